"""Gradient efficiency from the gradient tests' table, and the prediction table (analysis side, no torch)."""

import numpy as np
import pandas as pd
import pytest

from mcgrpo.analysis import efficiency
from mcgrpo.analysis.contrasts import name


def table(values: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    """The long gradient-test table from {arm: {measure: per-batch values}}."""
    return pd.DataFrame([{"arm": arm, "batch": b, "measure": m, "value": v}
                         for arm, measures in values.items() for m, vs in measures.items() for b, v in enumerate(vs)])


def arm(inner, sq, tokens, alignment=(np.nan,) * 4, share=(0.0,) * 4):
    return {"inner": inner, "sq_norm": sq, "tokens": tokens, "alignment": list(alignment),
            "share_outside_v": list(share), "projection_residual": [0.0] * 4, "cos_full": [0.5] * 4}


def test_efficiency_is_squared_mean_inner_over_mean_square_norm_relative_to_outcome():
    tests = table({"outcome": arm([1, 2, 3, 2], [4, 4, 4, 4], [100] * 4),
                   "dense": arm([2, 4, 6, 4], [8, 8, 8, 8], [400] * 4, [0.9, 0.8, 0.7, 0.6], [0.9] * 4)})
    e = efficiency.efficiency_table(tests, resamples=500).set_index("arm")
    # outcome: 2^2 / 4 = 1; dense: 4^2 / 8 = 2 -> 2x per update; 4x the tokens -> 0.5x per token
    assert e.loc["outcome", "per_update"] == pytest.approx(1.0)
    assert e.loc["dense", "per_update"] == pytest.approx(2.0)
    assert e.loc["dense", "per_token"] == pytest.approx(0.5)
    assert e.loc["dense", "per_update_low"] <= 2.0 <= e.loc["dense", "per_update_high"]
    assert e.loc["dense", "alignment"] == pytest.approx(0.75)
    assert np.isnan(e.loc["outcome", "alignment"])


def test_efficiency_squares_the_mean_not_the_mean_of_squares():
    # dense's <u,h> has the same mean square as outcome's but flips sign: E<u,h> = 0, so no efficiency at all
    tests = table({"outcome": arm([1, 1, 1, 1], [1, 1, 1, 1], [10] * 4), "dense": arm([1, -1, 1, -1], [1, 1, 1, 1], [10] * 4)})
    e = efficiency.efficiency_table(tests, resamples=200).set_index("arm")
    assert e.loc["dense", "per_update"] == pytest.approx(0.0)


def test_outcome_relative_to_itself_is_one_with_a_degenerate_interval():
    rng = np.random.default_rng(0)
    inner, sq = list(rng.random(6) + 0.5), list(rng.random(6) + 1)
    e = efficiency.efficiency_table(table({"outcome": arm(inner, sq, [50] * 6)}), resamples=200)
    assert e[["per_update", "per_update_low", "per_update_high", "per_token"]].to_numpy() == pytest.approx(1.0)


def test_bootstrap_resamples_batches_jointly():
    # dense's numbers are outcome's times two on every batch: every resample gives exactly the same ratio
    rng = np.random.default_rng(1)
    inner, sq = rng.random(8) + 0.2, rng.random(8) + 1
    tests = table({"outcome": arm(list(inner), list(sq), [10] * 8), "dense": arm(list(2 * inner), list(4 * sq), [20] * 8)})
    e = efficiency.efficiency_table(tests, resamples=300).set_index("arm")
    assert e.loc["dense", ["per_update_low", "per_update_high"]].to_numpy() == pytest.approx([1.0, 1.0])
    assert e.loc["dense", ["per_token_low", "per_token_high"]].to_numpy() == pytest.approx([0.5, 0.5])


def test_missing_outcome_rows_are_a_clear_error():
    with pytest.raises(ValueError, match="no 'outcome' rows"):
        efficiency.efficiency_table(table({"dense": arm([1] * 4, [1] * 4, [1] * 4)}))


def contrasts_for(diffs: dict[str, tuple[float, float]]) -> pd.DataFrame:
    rows = []
    for a, (updates, tokens) in diffs.items():
        for basis, d in (("updates", updates), ("tokens", tokens)):
            rows.append({"contrast": name(a, "outcome"), "basis": basis, "metric": "acc_default", "eval_set": "heldout",
                         "mean": d, "ci_low": d - 0.01, "ci_high": d + 0.01})
    return pd.DataFrame(rows)


def test_prediction_table_pairs_each_efficiency_with_its_basis_and_ranks_them():
    eff = pd.DataFrame({"arm": ["outcome", "k1", "k2", "k4"], "per_update": [1, 1.55, 1.6, 1.63],
                        "per_token": [1, 0.45, 0.27, 0.15]})
    for c in ("per_update", "per_token"):
        eff[f"{c}_low"], eff[f"{c}_high"] = eff[c] * 0.9, eff[c] * 1.1
    contrasts = contrasts_for({"k1": (0.01, -0.07), "k2": (0.012, -0.11), "k4": (0.015, -0.15)})
    table = efficiency.prediction_table(eff, contrasts, "outcome", "acc_default", "heldout")
    assert list(table["arm"]) == ["k1", "k2", "k4"]
    assert table.set_index("arm").loc["k4", "diff_tokens"] == pytest.approx(-0.15)
    assert table.set_index("arm").loc["k4", "diff_updates"] == pytest.approx(0.015)
    rho = efficiency.rank_agreement(table)
    assert rho["spearman_per_update"] == pytest.approx(1.0) and rho["spearman_per_token"] == pytest.approx(1.0)
    assert np.isnan(efficiency.rank_agreement(table.head(2))["spearman_per_token"])  # two points rank nothing


def test_second_moment_fit_recovers_a_plus_b_over_k():
    # E||u_k||^2 = 3 + 1/k exactly on every batch (times a batch factor): the share at k is (1/k) / (3 + 1/k)
    rng = np.random.default_rng(2)
    factor = 1 + rng.random(5)
    values = {f"sweep_k{k}": arm([1.0] * 5, list((3 + 1 / k) * factor), [10] * 5) for k in (1, 2, 4, 8, 16)}
    fit = efficiency.second_moment_fit(table({"outcome": arm([1.0] * 5, [1.0] * 5, [10] * 5), **values}), resamples=200)
    assert list(fit["k"]) == [1, 2, 4, 8, 16]
    expected = [(1 / k) / (3 + 1 / k) for k in (1, 2, 4, 8, 16)]
    np.testing.assert_allclose(fit["continuation_share"], expected)
    np.testing.assert_allclose(fit["share_low"], expected)  # the same shape on every batch: no spread
    assert fit["b"].iloc[0] / fit["a"].iloc[0] == pytest.approx(1 / 3)
    assert efficiency.second_moment_fit(table({"outcome": arm([1.0] * 4, [1.0] * 4, [1] * 4)})).empty
