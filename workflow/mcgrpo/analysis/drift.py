"""Verifier drift: where the lenient and the strict grader disagree on the same answers.

A large gap between acc_default and acc_strict means an arm may be learning to satisfy the
lenient grader's parsing rather than to solve problems, so its gains need a second look.
"""

from __future__ import annotations

import pandas as pd

from mcgrpo.core.store import COLUMNS

DRIFT_COLUMNS = [*COLUMNS["drift"], "eval_set"]


def drift_table(evals: pd.DataFrame, gap: float = 0.1) -> pd.DataFrame:
    """Per arm, seed, eval set and evaluation: the grader gap and whether it exceeds `gap`."""
    out = evals.assign(gap=evals["acc_default"] - evals["acc_strict"])
    out["drifted"] = out["gap"] > gap
    return (out.sort_values(["arm", "seed", "eval_set", "eval_index"])[DRIFT_COLUMNS]
            .reset_index(drop=True))


def drift_counts(drift: pd.DataFrame) -> pd.DataFrame:
    """Per arm and eval set: evaluations and runs, how many drifted, and the largest gap."""
    by = drift.groupby(["arm", "eval_set"])
    runs_drifted = drift[drift["drifted"]].groupby(["arm", "eval_set"])["seed"].nunique()
    out = pd.DataFrame({"runs": by["seed"].nunique(), "evaluations": by.size(),
                        "drifted": by["drifted"].sum().astype(int),
                        "runs_drifted": runs_drifted.reindex(by.size().index, fill_value=0).astype(int),
                        "max_gap": by["gap"].max()})
    return out.reset_index()
