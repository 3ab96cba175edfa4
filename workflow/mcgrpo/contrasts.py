"""Seed-paired contrasts between arms at equal tokens, equal updates and equal time.

Every arm gets the same generated-token budget B, so the primary comparison reads each run
at its first evaluation at or past B; the other two bases re-read the same runs where both
have made the same number of optimizer steps or spent the same training time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from mcgrpo.stats import holm, paired_summary
from mcgrpo.store import COLUMNS, read_contract

BASES = ("tokens", "updates", "time")
PAIRED_COLUMNS = ["contrast", "basis", "metric", "eval_set", "seed", "value_a", "value_b", "diff", "at"]
CONTRAST_COLUMNS = [*COLUMNS["contrasts"], "eval_set"]


def load_evals(results_dir: Path, arms: list[str], seeds: list[int]) -> pd.DataFrame:
    """Every run's evaluations, tagged with arm and seed; a missing run is an error."""
    frames = [read_contract(Path(results_dir) / "runs" / arm / f"seed{seed}" / "evals.parquet", "evals")
              .assign(arm=arm, seed=seed) for arm in arms for seed in seeds]
    return pd.concat(frames, ignore_index=True)


def budget_eval(run: pd.DataFrame, B: int) -> pd.Series:
    """The run's first evaluation with tokens_total >= B: where it has spent its budget."""
    reached = run[run["tokens_total"] >= B].sort_values("eval_index")
    if reached.empty:
        first = run.iloc[0] if len(run) else pd.Series(dtype=object)
        raise ValueError(f"run {first.get('arm', '?')}/seed{first.get('seed', '?')} never reached "
                         f"B={B} tokens (max tokens_total {run['tokens_total'].max()})")
    return reached.iloc[0]


def _until_budget(run: pd.DataFrame, B: int) -> pd.DataFrame:
    """The run's evaluations up to and including its B-evaluation, in order."""
    last = budget_eval(run, B)["eval_index"]
    return run[run["eval_index"] <= last].sort_values("eval_index")


def _positions(basis: str, end_a: pd.Series, end_b: pd.Series) -> tuple[str, float, float]:
    """The column to interpolate along and where to read A and the base on it."""
    if basis == "tokens":  # each at its own B-evaluation
        return "tokens_total", end_a["tokens_total"], end_b["tokens_total"]
    if basis == "updates":  # both at A's update count at its B-evaluation
        return "updates", end_a["updates"], end_a["updates"]
    t = min(end_a["train_seconds"], end_b["train_seconds"])  # time: both at the shorter run's
    return "train_seconds", t, t


def _read(run: pd.DataFrame, column: str, at: float, metric: str) -> float:
    """`metric` interpolated linearly in `column` at `at`, clamped at the run's ends."""
    return float(np.interp(at, run[column], run[metric]))


def paired(evals: pd.DataFrame, a: str, b: str, basis: str, metric: str, B: int,
           eval_set: str) -> pd.DataFrame:
    """One row per seed run by both arms: A's and the base's `metric` on `basis`."""
    if basis not in BASES:
        raise ValueError(f"basis {basis!r}: expected one of {', '.join(BASES)}")
    runs = evals[evals["eval_set"] == eval_set]
    by_seed = {arm: dict(tuple(runs[runs["arm"] == arm].groupby("seed"))) for arm in (a, b)}
    rows = []
    for seed in sorted(by_seed[a].keys() & by_seed[b].keys()):
        run_a, run_b = (_until_budget(by_seed[arm][seed], B) for arm in (a, b))
        column, at_a, at_b = _positions(basis, run_a.iloc[-1], run_b.iloc[-1])
        value_a, value_b = _read(run_a, column, at_a, metric), _read(run_b, column, at_b, metric)
        rows.append({"contrast": f"{a}-vs-{b}", "basis": basis, "metric": metric,
                     "eval_set": eval_set, "seed": int(seed), "value_a": value_a,
                     "value_b": value_b, "diff": value_a - value_b, "at": float(at_a)})
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


def summarize(paired_df: pd.DataFrame, margin: float, families: dict[str, str] | None = None,
              labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Per-contrast statistics; Holm runs over a family within one basis, metric and eval set."""
    families, labels = families or {}, labels or {}
    keys = ["contrast", "basis", "metric", "eval_set"]
    rows = [{**dict(zip(keys, key)), **paired_summary(group["diff"].to_numpy(), margin)}
            for key, group in paired_df.groupby(keys, sort=False)]
    out = pd.DataFrame(rows, columns=[*keys, "n", "mean", "ci_low", "ci_high", "p", "tost_p",
                                      "seeds_higher"])
    out["family"] = out["contrast"].map(lambda c: families.get(c, "main"))
    out["label"] = out["contrast"].map(lambda c: labels.get(c, "exploratory"))
    out["margin"] = float(margin)
    out["crossed_low"] = out["crossed_high"] = np.nan  # crossed bootstrap: not yet
    out["p_holm"] = (out.groupby(["family", "basis", "metric", "eval_set"])["p"]
                     .transform(holm) if len(out) else np.nan)
    return out[CONTRAST_COLUMNS]


def build(results_dir: Path, pairs: list[tuple[str, str]], seeds: list[int], B: int,
          eval_sets: list[str], margin: float, metrics=("acc_default", "acc_strict"),
          bases=BASES, families: dict[str, str] | None = None,
          labels: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(contrasts, paired) for every pair, basis, metric and eval set; writes nothing."""
    arms = list(dict.fromkeys(arm for pair in pairs for arm in pair))
    evals = load_evals(results_dir, arms, seeds)
    pieces = [paired(evals, a, b, basis, metric, B, eval_set) for a, b in pairs
              for basis in bases for metric in metrics for eval_set in eval_sets]
    paired_df = pd.concat(pieces, ignore_index=True) if pieces else pd.DataFrame(columns=PAIRED_COLUMNS)
    return summarize(paired_df, margin, families, labels), paired_df
