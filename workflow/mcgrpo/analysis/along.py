"""Alignment along training beside accuracy (paper H.5, Figure 16): does a reward's agreement with the
reference gradient decay as training with it fails?

Each measured run's alignment.parquet (train/along.py: the gradient tests at the run's policy every few
iterations) is averaged over its fixed batches, per iteration and credit rule, and set beside the run's
accuracy at the evaluation at that iteration (sampled, and greedy where evaluated), where there is one.
"""

from __future__ import annotations

import pandas as pd

MEASURES = ("alignment", "share_outside_v", "cos_full", "projection_residual")
ACCURACY = ("acc_default", "acc_greedy")
COLUMNS = ["arm", "seed", "iteration", "rule", "batches", *MEASURES, *ACCURACY]


def run_table(alignment: pd.DataFrame, evals: pd.DataFrame, arm: str, seed: int) -> pd.DataFrame:
    """One run's rows: per iteration and rule, the batch means of MEASURES and the run's accuracy there
    (on its first evaluation set; NaN where the run was not evaluated at that iteration)."""
    if alignment.empty:
        return pd.DataFrame(columns=COLUMNS)
    kept = alignment[alignment["measure"].isin(MEASURES)]
    keys = ["iteration", "arm"]
    means = kept.pivot_table(index=keys, columns="measure", values="value", aggfunc="mean").join(
        kept.groupby(keys)["batch"].nunique().rename("batches")).reset_index().rename(columns={"arm": "rule"})
    first = evals[evals["eval_set"] == evals["eval_set"].iloc[0]]
    accuracy = first.drop_duplicates("iteration", keep="last").set_index("iteration")
    for column in ACCURACY:
        means[column] = means["iteration"].map(accuracy[column]) if column in accuracy else float("nan")
    return means.assign(arm=arm, seed=seed).reindex(columns=COLUMNS)
