"""Seed-paired contrasts between arms at equal tokens, equal updates and equal training time.

Every arm gets the same generated-token budget B, so the primary comparison reads each run at
its first evaluation at or past B. The other bases re-read the same runs elsewhere:
- updates: the base interpolated linearly in updates to A's update count at B, as the paper does; where A
  made more updates than the base (which cannot be read past its own B), A interpolated to the base's
  count at B instead (the paper is silent there); `read` says which arm was moved;
- time: both at T*, the shorter of the two runs' training times at B, interpolated in time;
- time_c: both at T_c, the base's training time at B, for runs trained past B (the paper's S35);
- iterations: the base interpolated in iterations to A's iteration count at B (or A to the base's), as updates
  are. In an equal-iteration study B is an iteration count (budget.iterations) and every run's B-evaluation is
  at exactly B iterations, so this basis reads both arms there: the paper's equal-iteration comparison (3.1, G);
  such a study has no tokens or time_c basis (analysis/plan.py says why).
Training time is the runs' clock (Run.time, analysis.clock): the stages' wall time, or their process CPU time.
Each seed gives one difference; each problem's scores are read at the same positions, so the
crossed bootstrap can resample problems too. A reading that would need a curve beyond its end is
not defined (NaN), and so is every statistic of a contrast with such a seed: never a clamped value
that looks like a measurement.

Every reading also says how many generated tokens each arm had spent at the point read (tokens_a, tokens_b:
tokens_total interpolated where the point is), so that "equal tokens" can be seen to be equal: a run's first
evaluation at or after B can lie well past B (an iteration that generates many tokens, a reward's continuations).
Where two arms' points differ by more than APART x B, the contrast's `warning` says so; nothing is re-read.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mcgrpo.analysis import formats, informative
from mcgrpo.analysis.runs import Run
from mcgrpo.analysis.stats import RESAMPLES, crossed_bootstrap, holm, paired_summary
from mcgrpo.core.errors import ConfigError, DataError
from mcgrpo.core.warmup import Warmup

BASES = ("tokens", "iterations", "updates", "time", "time_c")
COUNTS = {"iterations": "iteration", "updates": "updates"}  # bases read at the smaller of two counts
KEY = ["contrast", "basis", "metric", "eval_set"]
PAIRED_COLUMNS = [*KEY, "seed", "value_a", "value_b", "diff", "at", "at_b", "moved", "clamped", "tokens_a",
                  "tokens_b", "iteration_a", "iteration_b"]
APART = 0.1  # a share of B: two arms read further apart than this at equal tokens get a warning
CONTRAST_COLUMNS = ["contrast", "a", "b", "id", "family", "label", "direction", "basis", "metric", "eval_set",
                    "n", "mean", "ci_low", "ci_high", "p", "p_holm", "tost_p", "margin", "ni_low", "ni_p",
                    "noninferior", "crossed_low", "crossed_high", "seeds_higher", "confirmed", "uninformative", "read",
                    "note", "tokens_a", "tokens_b", "warning"]
MOVED = {"": "each at its own B", "a": "A at the base's position", "b": "base at A's position"}


def name(a: str, b: str) -> str:
    return f"{a}-vs-{b}"


def label_key(key: tuple[str, str, str, str, str]) -> tuple[str, str, str, str]:
    """(a, b, basis, metric, eval_set) -> the table key (contrast, basis, metric, eval_set)."""
    a, b, *rest = key
    return (name(a, b), *rest)


def budget_row(run: Run, B: int) -> int:
    """Position of the run's first evaluation that reached B (tokens_total >= B, or iteration >= B where B
    counts iterations, a core.budget.Budget): where it has spent its budget."""
    column = getattr(B, "column", "tokens_total")
    spent = run.coords(column)
    reached = np.flatnonzero(spent >= B)
    if not reached.size:
        raise DataError(f"run {run.name} never reached B={int(B)} {getattr(B, 'unit', 'tokens')} on {run.eval_set} "
                         f"(max {column} {int(spent.max())})")
    return int(reached[0])


def read_at(x: np.ndarray, table: np.ndarray, at: float, last: bool = False) -> tuple[np.ndarray, bool]:
    """The row of `table` at position `at` along non-decreasing `x`, and whether it is undefined.

    The first row exactly at `at` if there is one (the last, with `last`: see FLAT), else linear between its
    neighbours; outside the range, NaN (undefined: the run was never evaluated there).
    """
    rows = neighbours(x, at, last)
    if rows is None:
        return np.full(np.shape(table[0]), np.nan), True
    below, above, w = rows
    if below == above:
        return table[above], False
    return (1 - w) * table[below] + w * table[above], False


def neighbours(x: np.ndarray, at: float, last: bool = False) -> tuple[int, int, float] | None:
    """(row below, row above, the weight of the row above) that read_at reads at `at`: one row twice where an
    evaluation is exactly there; None outside the range."""
    i = int(np.searchsorted(x, at, side="left"))
    if i < len(x) and x[i] == at:
        j = int(np.searchsorted(x, at, side="right")) - 1 if last else i
        return j, j, 1.0
    if i == 0 or i == len(x):
        return None
    return i - 1, i, float((at - x[i - 1]) / (x[i] - x[i - 1]))


def iteration_read(run: Run, column: str, end: int, at: float, last: bool = False) -> float:
    """The iterations done (evals' `iteration`) at the latest evaluation the reading at `at` along `column` weighs
    (read_at's row above, whose weight is above 0 wherever it reads two): what it saw of training at most. NaN where
    the reading is undefined."""
    rows = neighbours(run.coords(column)[:end], at, last)
    return np.nan if rows is None else float(run.coords("iteration")[rows[1]])


# A clock equal at two or more evaluations (an ingested TRL run's clock sums step_time; a coarse clock): the paper
# interpolates accuracy on the time axis and is silent on a flat clock, where time alone cannot tell the evaluations
# apart. The time bases read the last evaluation at that time, what the run had done by then on its clock, so a run
# read at its own B (T* is its time at B) is read at its B evaluation, as `read` says, never at one before it;
# between two times the reading is linear, as elsewhere. The count bases keep the first evaluation at a count.
FLAT = ("time", "time_c")


def positions(basis: str, a: Run, b: Run, B: int) -> tuple[str, float, int, float, int, str]:
    """(column, A's position, A's usable evaluations, the base's position, its usable evaluations,
    the arm read away from its own B evaluation: "a", "b", "both" or "").

    Usable evaluations end at the run's B-evaluation, except A's under time_c, which may read
    past B up to the base's time at B.
    """
    if basis not in BASES:
        raise ConfigError(f"basis {basis!r}: expected one of {', '.join(BASES)}")
    if basis in ("tokens", "time_c") and getattr(B, "unit", "tokens") != "tokens":
        raise ConfigError(f"basis {basis!r}: an equal-iteration study (B = {int(B)} iterations) has no token "
                          f"budget to read it at; allowed: iterations, updates, time")
    end_a, end_b = budget_row(a, B) + 1, budget_row(b, B) + 1
    if basis == "tokens":
        column = "tokens_total"
        return column, a.coords(column)[end_a - 1], end_a, b.coords(column)[end_b - 1], end_b, ""
    if basis in COUNTS:
        column = COUNTS[basis]
        ua, ub = a.coords(column)[end_a - 1], b.coords(column)[end_b - 1]
        at = min(ua, ub)  # the base at A's count where it reaches it, else A at the base's count
        return column, at, end_a, at, end_b, "b" if ua <= ub else "a"
    time_a, time_b = _clocked(a, len(a.evals) if basis == "time_c" else end_a), _clocked(b, end_b)
    if basis == "time":
        at = min(time_a[end_a - 1], time_b[end_b - 1])
        return a.time, at, end_a, at, end_b, "b" if time_a[end_a - 1] <= time_b[end_b - 1] else "a"
    at = time_b[end_b - 1]
    if time_a[-1] < at:
        raise DataError(f"run {a.name} ends at {time_a[-1]:.1f} s of training, before T_c = {at:.1f} s "
                         f"({b.name} at B): train it past B (budget.horizon) or leave out basis time_c")
    return a.time, at, len(time_a), at, end_b, "a"


def _clocked(run: Run, end: int) -> np.ndarray:
    """`run`'s clock, refused where it is unknown (NaN) at any of its first `end` evaluations, which a time basis
    reads it along: its time at B unknown, a contrast would read the other arm at its own time as if it were
    known (min() of a number and NaN is the number)."""
    clock = run.coords(run.time)
    unknown = np.flatnonzero(np.isnan(clock[:end]))
    if len(unknown):
        raise DataError(f"{run.source or run.name}: {run.time} unknown (NaN) at evaluation "
                        f"{run.evals['eval_index'].iloc[unknown[0]]} of {run.eval_set}, which a time basis reads; "
                        f"allowed: a run timed at every evaluation up to B (an ingested run: a log with step_time at "
                        f"every step), or the other bases (analysis.bases without time and time_c)")
    return clock


def paired_seeds(runs: dict[tuple[str, int, str], Run], a: str, b: str, eval_set: str) -> list[int]:
    """The seeds that ran both arms on `eval_set`: every basis pairs these (the robustness checks read them too)."""
    return sorted({s for arm, s, e in runs if arm == a and e == eval_set}
                  & {s for arm, s, e in runs if arm == b and e == eval_set})


def paired(runs: dict[tuple[str, int, str], Run], a: str, b: str, basis: str, metric: str,
           eval_set: str, B: int) -> tuple[pd.DataFrame, np.ndarray | None]:
    """Per seed run by both arms: A's and the base's `metric` on `basis`; and the per-problem
    differences (seeds x problems), or None where the metric has no per-problem scores.
    """
    rows, tables, first = [], [], None
    for seed in paired_seeds(runs, a, b, eval_set):
        run_a, run_b = runs[a, seed, eval_set], runs[b, seed, eval_set]
        column, at_a, end_a, at_b, end_b, moved = positions(basis, run_a, run_b, B)
        (score_a, per_problem), (score_b, _) = run_a.scores(metric), run_b.scores(metric)
        first = run_a if first is None else first
        # every seed's problem j is one problem: the crossed bootstrap resamples the columns of all seeds together
        for other in (run_b, first) if per_problem else ():
            if not np.array_equal(run_a.problems, other.problems):
                raise DataError(f"runs {run_a.name} and {other.name} scored different problems on {eval_set} (the "
                                f"evaluation set prepared again between them); allowed: runs evaluated on one set "
                                f"of problems: retrain those evaluated on another (move their stored run folders "
                                f"into results/_shared/quarantine/ and rerun the workflow)")
        last = basis in FLAT
        va, clamped_a = read_at(run_a.coords(column)[:end_a], score_a[:end_a], at_a, last)
        vb, clamped_b = read_at(run_b.coords(column)[:end_b], score_b[:end_b], at_b, last)
        rows.append({"contrast": name(a, b), "basis": basis, "metric": metric, "eval_set": eval_set,
                     "seed": int(seed), "value_a": va.mean(), "value_b": vb.mean(),
                     "diff": va.mean() - vb.mean(), "at": float(at_a), "at_b": float(at_b),
                     "moved": moved, "clamped": clamped_a or clamped_b,
                     "tokens_a": tokens_at(run_a, column, end_a, at_a, last),
                     "tokens_b": tokens_at(run_b, column, end_b, at_b, last),
                     "iteration_a": iteration_read(run_a, column, end_a, at_a, last),
                     "iteration_b": iteration_read(run_b, column, end_b, at_b, last)})
        tables.append(va - vb if per_problem else None)
    table = np.vstack(tables) if tables and all(t is not None for t in tables) else None
    if table is not None and len({t.shape for t in tables}) != 1:
        raise DataError(f"{name(a, b)}: seeds scored different numbers of problems on {eval_set}")
    # built by columns: a frame from hundreds of row dicts costs more than the contrast's arithmetic
    frame = pd.DataFrame({c: [r[c] for r in rows] for c in PAIRED_COLUMNS}) if rows else pd.DataFrame(
        rows, columns=PAIRED_COLUMNS)
    return frame, table


def tokens_at(run: Run, column: str, end: int, at: float, last: bool = False) -> float:
    """The generated tokens `run` had spent at position `at` along `column` (its first `end` evaluations), read
    where its score is (`last`: read_at's)."""
    return float(read_at(run.coords(column)[:end], run.coords("tokens_total")[:end], at, last)[0])


def warning(pairs: pd.DataFrame, basis: str, B: int) -> str:
    """At equal tokens, the seeds whose two arms were read more than APART x B apart, in words; else empty."""
    if basis != "tokens" or getattr(B, "unit", "tokens") != "tokens" or not len(pairs):
        return ""
    apart = (pairs["tokens_a"] - pairs["tokens_b"]).abs() / int(B)
    far = pairs.loc[apart > APART, "seed"].tolist()
    if not far:
        return ""
    return (f"arms read up to {apart.max():.0%} of B apart in tokens ({formats.seeds_in_words(far)}; more than "
            f"{APART:.0%} of B): not equal tokens there")


def read(pairs: pd.DataFrame) -> str:
    """Which arm each seed's reading moved away from its own B evaluation, in words."""
    groups: dict[str, list[int]] = {}  # a groupby's, in plain Python: a contrast has a few dozen seeds
    for moved, seed in zip(pairs["moved"].tolist(), pairs["seed"].tolist()):
        groups.setdefault(moved, []).append(seed)
    if len(groups) == 1:
        return MOVED[next(iter(groups))]
    return "; ".join(f"{MOVED[m]} ({formats.seeds_in_words(groups[m])})" for m in sorted(groups))


def summary(pairs: pd.DataFrame, table: np.ndarray | None, margin: float,
            resamples: int = RESAMPLES, seed: int = 0) -> dict:
    """Paired statistics of one contrast and its crossed seed-by-problem bootstrap interval; all
    NaN (not defined) where a seed's reading is."""
    diffs = pairs["diff"].to_numpy(dtype=float)
    if np.isnan(diffs).any():
        undefined = {k: np.nan for k in ("mean", "ci_low", "ci_high", "p", "tost_p", "ni_low", "ni_p",
                                          "crossed_low", "crossed_high", "seeds_higher")}
        return {**undefined, "n": len(diffs), "margin": float(margin), "noninferior": False}
    out = paired_summary(diffs, margin)
    low, high = crossed_bootstrap(table, resamples, seed) if table is not None else (np.nan, np.nan)
    return {**out, "margin": float(margin), "crossed_low": low, "crossed_high": high,
            "noninferior": bool(out["ni_low"] > -margin)}


TEST_P = {"equivalent": "tost_p", "noninferior": "ni_p"}  # any other direction: the two-sided p


def apply_plan(table: pd.DataFrame, plan: dict[tuple, dict], alpha: float = 0.05) -> pd.DataFrame:
    """Label each contrast from the plan; Holm within each primary family on its planned test.

    `plan` maps (contrast, basis, metric, eval_set) to id, label, family, direction and note;
    anything else is exploratory. Holm adjusts primary contrasts only (secondary ones are
    unadjusted, as preregistered); `confirmed` says whether a planned prediction held. A contrast whose data
    cannot tell its arms apart (column uninformative, analysis/informative.py) is not tested: its p are NaN,
    it is not noninferior, confirms nothing and counts as not rejected in its Holm family, which keeps its planned
    size (stats.holm).
    """
    table = table.reset_index(drop=True)
    entries = [plan.get(k, {}) for k in table[KEY].itertuples(index=False, name=None)]
    for column, default in (("id", ""), ("label", "exploratory"), ("family", ""), ("direction", ""),
                            ("note", "")):
        table[column] = [e.get(column, default) for e in entries]
    test_p = table["p"].to_numpy(dtype=float).copy()
    for direction, column in TEST_P.items():
        chosen = (table["direction"] == direction).to_numpy()
        test_p[chosen] = table.loc[chosen, column]
    untestable = (table["uninformative"] != "").to_numpy() if "uninformative" in table else np.zeros(len(table), bool)
    table.loc[untestable, ["p", *TEST_P.values()]] = np.nan
    if "noninferior" in table:
        table.loc[untestable, "noninferior"] = False  # a zero-width interval above -margin shows nothing
    test_p[untestable] = np.nan
    table["p_holm"] = np.nan
    primary = (table["label"] == "primary").to_numpy()
    for _, family in table[primary].groupby("family"):
        table.loc[family.index, "p_holm"] = holm(test_p[family.index])
    decisive = np.where(primary, table["p_holm"], test_p)
    sign = np.select([table["direction"] == "greater", table["direction"] == "less"],
                     [table["mean"] > 0, table["mean"] < 0], True)
    table["confirmed"] = pd.array(decisive < alpha, dtype="boolean") & sign
    table.loc[table["label"] == "exploratory", "confirmed"] = pd.NA
    return table


def build(runs: dict[tuple[str, int, str], Run], keys: list[tuple[str, str, str, str, str]], B: int,
          margin: float, plan: dict[tuple, dict] | None = None, alpha: float = 0.05,
          resamples: int = RESAMPLES, seed: int = 0, warmups: dict[str, Warmup] | None = None
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(contrasts, paired) for every (a, b, basis, metric, eval set) in `keys`; writes nothing. `warmups`: the
    study's filter arms' warm-ups (mcgrpo.core.warmup.study), which informative reads the readings against."""
    rows, pieces = [], []
    for a, b, basis, metric, eval_set in keys:
        pairs, table = paired(runs, a, b, basis, metric, eval_set, B)
        pieces.append(pairs)
        rows.append({"contrast": name(a, b), "a": a, "b": b, "basis": basis, "metric": metric,
                     "eval_set": eval_set, "read": read(pairs) if len(pairs) else "",
                     "tokens_a": float(pairs["tokens_a"].mean()) if len(pairs) else np.nan,
                     "tokens_b": float(pairs["tokens_b"].mean()) if len(pairs) else np.nan,
                     "warning": "; ".join(w for w in (warning(pairs, basis, B),
                                                      informative.before_choosing(pairs, warmups)) if w),
                     "uninformative": informative.reason(pairs, warmups),
                     **summary(pairs, table, margin, resamples, seed)})
    contrasts = apply_plan(pd.DataFrame(rows), plan or {}, alpha) if rows else pd.DataFrame(
        columns=CONTRAST_COLUMNS)
    paired_df = pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame(columns=PAIRED_COLUMNS)
    return contrasts[CONTRAST_COLUMNS], paired_df
