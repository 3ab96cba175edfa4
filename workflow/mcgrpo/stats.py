"""Paired-seed statistics for one contrast, and Holm adjustment within a family.

The seed is the unit: each seed contributes one difference between two arms run on the
same seed, so a one-sample t on the differences is the paired t-test.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import DescrStatsW


def paired_summary(diffs: np.ndarray, margin: float) -> dict:
    """n, mean, 95% paired-t CI, two-sided p, TOST p at ±margin and seeds with diff > 0.

    Fewer than two seeds leave nothing to test: the mean is reported, the rest is NaN.
    """
    d = np.asarray(diffs, dtype=float)
    out = {"n": int(d.size), "mean": float(d.mean()) if d.size else np.nan,
           "ci_low": np.nan, "ci_high": np.nan, "p": np.nan, "tost_p": np.nan,
           "seeds_higher": int((d > 0).sum())}
    if d.size < 2:
        return out
    test = stats.ttest_1samp(d, 0.0)
    ci = test.confidence_interval(confidence_level=0.95)
    out.update(ci_low=float(ci.low), ci_high=float(ci.high), p=float(test.pvalue),
               tost_p=float(DescrStatsW(d).ttost_mean(-margin, margin)[0]))
    return out


def holm(p: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values; NaNs (untestable contrasts) stay NaN and do not count."""
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method="holm")[1]
    return out
