"""Does each preregistered verdict survive the checks a careful reader would make? Five checks, one label.

A verdict from the paired-t test over seeds can hang on one choice of the analysis. Beside every planned
contrast this reads, from the same stored runs:
- crossed: the crossed seed-by-problem bootstrap interval (contrasts.parquet's crossed_low/high), which also
  counts the test problems as a sample;
- strict: the same contrast on the strict verifier (acc_strict, or pass@k_strict for pass@k);
- drift: per arm, the evaluations on the contrast's eval set where the default verifier's accuracy exceeds the
  strict one's by more than analysis.drift_gap (an arm learning the lenient grader's parsing);
- clock (bases time and time_c only): the same contrast with training time read on the other clock (process
  CPU seconds beside wall seconds, or the reverse): a neighbour's load slows the wall clock only;
- alike: for every seed the contrast pairs, its two runs were made under one stack (mcgrpo's code, torch,
  transformers, trl, vllm, math_verify) and, on the time bases, timed on one machine (mcgrpo.analysis.alike): the
  run store is keyed without either, so a pair may compare stacks or machines rather than arms.

What "the verdict holds on a check" means: the check, judged by the contrast's own rule at the same alpha,
reaches the same verdict (confirmed or not confirmed) as the contrast. A check confirms
- less / greater: its interval excludes 0 on the predicted side (same sign, 0 outside);
- two-sided: its interval excludes 0, on the side of the contrast's mean where that was confirmed (either side
  where it was not);
- equivalent: strict and clock: the TOST p < alpha; crossed: the interval within (-margin, +margin);
- noninferior: strict and clock: the non-inferiority p < alpha (lower 90% bound > -margin); crossed: its lower
  end > -margin.
Drift and alike are no verdicts: drift holds when neither arm drifted in any evaluation; it applies to contrasts
on a verifier other than the strict one (whose readings drift cannot inflate); alike holds when every pair read is
alike. Checks use unadjusted tests (Holm adjusts the primary verdict only). A check that cannot be read (no
per-problem scores, a metric already strict, a run without the other clock, a reading past a curve's end, runs
whose run.json records no versions or hardware) is not applied, and its columns are NaN.
The label is "robust" when the verdict holds on every applied check, else "fragile: <the failed checks, in words>";
an inconclusive contrast (its interval includes 0 and reaches past the margin: analysis/summary.py) that no check
overturns is "inconclusive: ...", never robust: a reading that shows nothing cannot be robustly shown;
a contrast whose data cannot tell its arms apart (analysis/informative.py) is "uninformative: <why>", never robust:
a check that agrees with no test is no evidence. For the same reason a strict or clock reading whose own data
cannot tell the arms apart (a strict verifier that credited no sample: a real model that never boxes its answer)
does not hold: its reason is in strict_uninformative / clock_uninformative, and the verdict is fragile.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from mcgrpo.analysis import contrasts as contrast_stats
from mcgrpo.analysis import alike, formats, informative, summary
from mcgrpo.analysis.runs import CLOCKS, Run, parse_metric
from mcgrpo.core.errors import DataError
from mcgrpo.core.warmup import Warmup

OTHER_CLOCK = {"wall": "cpu", "cpu": "wall"}
TIME_BASES = ("time", "time_c")
UNREAD = {"mean": np.nan, "low": np.nan, "high": np.nan, "p": np.nan, "why": ""}  # a check that does not apply
COLUMNS = [*contrast_stats.KEY, "id", "a", "b", "direction", "confirmed", "margin",
           "crossed_low", "crossed_high", "crossed_holds",
           "strict_metric", "strict_mean", "strict_low", "strict_high", "strict_p", "strict_holds", "strict_uninformative",
           "drifted_a", "evaluations_a", "drifted_b", "evaluations_b", "drift_holds",
           "other_clock", "clock_recorded", "clock_mean", "clock_low", "clock_high", "clock_p", "clock_holds",
           "clock_uninformative", "alike_compared", "alike_holds", "alike_unlike",
           "robust", "robustness"]
HOLDS = ("crossed_holds", "strict_holds", "drift_holds", "clock_holds", "alike_holds")


def confirms(direction: str, mean: float, low: float, high: float, test_p: float, margin: float,
             alpha: float, sign: float) -> bool | None:
    """Whether a check's reading confirms a prediction in `direction` (None where it cannot be read).

    `low`, `high`: its 95% interval; `test_p`: its TOST or non-inferiority p (NaN for the crossed interval,
    which is then judged by the interval against the margin); `sign`: two-sided, the side a confirmed contrast
    found (its mean's sign), 0 where it was not confirmed (either side then confirms).
    """
    if not np.isfinite(mean) or not (np.isfinite(low) and np.isfinite(high)):
        return None
    if direction in ("equivalent", "noninferior") and np.isfinite(test_p):
        return bool(test_p < alpha)
    if direction == "equivalent":
        return bool(-margin < low and high < margin)
    if direction == "noninferior":
        return bool(low > -margin)
    if direction == "less":
        return bool(high < 0)
    if direction == "greater":
        return bool(low > 0)
    return bool(high < 0 if sign < 0 else low > 0 if sign > 0 else high < 0 or low > 0)


def strict_metric(metric: str) -> str | None:
    """The strict verifier's counterpart of `metric` (None where it is already strict)."""
    verifier, k = parse_metric(metric)
    if verifier == "strict":
        return None
    return "acc_strict" if k == 1 else f"pass@{k}_strict"


def _reading(runs: dict, row, basis: str, metric: str, B, warmups: dict[str, Warmup] | None = None) -> dict:
    """mean, 95% paired-t interval and the planned test's p of the contrast of `row` read on `basis`/`metric`,
    and why its data cannot tell the arms apart ('' where they can); all NaN where a reading is not defined."""
    try:
        pairs, _ = contrast_stats.paired(runs, row["a"], row["b"], basis, metric, row["eval_set"], B)
    except DataError:  # a run without this metric, or ending before T_c on this clock
        return UNREAD
    out = contrast_stats.summary(pairs, None, row["margin"])
    p = out[contrast_stats.TEST_P[row["direction"]]] if row["direction"] in contrast_stats.TEST_P else out["p"]
    return {"mean": out["mean"], "low": out["ci_low"], "high": out["ci_high"], "p": p, "why": informative.reason(pairs, warmups)}


def _on_clock(runs: dict[tuple[str, int, str], Run], clock: str) -> dict | None:
    """`runs` timed by `clock`, or None where a run did not record it."""
    column = CLOCKS[clock]
    if any(column not in run.evals.columns for run in runs.values()):
        return None
    return {key: dataclasses.replace(run, time=column) for key, run in runs.items()}


def _drift(drift: pd.DataFrame, arm: str, eval_set: str) -> tuple[int, int]:
    """(drifted evaluations, evaluations) of `arm` on `eval_set`, over every seed."""
    mine = drift[(drift["arm"] == arm) & (drift["eval_set"] == eval_set)]
    return int(mine["drifted"].sum()), len(mine)


def _holds(reading: dict, confirmed: bool, direction: str, margin: float, alpha: float, sign: float) -> bool | None:
    """Whether a check's reading (crossed, strict, clock) reaches the contrast's verdict; False where its data cannot
    tell the arms apart (it agrees with no test), None where it was not read."""
    if reading["why"]:
        return False
    check = confirms(direction, reading["mean"], reading["low"], reading["high"], reading["p"], margin, alpha, sign)
    return None if check is None else check == confirmed


def row_checks(row, runs: dict, other: dict | None, drift: pd.DataFrame, B, clock: str, alpha: float,
               records: dict | None = None, warmups: dict[str, Warmup] | None = None) -> dict:
    """Every check of one planned contrast (a contrasts.parquet row), its label included; `records`: {(arm, seed):
    run.json} of the study's runs, None where they were not read (the alike check is then not applied); `warmups`:
    table's."""
    confirmed, direction, margin = bool(row["confirmed"]), row["direction"], row["margin"]
    sign = float(np.sign(row["mean"])) if confirmed and np.isfinite(row["mean"]) else 0.0
    out = {c: row[c] for c in (*contrast_stats.KEY, "id", "a", "b", "direction", "margin",
                               "crossed_low", "crossed_high")}
    out["confirmed"] = confirmed
    crossed = {"mean": row["mean"], "low": row["crossed_low"], "high": row["crossed_high"], "p": np.nan, "why": ""}
    out["crossed_holds"] = _holds(crossed, confirmed, direction, margin, alpha, sign)
    strict = strict_metric(row["metric"])
    s = _reading(runs, row, row["basis"], strict, B, warmups) if strict else UNREAD
    out.update(strict_metric=strict or "", strict_mean=s["mean"], strict_low=s["low"], strict_high=s["high"],
               strict_p=s["p"], strict_holds=_holds(s, confirmed, direction, margin, alpha, sign),
               strict_uninformative=s["why"])
    (out["drifted_a"], out["evaluations_a"]), (out["drifted_b"], out["evaluations_b"]) = (
        _drift(drift, row["a"], row["eval_set"]), _drift(drift, row["b"], row["eval_set"]))
    out["drift_holds"] = None if strict is None else out["drifted_a"] == 0 and out["drifted_b"] == 0
    timed = row["basis"] in TIME_BASES and other is not None
    c = _reading(other, row, row["basis"], row["metric"], B, warmups) if timed else UNREAD
    out.update(other_clock=OTHER_CLOCK[clock] if row["basis"] in TIME_BASES else "", clock_recorded=other is not None,
               clock_mean=c["mean"], clock_low=c["low"], clock_high=c["high"], clock_p=c["p"],
               clock_holds=_holds(c, confirmed, direction, margin, alpha, sign), clock_uninformative=c["why"])
    out.update(alike.check(records, row["a"], row["b"], contrast_stats.paired_seeds(runs, row["a"], row["b"],
                                                                                    row["eval_set"]),
                           row["basis"] in TIME_BASES))
    failed, why, silent = failures(out), summary.uninformative(row), summary.found(row) == "inconclusive"
    out["robust"] = not failed and not why and not silent
    out["robustness"] = (f"uninformative: {why}" if why else "fragile: " + "; ".join(failed) if failed
                         else inconclusive(row) if silent else "robust")
    return out


def inconclusive(row) -> str:
    """The label of an inconclusive contrast that no check overturns: not 'robust', since its reading shows neither
    a difference nor equivalence, and checks that agree with it agree with nothing."""
    return (f"inconclusive: the interval {formats.interval(row['mean'], row['ci_low'], row['ci_high'])} reaches past "
            f"±{100 * row['margin']:g} points, so there is no verdict to be robust")


def _crossed_words(direction: str, confirmed: bool, margin: float) -> str:
    m = f"{100 * margin:g} points"
    if direction == "equivalent":
        return f"reaches beyond ±{m}" if confirmed else f"lies within ±{m}"
    if direction == "noninferior":
        return f"reaches below -{m}" if confirmed else f"lies above -{m}"
    return "includes 0" if confirmed else "excludes 0"


def failures(checks: dict) -> list[str]:
    """The checks on which the verdict does not hold, each in words."""
    out = []
    if checks["crossed_holds"] is False:
        words = _crossed_words(checks["direction"], checks["confirmed"], checks["margin"])
        out.append(f"the crossed interval {words} "
                   f"[{formats.points(checks['crossed_low'])}, {formats.points(checks['crossed_high'])}]")
    if checks["strict_uninformative"]:
        out.append(f"the strict verifier cannot tell the arms apart ({checks['strict_uninformative']})")
    elif checks["strict_holds"] is False:
        out.append("on the strict verifier "
                   f"{formats.interval(checks['strict_mean'], checks['strict_low'], checks['strict_high'])}")
    clock = formats.CLOCK_WORDS.get(checks["other_clock"], "")
    if checks["clock_uninformative"]:
        out.append(f"the {clock} clock cannot tell the arms apart ({checks['clock_uninformative']})")
    elif checks["clock_holds"] is False:
        out.append(f"on the {clock} clock "
                   f"{formats.interval(checks['clock_mean'], checks['clock_low'], checks['clock_high'])}")
    if checks["drift_holds"] is False:
        out += [f"{checks[side]} drifted in {checks[f'drifted_{side}']} of {checks[f'evaluations_{side}']} evaluations"
                for side in ("a", "b") if checks[f"drifted_{side}"]]
    if checks["alike_holds"] is False:
        out.append(checks["alike_unlike"])
    return out


def table(contrasts: pd.DataFrame, runs: dict[tuple[str, int, str], Run], drift: pd.DataFrame, B,
          clock: str = "wall", alpha: float = 0.05, records: dict[tuple[str, int], dict] | None = None,
          warmups: dict[str, Warmup] | None = None) -> pd.DataFrame:
    """One row of checks per planned contrast (not exploratory ones) of contrasts.parquet, in its order; `records`:
    {(arm, seed): run.json} of the runs (mcgrpo.core.study_runs.records), which the alike check compares; `warmups`:
    the study's filter arms' warm-ups (mcgrpo.core.warmup.study), which a check's reading is held to as the
    contrast's is (informative)."""
    planned = summary.planned(contrasts)
    planned = planned[planned["confirmed"].notna()]
    other = _on_clock(runs, OTHER_CLOCK[clock]) if planned["basis"].isin(TIME_BASES).any() else None
    rows = [row_checks(r, runs, other, drift, B, clock, alpha, records, warmups) for _, r in planned.iterrows()]
    out = pd.DataFrame(rows, columns=COLUMNS)
    for column in HOLDS:
        out[column] = pd.array(out[column].tolist(), dtype="boolean")
    return out


def drift_cell(row) -> str:
    """'outcome 6/36, mc_k4 0/36': each arm's drifted evaluations (A first)."""
    return ", ".join(f"{row[side]} {int(row[f'drifted_{side}'])}/{int(row[f'evaluations_{side}'])}"
                     for side in ("a", "b"))


def alike_cell(row) -> str:
    """'4 pairs alike', the words of the pairs that are not, or 'not recorded' (no run.json records them)."""
    pairs = int(row["alike_compared"])
    if not pairs:
        return "not recorded"
    return row["alike_unlike"] or f"{pairs} pair{'s' if pairs != 1 else ''} alike"
