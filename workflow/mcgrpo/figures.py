"""Accuracy curves per arm, in generated tokens (the matched budget) or in training time.

Runs evaluate at different token counts, so each seed's curve is interpolated onto a common
grid before averaging; the band is a 95% t interval over seeds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy import stats

# x column -> (axis name, (divisor, unit) from largest to smallest)
AXES = {"tokens_total": ("generated tokens",
                         ((1e9, "billions"), (1e6, "millions"), (1e3, "thousands"), (1, ""))),
        "train_seconds": ("training time", ((3600, "hours"), (60, "minutes"), (1, "seconds")))}


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


def _unit(x: str, top: float) -> tuple[float, str]:
    """The divisor and axis label that keep ticks readable for values up to `top`."""
    name, units = AXES[x]
    scale, unit = next(((s, u) for s, u in units if top >= s), units[-1])
    return scale, f"{name} ({unit})" if unit else name


def _grid_end(run_ends: pd.Series, x: str, B: int) -> float:
    """Tokens: the budget. Time: the shortest run, so every seed covers the whole grid."""
    return float(B) if x == "tokens_total" else float(run_ends.min())


def accuracy_curves(evals: pd.DataFrame, x: str, B: int, path: str | Path,
                    metric: str = "acc_default", eval_set: str | None = None) -> Path:
    """Save a PNG of `metric` against `x` ("tokens_total" or "train_seconds"), one line per arm."""
    if x not in AXES:
        raise ValueError(f"x {x!r}: expected one of {', '.join(AXES)}")
    sets = sorted(evals["eval_set"].unique())
    if eval_set is None and len(sets) != 1:
        raise ValueError(f"evals hold eval sets {', '.join(sets)}: choose one with eval_set")
    eval_set = eval_set or sets[0]
    evals = evals[evals["eval_set"] == eval_set]
    ends = {arm: _grid_end(runs.groupby("seed")[x].max(), x, B) for arm, runs in evals.groupby("arm")}
    scale, xlabel = _unit(x, max(ends.values()))
    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for arm, runs in evals.groupby("arm"):
        grid = np.linspace(0.0, ends[arm], 101)
        mean, low, high = mean_curve(runs, x, grid, metric)
        (line,) = ax.plot(grid / scale, mean, label=f"{arm} (n={runs['seed'].nunique()})")
        ax.fill_between(grid / scale, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    if x == "tokens_total":
        ax.axvline(B / scale, color="grey", linestyle="--", label="budget B")
    ax.set(title=f"{metric} on {eval_set} by {AXES[x][0]}\n(mean over seeds, shaded: 95% t interval)",
           xlabel=xlabel, ylabel=f"accuracy ({metric}, fraction correct)")
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return Path(path)
