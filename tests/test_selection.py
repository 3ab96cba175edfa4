"""Prompt selection: the stream, filters and their control, warm-up, dynamic sampling, lr arms."""

import copy

import numpy as np
import pytest

from mcgrpo.core import config as study_config
from mcgrpo import studies
from mcgrpo.train.models.tiny import build_model
from mcgrpo.train.selection import nearest_with_extras
from mcgrpo.train.selection.predictors import History, Level
from mcgrpo.train.selection.stream import PromptStream
from mcgrpo.train.trainer import Trainer

FILTER = {"candidates": 6, "keep": 1, "warmup_prompts": 4, "window": 4}


def _study(study, **arms):
    cfg = copy.deepcopy(study)
    cfg["arms"] = {name: spec for name, spec in arms.items()}
    cfg["analysis"] = {"base": None}
    return studies.validate(cfg)


def _trainer(cfg, arm, tiny, world, budget=None, pool=None):
    model, tokenizer = tiny
    model = build_model(tokenizer, 32, 1, 2, 64, 96, seed=0)
    return Trainer(study_config.run_config(cfg, arm, 1), model, tokenizer,
                   world[0] if pool is None else pool, None, budget)


def test_stream_candidates_depend_only_on_seed_iteration_and_count():
    a, b = PromptStream(50, 3), PromptStream(50, 3)
    assert np.array_equal(a.candidates(7, 24), b.candidates(7, 24))
    assert not np.array_equal(a.candidates(7, 24), PromptStream(50, 4).candidates(7, 24))
    epoch = np.concatenate([a.candidates(i, 10) for i in range(5)])
    assert sorted(epoch) == list(range(50))  # each epoch visits the pool once


def test_keep_nearest_target_plus_random_extras():
    predicted = np.array([0.1, 0.45, 0.9, 0.55, 0.3, 0.5])
    picked = nearest_with_extras(predicted, 0.5, keep=3, extras=1, rng=np.random.default_rng(0))
    assert picked[:3].tolist() == [5, 1, 3]
    assert len(picked) == 4 and picked[3] in (0, 2, 4)


def test_filter_and_random_control_see_identical_candidates(study, tiny, world):
    cfg = _study(study, filter={"selection": {"critic_filter": FILTER}},
                 random={"selection": {"random_choice": FILTER}})
    logs = {}
    for arm in ("filter", "random"):
        trainer = _trainer(cfg, arm, tiny, world)
        trainer.run(max_iterations=5)
        logs[arm] = trainer.log.frames()["prompts"]
    cands = {arm: log.groupby("iteration")["problem_id"].apply(list) for arm, log in logs.items()}
    assert cands["filter"].equals(cands["random"]) and (cands["filter"].str.len() == 6).all()
    for log in logs.values():  # warm-up: the first candidates until 4 prompts were trained (2 iterations)
        early = log[log.iteration < 2]
        assert early.groupby("iteration")["chosen"].apply(lambda c: c.tolist() == [True] * 2 + [False] * 4).all()
        assert log.groupby("iteration")["chosen"].sum().eq(2).all()
        assert log[log.iteration >= 2]["predicted_success"].notna().all()  # the critic is fitted and logged


def test_history_and_level_predictors():
    history = History(window=2)
    history.observe(0, [3, 4], None, [1.0, 0.0], [2, 3])
    assert history.predict([3, 4, 9], None, [2, 3, 2]).tolist() == [1.0, 0.0, 0.5]
    level = Level(window=2)
    level.observe(0, [3, 4, 5], None, [1.0, 0.0, 0.5], [2, 3, 2])
    assert level.predict([7, 8, 9], None, [2, 3, 5]).tolist() == [0.75, 0.0, 0.5]
    level.observe(2, [6], None, [0.0], [5])  # iteration 0 falls out of a window of 2
    assert level.predict([1], None, [2]).tolist() == [0.0]


class CountingEngine:
    """The real engine, counting every token it generates."""

    def __init__(self, engine):
        self.engine, self.generated = engine, 0

    def generate(self, *args):
        out = self.engine.generate(*args)
        self.generated += sum(len(c) for c in out)
        return out

    def sync(self, model):
        self.engine.sync(model)


def test_dynamic_sampling_counts_every_discarded_token(study, tiny, world):
    cfg = _study(study, dapo={"selection": {"dynamic_sampling": {"max_groups": 6}}})
    unreachable = world[0].assign(answer="never")  # every group all-wrong: nothing is ever kept
    trainer = _trainer(cfg, "dapo", tiny, world, pool=unreachable)
    trainer.engine = CountingEngine(trainer.engine)
    trainer.run(max_iterations=2)
    its = trainer.log.frames()["iterations"]
    assert (its["tokens_discarded"] > 0).all() and (its["groups_all_wrong"] == 2).all()
    assert its["tokens_total"].iloc[-1] == trainer.engine.generated
    assert (its["tokens_rollout"] + its["tokens_discarded"] == its["tokens_total"]).all()
    prompts = trainer.log.frames()["prompts"]
    assert prompts.groupby("iteration").size().eq(6).all()  # three chunks of 2 groups tried per iteration


def test_dynamic_sampling_keeps_mixed_groups_in_stream_order():
    from mcgrpo.train.engines import Completion
    from mcgrpo.train.rollout import Rollouts, Scores
    from mcgrpo.train.selection import DynamicSampling
    outcomes = {0: [[0, 0], [1, 0]], 1: [[1, 1], [0, 1]]}  # chunk -> per group rewards (G = 2)

    def sample(indices, chunk):
        rewards = np.array(outcomes[chunk], dtype=float).ravel()
        completions = [Completion(tuple(range(3 + r)), True) for r in range(4)]  # 3, 4, 5, 6 tokens
        return Rollouts([{"i": int(j)} for j in indices], 2, [()] * 4, completions, [""] * 4,
                        Scores(rewards > 0, rewards > 0, rewards > 0), rewards)

    ds = DynamicSampling(PromptStream(10, 0), per_iteration=2, max_groups=8)
    batch, discarded, selection = ds.generate(0, ds.select(0, None), sample)
    stream = PromptStream(10, 0).slice(0, 4)
    assert selection.candidates.tolist() == stream.tolist()
    assert selection.chosen.tolist() == [stream[1], stream[3]]
    assert [p["i"] for p in batch.problems] == [stream[1], stream[3]]
    assert batch.rewards.tolist() == [1, 0, 0, 1] and discarded == (3 + 4) * 2
    assert ds.cursor == 4


def test_linear_decay_reaches_zero_exactly_at_budget(study, tiny, world):
    cfg = _study(study, decay={"lr": {"schedule": "linear_decay"}}, double={"lr": {"scale": 2.0}})
    trainer = _trainer(cfg, "decay", tiny, world, budget=1000)
    lr0 = cfg["recipe"]["lr"]
    for tokens, expected in ((0, lr0), (500, lr0 / 2), (1000, 0.0), (1200, 0.0)):
        trainer.tokens["rollout"] = tokens
        assert trainer.learning_rate() == pytest.approx(expected, abs=0.0)
    assert _trainer(cfg, "double", tiny, world, budget=1000).learning_rate() == 2 * lr0


def test_strict_reward_arm_overrides_the_recipe(study):
    cfg = _study(study, strict={"recipe": {"reward_verifier": "strict"}}, base={})
    assert study_config.run_config(cfg, "strict", 1)["recipe"]["reward_verifier"] == "strict"
    assert study_config.run_config(cfg, "base", 1)["recipe"]["reward_verifier"] == "default"
    bad = copy.deepcopy(study)
    bad["arms"]["f"] = {"selection": {"critic_filter": {"candidates": 1}}}
    with pytest.raises(study_config.ConfigError, match=r"arms.f.selection.critic_filter: needs keep \(6\)"):
        studies.validate(bad)
