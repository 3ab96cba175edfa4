"""Accuracy curves over training, and what they say beyond one reading at B.

- mean curves over seeds (each seed interpolated onto a common grid);
- the difference from the base at every evaluation, paired by seed and evaluation index
  (evaluation k is the k-th multiple of B / per_budget in every arm; runs whose indices skip a
  point are refused);
- the share of B (or of the base's training time at B) at which an arm's mean curve (over
  evaluation indices) first reaches the base's mean accuracy at B, with a seed bootstrap;
- the heuristic extrapolation: an arm with per-token efficiency e reaches after t tokens what
  the base reaches after e*t tokens on the same seed (a heuristic, not a prediction).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from mcgrpo.analysis.contrasts import budget_row, name
from mcgrpo.analysis.runs import Run
from mcgrpo.analysis.stats import RESAMPLES, mean_ci, resample_counts

AXES = ("tokens", "time")  # of the share of budget; time is each run's clock (Run.time)
EXTRAPOLATION_COLUMNS = ["contrast", "metric", "eval_set", "efficiency", "n", "observed_at_B", "extrapolated_at_B",
                         "mean", "ci_low", "ci_high", "p", "evaluations_used"]


def mean_curve(evals_arm: pd.DataFrame, x: str, grid: np.ndarray,
               metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds of each seed's `metric` interpolated at `grid`, with a 95% t band.

    The band is NaN (not drawn) with a single seed.
    """
    curves = np.array([np.interp(grid, run[x], run[metric])
                       for _, run in evals_arm.sort_values(x).groupby("seed")])
    mean = curves.mean(axis=0)
    if len(curves) < 2:
        return mean, np.full_like(mean, np.nan), np.full_like(mean, np.nan)
    half = stats.t.ppf(0.975, len(curves) - 1) * stats.sem(curves, axis=0)
    return mean, mean - half, mean + half


def _common_seeds(runs: dict, a: str, b: str, eval_set: str) -> list[int]:
    return sorted({s for arm, s, e in runs if arm == a and e == eval_set}
                  & {s for arm, s, e in runs if arm == b and e == eval_set})


def check_indices(*runs: Run) -> int:
    """The number of evaluation indices all `runs` share, once it is checked that each run's
    indices are 0, 1, 2, ...: evaluation k is the k-th point of B / per_budget in every arm, so
    curves can be paired by index. Runs from a trainer that skipped points are refused."""
    for run in runs:
        index = run.coords("eval_index")  # as floats, cached: equal to 0, 1, 2, ... exactly when the integers are
        if not np.array_equal(index, np.arange(len(index))):
            raise ValueError(f"run {run.name} on {run.eval_set}: evaluation indices "
                             f"{run.evals['eval_index'].tolist()[:12]} are not "
                             f"0, 1, 2, ...: its curve cannot be paired by index with another run's (retrain it "
                             f"with this version, which records every evaluation point)")
    return min(len(r.evals) for r in runs)


def differences(runs: dict[tuple[str, int, str], Run], a: str, b: str, metric: str,
                eval_set: str) -> pd.DataFrame:
    """A minus the base at every evaluation index both reached, paired by seed: mean and 95% t CI."""
    by_index: dict[int, list[tuple[float, float]]] = {}
    for seed in _common_seeds(runs, a, b, eval_set):
        ra, rb = runs[a, seed, eval_set], runs[b, seed, eval_set]
        n = check_indices(ra, rb)
        diff = ra.scores(metric)[0].mean(axis=1)[:n] - rb.scores(metric)[0].mean(axis=1)[:n]
        tokens = (ra.coords("tokens_total")[:n] + rb.coords("tokens_total")[:n]) / 2
        for i, d, t in zip(range(n), diff, tokens):
            by_index.setdefault(int(i), []).append((d, t))
    rows = [{"contrast": name(a, b), "metric": metric, "eval_set": eval_set, "eval_index": i,
             "tokens": float(np.mean([t for _, t in v])), **mean_ci(np.array([d for d, _ in v]))}
            for i, v in sorted(by_index.items())]
    return pd.DataFrame(rows, columns=["contrast", "metric", "eval_set", "eval_index", "tokens", "n", "mean",
                                       "ci_low", "ci_high", "p"])


def first_crossing(x: np.ndarray, y: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per row of curves (x, y), the first x at which y reaches the row's `target`; NaN if never.

    Linear between points, as the curves are; a curve that starts at the target crosses at its start.
    """
    y = np.atleast_2d(y)
    x = np.broadcast_to(x, y.shape)
    target = np.broadcast_to(target, (len(y),))
    reached = y >= target[:, None]
    j = reached.argmax(axis=1)
    rows, lo = np.arange(len(y)), np.maximum(j - 1, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(j == 0, 1.0, (target - y[rows, lo]) / (y[rows, j] - y[rows, lo]))
    out = x[rows, lo] + w * (x[rows, j] - x[rows, lo])
    return np.where(reached.any(axis=1), out, np.nan)


def budget_share(runs: dict[tuple[str, int, str], Run], a: str, b: str, metric: str, eval_set: str,
                 B: int, axis: str = "tokens", resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """Where A's mean curve first reaches the base's mean `metric` at B, as a share of B (tokens) or
    of the base's mean training time at B (time).

    As the paper's C.6.8: the mean curve averages, over the seeds both arms ran, A's position and
    `metric` at each evaluation index all of them reached; the 95% interval comes from seed
    resamples that keep each seed's two runs together, a resample that never reaches its target
    counting as not reached (+inf).
    """
    seeds = _common_seeds(runs, a, b, eval_set)
    run_a, run_b = [runs[a, s, eval_set] for s in seeds], [runs[b, s, eval_set] for s in seeds]
    column = "tokens_total" if axis == "tokens" else run_b[0].time
    at_b = [budget_row(r, B) for r in run_b]
    target = np.array([r.scores(metric)[0].mean(axis=1)[i] for r, i in zip(run_b, at_b)])
    scale = np.full(len(seeds), float(B)) if axis == "tokens" else np.array(
        [r.coords(column)[i] for r, i in zip(run_b, at_b)])
    common = check_indices(*run_a)  # evaluation indices every seed reached
    xs = np.array([r.coords(column)[:common] for r in run_a])
    ys = np.array([r.scores(metric)[0].mean(axis=1)[:common] for r in run_a])
    # A mean curve already at the target at its first evaluation (tokens 0) needs no share of the
    # budget: the share is not defined, rather than a 0.00 that reads as a measurement
    defined = bool(ys.mean(axis=0)[0] < target.mean())
    point = first_crossing(xs.mean(axis=0), ys.mean(axis=0), target.mean())[0] / scale.mean() if defined else np.nan
    low = high = reached = np.nan
    if len(seeds) >= 2 and defined:
        w = resample_counts(len(seeds), resamples, seed, 2).astype(float) / len(seeds)
        shares = first_crossing(w @ xs, w @ ys, w @ target) / (w @ scale)
        shares = np.where(np.isnan(shares), np.inf, shares)
        low, high = np.quantile(shares, [0.025, 0.975], method="inverted_cdf")  # inf stays inf
        reached = float(np.isfinite(shares).mean())
    return {"contrast": name(a, b), "metric": metric, "eval_set": eval_set, "axis": axis, "n": len(seeds),
            "target": float(target.mean()), "scale": float(scale.mean()), "share": float(point),
            "defined": defined, "reached": bool(np.isfinite(point)), "share_low": float(low), "share_high": float(high),
            "resamples_reached": reached, "curve_end": float(xs[:, -1].mean() / scale.mean())}


def extrapolation(runs: dict[tuple[str, int, str], Run], a: str, b: str, metric: str, eval_set: str,
                  B: int, efficiency: float) -> dict:
    """Observed minus extrapolated accuracy of A, averaged over A's evaluations up to B (only those
    whose e*t lies within the base's run), paired over seeds; and both at B, where the base reaches e*t_B.
    """
    gaps, at_budget = [], []
    for seed in _common_seeds(runs, a, b, eval_set):
        ra, rb = runs[a, seed, eval_set], runs[b, seed, eval_set]
        end = budget_row(ra, B) + 1
        t = ra.coords("tokens_total")[:end] * efficiency
        observed = ra.scores(metric)[0].mean(axis=1)[:end]
        base_t, base_v = rb.coords("tokens_total"), rb.scores(metric)[0].mean(axis=1)
        inside = t <= base_t[-1]
        predicted = np.interp(t, base_t, base_v)
        gaps.append((observed - predicted)[inside].mean())
        at_budget.append((observed[-1], predicted[-1] if inside[-1] else np.nan, inside.sum()))
    observed_b, predicted_b, used = (np.array(v, dtype=float) for v in zip(*at_budget)) if at_budget else ([],) * 3
    s = mean_ci(np.array(gaps))
    return {"contrast": name(a, b), "metric": metric, "eval_set": eval_set, "efficiency": efficiency,
            "n": s["n"], "observed_at_B": float(np.mean(observed_b)) if len(observed_b) else np.nan,
            "extrapolated_at_B": float(np.mean(predicted_b)) if len(predicted_b) else np.nan,
            "mean": s["mean"], "ci_low": s["ci_low"], "ci_high": s["ci_high"], "p": s["p"],
            "evaluations_used": int(np.min(used)) if len(used) else 0}
