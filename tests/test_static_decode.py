"""The static-cache decode (engines/static_decode.py) on the CPU, in fp32, without a graph: the dynamic decode's
tokens and log-probs, rows ending at their end token or their limit at many different steps; a request draws the
same alone as in a batch; the loop stops within CHECK_EVERY steps of the last end; bad modes are refused.
(On a GPU, the graph against the eager step: tests/test_gpu_decode.py.)"""

import numpy as np
import pytest
import torch

from mcgrpo.train.engines import static_decode
from mcgrpo.train.engines.hf import HFEngine
from mcgrpo.train.rollout import Prompter

QUESTIONS = ["1+2", "3*4-5", "(6+7)*8", "9", "12-3*2", "5*5+5", "7-8", "2*(3+4)"]


def _ending(model, tokenizer, pull: float):
    """`model` with its end token made likelier (its tied output row `pull` x the mean final hidden state), so
    that rows end at their end token at many different steps."""
    prompter = Prompter(tokenizer)
    with torch.no_grad():
        h = model(input_ids=torch.tensor([prompter(q)[:5] for q in QUESTIONS]),
                  output_hidden_states=True).hidden_states[-1]
        model.lm_head.weight[tokenizer.eos_token_id] = pull * h.reshape(-1, h.shape[-1]).mean(0)
    return model


def _requests(tokenizer, n: int, limit=None):
    prompter = Prompter(tokenizer)
    prompts = [prompter(QUESTIONS[r % len(QUESTIONS)]) for r in range(n)]
    limits = [limit or 1 + r % 40 for r in range(n)]  # 1 to 40 tokens: rows reach their limits at many steps
    return prompts, limits, [2000 + r for r in range(n)]


def _same(a, b) -> None:
    assert [c.tokens for c in a] == [c.tokens for c in b]
    assert [c.finished for c in a] == [c.finished for c in b]
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.logprobs, y.logprobs, rtol=1e-6, atol=1e-6)  # fp32 rounding


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9), (0.0, 1.0)])
def test_the_static_decode_draws_the_dynamic_decodes_tokens_and_logprobs(tiny, temperature, top_p):
    model, tokenizer = tiny
    model = _ending(model, tokenizer, 0.5)
    prompts, limits, seeds = _requests(tokenizer, 48)
    settings = dict(temperature=temperature, top_p=top_p)
    dynamic = HFEngine(model, tokenizer, decode="dynamic", **settings).generate(prompts, limits, seeds)
    static = HFEngine(model, tokenizer, decode="static", **settings).generate(prompts, limits, seeds)
    _same(static, dynamic)
    ends = {len(c) for c in static if c.finished}
    stops = {len(c) for c in static if not c.finished}
    if temperature:  # rows end at their end token and at their limit, each at many different steps
        assert len(ends) >= 5 and len(stops) >= 5, (ends, stops)


def test_a_request_draws_the_same_alone_as_in_a_static_batch(tiny):
    model, tokenizer = tiny
    model = _ending(model, tokenizer, 0.5)
    prompts, limits, seeds = _requests(tokenizer, 24)
    engine = HFEngine(model, tokenizer, decode="static")
    together = engine.generate(prompts, limits, seeds)
    alone = [engine.generate([p], [k], [s])[0] for p, k, s in zip(prompts, limits, seeds)]
    _same(together, alone)
    assert len({c.tokens for c in together}) > 20  # the same prompt's rows draw different completions


def test_the_static_loop_stops_within_check_every_steps_of_the_last_end(tiny):
    """No row outlives its end token here (all end before 40 of the 60 allowed): the loop stops at the first
    check after the last end, not at the horizon, and still draws the dynamic decode's tokens."""
    model, tokenizer = tiny
    model = _ending(model, tokenizer, 1.0)
    prompts, limits, seeds = _requests(tokenizer, 32, limit=60)
    calls = []
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    try:
        static = HFEngine(model, tokenizer, decode="static").generate(prompts, limits, seeds)
    finally:
        hook.remove()
    _same(static, HFEngine(model, tokenizer, decode="dynamic").generate(prompts, limits, seeds))
    last = max(len(c) for c in static)
    assert all(c.finished for c in static) and last < 40
    steps = len(calls) - 1  # the prefill, then one forward a step
    assert last - 1 <= steps <= last - 1 + static_decode.CHECK_EVERY and steps < 59


def test_decode_modes_are_checked(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match=r"engine.decode: unknown decode 'fast'; allowed: auto, dynamic, static"):
        HFEngine(model, tokenizer, decode="fast")
    assert HFEngine(model, tokenizer)._mode() == "dynamic"  # auto on a CPU: the CPU's path, unchanged
    prompts, limits, seeds = _requests(tokenizer, 2)
    with pytest.raises(ValueError, match="engine.decode: graph needs a CUDA device"):
        HFEngine(model, tokenizer, decode="graph").generate(prompts, limits, seeds)
    model.set_attn_implementation("eager")
    try:
        with pytest.raises(ValueError, match="engine.decode: static cannot decode this model: attention 'eager'"):
            HFEngine(model, tokenizer, decode="static").generate(prompts, limits, seeds)
    finally:
        model.set_attn_implementation("sdpa")


@pytest.mark.slow  # torch.compile of the step: about 100 s on two shared cores
def test_the_compiled_step_draws_the_static_steps_tokens(tiny):
    model, tokenizer = tiny
    model = _ending(model, tokenizer, 0.5)
    prompts, limits, seeds = _requests(tokenizer, 16)
    compiled = HFEngine(model, tokenizer, decode="compile").generate(prompts, limits, seeds)
    _same(compiled, HFEngine(model, tokenizer, decode="static").generate(prompts, limits, seeds))
