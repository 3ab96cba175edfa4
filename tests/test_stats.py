import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from mcgrpo.stats import holm, paired_summary

A = np.array([0.52, 0.48, 0.61, 0.55, 0.50])
B = np.array([0.50, 0.45, 0.55, 0.56, 0.47])


def test_paired_summary_matches_scipy_and_statsmodels():
    s = paired_summary(A - B, margin=0.02)
    d = A - B
    half = stats.t.ppf(0.975, len(d) - 1) * stats.sem(d)
    assert s["n"] == 5 and s["seeds_higher"] == 4 and isinstance(s["seeds_higher"], int)
    assert s["mean"] == pytest.approx(d.mean())
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half))
    assert s["p"] == pytest.approx(stats.ttest_rel(A, B).pvalue)
    assert s["tost_p"] == pytest.approx(ttost_paired(A, B, -0.02, 0.02)[0])


def test_tost_equivalent_arms_small_p_different_arms_large_p():
    noise = np.random.default_rng(0).normal(0, 0.002, size=8)
    assert paired_summary(noise, margin=0.02)["tost_p"] < 0.01
    assert paired_summary(0.2 + noise, margin=0.02)["tost_p"] > 0.99


@pytest.mark.parametrize("diffs, mean", [([0.1], 0.1), ([], np.nan)])
def test_paired_summary_too_few_seeds_is_nan_not_crash(diffs, mean):
    s = paired_summary(np.array(diffs), margin=0.02)
    assert s["n"] == len(diffs) and s["seeds_higher"] == len(diffs)
    assert s["mean"] == pytest.approx(mean, nan_ok=True)
    assert all(np.isnan(s[k]) for k in ("ci_low", "ci_high", "p", "tost_p"))


def test_holm_matches_statsmodels_and_keeps_nan():
    p = [0.01, np.nan, 0.04, 0.03]
    out = holm(p)
    expected = multipletests([0.01, 0.04, 0.03], method="holm")[1]
    assert np.isnan(out[1])
    np.testing.assert_allclose(out[[0, 2, 3]], expected)
    np.testing.assert_allclose(out[[0, 2, 3]], [0.03, 0.06, 0.06])


def test_holm_all_nan_and_empty():
    assert np.isnan(holm([np.nan, np.nan])).all()
    assert holm([]).shape == (0,)
