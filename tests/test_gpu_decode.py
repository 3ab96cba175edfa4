"""The static decode on a GPU (skipped without CUDA): the step replayed as a CUDA graph draws what the same step
run eagerly draws, tokens and log-probs (bf16 autocast on both: the same kernels, so the same tokens; log-probs
within bf16 rounding), and a request draws the same tokens alone as in a batch of 64 (common random numbers).
`bench/gpu/run.py` runs this file on the GPU machine and reports its result."""

import numpy as np
import pytest
import torch

from mcgrpo.train.engines.hf import HFEngine
from test_static_decode import _ending, _requests

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bench/gpu/run.py runs it)")


@pytest.fixture
def gpu_tiny(tiny):
    model, tokenizer = tiny
    return _ending(model, tokenizer, 0.5).cuda(), tokenizer


def test_the_graph_replays_draw_the_eager_steps_tokens_and_logprobs(gpu_tiny):
    model, tokenizer = gpu_tiny
    prompts, limits, seeds = _requests(tokenizer, 64)
    graph = HFEngine(model, tokenizer, decode="graph").generate(prompts, limits, seeds)
    eager = HFEngine(model, tokenizer, decode="static").generate(prompts, limits, seeds)
    assert [c.tokens for c in graph] == [c.tokens for c in eager]
    for a, b in zip(graph, eager):
        np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=0, atol=2e-2)  # bf16 rounding
    assert HFEngine(model, tokenizer)._mode() == "graph"  # the default on a GPU


def test_a_request_draws_the_same_tokens_alone_as_in_a_graphed_batch_of_64(gpu_tiny):
    model, tokenizer = gpu_tiny
    prompts, limits, seeds = _requests(tokenizer, 64)
    engine = HFEngine(model, tokenizer, decode="graph")
    together = engine.generate(prompts, limits, seeds)
    alone = [engine.generate([p], [k], [s])[0] for p, k, s in zip(prompts, limits, seeds)]
    assert [c.tokens for c in together] == [c.tokens for c in alone]
    assert sum(c.finished for c in together) >= 10  # rows end at their end token, at many steps
