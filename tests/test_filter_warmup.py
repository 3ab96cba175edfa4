"""A filter that had chosen no prompt by the reading: its contrast is uninformative (analysis/informative.py), a
contrast where only some seeds read that early says so in its warning, and the warm-up is read from the config."""

import copy
import dataclasses

import numpy as np
import pandas as pd
import pytest

from conftest import SMALL_STUDY
from mcgrpo import studies
from mcgrpo.analysis import contrasts, informative, power
from mcgrpo.analysis.runs import Run
from mcgrpo.core import warmup
from mcgrpo.core.warmup import Warmup

B = 100
CRITIC = Warmup("filt", "critic_filter", 512, 8)  # 64 iterations of the stream; chosen prompts from the 65th on
WARMUPS = {"filt": CRITIC}
REASON = ("arm filt's filter never chose a prompt before the readings: its warm-up (selection.critic_filter."
          "warmup_prompts 512, 64 iterations of 8 prompts) lasted through every seed's reading (at most iteration "
          "{latest}; its first chosen prompts are trained in iteration 65)")


def run(arm: str, seed: int, iterations: list[int], correct: list[float], tokens=(0, 50, 105),
        seconds=(0, 10, 20)) -> Run:
    """A run evaluated after `iterations` iterations, at `tokens` and `seconds`, scoring `correct` of 10 samples of
    one problem."""
    acc = np.asarray(correct, float) / 10
    evals = pd.DataFrame({"eval_index": range(len(tokens)), "tokens_total": tokens, "iteration": iterations,
                          "updates": iterations, "train_seconds": np.asarray(seconds, float), "eval_set": "test",
                          "acc_default": acc, "acc_strict": acc})
    table = np.asarray(correct, float)[:, None]
    return Run(arm, seed, "test", evals, np.array(["q0"], dtype=object), np.full(table.shape, 10),
               {"default": table, "strict": table})


def study(*filter_reads: list[int], stream_reads=(0, 20, 40)) -> dict:
    """Four seeds of `filt` (the filter, evaluated after the iterations of each of `filter_reads`) and `stream`,
    whose seeds differ unevenly (a difference that spreads)."""
    out = {}
    for seed, reads in enumerate(filter_reads):
        for r in (run("filt", seed, list(reads), [2, 4, 6 + seed % 2]),
                  run("stream", seed, list(stream_reads), [2, 4, 5 - seed // 2])):
            out[r.arm, r.seed, r.eval_set] = r
    return out


def build(runs: dict, basis: str = "tokens", warmups=WARMUPS, plan=None) -> tuple[pd.Series, pd.DataFrame]:
    table, pairs = contrasts.build(runs, [("filt", "stream", basis, "acc_default", "test")], B, 0.02, plan,
                                   resamples=50, warmups=warmups)
    return table.iloc[0], pairs


def test_the_warm_up_counts_whole_iterations_and_acts_after_them():
    assert (CRITIC.iterations, CRITIC.acted(64), CRITIC.acted(65)) == (64, False, True)
    assert Warmup("f", "level_filter", 30, 8).iterations == 4  # 30 prompts: the 4th iteration's 8 are taken too
    assert Warmup("f", "history_filter", 0, 8).acted(1)


def test_a_filter_read_before_it_chose_is_uninformative_and_untested():
    """Every seed read after 40 iterations, the filter choosing from the 65th: before, a verdict (p 0.016 here)."""
    plan = {("filt-vs-stream", "tokens", "acc_default", "test"): {"id": "S3", "label": "primary", "family": "H",
                                                                  "direction": "greater"}}
    row, pairs = build(study(*[(0, 20, 40)] * 4), plan=plan)
    assert pairs["iteration_a"].tolist() == [40.0] * 4 and pairs["iteration_b"].tolist() == [40.0] * 4
    assert row["uninformative"] == REASON.format(latest=40)
    assert np.isnan(row["p"]) and np.isnan(row["p_holm"]) and not row["confirmed"]
    assert informative.check(pairs, WARMUPS)[0] == "warmup"
    assert build(study(*[(0, 20, 40)] * 4), warmups=None)[0]["uninformative"] == ""  # no config: nothing to read


@pytest.mark.parametrize("last, words", [(64, REASON.format(latest=64)), (65, "")])
def test_a_reading_exactly_at_the_warm_ups_end_saw_no_choice(last, words):
    """After 64 iterations every trained prompt was the stream's; after 65 the last iteration's were chosen."""
    row, _ = build(study(*[(0, 40, last)] * 4))
    assert row["uninformative"] == words


def test_an_interpolated_reading_weighs_the_later_evaluation():
    """At equal time (T* = 16 s, the stream's B at 16 s), the filter is read between its evaluations after 40 and 70
    iterations: the later one, past the warm-up, has weight 0.6, so the filter's choices are in the reading."""
    runs = study(*[(0, 40, 70)] * 4)
    for seed in range(4):
        runs["stream", seed, "test"] = run("stream", seed, [0, 20, 40], [2, 4, 5 - seed // 2], seconds=(0, 8, 16))
    row, pairs = build(runs, "time")
    assert pairs["iteration_a"].tolist() == [70.0] * 4 and row["uninformative"] == ""
    row, pairs = build(runs, "time", {"filt": Warmup("filt", "critic_filter", 560, 8)})
    assert row["uninformative"] == REASON.replace("512, 64", "560, 70").replace("iteration 65", "iteration 71").format(
        latest=70)


def test_a_filter_read_before_it_chose_in_some_seeds_is_read_with_a_warning():
    """Seeds 0 and 2 read after 40 iterations, seeds 1 and 3 after 80: the contrast is read (its mean diluted by the
    early seeds), and its warning says which seeds read the stream under the filter's name."""
    row, _ = build(study((0, 20, 40), (0, 40, 80), (0, 20, 40), (0, 40, 80)))
    assert row["uninformative"] == "" and np.isfinite(row["p"])
    assert row["warning"] == ("arm filt's filter had chosen no prompt by the reading of 2 of 4 seeds (seeds 0, 2: its "
                              "warm-up is selection.critic_filter.warmup_prompts 512, 64 iterations of 8 prompts)")


def test_the_base_arms_filter_and_the_seeds_planner():
    """The filter as the base (B side) is held to the same rule; no number of seeds at this B reads past it."""
    swap = {"filt": "stream", "stream": "filt"}
    runs = {(swap[arm], *rest): dataclasses.replace(r, arm=swap[arm])
            for (arm, *rest), r in study(*[(0, 20, 40)] * 4).items()}
    table, pairs = contrasts.build(runs, [("stream", "filt", "tokens", "acc_default", "test")], B, 0.02,
                                   resamples=50, warmups=WARMUPS)
    assert table.at[0, "uninformative"] == REASON.format(latest=40)
    note = power.plan(pairs, 0.02, warmups=WARMUPS).at[0, "note"]
    assert note == "no number of seeds helps: " + REASON.format(latest=40)


def test_the_warm_up_is_read_from_the_config_with_its_defaults():
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["arms"] = {"outcome": {}, "crit": {"selection": {"critic_filter": {"candidates": 4, "keep": 1}}},
                   "lev": {"selection": {"level_filter": {"candidates": 4, "keep": 1, "warmup_prompts": 7}}},
                   "dyn": {"selection": {"dynamic_sampling": {}}}}
    assert warmup.study(studies.validate(cfg)) == {"crit": Warmup("crit", "critic_filter", 32, 2),
                                                    "lev": Warmup("lev", "level_filter", 7, 2)}
    del cfg["recipe"]["prompts_per_iteration"]
    assert warmup.study(cfg)["crit"] == Warmup("crit", "critic_filter", 32, 8)  # unvalidated: the schema's defaults
    assert warmup.study(None) == {} and warmup.study({k: v for k, v in cfg.items() if k != "recipe"}) == {}
