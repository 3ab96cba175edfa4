"""The policy's features for critics and filters: one prefill pass, under the same precision as the
other stages (bf16 autocast on a GPU, full precision on the CPU)."""

import numpy as np
import pytest
import torch

from mcgrpo.train.policy import prefix_features, prompt_features


def _dtypes_seen(model, run) -> set:
    seen = set()
    hooks = [m.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
             for m in model.modules() if isinstance(m, torch.nn.Linear)]
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return seen


def test_features_are_the_last_hidden_state_at_each_prefix_end(tiny):
    model, tokenizer = tiny
    seqs = [[5, 6, 7, 8], [9, 10]]
    out = prefix_features(model, seqs, [[2, 4], [2]], tokenizer.pad_token_id)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([seqs[0]]), output_hidden_states=True).hidden_states[-1][0]
    np.testing.assert_allclose(out[0], full[[1, 3]].numpy(), rtol=1e-5, atol=1e-6)
    assert prompt_features(model, seqs, tokenizer.pad_token_id).shape == (2, full.shape[-1])
    assert _dtypes_seen(model, lambda: prefix_features(model, seqs, [[4], [2]], 0)) == {torch.float32}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 autocast applies on a GPU only")
def test_features_run_under_bf16_autocast_on_a_gpu(tiny):
    model, tokenizer = tiny
    model = model.cuda()
    seen = _dtypes_seen(model, lambda: prefix_features(model, [[5, 6, 7]], [[3]], tokenizer.pad_token_id))
    assert seen == {torch.bfloat16}
