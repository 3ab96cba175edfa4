"""The protocol's statistics: paired-seed tests, Holm, the crossed bootstrap, pass@k.

The seed is the unit: each seed contributes one difference between two arms run on the
same seed, so a one-sample t on the differences is the paired t-test. Every test problem is
shared by all runs of a study, so the crossed bootstrap resamples seeds and problems together.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np
from scipy import special
from scipy.special import comb
from statsmodels.stats.weightstats import DescrStatsW

from mcgrpo.core.errors import DataError

RESAMPLES = 10_000
# Differences that spread by no more than this have no variance to test against (analysis/informative.py): accuracies
# are multiples of 1 / (problems x samples), far above it; a float rounding error (0.3 - 0.2 against 0.1) far below.
TOLERANCE = 1e-9


def spread(values: np.ndarray) -> bool:
    """Whether `values` (two or more) differ by more than TOLERANCE: where they do not, a t statistic divides by a
    standard error of 0 (or of rounding noise) and its p (0, or NaN at a mean of 0) is no test. The paper is silent;
    the conservative reading, and scipy's own warning there, is that such data test nothing."""
    return bool(np.ptp(values) > TOLERANCE)


def mean_ci(values: np.ndarray, level: float = 0.95) -> dict:
    """n, mean, t interval at `level` and two-sided p against 0; NaN below two values, and p NaN where they do not
    spread (`spread`: the interval has zero width, and there is no test).

    scipy.stats.ttest_1samp's numbers (the tests check it) in closed form: that call costs
    milliseconds, and curves take thousands of these. The t quantile and tail are the special functions
    scipy.stats.t computes them with (stdtrit, stdtr: the same numbers), without its argument checks per call.
    """
    d = np.asarray(values, dtype=float)
    out = {"n": int(d.size), "mean": float(d.mean()) if d.size else np.nan,
           "ci_low": np.nan, "ci_high": np.nan, "p": np.nan}
    if d.size >= 2:
        se = d.std(ddof=1) / np.sqrt(d.size)
        half = special.stdtrit(d.size - 1, 0.5 + level / 2) * se
        p = 2 * special.stdtr(d.size - 1, -(abs(out["mean"]) / se)) if spread(d) else np.nan
        out.update(ci_low=out["mean"] - half, ci_high=out["mean"] + half, p=float(p))
    return out


def paired_summary(diffs: np.ndarray, margin: float) -> dict:
    """mean_ci of the paired differences, TOST p at ±margin, non-inferiority and seeds higher.

    Non-inferiority (the paper's C.1): the lower bound of the 90% interval exceeds -margin, i.e.
    the one-sided test of mean <= -margin (ni_p) rejects at 5%. Fewer than two seeds leave
    nothing to test: the mean is reported, the rest is NaN. Differences that do not spread (`spread`) are no test
    either: every p is NaN (statsmodels would divide by a standard error of 0 and return 0 or 1), the bounds are the
    mean (an interval of zero width).
    """
    d = np.asarray(diffs, dtype=float)
    out = {**mean_ci(d), "tost_p": np.nan, "ni_low": np.nan, "ni_p": np.nan, "seeds_higher": int((d > 0).sum())}
    if d.size >= 2 and not spread(d):
        out.update(ni_low=out["mean"])
    elif d.size >= 2:
        described = DescrStatsW(d)
        out.update(tost_p=float(described.ttost_mean(-margin, margin)[0]),
                   ni_low=float(described.tconfint_mean(alpha=0.10)[0]),
                   ni_p=float(described.ttest_mean(-margin, alternative="larger")[1]))
    return out


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values over the family `p` as planned; a NaN (a planned test not made: an uninformative
    contrast) stays NaN and counts as not rejected, p = 1, so the family keeps its planned size.

    The paper adjusts "within each preregistered primary family" and is silent on a member that cannot be tested;
    dropping it would adjust its siblings by fewer tests than planned, so that a sibling's degenerate data made a
    verdict easier to reach: the conservative reading keeps it. The same numbers as statsmodels'
    multipletests(method="holm") with NaN read as 1 (the tests check it), which runs a full garbage collection on
    every call: seconds over a few hundred families.
    """
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    factors = np.arange(len(p), len(p) - len(order), -1)  # untested members rank last (p = 1): never multiply
    out[order] = np.minimum(1.0, np.maximum.accumulate(p[order] * factors))
    return out


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Chen et al.'s unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    n, c = np.asarray(n), np.asarray(c)
    if k < 1 or (n < k).any():
        raise DataError(f"pass@{k} needs 1 <= k <= samples per problem (fewest here: {n.min()})")
    if k == 1:  # the same, without the binomials: the fraction correct
        return c / n
    return 1.0 - comb(n - c, k) / comb(n, k)


@lru_cache(maxsize=64)
def resample_counts(size: int, resamples: int = RESAMPLES, seed: int = 0, stream: int = 0) -> np.ndarray:
    """How often each of `size` units is drawn in each bootstrap resample (resamples x size).

    Seeded by (seed, stream, size), so every contrast of a study with the same seeds and problems
    sees the same resamples (common random numbers), and a rerun gives the same intervals.
    """
    rng = np.random.default_rng([seed, stream, size])
    draws = rng.integers(0, size, (resamples, size)) + size * np.arange(resamples)[:, None]
    counts = np.bincount(draws.ravel(), minlength=resamples * size).reshape(resamples, size)
    counts = counts.astype(np.float32)  # exact for counts; halves the bootstrap's matrix product
    counts.flags.writeable = False
    return counts


def crossed_bootstrap(table: np.ndarray, resamples: int = RESAMPLES, seed: int = 0,
                      level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean of `table` (seeds x problems), resampling both at once.

    A resample draws seeds and problems independently with replacement and averages the
    table over the drawn rows and columns: sum_ij s_i t_ij p_j / (n P) for counts s and p.
    """
    table = np.asarray(table, dtype=np.float32)
    n, problems = table.shape
    if n < 2 or problems < 1:
        return np.nan, np.nan
    seeds_drawn = resample_counts(n, resamples, seed, 0)
    problems_drawn = resample_counts(problems, resamples, seed, 1)
    means = np.einsum("rs,rs->r", problems_drawn @ table.T, seeds_drawn) / (n * problems)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)
