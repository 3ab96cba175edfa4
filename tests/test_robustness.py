"""The robustness checks beside each planned contrast: robust where every check agrees, and each check alone
making a verdict fragile (constructed runs: 4 seeds x 5 problems x 10 samples, evaluations at 0 and B)."""

import numpy as np
import pandas as pd
import pytest

from mcgrpo.analysis import robustness, summary
from mcgrpo.analysis.contrasts import build, name
from mcgrpo.analysis.drift import drift_table
from mcgrpo.analysis.runs import Run, evals_frame

B, SEEDS, PROBLEMS, SAMPLES = 100, range(4), 5, 10


def run(arm, seed, default, strict=None, wall=(0, 10), cpu=None):
    """A run with correct counts `default` (and `strict`, else the same) per evaluation x problem."""
    default = np.asarray(default, float)
    strict = default if strict is None else np.asarray(strict, float)
    evals = pd.DataFrame({"eval_index": [0, 1], "tokens_total": [0, B], "iteration": [0, 1], "updates": [0, 10],
                          "train_seconds": np.asarray(wall, float), "train_cpu_seconds": np.asarray(cpu or wall, float),
                          "eval_set": "test", "acc_default": default.mean(1) / SAMPLES,
                          "acc_strict": strict.mean(1) / SAMPLES})
    return Run(arm, seed, "test", evals, np.array([f"q{j}" for j in range(PROBLEMS)], dtype=object),
               np.full(default.shape, SAMPLES), {"default": default, "strict": strict})


def study(a_counts, **a_extra):
    """Base: 5 of 10 on every problem at both evaluations; A: `a_counts(seed)` -> (default, strict or None)."""
    runs = {}
    for seed in SEEDS:
        runs["base", seed, "test"] = run("base", seed, np.full((2, PROBLEMS), 5))
        default, strict = a_counts(seed)
        runs["a", seed, "test"] = run("a", seed, default, strict, **a_extra.get(seed, {}))
    return runs


def a_trails(seed):
    """3 of 10 below the base on every problem at B, one less on the first `seed` problems (seeds differ a little:
    the same total every seed would be a difference without variance, an uninformative contrast)."""
    at_b = np.full(PROBLEMS, 2.0)
    at_b[:seed] -= 1
    return np.vstack([np.full(PROBLEMS, 5), at_b]), None


def checks(runs, direction="less", basis="tokens", metric="acc_default", clock="wall"):
    plan = {(name("a", "base"), basis, metric, "test"): {"id": "T1", "label": "secondary", "direction": direction}}
    contrasts, _ = build(runs, [("a", "base", basis, metric, "test")], B, 0.02, plan, resamples=2000)
    table = robustness.table(contrasts, runs, drift_table(evals_frame(runs)), B, clock)
    return contrasts.iloc[0], table.iloc[0]


def test_a_verdict_that_survives_every_check_is_robust():
    contrast, row = checks(study(a_trails), basis="time")
    assert bool(contrast["confirmed"]) and row["robust"] and row["robustness"] == "robust"
    assert row[["crossed_holds", "strict_holds", "drift_holds", "clock_holds"]].tolist() == [True] * 4
    assert row["strict_mean"] == pytest.approx(contrast["mean"]) and row["clock_mean"] == pytest.approx(contrast["mean"])
    assert (row["drifted_a"], row["evaluations_a"], row["drifted_b"], row["evaluations_b"]) == (0, 8, 0, 8)
    assert summary.judged(contrast, row["robustness"]) == "confirmed, and robust"


def test_a_difference_carried_by_one_problem_fails_the_crossed_interval_only():
    def one_problem(seed):  # all of A's deficit on problem 0; problem 1 one above or below by seed
        at_b = np.full(PROBLEMS, 5.0)
        at_b[0] = 0
        at_b[1] += 1 if seed % 2 else -1
        return np.vstack([np.full(PROBLEMS, 5), at_b]), None
    contrast, row = checks(study(one_problem))
    assert bool(contrast["confirmed"]) and contrast["crossed_low"] < 0 <= contrast["crossed_high"]
    assert row[["crossed_holds", "strict_holds", "drift_holds"]].tolist() == [False, True, True]
    assert row["robustness"] == (f"fragile: the crossed interval includes 0 [{100 * contrast['crossed_low']:+.1f}, "
                                 f"{100 * contrast['crossed_high']:+.1f}]")
    assert summary.judged(contrast, row["robustness"]).startswith("confirmed, but fragile: the crossed interval")


def test_a_gap_the_strict_verifier_does_not_see_fails_the_strict_check_only():
    def lenient_loss(seed):  # default trails; strict scores A as the base (and above its default: no drift)
        default, _ = a_trails(seed)
        strict = default.copy()
        strict[1] = 5
        strict[1, 0] = 6 if seed % 2 else 4
        return default, strict
    contrast, row = checks(study(lenient_loss))
    assert bool(contrast["confirmed"]) and row["strict_metric"] == "acc_strict"
    assert row["strict_mean"] == pytest.approx(0.0) and row["strict_low"] < 0 < row["strict_high"]
    assert row[["crossed_holds", "strict_holds", "drift_holds"]].tolist() == [True, False, True]
    assert row["robustness"] == (f"fragile: on the strict verifier +0.0 [{100 * row['strict_low']:+.1f}, "
                                 f"{100 * row['strict_high']:+.1f}]")


def test_an_arm_whose_default_outruns_its_strict_accuracy_fails_the_drift_check_only():
    def drifts_early(seed):  # at evaluation 0 the strict verifier accepts 2 of 10 fewer (gap 0.2 > 0.1)
        default, _ = a_trails(seed)
        strict = default.copy()
        strict[0] -= 2
        return default, strict
    contrast, row = checks(study(drifts_early))
    assert bool(contrast["confirmed"]) and (row["drifted_a"], row["evaluations_a"]) == (4, 8)
    assert row["robustness"] == "fragile: a drifted in 4 of 8 evaluations"
    assert robustness.drift_cell(row) == "a 4/8, base 0/8"
    # on the strict verifier drift cannot inflate the reading: the check does not apply
    _, strict_row = checks(study(drifts_early), metric="acc_strict")
    assert pd.isna(strict_row["drift_holds"]) and pd.isna(strict_row["strict_holds"])


def test_equal_time_on_the_other_clock_can_fail_alone():
    def better_early(seed):  # A at evaluation 0 is above the base, at B below it
        default, _ = a_trails(seed)
        default[0] = 8
        return default, None
    # the base spent 2 s of CPU by B (a neighbour slowed its wall clock to 10 s): T* on the CPU clock is 2 s,
    # where A is read 1/5 of the way from 8 to ~2 of 10: above the base
    runs = study(better_early)
    for seed in SEEDS:
        runs["base", seed, "test"] = run("base", seed, np.full((2, PROBLEMS), 5), cpu=(0, 2))
    contrast, row = checks(runs, basis="time")
    assert bool(contrast["confirmed"]) and row["other_clock"] == "cpu" and row["clock_mean"] > 0
    assert row[["crossed_holds", "strict_holds", "drift_holds", "clock_holds"]].tolist() == [True, True, True, False]
    assert row["robustness"].startswith("fragile: on the process CPU time clock +")


def test_a_not_confirmed_verdict_holds_where_no_check_confirms_it():
    contrast, row = checks(study(a_trails), direction="greater")  # A trails: 'A beats the base' is not confirmed
    assert not bool(contrast["confirmed"]) and row["robustness"] == "robust"
    assert summary.judged(contrast, row["robustness"]) == "not confirmed, and robust"


@pytest.mark.parametrize("direction, mean, low, high, p, expected", [
    ("less", -0.03, -0.05, -0.01, np.nan, True), ("less", -0.03, -0.05, 0.01, np.nan, False),
    ("less", 0.03, 0.01, 0.05, np.nan, False),  # excludes 0 on the wrong side
    ("greater", 0.03, 0.01, 0.05, np.nan, True), ("two-sided", 0.03, 0.01, 0.05, np.nan, True),
    ("two-sided", -0.03, -0.05, -0.01, np.nan, False),  # the other side of the contrast's own (positive) mean
    ("equivalent", 0.0, -0.05, 0.05, 0.01, True),  # the TOST p decides where there is one
    ("equivalent", 0.0, -0.01, 0.01, np.nan, True), ("equivalent", 0.0, -0.03, 0.01, np.nan, False),
    ("noninferior", 0.0, -0.01, 0.5, np.nan, True), ("noninferior", 0.0, -0.03, 0.5, np.nan, False),
    ("noninferior", 0.0, -0.03, 0.5, 0.2, False), ("less", np.nan, np.nan, np.nan, np.nan, None),
])
def test_what_confirms_each_direction(direction, mean, low, high, p, expected):
    assert robustness.confirms(direction, mean, low, high, p, 0.02, 0.05, sign=1.0) is expected


def test_two_sided_confirms_on_either_side_where_the_contrast_was_not_confirmed():
    assert robustness.confirms("two-sided", -0.03, -0.05, -0.01, np.nan, 0.02, 0.05, sign=0.0) is True
    assert robustness.confirms("two-sided", 0.0, -0.05, 0.01, np.nan, 0.02, 0.05, sign=0.0) is False


def test_the_summary_states_the_result_not_the_hypothesis():
    row = pd.Series({"id": "S2", "label": "secondary", "family": "", "direction": "greater", "a": "mc_k4",
                     "b": "outcome", "basis": "updates", "n": 4, "mean": -0.003, "ci_low": -0.044, "ci_high": 0.039,
                     "p": 0.8, "p_holm": np.nan, "margin": 0.02, "confirmed": False, "tost_p": 0.4, "ni_p": 0.3})
    # the interval reaches past ±2 points: inconclusive, and no robustness beside a reading that shows nothing
    assert summary.sentence(row, "robust") == (
        "S2 (secondary; predicted: mc_k4 beats outcome): mc_k4 against outcome is inconclusive (the interval "
        "reaches past ±2 points) at equal updates: -0.3 [-4.4, +3.9] points, p = 0.800, 4 seeds: not confirmed")
    assert summary.result(row.copy().replace({0.4: 0.01})).endswith("matches outcome within ±2 points")
