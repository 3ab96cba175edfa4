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
from scipy import stats

from mcgrpo.analysis import informative
from mcgrpo.core.errors import DataError
from mcgrpo.core.warmup import Warmup

MAX_SEEDS = 10_000  # equivalence: past this, never
EXCLUDE_MOST = 10**12  # excluding 0: counts are given as they are up to here (statsmodels' solver gave them so)
ASSUMPTION = ("Assumes the seed differences are normal with the observed mean and SD as true values; excluding 0: "
              "paired t test, two-sided; equivalence: TOST at ±margin. A small pilot's mean is uncertain: treat the "
              "counts as a plan. note: why there is no plan (both counts never) where the data cannot tell the arms "
              "apart; at the floor or the ceiling no number of seeds helps.")


def t_power(effect: float, n: int, alpha: float, two_sided: bool = True) -> float:
    """Power of the one-sample t test on n paired seeds at standardized effect `effect` (mean / SD, >= 0 to test
    for two-sided): the noncentral t's upper tail past the critical value (and its tail below minus it), both read
    as upper tails. statsmodels' TTestPower reads the lower one with nct.cdf, which is NaN at large effects (effect 10,
    3 seeds: the paper's tightest contrasts), so its power was NaN and its solver stopped at 2 seeds, or returned NaN,
    which max(2, NaN) read as 2."""
    df, nc = n - 1, effect * np.sqrt(n)
    crit = stats.t.isf(alpha / 2 if two_sided else alpha, df)
    out = stats.nct.sf(crit, df, nc) + (stats.nct.sf(crit, df, -nc) if two_sided else 0.0)
    if not np.isfinite(out):  # never met in a search (it stops at 2 seeds long before), but never a silent count
        raise DataError(f"the power of the t test at effect {effect:g} with {n} seeds is not defined (scipy's "
                        f"noncentral t gave NaN)")
    return float(out)


def fewest(power_at, power: float, most: int = MAX_SEEDS) -> float:
    """The fewest seeds n >= 2 with power_at(n) >= `power`, for a power that grows with n; inf past `most`."""
    lo, hi = 2, 2
    while power_at(hi) < power:  # double, then bisect
        lo, hi = hi, hi * 2
        if hi > most:
            return np.inf
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if power_at(mid) < power else (lo, mid)
    return float(lo)


def seeds_to_exclude_zero(mean: float, sd: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Paired seeds for `power` to reject mean 0 (two-sided t test); 2 at least; inf where the mean is 0, where there
    is no SD (0: the study's t test makes no test of seeds that do not spread, stats.spread) or past EXCLUDE_MOST."""
    if not np.isfinite(mean) or not np.isfinite(sd) or mean == 0 or sd <= 0:
        return np.inf
    return fewest(lambda n: t_power(abs(mean) / sd, n, alpha), power, EXCLUDE_MOST)


def tost_power(mean: float, sd: float, margin: float, n: int, alpha: float = 0.05) -> float:
    """Power of TOST at ±margin with n paired seeds: both one-sided tests reject (their union bound)."""
    low = t_power((mean + margin) / sd, n, alpha, two_sided=False)
    high = t_power((margin - mean) / sd, n, alpha, two_sided=False)
    return float(max(0.0, low + high - 1))


def seeds_for_equivalence(mean: float, sd: float, margin: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The fewest paired seeds with TOST power >= `power`; inf where |mean| >= margin (never equivalent), where there
    is no SD (as seeds_to_exclude_zero) or past MAX_SEEDS."""
    if not np.isfinite(mean) or not np.isfinite(sd) or abs(mean) >= margin or sd <= 0:
        return np.inf
    return fewest(lambda n: tost_power(mean, sd, margin, n, alpha), power)


COLUMNS = ["contrast", "basis", "metric", "eval_set", "seeds", "mean", "sd", "seeds_to_exclude_0",
           "seeds_for_equivalence", "note"]
BOUNDS = ("floor", "ceiling", "warmup")  # no seed can move a reading off a bound, nor past the filter's warm-up


def no_plan(pairs: pd.DataFrame, warmups: dict[str, Warmup] | None = None) -> str:
    """Why the pilot's paired readings give no plan ('' where they do): no number of seeds helps at a bound, nor
    where the filter chose no prompt before the readings (every new seed is read as early)."""
    kind, why = informative.check(pairs, warmups)
    if kind in BOUNDS:
        return f"no number of seeds helps: {why}"
    return f"no SD to plan from: {why}" if kind else ""


def plan(paired: pd.DataFrame, margin: float, alpha: float = 0.05, power: float = 0.8,
         warmups: dict[str, Warmup] | None = None) -> pd.DataFrame:
    """Per contrast, basis, metric and eval set: seeds now, observed mean and SD of the differences, the
    seeds needed to exclude 0 and to establish equivalence, and why there is no plan (if there is none); `warmups`:
    the study's filter arms' warm-ups (mcgrpo.core.warmup.study)."""
    rows = []
    for (contrast, basis, metric, eval_set), d in paired.groupby(["contrast", "basis", "metric", "eval_set"],
                                                                 sort=False):
        diff, note = d["diff"].to_numpy(dtype=float), no_plan(d, warmups)
        mean, sd = float(diff.mean()), float(diff.std(ddof=1)) if len(diff) > 1 else np.nan
        rows.append({"contrast": contrast, "basis": basis, "metric": metric, "eval_set": eval_set,
                     "seeds": len(diff), "mean": mean, "sd": sd,
                     "seeds_to_exclude_0": np.inf if note else seeds_to_exclude_zero(mean, sd, alpha, power),
                     "seeds_for_equivalence": np.inf if note else seeds_for_equivalence(mean, sd, margin, alpha,
                                                                                        power),
                     "note": note})
    return pd.DataFrame(rows, columns=COLUMNS)
