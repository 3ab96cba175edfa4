import itertools

import numpy as np
import pytest
from scipy import stats
from scipy.special import comb
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import DescrStatsW, ttost_paired

from mcgrpo.analysis.stats import crossed_bootstrap, holm, mean_ci, paired_summary, pass_at_k, resample_counts

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
    # non-inferiority: the lower bound of the 90% interval, and the one-sided test at -margin
    assert s["ni_low"] == pytest.approx(DescrStatsW(d).tconfint_mean(alpha=0.1)[0])
    assert s["ni_low"] == pytest.approx(d.mean() - stats.t.ppf(0.95, 4) * stats.sem(d))
    assert s["ni_p"] == pytest.approx(stats.ttest_1samp(d, -0.02, alternative="greater").pvalue)


@pytest.mark.parametrize("seed", range(5))
def test_mean_ci_is_scipys_one_sample_t(seed):
    d = np.random.default_rng(seed).normal(0.01, 0.03, 3 + seed)
    test = stats.ttest_1samp(d, 0.0)
    for level in (0.9, 0.95):
        ci = test.confidence_interval(confidence_level=level)
        out = mean_ci(d, level)
        assert (out["ci_low"], out["ci_high"]) == pytest.approx((ci.low, ci.high))
        assert out["p"] == pytest.approx(test.pvalue)


def test_non_inferiority_decides_at_the_margin():
    assert paired_summary(np.array([-0.010, -0.012, -0.008, -0.011]), 0.02)["ni_p"] < 0.05
    assert paired_summary(np.array([-0.03, -0.025, -0.028, -0.031]), 0.02)["ni_p"] > 0.95


def test_tost_equivalent_arms_small_p_different_arms_large_p():
    noise = np.random.default_rng(0).normal(0, 0.002, size=8)
    assert paired_summary(noise, margin=0.02)["tost_p"] < 0.01
    assert paired_summary(0.2 + noise, margin=0.02)["tost_p"] > 0.99


@pytest.mark.parametrize("diffs, mean", [([0.1], 0.1), ([], np.nan)])
def test_paired_summary_too_few_seeds_is_nan_not_crash(diffs, mean):
    s = paired_summary(np.array(diffs), margin=0.02)
    assert s["n"] == len(diffs) and s["seeds_higher"] == len(diffs)
    assert s["mean"] == pytest.approx(mean, nan_ok=True)
    assert all(np.isnan(s[k]) for k in ("ci_low", "ci_high", "p", "tost_p", "ni_low", "ni_p"))



@pytest.mark.filterwarnings("error::RuntimeWarning")  # statsmodels divided by a standard error of 0 here
@pytest.mark.parametrize("diffs", [[0.03] * 4, [-0.03] * 4, [0.01] * 4, [0.0] * 4, [0.3 - 0.2, 0.1, 0.1, 0.1]],
                         ids=["+3 points", "-3 points", "+1 point, inside the margin", "all 0", "rounding noise"])
def test_differences_that_do_not_spread_are_no_test(diffs):
    """Every seed's difference the same (sd 0, or rounding noise): t = mean / 0 is no test. Before, p was 0 (NaN at
    mean 0), TOST p 0 inside the margin and 1 outside it, non-inferiority p 0 or 1: numbers any caller (a difference
    curve, a table) would print as evidence. Now every p is NaN; the interval is the mean, of zero width."""
    s = paired_summary(np.array(diffs), margin=0.02)
    assert all(np.isnan(s[k]) for k in ("p", "tost_p", "ni_p"))
    assert s["ci_low"] == pytest.approx(s["mean"]) and s["ci_high"] == pytest.approx(s["mean"])
    assert s["ni_low"] == pytest.approx(s["mean"]) and s["n"] == 4
    assert np.isnan(mean_ci(np.array(diffs))["p"])


def test_the_smallest_spread_data_can_show_is_tested():
    """One seed a sample of 12 apart from the rest is a spread: the t test runs, with scipy's p."""
    d = np.array([0.25, 0.25, 0.25, 0.25 + 1 / 12])
    s = paired_summary(d, margin=0.02)
    assert s["p"] == pytest.approx(stats.ttest_1samp(d, 0.0).pvalue)
    assert np.isfinite(s["tost_p"]) and np.isfinite(s["ni_p"])

def test_holm_matches_statsmodels_and_keeps_nan_in_the_family_as_not_rejected():
    """A NaN (a planned test not made) stays NaN and keeps its place: the family is adjusted for its planned four."""
    p = [0.01, np.nan, 0.04, 0.03]
    out = holm(p)
    expected = multipletests([0.01, 1.0, 0.04, 0.03], method="holm")[1]
    assert np.isnan(out[1])
    np.testing.assert_allclose(out[[0, 2, 3]], expected[[0, 2, 3]])
    np.testing.assert_allclose(out[[0, 2, 3]], [0.04, 0.09, 0.09])


@pytest.mark.parametrize("seed", range(6))
def test_holm_matches_statsmodels_on_random_families(seed):
    p = np.random.default_rng(seed).uniform(0, 0.2, 2 + seed) ** 2
    p[0] = p[-1]  # a tie
    np.testing.assert_allclose(holm(p), multipletests(p, method="holm")[1])


def test_holm_all_nan_and_empty():
    assert np.isnan(holm([np.nan, np.nan])).all()
    assert holm([]).shape == (0,)


def test_pass_at_k_hand_values_and_brute_force():
    # n = 4 samples, c = 2 correct: pass@1 = 1/2, pass@2 = 1 - C(2,2)/C(4,2) = 5/6, pass@3 = 1
    np.testing.assert_allclose(pass_at_k(np.array([4, 4, 4]), np.array([2, 2, 2]), 2), [5 / 6] * 3)
    np.testing.assert_allclose(pass_at_k(np.array([4]), np.array([2]), 1), [0.5])
    np.testing.assert_allclose(pass_at_k(np.array([4]), np.array([2]), 3), [1.0])
    for n, c, k in [(8, 3, 4), (8, 0, 8), (8, 8, 2), (6, 1, 5)]:
        draws = list(itertools.combinations([1] * c + [0] * (n - c), k))
        assert pass_at_k(np.array([n]), np.array([c]), k)[0] == pytest.approx(np.mean([any(d) for d in draws]))
        assert pass_at_k(np.array([n]), np.array([c]), k)[0] == pytest.approx(1 - comb(n - c, k) / comb(n, k))


def test_pass_at_k_rejects_k_above_samples():
    with pytest.raises(ValueError, match=r"pass@9 needs 1 <= k <= samples per problem \(fewest here: 8\)"):
        pass_at_k(np.array([8, 9]), np.array([1, 1]), 9)


def test_resample_counts_are_seeded_multinomial_draws():
    counts = resample_counts(7, 2000, seed=3, stream=1)
    assert counts.shape == (2000, 7) and (counts.sum(axis=1) == 7).all()
    assert counts.mean() == pytest.approx(1.0, abs=0.05)
    assert np.array_equal(counts, resample_counts(7, 2000, seed=3, stream=1))
    assert not np.array_equal(counts, resample_counts(7, 2000, seed=3, stream=2))
    assert not counts.flags.writeable


def test_crossed_bootstrap_equals_the_explicit_resampling_loop():
    rng = np.random.default_rng(4)
    table = rng.normal(0.02, 0.1, (5, 12))
    low, high = crossed_bootstrap(table, resamples=400, seed=9)
    seeds, problems = resample_counts(5, 400, 9, 0), resample_counts(12, 400, 9, 1)
    means = []
    for s, p in zip(seeds, problems):  # expand counts into the drawn rows and columns
        rows, cols = np.repeat(np.arange(5), s.astype(int)), np.repeat(np.arange(12), p.astype(int))
        means.append(table[np.ix_(rows, cols)].mean())
    np.testing.assert_allclose((low, high), np.percentile(means, [2.5, 97.5]), atol=1e-5)


def test_crossed_bootstrap_is_wider_than_seeds_alone_when_problems_vary():
    rng = np.random.default_rng(5)
    table = 0.02 + rng.normal(0, 0.3, (8, 40))  # problem-level noise dominates
    low, high = crossed_bootstrap(table, seed=0)
    assert low < table.mean() < high
    seeds_only = [table[rng.integers(0, 8, 8)].mean() for _ in range(2000)]
    assert high - low > np.subtract(*np.percentile(seeds_only, [97.5, 2.5]))


def test_crossed_bootstrap_needs_two_seeds():
    assert np.isnan(crossed_bootstrap(np.ones((1, 5)))).all()


def test_crossed_bootstrap_on_tied_and_constant_tables():
    """Per-problem differences are few distinct values (multiples of 1/12 here), so resampled means tie: the
    percentile interval stays finite and brackets the mean. A table of one value gives that value, a point: its
    contrast is uninformative (every seed alike) before anything reads the interval."""
    table = np.random.default_rng(2).integers(-1, 2, (4, 30)) / 12
    low, high = crossed_bootstrap(table, resamples=500, seed=0)
    assert np.isfinite([low, high]).all() and low < table.mean() < high
    assert crossed_bootstrap(np.full((4, 30), 1 / 12), resamples=500) == pytest.approx((1 / 12, 1 / 12))
