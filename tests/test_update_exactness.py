"""The trainer's update is exactly the recipe's: on fixed batches, its gradients, loss and parameters after
three optimizer steps equal those of a plain reference that scores each sequence alone (no padding, no
microbatches, no row skipped) and steps a fresh Adam, and the figures the trainer produced before its
speed-ups (issue #9). Guards every speed-up of the update path."""

import copy

import numpy as np
import pytest
import torch

import credit_fixtures as fx
from conftest import SMALL_STUDY
from mcgrpo.core import config as study_config
from mcgrpo import studies
from mcgrpo.train import loss as update_loss, updates as reuse
from mcgrpo.train.credit import Credit, TrainingSequence
from mcgrpo.train.engines import Completion
from mcgrpo.core.seeds import stable_seed
from mcgrpo.train.models.tiny import build_model
from mcgrpo.train.trainer import Trainer

# Recorded with the trainer before the speed-ups, on the batches below: per step (loss, gradient norm), then
# the sum of |parameter change| over the three steps and a signed fingerprint of the change.
BEFORE = {
    "outcome": ([(1.6365200281143188, 6.494595527648926), (-5.866437777876854, 7.40647029876709), (0.0, 0.0)],
                3.982643880927469, -0.00253004963049091),
    "ppo": ([(0.20803705882281065, 9.616592168807983), (1.5119691863656044, 7.94261622428894), (0.0, 0.0)],
            9.934019739396206, 0.050046583993248864),
}
ARMS = {"outcome": {}, "ppo": {"update": {"epochs": 2, "minibatches": 2, "clip": 0.2}}}
TEXTS = ["1+2=3 \\boxed{3}", "3", "1+2=4 so \\boxed{4}", "x", "\\boxed{3}", "2+1=3", "no idea at all, sorry", "=="]


def _model(tokenizer):
    return build_model(tokenizer, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                       max_positions=96, seed=0)


def _fixed_batch(tokenizer, pool, iteration: int):
    """Two groups of 4 fixed completions (lengths 1 to 21) with behaviour log-probs, per-token credit that
    differs by iteration (one completion with none; none at all in iteration 2, where only Adam's momentum
    moves the weights), and one extra sequence trained from a rollout prefix (as continuation reuse)."""
    rng = np.random.default_rng(iteration)
    batch = fx.rollouts(tokenizer, pool.head(2).to_dict("records"), TEXTS, 4)
    batch.completions = [Completion(c.tokens, True, tuple(rng.normal(-4.6, 0.3, len(c))))
                         for c in batch.completions]
    credit = [rng.normal(size=len(c)) * (r != 2) * (iteration != 2) for r, c in enumerate(batch.completions)]
    prefix = batch.prompts[0] + batch.completions[0].tokens[:4]
    extra = Completion(fx.tokens(tokenizer, "=3 done"), True, tuple(rng.normal(-4.6, 0.3, 7)))
    return batch, Credit(credit, sequences=[TrainingSequence(prefix, extra, rng.normal(size=7) * (iteration != 2))])


def _reference_loss(model, data: reuse.Batch, clip: float | None) -> float:
    """-(1/N) sum of credit x log-prob (clipped against the behaviour log-probs if asked), one sequence at a time."""
    total = 0.0
    for context, tokens, credit, behaviour in zip(data.contexts, data.tokens, data.credit, data.behaviour):
        ids = torch.tensor([list(context) + list(tokens)])
        logits = model(input_ids=ids).logits[0, len(context) - 1:-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
        weight = torch.as_tensor(credit, dtype=torch.float32)
        if clip is None:
            objective = weight * logp
        else:
            ratio = torch.exp(logp - torch.as_tensor(behaviour, dtype=torch.float32))
            objective = torch.minimum(ratio * weight, ratio.clamp(1 - clip, 1 + clip) * weight)
        loss = -objective.sum() / len(data)
        loss.backward()
        total += loss.item()
    return total


def _reference_update(model, optimizer, recipe: dict, spec: dict | None, seed: int, batch, credit):
    """The iteration's steps by the recipe: per step the loss, clipped gradient norm, and the gradients."""
    data, out = reuse.training_batch(batch, credit), []
    for rows in reuse.minibatches(len(data), spec, seed):
        optimizer.zero_grad(set_to_none=True)
        loss = _reference_loss(model, data.take(rows), spec and spec["clip"])
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), recipe["grad_clip"])
        out.append((loss, float(norm)))
        optimizer.step()
    return out


def _trainer(arm: str, tokenizer, pool) -> Trainer:
    study = studies.validate({**copy.deepcopy(SMALL_STUDY), "arms": ARMS})
    cfg = study_config.run_config(study, arm, 1)
    assert cfg["recipe"]["microbatch_size"] < 9  # the trainer accumulates over several microbatches
    return Trainer(cfg, _model(tokenizer), tokenizer, pool, None, None)


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_three_updates_equal_the_plain_reference(arm, tiny, world):
    _, tokenizer = tiny
    pool, _ = world
    trainer = _trainer(arm, tokenizer, pool)
    cfg = trainer.cfg
    model = _model(tokenizer)
    r, spec = cfg["recipe"], cfg["arm_config"].get("update")
    optimizer = torch.optim.Adam(model.parameters(), lr=trainer.learning_rate(), betas=tuple(r["adam_betas"]),
                                 eps=r["adam_eps"])
    for i in range(3):
        batch, credit = _fixed_batch(tokenizer, pool, i)
        loss, norm = trainer.update(i, batch, credit)
        steps = _reference_update(model, optimizer, r, spec, stable_seed(trainer.seed, "minibatches", i), batch, credit)
        assert loss == pytest.approx(np.mean([s[0] for s in steps]), rel=1e-5, abs=1e-7)
        assert norm == pytest.approx(np.mean([s[1] for s in steps]), rel=1e-5)
        for a, b in zip(trainer.model.parameters(), model.parameters()):  # the last step's gradients
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-7)
    for (name, a), b in zip(trainer.model.named_parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)
        assert not torch.equal(a, _model(tokenizer).get_parameter(name))  # every parameter moved


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_three_updates_equal_those_recorded_before_the_speedups(arm, tiny, world):
    _, tokenizer = tiny
    pool, _ = world
    trainer = _trainer(arm, tokenizer, pool)
    steps = [trainer.update(i, *_fixed_batch(tokenizer, pool, i)) for i in range(3)]
    recorded, moved, fingerprint = BEFORE[arm]
    for (loss, norm), (loss_before, norm_before) in zip(steps, recorded):
        assert loss == pytest.approx(loss_before, rel=1e-5, abs=1e-6)
        assert norm == pytest.approx(norm_before, rel=1e-5, abs=1e-6)
    flat = lambda model: torch.cat([p.detach().flatten().double() for p in model.parameters()])  # noqa: E731
    change = flat(trainer.model) - flat(_model(tokenizer))
    assert float(change.abs().sum()) == pytest.approx(moved, rel=1e-5)
    signed = float((change * torch.arange(len(change), dtype=torch.float64).sin()).sum())
    assert signed == pytest.approx(fingerprint, abs=1e-6 * moved)


def _logits(shape=(3, 5, 11), dtype=torch.float32, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    logits = (torch.randn(shape, generator=generator) * 4).to(dtype).requires_grad_()
    return logits, torch.randint(0, shape[-1], shape[:-1], generator=generator)


def _by_log_softmax(logits, targets):
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[..., None]).squeeze(-1)


def test_chosen_logprobs_has_the_gradient_of_its_definition():
    logits, targets = _logits(dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: update_loss.chosen_logprobs(x, targets), (logits,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [update_loss.VOCAB_CHUNK, 11, 23])  # whole, one position, two positions a chunk
def test_chosen_logprobs_equal_log_softmax_and_gather_and_their_gradient(dtype, chunk, monkeypatch):
    """What the GPU's update scores with against what the CPU's does, in float32 and from bf16 logits (autocast's),
    the positions taken whole or a chunk at a time: the same log-probs and gradients to float32 rounding (the
    gradient then rounded to the logits' dtype by both)."""
    monkeypatch.setattr(update_loss, "VOCAB_CHUNK", chunk)
    logits, targets = _logits(dtype=dtype)
    weights = torch.randn(targets.shape, generator=torch.Generator().manual_seed(1))
    reference = logits.detach().clone().requires_grad_()
    chosen, plain = update_loss.chosen_logprobs(logits, targets), _by_log_softmax(reference, targets)
    assert chosen.dtype == plain.dtype == torch.float32
    torch.testing.assert_close(chosen, plain, rtol=1e-6, atol=2e-6)
    (weights * chosen).sum().backward()
    (weights * plain).sum().backward()
    assert logits.grad.dtype == dtype
    tolerance = {"rtol": 0, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 8e-3, "atol": 1e-6}
    torch.testing.assert_close(logits.grad, reference.grad, **tolerance)


def test_the_update_scored_by_chosen_logprobs_equals_the_plain_reference(tiny, world, monkeypatch):
    """The trainer's whole update (prefix, microbatches, repeats, reuse's clipped steps) with chosen_logprobs, as a
    GPU's runs it, here on the CPU: the plain reference's losses, gradients and parameters."""
    monkeypatch.setattr(update_loss, "CHOSEN_ON", frozenset({"cpu"}))
    calls = []
    monkeypatch.setattr(update_loss, "chosen_logprobs", lambda *a: calls.append(1) or update_loss._ChosenLogprob.apply(*a))
    for arm in sorted(ARMS):
        test_three_updates_equal_the_plain_reference(arm, tiny, world)
    assert calls
