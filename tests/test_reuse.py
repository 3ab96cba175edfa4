"""Reuse and the update: the clipped objective, the step schedule, behaviour log-probs, and two properties
of every dense arm: zero weights give outcome-only's update, and every token the engine makes counts."""

import copy

import numpy as np
import pytest
import torch

import credit_fixtures as fx
from conftest import SMALL_STUDY
from mcgrpo.core import config as study_config
from mcgrpo import studies
from mcgrpo.train import updates as reuse
from mcgrpo.train.credit import CreditContext
from mcgrpo.train.engines import build as build_engine
from mcgrpo.train.loss import backward_policy_loss, token_logprobs
from mcgrpo.train.models.tiny import build_model
from mcgrpo.train.rollout import Prompter, sample_groups
from mcgrpo.train.trainer import Trainer

ZERO_WEIGHT_ARMS = {
    "mc": {"monte_carlo": {"k": 2, "alpha": 0.0}},
    "mc_centered": {"monte_carlo": {"k": 2, "form": "centered_maxnorm", "alpha": 0.0}},
    "critic_td": {"critic": {"form": "td", "weight": 0.0, "window": 1, "min_iterations": 1}},
    "critic_baseline": {"critic": {"form": "baseline", "weight": 0.0, "window": 1, "min_iterations": 1}},
    "length": {"length": {"lambda": 0.0}},
    "process": {"process": {"lambda": 0.0}},
    "path": {"path_penalty": {"lambda": 0.0, "beta": 0.0}},
}


def _study(arms: dict) -> dict:
    return studies.validate({**copy.deepcopy(SMALL_STUDY), "arms": {"outcome": {}, **arms}})


def _model(tokenizer):
    return build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                       max_positions=96, seed=0)


def _batch(tokenizer, pool):
    """Two arith groups of 4 with mixed outcomes: the reference solution, and wrong or unboxed variants."""
    problems = pool.head(2).to_dict("records")
    texts = [t for p in problems for t in (p["solution"], p["solution"].replace("\\boxed", ""), "1+1=3 \\boxed{0}",
                                          "7*7=49")]
    return fx.rollouts(tokenizer, problems, texts, 4)


def test_minibatches_are_one_step_on_policy_else_epochs_of_shuffled_parts():
    assert [rows.tolist() for rows in reuse.minibatches(5, None, 0)] == [[0, 1, 2, 3, 4]]
    steps = reuse.minibatches(8, {"epochs": 2, "minibatches": 2, "clip": 0.2}, 0)
    assert [len(rows) for rows in steps] == [4, 4, 4, 4]
    assert sorted(np.concatenate(steps[:2])) == list(range(8)) == sorted(np.concatenate(steps[2:]))


def test_clipped_objective_by_hand(tiny):
    model, tokenizer = tiny
    prompts = [fx.tokens(tokenizer, "<bos><|user|>1+2<|end|><|assistant|>")] * 2
    completions = [fx.tokens(tokenizer, "1+2=3"), fx.tokens(tokenizer, "x")]
    credit = [np.array([1.0, -1.0, 2.0, 0.5, -0.5]), np.array([3.0])]
    with torch.no_grad():
        logp, mask = token_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    now = [logp[r][mask[r]].double().numpy() for r in range(2)]
    # behaviour 1.5 x less likely than now: r = 1.5, clipped to 1.2 where credit > 0 (min picks 1.2 x credit),
    # kept at 1.5 where credit < 0 (min picks the more negative 1.5 x credit)
    behaviour = [lp - np.log(1.5) for lp in now]
    loss = backward_policy_loss(model, prompts, completions, credit, tokenizer.pad_token_id, 1, behaviour, 0.2)
    by_hand = -(1.2 * (1 + 2 + 0.5 + 3) + 1.5 * (-1 - 0.5)) / 2
    assert loss == pytest.approx(by_hand, rel=1e-5)
    model.zero_grad(set_to_none=True)  # only clipped tokens: no gradient at all
    backward_policy_loss(model, prompts, completions, [np.abs(c) for c in credit], tokenizer.pad_token_id, 2,
                         behaviour, 0.2)
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in model.parameters())
    # at ratio 1 the clipped step's gradient is the on-policy one
    grads = []
    for old in (None, now):
        model.zero_grad(set_to_none=True)
        backward_policy_loss(model, prompts, completions, credit, tokenizer.pad_token_id, 2, old, 0.2 if old else None)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-7)


def test_engine_records_the_behaviour_logprobs_of_what_it_sampled(tiny, world):
    model, tokenizer = tiny
    pool, _ = world
    prompter, engine = Prompter(tokenizer), build_engine("hf", model, tokenizer)
    batch = sample_groups(engine, prompter, pool.head(2).to_dict("records"), 2, 12, [1, 2, 3, 4], "default")
    with torch.no_grad():
        logp, mask = token_logprobs(model, batch.prompts, [c.tokens for c in batch.completions], tokenizer.pad_token_id)
    for r, c in enumerate(batch.completions):
        np.testing.assert_allclose(c.logprobs, logp[r][mask[r]].numpy(), rtol=1e-4, atol=1e-5)


def test_ppo_epochs_take_epochs_x_minibatches_clipped_steps(tiny, world):
    model, tokenizer = tiny
    pool, _ = world
    cfg = _study({"ppo": {"update": {"epochs": 2, "minibatches": 2}}})
    trainer = Trainer(study_config.run_config(cfg, "ppo", 1), model, tokenizer, pool, None, None)
    log = trainer.run(max_iterations=2)
    assert [row["updates"] for row in log.iterations] == [4, 8]
    with pytest.raises(study_config.ConfigError, match="arms.ppo.update.minibatches: 9 minibatches cannot be cut "
                                                       "from 8 completions"):
        _study({"ppo": {"update": {"minibatches": 9}}})


@pytest.mark.parametrize("arm", sorted(ZERO_WEIGHT_ARMS))
def test_a_dense_arm_at_zero_weight_updates_exactly_as_outcome_only(arm, tiny, world):
    _, tokenizer = tiny
    pool, _ = world
    cfg = _study({})  # validation refuses length, process and path_penalty at zero weight as outcome-only GRPO
    cfg["arms"][arm] = {"credit": ZERO_WEIGHT_ARMS[arm]}  # under another name (this test is why): the schema alone
    study_config.validate_schema(cfg)  # fills the arm's defaults
    batch = _batch(tokenizer, pool)
    assert 0 < batch.rewards.mean() < 1

    def update(name):
        trainer = Trainer(study_config.run_config(cfg, name, 1), _model(tokenizer), tokenizer, pool, None, None)
        for i in range(2):  # a critic is in use from its second iteration
            ctx = CreditContext(engine=trainer.engine, prompter=trainer.prompter, limit=24,
                                verifier="default", advantage_eps=1e-6, seed=(1, i), features=trainer.view.prefix_features)
            credit = trainer.credit(batch, ctx)
        trainer.update(1, batch, credit)
        return credit, [p.detach().clone() for p in trainer.model.parameters()]

    (base_credit, base_params), (credit, params) = update("outcome"), update(arm)
    assert credit.stats.get("critic_active", 1) == 1
    for a, b in zip(base_credit.tokens, credit.tokens):
        np.testing.assert_array_equal(a, b)
    assert all(torch.equal(a, b) for a, b in zip(base_params, params))


@pytest.mark.parametrize("spec", [{"monte_carlo": {"k": 2, "reuse": True}}, {"critic": {"min_iterations": 1}},
                                  {"path_penalty": {}}])
def test_every_token_the_engine_generates_counts_toward_the_budget(spec, tiny, world):
    model, tokenizer = tiny
    pool, _ = world
    cfg = _study({"arm": {"credit": spec}})
    trainer = Trainer(study_config.run_config(cfg, "arm", 1), model, tokenizer, pool, None, None)
    trainer.engine = counting = fx.CountingEngine(trainer.engine)
    log = trainer.run(max_iterations=3)
    assert counting.generated == trainer.tokens_total == log.iterations[-1]["tokens_total"]
    continuation = sum(row["tokens_continuation"] - prev for row, prev in
                       zip(log.iterations, [0] + [r["tokens_continuation"] for r in log.iterations[:-1]]))
    assert (continuation > 0) == ("monte_carlo" in spec)
