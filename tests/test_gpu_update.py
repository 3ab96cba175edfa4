"""The update on a GPU (issue 45, item 2; skipped without CUDA: `bench/gpu/run.py` runs them on the GPU machine): the
trainer's Adam is the fused kernel, and its steps move the weights as the unfused steps do, within float32 rounding;
the update scored by chosen_logprobs (logit - logsumexp) has log_softmax's loss and gradients, within bf16 rounding.
On a CPU the Adam is torch's default, so that the CPU's runs keep their numbers (tests/test_update_exactness.py
checks chosen_logprobs on the CPU)."""

import copy

import pytest
import numpy as np
import torch

from mcgrpo.train import loss
from mcgrpo.train.trainer import adam

RECIPE = {"lr": 1e-3, "adam_betas": [0.9, 0.999], "adam_eps": 1e-8}
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bench/gpu/run.py runs it)")


def test_the_cpu_keeps_torchs_default_adam(tiny):
    model, _ = tiny
    assert adam(model, RECIPE).defaults["fused"] is None


def _steps(model, optimizer, steps: int = 3) -> None:
    """`steps` Adam steps on gradients drawn the same for every model of the same shape."""
    generator = torch.Generator(device=model.device).manual_seed(0)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=generator, device=p.device)
        optimizer.step()


@cuda
def test_the_gpus_fused_adam_steps_as_the_unfused_one(tiny):
    fused_model = copy.deepcopy(tiny[0]).cuda()
    plain_model = copy.deepcopy(fused_model)
    fused = adam(fused_model, RECIPE)
    assert fused.defaults["fused"] is True
    plain = torch.optim.Adam(plain_model.parameters(), lr=RECIPE["lr"], betas=tuple(RECIPE["adam_betas"]),
                             eps=RECIPE["adam_eps"], foreach=True)
    _steps(fused_model, fused)
    _steps(plain_model, plain)
    for (name, a), b in zip(fused_model.named_parameters(), plain_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")


@cuda
def test_the_gpus_update_scored_by_chosen_logprobs_has_log_softmaxs_loss_and_gradients(tiny, monkeypatch):
    model, tokenizer = tiny
    model = copy.deepcopy(model).cuda()
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    contexts = [tuple(rng.integers(1, vocab, 9).tolist())] * 4 + [tuple(rng.integers(1, vocab, 6).tolist())] * 4
    completions = [rng.integers(1, vocab, int(n)).tolist() for n in rng.integers(1, 20, 8)]
    credit = [rng.standard_normal(len(c)) for c in completions]
    scored = {}
    for devices in (frozenset({"cuda"}), frozenset()):
        monkeypatch.setattr(loss, "CHOSEN_ON", devices)
        model.zero_grad(set_to_none=True)
        value = loss.backward_policy_loss(model, contexts, completions, credit, tokenizer.pad_token_id, 3)
        scored[devices] = value, [p.grad.clone() for p in model.parameters()]
    (chosen, chosen_grads), (plain, plain_grads) = scored.values()
    assert chosen == pytest.approx(plain, rel=1e-4, abs=1e-5)
    for (name, _), a, b in zip(model.named_parameters(), chosen_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=1e-4, msg=lambda m: f"{name}: {m}")
