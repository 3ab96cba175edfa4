"""Numbers as a reader wants them: accuracy in points with one decimal (0.01 = 1 point), p to three places,
token counts as 135k. The CSV tables keep the raw values; the markdown, HTML and summary use these."""

from __future__ import annotations

import numpy as np

BASIS_WORDS = {"tokens": "equal tokens", "iterations": "equal iterations", "updates": "equal updates",
               "time": "equal time (T*)", "time_c": "equal time (T_c)"}
CLOCK_WORDS = {"wall": "wall time", "cpu": "process CPU time"}  # analysis.clock


def metric_words(metric: str) -> str:
    """'acc_strict' -> 'accuracy (strict verifier)', 'pass@8_default' -> 'pass@8 (default verifier)'."""
    if metric == "acc_greedy":
        return "greedy accuracy (default verifier)"
    measure, _, verifier = metric.rpartition("_")
    return f"{'accuracy' if measure == 'acc' else measure} ({verifier} verifier)" if measure else metric


def missing(value) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and not np.isfinite(value))


def points(value: float) -> str:
    """A difference of accuracies (fractions) in signed points: 0.0612 -> '+6.1'."""
    return "n/a" if missing(value) else f"{100 * value:+.1f}"


def percent(value: float) -> str:
    """An accuracy (fraction) in percent: 0.4219 -> '42.2%'."""
    return "n/a" if missing(value) else f"{100 * value:.1f}%"


NOT_DEFINED = "not defined"  # a reading that would need a curve beyond its end: no number


def interval(mean: float, low: float, high: float) -> str:
    """'mean [low, high]' in points, or the mean alone where the interval is undefined (one seed); not defined
    where the mean is."""
    if missing(mean):
        return NOT_DEFINED
    if missing(low) or missing(high):
        return points(mean)
    return f"{points(mean)} [{points(low)}, {points(high)}]"


def p_value(p: float) -> str:
    """p to three places; below 0.0005 as '<0.001'; 'n/a' where undefined (no variation between seeds)."""
    if missing(p):
        return "n/a"
    return "<0.001" if p < 0.0005 else f"{p:.3f}"


def tokens(n: float) -> str:
    """A token count to three significant digits: 600 -> '600', 135_000 -> '135k', 1_250_000 -> '1.25M'."""
    if missing(n):
        return "n/a"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{suffix}"
    return f"{n:.3g}"


def seeds_in_words(seeds: list[int]) -> str:
    """'seed 3' or 'seeds 1, 2': which seeds a warning or reading is about."""
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
