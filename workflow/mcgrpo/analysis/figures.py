"""The study's figures, each readable without a caption and fit for a paper: titles in words, units on
every axis, one colour per arm across every figure, markers where runs were evaluated, clamped or
undefined readings marked. Each is saved as PNG (the report) and PDF (vector, for papers).

Accuracy is drawn in percent and differences in points (A minus the base; 1 point = 0.01 accuracy); the
equivalence margin is a grey band around zero.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import io
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from mcgrpo.analysis.curves import mean_curve
from mcgrpo.analysis.formats import BASIS_WORDS, CLOCK_WORDS, metric_words
from mcgrpo.analysis.runs import CLOCKS
from mcgrpo.core.clock import STAGES
from mcgrpo.core.errors import IntegrityError
from mcgrpo.core.store import atomic

# x column -> (axis name, (divisor, unit) from largest to smallest)
_SECONDS = ((3600, "hours"), (60, "minutes"), (1, "seconds"))
AXES = {"tokens_total": ("generated tokens",
                         ((1e9, "billions"), (1e6, "millions"), (1e3, "thousands"), (1, ""))),
        "train_seconds": ("training time", _SECONDS), "train_cpu_seconds": ("training CPU time", _SECONDS)}
_CLOCK_OF = {column: clock for clock, column in CLOCKS.items()}
BASIS_MARKERS = {"tokens": "D", "updates": "s", "time": "^", "time_c": "v"}
PALETTE = [f"C{i}" for i in range(10)]
# Stages are not arms: navy, greys, sand and yellow, each far (in RGB) from every colour of the arms' PALETTE
# (matplotlib's tab10), so that no stage reads as an arm.
STAGE_COLOURS = dict(zip(STAGES, ("#00224e", "#3d3d3d", "#b0b0b0", "#d8c59a", "#fee838")))


def arm_colours(arms: list[str]) -> dict[str, str]:
    """One colour per arm, by the order of `arms`, the same in every figure. The rules pass the study's config
    key-sorted, so arms are coloured alphabetically and reordering a study's arms redraws nothing."""
    return {arm: PALETTE[i % len(PALETTE)] for i, arm in enumerate(arms)}


def _colours(colours: dict[str, str] | None, arms) -> dict[str, str]:
    return colours if colours is not None else arm_colours(sorted(set(arms)))


def _figure(width: float = 7, height: float = 4.5, ncols: int = 1, sharey: bool = False):
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, sharey=sharey, squeeze=False)[0]
    return fig, (axes[0] if ncols == 1 else axes)


def _wrap(text: str, inches: float, points: float) -> str:
    """`text` wrapped, line by line, to what `inches` of width hold at a font of `points` (a character averages
    about half the font size)."""
    width = max(20, int(inches * 72 / (0.52 * points)))
    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def _fit_titles(fig: Figure) -> None:
    """Wrap every title (each axes' and the figure's) to the width it has, so that none is clipped at the edges;
    tight_layout then makes room for the extra lines."""
    for ax in fig.axes:
        title = ax.title
        if title.get_text():
            title.set_text(_wrap(title.get_text(), ax.get_position().width * fig.get_figwidth(), title.get_fontsize()))
    if fig._suptitle is not None:
        fig._suptitle.set_text(_wrap(fig._suptitle.get_text(), fig.get_figwidth(), fig._suptitle.get_fontsize()))


# A PNG's text keys: what it was drawn from (the stamp its step gives, steps.drawn_from), and a seal of that stamp
# and its pixels.
STAMP, SEAL = "mcgrpo drawn_from", "mcgrpo seal"
_stamp: contextvars.ContextVar[str] = contextvars.ContextVar("mcgrpo_figure_stamp", default="")


@contextlib.contextmanager
def stamped(drawn_from: str):
    """Every figure saved in the block carries `drawn_from` (held_figure)."""
    token = _stamp.set(drawn_from)
    try:
        yield
    finally:
        _stamp.reset(token)


def _seal(image, stamp: str) -> str:
    """sha256 of `stamp`, the image's size and its RGBA pixels."""
    rgba = image.convert("RGBA")
    return hashlib.sha256(f"{stamp}\n{rgba.size}\n".encode() + rgba.tobytes()).hexdigest()


def _png(fig: Figure, path: Path) -> None:
    """`fig` as a PNG at 150 dpi carrying the stamp of the block (stamped) and its seal (held_figure)."""
    from PIL import Image, PngImagePlugin
    buffer, stamp = io.BytesIO(), _stamp.get()
    fig.savefig(buffer, dpi=150, format="png")
    with Image.open(buffer) as image:
        text = PngImagePlugin.PngInfo()
        for key, value in {**image.text, STAMP: stamp, SEAL: _seal(image, stamp)}.items():
            text.add_text(key, value)
        image.save(path, format="png", pnginfo=text)


def held_figure(path: Path, drawn_from: str, redo: str) -> None:
    """Refuse `path`, a PNG the report shows, where it was not drawn from what its step reads now (`drawn_from`), or
    its pixels are not the ones drawn; `redo`: what draws it again. A figure cannot be held byte for byte to the
    figure its analysis would draw now, as a table is: matplotlib, freetype and zlib draw and pack the same data into
    other bytes from one version to the next, so a comparison would refuse every study drawn under another stack.
    Instead each PNG carries the stamp of the analysis files, runs and config it was drawn from and a seal of that
    stamp and its pixels: an older figure put back, or one from an earlier config, carries another stamp; one edited
    by hand has other pixels. The seal is a checksum, not a signature: it catches a figure changed by mistake, not
    one forged with this code. A figure not there is not held (as a table not there)."""
    from PIL import Image
    if not path.is_file():
        return
    with Image.open(path) as image:
        stamp, seal = image.text.get(STAMP), image.text.get(SEAL)
        if stamp is None or seal is None:
            raise IntegrityError(f"{path}: records no analysis it was drawn from (drawn before figures were stamped, "
                                 f"or by hand); allowed: the figure its analysis draws now ({redo})")
        if seal != _seal(image, stamp):
            raise IntegrityError(f"{path}: its pixels are not the ones drawn (edited after it was drawn); allowed: "
                                 f"the figure its analysis draws now ({redo})")
    if stamp != drawn_from:
        raise IntegrityError(f"{path}: drawn from analysis files, runs or a config other than the study's now (its "
                             f"stamp {stamp[:12] or '(none)'}, the study's {drawn_from[:12]}): left from an earlier "
                             f"run of the study, or put back; allowed: the figure its analysis draws now ({redo})")


def _save(fig: Figure, path: str | Path, bottom: float = 0.0) -> Path:
    """Save as PNG at 150 dpi (stamped: _png) and as PDF beside it, leaving `bottom` (a fraction of the height) for a
    legend."""
    _fit_titles(fig)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    path = Path(path)
    with atomic(path) as tmp:
        _png(fig, tmp)
    with atomic(path.with_suffix(".pdf")) as tmp:
        # No creation date in the PDF: the same Parquet gives the same bytes (a rerun, another machine, an image)
        fig.savefig(tmp, dpi=150, format="pdf", metadata={"CreationDate": None})
    return path


def _empty(path: str | Path, title: str, why: str) -> Path:
    """A figure that says why it has nothing to show (so the report still lists it)."""
    fig, ax = _figure(7, 2)
    ax.axis("off")
    ax.set_title(title)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True)
    return _save(fig, path)


def _scale(x: str, top: float) -> tuple[float, str]:
    """The divisor and unit that keep ticks readable for values up to `top`."""
    units = AXES[x][1]
    return next(((s, u) for s, u in units if top >= s), units[-1])


def _unit(x: str, top: float) -> tuple[float, str]:
    """The divisor and axis label that keep ticks readable for values up to `top`."""
    scale, unit = _scale(x, top)
    return scale, f"{AXES[x][0]} ({unit})" if unit else AXES[x][0]


def time_label(label: str, hardware: str | None, column: str = "train_seconds") -> str:
    """A time axis says what was timed and where: the clock of the training stages (evaluation excluded)."""
    where = f" on {hardware}" if hardware else ""
    return f"{label}: {CLOCK_WORDS[_CLOCK_OF[column]]} of the training stages{where}"


def _margin_band(ax, margin: float, vertical: bool = False) -> None:
    span = ax.axvspan if vertical else ax.axhspan
    line = ax.axvline if vertical else ax.axhline
    span(-100 * margin, 100 * margin, color="grey", alpha=0.15, linewidth=0,
         label=f"±margin ({100 * margin:g} points)")
    line(0, color="black", linewidth=0.8)


def evaluation_grid(runs: pd.DataFrame, x: str, end: float) -> np.ndarray:
    """Where an arm's curve is drawn: each evaluation's mean position over seeds, up to `end` (which is
    added). Mean and band are computed there only, so the band never bulges between evaluations."""
    points = runs.groupby("eval_index")[x].mean().to_numpy()
    return np.unique(np.append(points[points < end], end))


def accuracy_curves(evals: pd.DataFrame, x: str, B: int, path: str | Path, metric: str = "acc_default",
                    eval_set: str | None = None, colours: dict[str, str] | None = None,
                    hardware: str | None = None) -> Path:
    """`metric` against `x` ("tokens_total", or a clock: "train_seconds", "train_cpu_seconds"), one line per arm
    with its 95% band."""
    if x not in AXES:
        raise ValueError(f"x {x!r}: expected one of {', '.join(AXES)}")
    sets = sorted(evals["eval_set"].unique())
    if eval_set is None and len(sets) != 1:
        raise ValueError(f"evals hold eval sets {', '.join(sets)}: choose one with eval_set")
    eval_set = eval_set or sets[0]
    evals = evals[evals["eval_set"] == eval_set]
    colours = _colours(colours, evals["arm"])
    # Tokens: up to B (a B in iterations: as time). Time: up to the arm's shortest run, so that no seed is read
    # past its end (clamped).
    in_tokens = getattr(B, "unit", "tokens") == "tokens"
    ends = {arm: float(B) if x == "tokens_total" and in_tokens else float(runs.groupby("seed")[x].max().min())
            for arm, runs in evals.groupby("arm")}
    scale, xlabel = _unit(x, max(ends.values()))
    fig, ax = _figure()
    for arm, runs in sorted(evals.groupby("arm"), key=lambda item: list(colours).index(item[0])):
        grid = evaluation_grid(runs, x, ends[arm])
        mean, low, high = mean_curve(runs, x, grid, metric)
        ax.plot(grid / scale, 100 * mean, marker="o", markersize=3.5, color=colours[arm],
                label=f"{arm} (n={runs['seed'].nunique()} seeds)")
        # An accuracy lies in [0, 100]%: the t band (symmetric, few seeds) is cut there.
        ax.fill_between(grid / scale, np.clip(100 * low, 0, 100), np.clip(100 * high, 0, 100), color=colours[arm],
                        alpha=0.18, linewidth=0)
    if x == "tokens_total":
        if in_tokens:
            ax.axvline(B / scale, color="grey", linestyle="--", label="budget B")
    else:
        xlabel = time_label(xlabel, hardware, x)
    reach = "" if x == "tokens_total" else "; each arm up to its shortest run"
    ax.set(title=f"{metric_words(metric).capitalize()} on {eval_set} against {AXES[x][0]}\n"
                 f"(mean over seeds at each evaluation, shaded: 95% t interval{reach})",
           xlabel=xlabel, ylabel="accuracy (%)")
    ax.legend(loc="best", fontsize="small")
    return _save(fig, path)


def _arm_a(contrast: str) -> str:
    return contrast.split("-vs-")[0]


def difference_from_base(differences: pd.DataFrame, B: int, margin: float, path: str | Path,
                         colours: dict[str, str] | None = None, warnings: dict[str, str] | None = None) -> Path:
    """A minus the base at every evaluation (paired by seed): one small panel per contrast, margin band. A panel
    whose contrast has a warning about its runs ({contrast: words}, the tables' own) is numbered, the words below."""
    title = "Accuracy difference from the base at every evaluation"
    if differences.empty:
        return _empty(path, title, "no contrast to show")
    names = list(dict.fromkeys(differences["contrast"]))
    colours = _colours(colours, [_arm_a(c) for c in names])
    scale, xlabel = _unit("tokens_total", float(differences["tokens"].max()))
    fig, axes = _figure(max(7, 3.2 * len(names)), 4.2, ncols=len(names), sharey=True)
    said = {c: f"warning: {w}" for c, w in (warnings or {}).items() if w}
    numbers, footnote = _numbered([said.get(c, "") for c in names])
    for ax, contrast in zip(np.atleast_1d(axes), names):
        d = differences[differences["contrast"] == contrast]
        colour = colours.get(_arm_a(contrast), "C0")
        _margin_band(ax, margin)
        ax.plot(d["tokens"] / scale, 100 * d["mean"], marker="o", markersize=3.5, color=colour, label="mean")
        ax.fill_between(d["tokens"] / scale, 100 * d["ci_low"], 100 * d["ci_high"], color=colour, alpha=0.18,
                        linewidth=0)
        undefined = d[d["ci_low"].isna() & d["mean"].notna()]  # one seed, or no variation: no interval
        ax.scatter(undefined["tokens"] / scale, 100 * undefined["mean"], s=28, facecolors="white",
                   edgecolors=colour, zorder=3, label="no interval (undefined)" if len(undefined) else None)
        if getattr(B, "unit", "tokens") == "tokens":  # B in iterations has no place on a tokens axis
            ax.axvline(B / scale, color="grey", linestyle="--", label="budget B")
        mark = f" [{numbers[said[contrast]]}]" if contrast in said else ""
        ax.set(title=f"{contrast.replace('-vs-', ' minus ')}{mark}\n(n={int(d['n'].max())} seeds)", xlabel=xlabel)
    first_ax = np.atleast_1d(axes)[0]
    first_ax.set_ylabel("A minus base (points)")
    first_ax.legend(loc="best", fontsize="x-small")
    first = differences.iloc[0]
    fig.suptitle(f"{title}\n({metric_words(first['metric'])} on {first['eval_set']}; shaded: 95% t interval)",
                 fontsize="medium")
    return _save(fig, path, _footnote(fig, footnote))


def _mark_readings(ax, row, x: float, scale: float = 1.0) -> None:
    """Say on the plot where a bar or point is not a plain reading at B: not defined (no number is
    drawn), or, at equal updates, A read at the base's update count (`scale`: the plot's units per fraction)."""
    if np.isnan(row["mean"]):
        ax.annotate("not defined", (x, 0), rotation=90, fontsize="x-small", ha="center", va="bottom")
    elif row["basis"] == "updates" and str(row.get("read", "")).startswith("A at"):
        top = row["ci_high"] if np.isfinite(row["ci_high"]) else row["mean"]
        # Level, just above the interval: upright text above the axes' top ran into the title.
        ax.annotate("A at base's\nupdates", (x, scale * top), xytext=(0, 3), textcoords="offset points",
                    fontsize="xx-small", ha="center", va="bottom")


def _said(row, columns: tuple[str, ...] = ("warning", "uninformative")) -> str:
    """What the tables say beside a contrast row's verdict that its plot would not show: its warning, and why its
    data cannot tell the arms apart (`uninformative`), each named; '' where neither."""
    return "; ".join(f"{c}: {row[c]}" for c in columns if isinstance(row.get(c), str) and row[c])


def _numbered(notes: list[str]) -> tuple[dict[str, int], str]:
    """Each distinct non-empty note's number, and the footnote that spells them out ('' where none): a figure
    shows beside its bars what the tables say beside their verdicts."""
    numbers = {n: k + 1 for k, n in enumerate(dict.fromkeys(n for n in notes if n))}
    return numbers, "\n".join(f"[{k}] {n}" for n, k in numbers.items())


def _footnote(fig: Figure, text: str) -> float:
    """Write `text` (wrapped to the figure's width) beneath the axes; the share of the height it needs."""
    if not text:
        return 0.0
    text = _wrap(text, fig.get_figwidth(), 7)
    fig.text(0.01, 0.01, text, fontsize=7, ha="left", va="bottom")
    return min(0.5, (text.count("\n") + 1.5) * 7 * 1.3 / 72 / fig.get_figheight())


def per_seed(paired: pd.DataFrame, contrasts: pd.DataFrame, margin: float, path: str | Path,
             colours: dict[str, str] | None = None) -> Path:
    """Per contrast and basis: each seed's difference (dots; hollow: clamped), the mean and its 95% paired-t CI.
    A bar whose contrast row has a `warning` (the tables' warnings) or is `uninformative` is numbered, and what the
    tables say of it spelt out below.

    This is also the figure of equal tokens against equal time: every basis sits side by side.
    """
    title = "Per-seed differences from the base"
    if contrasts.empty:
        return _empty(path, title, "no contrast to show")
    names, bases = list(dict.fromkeys(contrasts["contrast"])), list(dict.fromkeys(contrasts["basis"]))
    colours = _colours(colours, [_arm_a(c) for c in names])
    width = 0.8 / len(bases)
    fig, ax = _figure(max(7, 1.8 * len(names) * len(bases) ** 0.5), 4.8)
    _margin_band(ax, margin)
    rng = np.random.default_rng(0)
    clamped_any = False
    numbers, footnote = _numbered([_said(r) for _, r in contrasts.iterrows()])
    for i, c in enumerate(names):
        colour = colours.get(_arm_a(c), "C0")
        for j, basis in enumerate(bases):
            x = i - 0.4 + width * (j + 0.5)
            seeds = paired[(paired["contrast"] == c) & (paired["basis"] == basis)]
            clamped = seeds["clamped"].astype(bool).to_numpy() if "clamped" in seeds else np.zeros(len(seeds), bool)
            clamped_any |= bool(clamped.any())
            jitter = x + rng.uniform(-width / 4, width / 4, len(seeds))
            ax.scatter(jitter[~clamped], 100 * seeds["diff"].to_numpy()[~clamped], s=12, color=colour, alpha=0.6)
            ax.scatter(jitter[clamped], 100 * seeds["diff"].to_numpy()[clamped], s=16, facecolors="white",
                       edgecolors=colour)
            row = contrasts[(contrasts["contrast"] == c) & (contrasts["basis"] == basis)]
            if len(row):
                r = row.iloc[0]
                err = None if np.isnan(r["ci_low"]) else [[100 * (r["mean"] - r["ci_low"])],
                                                          [100 * (r["ci_high"] - r["mean"])]]
                ax.errorbar(x, 100 * r["mean"], yerr=err, fmt=BASIS_MARKERS.get(basis, "o"), color=colour,
                            capsize=4, markersize=6, markerfacecolor=colour if err else "white")
                _mark_readings(ax, r, x, scale=100)
                if _said(r):
                    ax.annotate(f"[{numbers[_said(r)]}]", (x, 0 if np.isnan(r["mean"]) else 100 * r["mean"]), xytext=(6, 0),
                                textcoords="offset points", fontsize="x-small", va="center", color="firebrick")
    for basis in bases:  # the legend: one entry per basis, in black (the colours are the arms)
        ax.errorbar([], [], yerr=[], fmt=BASIS_MARKERS.get(basis, "o"), color="black", capsize=3,
                    label=BASIS_WORDS.get(basis, basis))
    if clamped_any:
        ax.scatter([], [], s=16, facecolors="white", edgecolors="black", label="seed read past its last evaluation")
    ax.set_xticks(range(len(names)), [f"{c.replace('-vs-', ' minus ')}\n(n={int(contrasts[contrasts['contrast'] == c]['n'].max())} seeds)"
                                      for c in names], fontsize="small")
    first = contrasts.iloc[0]
    ax.set(title=f"{title}: {metric_words(first['metric'])} on {first['eval_set']}\n"
                 f"(dots: seeds; bars: mean and 95% paired-t CI)", ylabel="A minus base (points)")
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.12 * (high - low))  # room for the marks above the intervals
    ax.legend(loc="best", fontsize="small")
    return _save(fig, path, _footnote(fig, footnote))


def stage_seconds(stages: pd.DataFrame, path: str | Path, hardware: str | None = None) -> Path:
    """Stacked bars: mean training seconds per stage before B, per arm."""
    height = 2.1 + 0.6 * len(stages)
    fig, ax = _figure(7, height)
    top = float(stages["total"].max()) if len(stages) else 1.0
    (scale, unit), (_, label) = _scale("train_seconds", top), _unit("train_seconds", top)
    left = np.zeros(len(stages))
    for stage in STAGES:
        ax.barh(stages["arm"], stages[stage] / scale, left=left, color=STAGE_COLOURS[stage], label=stage)
        left += np.nan_to_num(stages[stage].to_numpy(dtype=float)) / scale  # NaN: not recorded (an ingested run)
    for y, (total, n) in enumerate(zip(stages["total"], stages["seeds"])):
        ax.text(np.nan_to_num(total) / scale, y, f" {total / scale:.3g} {unit} (n={n} seeds)" if np.isfinite(total)
                else f" stage times not recorded (n={n} seeds)", va="center", fontsize="small")
    ax.set(title="Training time per stage before B (mean over seeds; evaluation excluded)",
           xlabel=time_label(label, hardware))
    ax.set_xlim(0, left.max() * 1.3 if len(stages) and left.max() > 0 else 1)
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=len(STAGES), fontsize="small",
               frameon=False)
    return _save(fig, path, bottom=0.35 / height)


def drift(drift_df: pd.DataFrame, gap: float, path: str | Path, eval_set: str,
          colours: dict[str, str] | None = None) -> Path:
    """Default minus strict accuracy over evaluations: each seed thin, the arm's mean thick with markers."""
    fig, ax = _figure()
    d = drift_df[drift_df["eval_set"] == eval_set]
    colours = _colours(colours, d["arm"])
    for arm, runs in sorted(d.groupby("arm"), key=lambda item: list(colours).index(item[0])):
        for _, run in runs.groupby("seed"):
            ax.plot(run["eval_index"], 100 * run["gap"], color=colours[arm], alpha=0.25, linewidth=0.8)
        mean = runs.groupby("eval_index")["gap"].mean()
        ax.plot(mean.index, 100 * mean, color=colours[arm], linewidth=2, marker="o", markersize=3.5,
                label=f"{arm}: {int(runs['drifted'].sum())} of {len(runs)} evaluations drifted")
    ax.axhline(100 * gap, color="red", linestyle="--", label=f"drift threshold ({100 * gap:g} points)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title=f"Verifier drift on {eval_set}: default minus strict accuracy\n(thin: seeds, thick: mean over seeds)",
           xlabel="evaluation (0 = start; evaluations at equal steps of B)",
           ylabel="default minus strict accuracy (points)")
    ax.legend(loc="best", fontsize="small")
    return _save(fig, path)


def _plain_log_ticks(ax) -> None:
    """A log x axis labelled in plain numbers (0.2, not 2 x 10^-1); across a decade or more, minor ticks only
    at 2, 3 and 5 x 10^k, so that their labels do not run into each other."""
    low, high = ax.get_xlim()

    def minor(value, _):
        mantissa = round(value / 10 ** np.floor(np.log10(value)), 6)
        return f"{value:g}" if high / low < 10 or mantissa in (2, 3, 5) else ""

    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(minor))


def prediction(prediction_df: pd.DataFrame, line: tuple[np.ndarray, np.ndarray] | None, margin: float,
               path: str | Path, rho: dict[str, float], colours: dict[str, str] | None = None) -> Path:
    """The paper's Figure 2: (a) per-update efficiency against the equal-updates difference, (b) per-token
    efficiency against the equal-tokens difference with the extrapolation line; 95% intervals both ways.
    Differences in points, as the margin band and every other figure."""
    colours = _colours(colours, prediction_df["arm"])
    fig = Figure(figsize=(11, 4.6))
    FigureCanvasAgg(fig)
    panels = (("per_update", "updates", "a  Per update: gradient efficiency vs training at equal updates"),
              ("per_token", "tokens", "b  Per generated token: efficiency vs training at equal tokens"))
    for k, (measure, basis, title) in enumerate(panels):
        ax = fig.add_subplot(1, 2, k + 1)
        _margin_band(ax, margin)
        for r in prediction_df.itertuples():
            x, y = getattr(r, measure), 100 * getattr(r, f"diff_{basis}")
            xerr = [[x - getattr(r, f"{measure}_low")], [getattr(r, f"{measure}_high") - x]]
            yerr = [[y - 100 * getattr(r, f"diff_{basis}_low")], [100 * getattr(r, f"diff_{basis}_high") - y]]
            ax.errorbar(x, y, xerr=xerr, yerr=None if np.isnan(yerr).any() else yerr, fmt="o",
                        color=colours.get(r.arm, "C0"), capsize=3, label=r.arm)
        if basis == "tokens" and line is not None:
            ax.plot(line[0], 100 * np.asarray(line[1]), "k--", linewidth=1,
                    label="extrapolation: base read at e x tokens")
        ax.axvline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        _plain_log_ticks(ax)
        spearman = rho.get(f"spearman_{measure}", np.nan)
        ax.set(title=f"{title}\nSpearman rho = {spearman:.2f}" if np.isfinite(spearman) else
               f"{title}\n(Spearman needs three arms)", xlabel=f"efficiency {measure.replace('_', ' ')}, "
               "relative to outcome-only (log)", ylabel="A minus outcome-only (points)")
        ax.title.set_fontsize("small")
        ax.legend(loc="best", fontsize="x-small")
    return _save(fig, path)
