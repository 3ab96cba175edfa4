import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mcgrpo.analysis.curves import budget_share, differences, extrapolation, first_crossing
from test_contrasts import make_run, runs_of

B = 100


def test_first_crossing_interpolates_starts_and_never():
    x = np.array([0.0, 10.0, 20.0, 30.0])
    y = np.array([[0.1, 0.2, 0.4, 0.5], [0.6, 0.7, 0.8, 0.9], [0.1, 0.1, 0.1, 0.1]])
    np.testing.assert_allclose(first_crossing(x, y, np.array([0.3, 0.5, 0.5])), [15.0, 0.0, np.nan])
    # per-row x as well, and the first of two crossings
    np.testing.assert_allclose(first_crossing(np.array([[0, 4, 8, 12]]), np.array([[0, 1, 0, 1]]), 0.5), [2.0])


# Two seeds; evaluations at tokens 0, 50, 100 (B) and 150; accuracy in tenths (one problem, 10 samples).
SHARE = runs_of(
    make_run("base", 0, [0, 50, 100, 150], [0, 1, 2, 3], [0, 10, 20, 30], [2, 4, 6, 7]),
    make_run("base", 1, [0, 50, 100, 150], [0, 1, 2, 3], [0, 10, 20, 30], [2, 4, 8, 8]),
    make_run("a", 0, [0, 50, 100, 150], [0, 1, 2, 3], [0, 5, 10, 15], [2, 6, 8, 9]),
    make_run("a", 1, [0, 50, 100, 150], [0, 1, 2, 3], [0, 5, 10, 15], [2, 4, 8, 9]),
)


def test_budget_share_hand_case_on_tokens_and_time():
    # target: the base's mean at B = 0.7; A's mean curve 0.2, 0.5, 0.8 -> crosses at 50 + 2/3 * 50 tokens
    tokens = budget_share(SHARE, "a", "base", "acc_default", "test", B, "tokens", resamples=300)
    assert tokens["target"] == pytest.approx(0.7) and tokens["n"] == 2 and tokens["reached"]
    assert tokens["share"] == pytest.approx((50 + 50 * 2 / 3) / 100)
    # time: the same crossing at 5 + 2/3 * 5 s, as a share of the base's 20 s at B
    time = budget_share(SHARE, "a", "base", "acc_default", "test", B, "time", resamples=300)
    assert time["share"] == pytest.approx((5 + 5 * 2 / 3) / 20) and time["scale"] == pytest.approx(20)
    # resampled seeds: both copies of seed 0 (target 0.6 -> 50 + 0/2) or of seed 1 (0.8 -> 100)
    assert tokens["share_low"] >= 0.5 - 1e-9 and tokens["share_high"] <= 1.0 + 1e-9
    assert tokens["resamples_reached"] == 1.0 and tokens["curve_end"] == pytest.approx(1.5)


def test_budget_share_not_reached_is_nan_and_infinite_bounds():
    slow = runs_of(*(r for r in SHARE.values() if r.arm == "base"),
                   make_run("a", 0, [0, 50, 100], [0, 1, 2], [0, 5, 10], [1, 2, 3]),
                   make_run("a", 1, [0, 50, 100], [0, 1, 2], [0, 5, 10], [1, 2, 3]))
    out = budget_share(slow, "a", "base", "acc_default", "test", B, "tokens", resamples=200)
    assert not out["reached"] and np.isnan(out["share"])
    assert np.isinf(out["share_high"]) and out["resamples_reached"] == 0.0


def test_differences_pair_by_evaluation_index_with_t_intervals():
    out = differences(SHARE, "a", "base", "acc_default", "test")
    assert out["eval_index"].tolist() == [0, 1, 2, 3] and (out["n"] == 2).all()
    np.testing.assert_allclose(out["mean"], [0.0, 0.1, 0.1, 0.15])
    d = np.array([0.2, 0.0])  # evaluation 1: seed 0 +0.2, seed 1 0.0
    half = stats.t.ppf(0.975, 1) * stats.sem(d)
    np.testing.assert_allclose(out.loc[1, ["ci_low", "ci_high"]].astype(float), [0.1 - half, 0.1 + half])
    np.testing.assert_allclose(out["tokens"], [0, 50, 100, 150])


def test_extrapolation_hand_case():
    # efficiency 0.5: A at t tokens should match the base at t/2 on the same seed
    out = extrapolation(SHARE, "a", "base", "acc_default", "test", B, 0.5)
    # seed 0: A 0.2, 0.6, 0.8 against base at 0, 25, 50 -> 0.2, 0.3, 0.4: gaps 0, 0.3, 0.4
    # seed 1: A 0.2, 0.4, 0.8 against 0.2, 0.3, 0.4: gaps 0, 0.1, 0.4
    assert out["n"] == 2 and out["evaluations_used"] == 3
    assert out["mean"] == pytest.approx(np.mean([0.7 / 3, 0.5 / 3]))
    assert out["observed_at_B"] == pytest.approx(0.8) and out["extrapolated_at_B"] == pytest.approx(0.4)


def test_extrapolation_uses_only_evaluations_inside_the_base_run():
    # efficiency 2: e*t = 200 and 300 at B and past it lie beyond the base's last evaluation (150)
    out = extrapolation(SHARE, "a", "base", "acc_default", "test", B, 2.0)
    assert out["evaluations_used"] == 2 and np.isnan(out["extrapolated_at_B"])


def test_budget_share_is_not_defined_where_a_starts_at_the_target():
    """The base at B no better than A at tokens 0 (strict-verifier rows): no share of the budget is
    needed, so the share is not defined, rather than 0.00 [0.00, 0.00]."""
    from mcgrpo.analysis.tables import _budget_share
    flat = runs_of(make_run("base", 0, [0, 50, 100], [0, 1, 2], [0, 5, 10], [2, 2, 2]),
                   make_run("base", 1, [0, 50, 100], [0, 1, 2], [0, 5, 10], [2, 2, 1]),
                   *(r for r in SHARE.values() if r.arm == "a"))
    out = budget_share(flat, "a", "base", "acc_default", "test", B, "tokens", resamples=200)
    assert not out["defined"] and np.isnan(out["share"]) and np.isnan(out["share_low"])
    assert _budget_share(pd.DataFrame([out]))["share"].iloc[0] == "not defined (A starts at or above the target)"
    assert budget_share(SHARE, "a", "base", "acc_default", "test", B, "tokens", resamples=50)["defined"]


def test_curves_whose_indices_skip_a_point_are_refused():
    skipped = make_run("a", 0, [0, 50, 100, 150], [0, 1, 2, 3], [0, 5, 10, 15], [2, 6, 8, 9])
    skipped.evals["eval_index"] = [0, 1, 3, 4]  # an old trainer: one iteration crossed points 2 and 3
    runs = {**SHARE, ("a", 0, "test"): skipped}
    with pytest.raises(ValueError, match=r"run a/seed0 on test: evaluation indices \[0, 1, 3, 4\] are not 0, 1, 2"):
        differences(runs, "a", "base", "acc_default", "test")
    with pytest.raises(ValueError, match="cannot be paired by index"):
        budget_share(runs, "a", "base", "acc_default", "test", B, "tokens", resamples=50)


def test_a_difference_curve_point_where_every_seed_differs_alike_has_no_p():
    """At evaluation 1 both seeds read A 0.1 above the base: no spread, so no test (before, p = 0 in
    differences.parquet: a 'significant' point of a curve from two identical differences)."""
    alike = runs_of(*(make_run(arm, seed, [0, 50], [0, 1], [0, 10], [2, 4 + (arm == "a")])
                      for arm in ("a", "base") for seed in (0, 1)))
    out = differences(alike, "a", "base", "acc_default", "test")
    np.testing.assert_allclose(out["mean"], [0.0, 0.1])
    assert out["p"].isna().all() and out.loc[1, "ci_low"] == out.loc[1, "ci_high"] == pytest.approx(0.1)
