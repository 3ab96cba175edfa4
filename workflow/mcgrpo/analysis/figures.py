"""The study's figures (PNG), each readable without a caption: titles say what is plotted,
axes carry units, legends name arms, seeds and intervals.

Accuracy is drawn as a fraction (0.01 is one percentage point), differences as A minus the base,
and the equivalence margin as a grey band around zero.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from mcgrpo.analysis.curves import mean_curve
from mcgrpo.core.clock import STAGES
from mcgrpo.core.store import atomic

# x column -> (axis name, (divisor, unit) from largest to smallest)
AXES = {"tokens_total": ("generated tokens",
                         ((1e9, "billions"), (1e6, "millions"), (1e3, "thousands"), (1, ""))),
        "train_seconds": ("training time", ((3600, "hours"), (60, "minutes"), (1, "seconds")))}
BASIS_NAMES = {"tokens": "equal tokens (at B)", "updates": "equal updates", "time": "equal time (T*)",
               "time_c": "equal time (T_c)"}


def _figure(width: float = 7, height: float = 4.5):
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig: Figure, path: str | Path, bottom: float = 0.0) -> Path:
    """Save at 120 dpi, leaving `bottom` (a fraction of the height) free for a figure legend."""
    fig.tight_layout(rect=(0, bottom, 1, 1))
    with atomic(path) as tmp:
        fig.savefig(tmp, dpi=120, format=Path(path).suffix.lstrip("."))
    return Path(path)


def _empty(path: str | Path, title: str, why: str) -> Path:
    """A figure that says why it has nothing to show (so the report still lists it)."""
    fig, ax = _figure(7, 2)
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    return _save(fig, path)


def _unit(x: str, top: float) -> tuple[float, str]:
    """The divisor and axis label that keep ticks readable for values up to `top`."""
    name, units = AXES[x]
    scale, unit = next(((s, u) for s, u in units if top >= s), units[-1])
    return scale, f"{name} ({unit})" if unit else name


def _margin_band(ax, margin: float, vertical: bool = False) -> None:
    span = ax.axvspan if vertical else ax.axhspan
    line = ax.axvline if vertical else ax.axhline
    span(-margin, margin, color="grey", alpha=0.15, linewidth=0, label=f"±margin ({margin:g})")
    line(0, color="black", linewidth=0.8)


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
    fig, ax = _figure()
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
    return _save(fig, path)


def difference_from_base(differences: pd.DataFrame, B: int, margin: float, path: str | Path) -> Path:
    """A minus the base at every evaluation (paired by seed), one line per contrast, margin band."""
    title = "Accuracy difference from the base at every evaluation"
    if differences.empty:
        return _empty(path, title, "no contrast to show")
    scale, xlabel = _unit("tokens_total", float(differences["tokens"].max()))
    fig, ax = _figure()
    _margin_band(ax, margin)
    for contrast, d in differences.groupby("contrast"):
        (line,) = ax.plot(d["tokens"] / scale, d["mean"], marker="o", markersize=3,
                          label=f"{contrast} (n={int(d['n'].max())})")
        ax.fill_between(d["tokens"] / scale, d["ci_low"], d["ci_high"], color=line.get_color(), alpha=0.2,
                        linewidth=0)
    ax.axvline(B / scale, color="grey", linestyle="--", label="budget B")
    first = differences.iloc[0]
    ax.set(title=f"{title}\n({first['metric']} on {first['eval_set']}; mean over seeds, shaded: 95% t interval)",
           xlabel=f"{xlabel}, mean of the two arms", ylabel="A minus base (fraction; 0.01 = 1 point)")
    ax.legend(loc="best", fontsize="small")
    return _save(fig, path)


def _mark_readings(ax, row, x: float) -> None:
    """Say on the plot where a bar or point is not a plain reading at B: not defined (no number is
    drawn), or, at equal updates, A read at the base's update count."""
    if np.isnan(row["mean"]):
        ax.annotate("not defined", (x, 0), rotation=90, fontsize="x-small", ha="center", va="bottom")
    elif row["basis"] == "updates" and str(row.get("read", "")).startswith("A at"):
        ax.annotate("A at base's updates", (x, row["ci_high"] if np.isfinite(row["ci_high"]) else row["mean"]),
                    rotation=90, fontsize="x-small", ha="center", va="bottom")


def per_seed(paired: pd.DataFrame, contrasts: pd.DataFrame, margin: float, path: str | Path) -> Path:
    """Per contrast and basis: each seed's difference (dots), the mean and its 95% paired-t CI."""
    title = "Per-seed differences, mean and 95% paired-t CI per contrast and basis"
    if contrasts.empty:
        return _empty(path, title, "no contrast to show")
    names, bases = list(dict.fromkeys(contrasts["contrast"])), list(dict.fromkeys(contrasts["basis"]))
    width = 0.8 / len(bases)
    fig, ax = _figure(max(7, 1.6 * len(names) * len(bases) ** 0.5), 4.8)
    _margin_band(ax, margin)
    rng = np.random.default_rng(0)
    for j, basis in enumerate(bases):
        color = f"C{j}"
        for i, c in enumerate(names):
            x = i - 0.4 + width * (j + 0.5)
            seeds = paired[(paired["contrast"] == c) & (paired["basis"] == basis)]["diff"]
            ax.scatter(x + rng.uniform(-width / 4, width / 4, len(seeds)), seeds, s=12, color=color, alpha=0.5)
            row = contrasts[(contrasts["contrast"] == c) & (contrasts["basis"] == basis)]
            if len(row):
                r = row.iloc[0]
                ax.errorbar(x, r["mean"], yerr=[[r["mean"] - r["ci_low"]], [r["ci_high"] - r["mean"]]],
                            fmt="D", color=color, capsize=4, markersize=6,
                            label=BASIS_NAMES.get(basis, basis) if i == 0 else None)
                _mark_readings(ax, r, x)
    ax.set_xticks(range(len(names)), [f"{c}\n(n={int(contrasts[contrasts['contrast'] == c]['n'].max())})"
                                      for c in names], fontsize="small")
    first = contrasts.iloc[0]
    ax.set(title=f"{title}\n({first['metric']} on {first['eval_set']}; dots: seeds)",
           ylabel="A minus base (fraction; 0.01 = 1 point)")
    ax.legend(loc="best", fontsize="small")
    return _save(fig, path)


def bases_bars(contrasts: pd.DataFrame, margin: float, path: str | Path) -> Path:
    """Equal tokens against equal time (and updates) per contrast: mean and 95% CI bars."""
    title = "The same contrasts at equal tokens and at equal training time"
    if contrasts.empty:
        return _empty(path, title, "no contrast to show")
    names, bases = list(dict.fromkeys(contrasts["contrast"])), list(dict.fromkeys(contrasts["basis"]))
    width = 0.8 / len(bases)
    fig, ax = _figure(max(7, 1.4 * len(names)), 4.5)
    _margin_band(ax, margin)
    for j, basis in enumerate(bases):
        rows = contrasts[contrasts["basis"] == basis].set_index("contrast").reindex(names)
        x = np.arange(len(names)) - 0.4 + width * (j + 0.5)
        ax.bar(x, rows["mean"], width, yerr=[rows["mean"] - rows["ci_low"], rows["ci_high"] - rows["mean"]],
               capsize=3, label=BASIS_NAMES.get(basis, basis), color=f"C{j}")
        for xi, (_, r) in zip(x, rows.reset_index().iterrows()):
            if not pd.isna(r.get("basis")):
                _mark_readings(ax, r, xi)
    ax.set_xticks(range(len(names)), names, fontsize="small")
    first = contrasts.iloc[0]
    ax.set(title=f"{title}\n({first['metric']} on {first['eval_set']}; bars: mean over seeds, 95% paired-t CI)",
           ylabel="A minus base (fraction; 0.01 = 1 point)")
    ax.legend(loc="best", fontsize="small")
    return _save(fig, path)


def stage_seconds(stages: pd.DataFrame, path: str | Path) -> Path:
    """Stacked bars: mean training seconds per stage before B, per arm."""
    height = 1.9 + 0.6 * len(stages)
    fig, ax = _figure(7, height)
    scale, label = _unit("train_seconds", float(stages["total"].max()) if len(stages) else 1.0)
    left = np.zeros(len(stages))
    for j, stage in enumerate(STAGES):
        ax.barh(stages["arm"], stages[stage] / scale, left=left, color=f"C{j}", label=stage)
        left += stages[stage].to_numpy() / scale
    for y, (total, n) in enumerate(zip(stages["total"], stages["seeds"])):
        ax.text(total / scale, y, f" {total / scale:.3g} (n={n})", va="center", fontsize="small")
    ax.set(title="Training time per stage before B (mean over seeds)", xlabel=label)
    ax.set_xlim(0, left.max() * 1.25 if len(stages) else 1)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=len(STAGES), fontsize="small",
               frameon=False)
    return _save(fig, path, bottom=0.35 / height)


def drift(drift_df: pd.DataFrame, gap: float, path: str | Path, eval_set: str) -> Path:
    """Default minus strict accuracy over evaluations: each seed thin, the arm's mean thick."""
    fig, ax = _figure()
    d = drift_df[drift_df["eval_set"] == eval_set]
    for j, (arm, runs) in enumerate(d.groupby("arm")):
        for _, run in runs.groupby("seed"):
            ax.plot(run["eval_index"], run["gap"], color=f"C{j}", alpha=0.25, linewidth=0.8)
        mean = runs.groupby("eval_index")["gap"].mean()
        ax.plot(mean.index, mean, color=f"C{j}", linewidth=2,
                label=f"{arm}: {int(runs['drifted'].sum())} of {len(runs)} evaluations drifted")
    ax.axhline(gap, color="red", linestyle="--", label=f"drift threshold ({gap:g})")
    ax.set(title=f"Verifier drift on {eval_set}: default minus strict accuracy\n(thin: seeds, thick: mean)",
           xlabel="evaluation (0 = start; evaluations at equal steps of B)",
           ylabel="acc_default - acc_strict (fraction)")
    ax.legend(loc="best", fontsize="small")
    return _save(fig, path)
