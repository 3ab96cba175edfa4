"""The seeds planner: how many paired seeds a contrast needs, from its per-seed differences (or a pilot's).

Assumption (stated in every table): the seed differences are normal with the observed mean and standard
deviation as their true values, and the study tests them as it does now, with the paired t test (two-sided,
level alpha) for excluding 0, and TOST at the margin (each one-sided test at alpha) for equivalence. The
observed mean of a small pilot is itself uncertain, so the counts are a plan, not a promise.

Where the differences cannot tell the arms apart (analysis/informative.py) there is no plan: both counts are
"never" and the note says why. At the floor or the ceiling no number of seeds helps (each new seed reads the same
bound); with one seed, a constant difference or an undefined reading, the pilot has no SD to plan from.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from statsmodels.stats.power import TTestPower

from mcgrpo.analysis import informative

MAX_SEEDS = 10_000
ASSUMPTION = ("Assumes the seed differences are normal with the observed mean and SD as true values; excluding 0: "
              "paired t test, two-sided; equivalence: TOST at ±margin. A small pilot's mean is uncertain: treat the "
              "counts as a plan. note: why there is no plan (both counts never) where the data cannot tell the arms "
              "apart; at the floor or the ceiling no number of seeds helps.")


def seeds_to_exclude_zero(mean: float, sd: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Paired seeds for `power` to reject mean 0 (two-sided t test); inf where the mean is 0; 2 at least."""
    if not np.isfinite(mean) or not np.isfinite(sd) or mean == 0:
        return np.inf
    if sd == 0:
        return 2.0
    n = TTestPower().solve_power(effect_size=abs(mean) / sd, alpha=alpha, power=power, alternative="two-sided")
    return float(max(2, np.ceil(n)))


def tost_power(mean: float, sd: float, margin: float, n: int, alpha: float = 0.05) -> float:
    """Power of TOST at ±margin with n paired seeds: both one-sided tests reject (their union bound)."""
    t = TTestPower()
    low = t.power(effect_size=(mean + margin) / sd, nobs=n, alpha=alpha, alternative="larger")
    high = t.power(effect_size=(margin - mean) / sd, nobs=n, alpha=alpha, alternative="larger")
    return float(max(0.0, low + high - 1))


def seeds_for_equivalence(mean: float, sd: float, margin: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The fewest paired seeds with TOST power >= `power`; inf where |mean| >= margin (never equivalent)."""
    if not np.isfinite(mean) or not np.isfinite(sd) or abs(mean) >= margin:
        return np.inf
    if sd == 0:
        return 2.0
    lo, hi = 2, 2
    while tost_power(mean, sd, margin, hi, alpha) < power:  # power grows with n: double, then bisect
        lo, hi = hi, hi * 2
        if hi > MAX_SEEDS:
            return np.inf
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if tost_power(mean, sd, margin, mid, alpha) < power else (lo, mid)
    return float(lo)


COLUMNS = ["contrast", "basis", "metric", "eval_set", "seeds", "mean", "sd", "seeds_to_exclude_0",
           "seeds_for_equivalence", "note"]
BOUNDS = ("floor", "ceiling")  # no seed can move a reading off a bound


def no_plan(pairs: pd.DataFrame) -> str:
    """Why the pilot's paired readings give no plan ('' where they do): no number of seeds helps at a bound."""
    kind, why = informative.check(pairs)
    if kind in BOUNDS:
        return f"no number of seeds helps: {why}"
    return f"no SD to plan from: {why}" if kind else ""


def plan(paired: pd.DataFrame, margin: float, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """Per contrast, basis, metric and eval set: seeds now, observed mean and SD of the differences, the
    seeds needed to exclude 0 and to establish equivalence, and why there is no plan (if there is none)."""
    rows = []
    for (contrast, basis, metric, eval_set), d in paired.groupby(["contrast", "basis", "metric", "eval_set"],
                                                                 sort=False):
        diff, note = d["diff"].to_numpy(dtype=float), no_plan(d)
        mean, sd = float(diff.mean()), float(diff.std(ddof=1)) if len(diff) > 1 else np.nan
        rows.append({"contrast": contrast, "basis": basis, "metric": metric, "eval_set": eval_set,
                     "seeds": len(diff), "mean": mean, "sd": sd,
                     "seeds_to_exclude_0": np.inf if note else seeds_to_exclude_zero(mean, sd, alpha, power),
                     "seeds_for_equivalence": np.inf if note else seeds_for_equivalence(mean, sd, margin, alpha,
                                                                                        power),
                     "note": note})
    return pd.DataFrame(rows, columns=COLUMNS)
