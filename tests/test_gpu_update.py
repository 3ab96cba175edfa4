"""The update's optimizer (issue 45, item 2): on a GPU the trainer's Adam is the fused kernel, and its steps move the
weights as the unfused steps do, within float32 rounding (skipped without CUDA: `bench/gpu/run.py` runs it on the
GPU machine); on a CPU it is torch's default, so that the CPU's runs keep their numbers."""

import copy

import pytest
import torch

from mcgrpo.train.trainer import adam

RECIPE = {"lr": 1e-3, "adam_betas": [0.9, 0.999], "adam_eps": 1e-8}


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (bench/gpu/run.py runs it)")
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
