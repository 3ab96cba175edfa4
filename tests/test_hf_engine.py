"""The hf engine: a request's tokens come from its own seed whatever batch it shares, finished rows leave the
batch in bulk without changing what the others draw, and both forms of the decode mask give the same tokens."""

import numpy as np
import pytest
import torch

from mcgrpo.train.engines.hf import LEAVE_SHARE, HFEngine
from mcgrpo.train.loss import backward_policy_loss
from mcgrpo.train.rollout import Prompter

QUESTIONS = ["1+2", "3*4-5", "(6+7)*8", "9", "12-3*2", "5*5+5", "7-8", "2*(3+4)"]


def _requests(tokenizer, n: int):
    prompter = Prompter(tokenizer)
    prompts = [prompter(QUESTIONS[r % len(QUESTIONS)]) for r in range(n)]
    limits = [r % 17 for r in range(n)]  # 0 to 16 tokens: rows finish at every step, some at their end token
    return prompts, limits, [1000 + r for r in range(n)]


def test_each_request_draws_the_same_tokens_alone_as_in_a_batch_that_sheds_finished_rows(tiny):
    model, tokenizer = tiny
    engine = HFEngine(model, tokenizer)
    prompts, limits, seeds = _requests(tokenizer, 34)
    together = engine.generate(prompts, limits, seeds)
    alone = [engine.generate([p], [k], [s])[0] for p, k, s in zip(prompts, limits, seeds)]
    assert [c.tokens for c in together] == [c.tokens for c in alone]
    assert [c.finished for c in together] == [c.finished for c in alone]
    for a, b in zip(together, alone):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-6)
    assert any(c.finished for c in together) and any(not c.finished and len(c) for c in together)
    assert 34 * LEAVE_SHARE > 1  # rows leave in bulk, several at once


def test_completions_end_at_the_end_token_or_at_their_limit(tiny):
    model, tokenizer = tiny
    prompts, limits, seeds = _requests(tokenizer, 34)
    for c, limit in zip(HFEngine(model, tokenizer).generate(prompts, limits, seeds), limits):
        eos = [i for i, t in enumerate(c.tokens) if t == tokenizer.eos_token_id]
        assert eos == ([len(c) - 1] if c.finished else [])
        assert len(c) == limit or c.finished and len(c) < limit
        assert len(c.logprobs) == len(c) and all(lp <= 0 for lp in c.logprobs)


@pytest.mark.parametrize("attention", ["eager"])
def test_the_two_dimensional_decode_mask_of_other_attention_draws_what_sdpa_draws(tiny, attention):
    model, tokenizer = tiny
    prompts, limits, seeds = _requests(tokenizer, 34)
    sdpa = HFEngine(model, tokenizer).generate(prompts, limits, seeds)
    model.set_attn_implementation(attention)
    try:
        assert HFEngine(model, tokenizer)._decode_mask(torch.ones((2, 3), dtype=torch.long), 4).shape == (2, 7)
        other = HFEngine(model, tokenizer).generate(prompts, limits, seeds)
    finally:
        model.set_attn_implementation("sdpa")
    assert [c.tokens for c in other] == [c.tokens for c in sdpa]


def test_a_model_trains_after_generating_and_keeps_its_mode(tiny):
    """The engine decodes under inference mode: nothing it leaves behind may stop the shared model from training."""
    model, tokenizer = tiny
    model.train()
    prompts, limits, seeds = _requests(tokenizer, 8)
    completions = HFEngine(model, tokenizer).generate(prompts, limits, seeds)
    assert model.training
    credit = [np.full(len(c), 1.0 if r % 2 else -1.0) for r, c in enumerate(completions)]
    backward_policy_loss(model, prompts, [c.tokens for c in completions], credit, tokenizer.pad_token_id, 4)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and not g.is_inference() for g in grads)
    assert any(bool(g.abs().sum()) for g in grads)
