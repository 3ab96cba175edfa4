"""What each arm spent and trained on before B, from iterations.parquet.

Training time is the sum of five stages; the matched-compute argument needs to see where each
arm's time goes (a Monte-Carlo reward's in credit, outcome-only GRPO's in updates). The share
of mixed-outcome groups says how much of each batch carried any gradient; for a selection arm, the
candidates' mean predicted success says where the filter could help (a gain is expected where they
average below 1/2).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from mcgrpo.analysis.stats import mean_ci
from mcgrpo.core.clock import STAGES

GROUPS = ("all_wrong", "all_correct", "mixed")
PREDICTED = ("cand_pred_mean", "chosen_pred_mean")  # NaN in arms that predict nothing
COLUMNS = ["tokens_total", *(f"t_{s}" for s in STAGES), *(f"groups_{g}" for g in GROUPS), *PREDICTED,
           "prompts_distinct"]


def run_totals(iterations: Mapping[str, np.ndarray], tokens_at_budget: float) -> dict:
    """One run's iterations up to its evaluation at B: how many, seconds per stage, groups of each kind,
    the mean predicted success of the candidates and of the chosen prompts, distinct prompts trained."""
    keep = np.asarray(iterations["tokens_total"]) <= tokens_at_budget
    kept = {c: np.asarray(iterations[c], dtype=float)[keep] for c in COLUMNS}
    return {"iterations": int(keep.sum()),
            **{s: float(kept[f"t_{s}"].sum()) for s in STAGES},
            **{f"groups_{g}": _count(kept[f"groups_{g}"].sum()) for g in GROUPS},
            **{c: float(np.nanmean(kept[c])) if np.isfinite(kept[c]).any() else np.nan for c in PREDICTED},
            "prompts_distinct": _count(kept["prompts_distinct"][-1]) if keep.any() else 0}


def _count(value: float) -> int | float:
    """A count, or NaN where the run did not record it (a run ingested from TRL's logs: no groups, no prompts)."""
    return int(value) if np.isfinite(value) else np.nan


def stage_seconds(totals: pd.DataFrame) -> pd.DataFrame:
    """Per arm (from run_totals rows with arm and seed): mean over seeds of seconds per stage before B,
    the total and each stage's share."""
    per_run = totals.assign(total=totals[list(STAGES)].sum(axis=1, min_count=1))  # NaN: not recorded (ingested)
    out = per_run.groupby("arm")[["iterations", *STAGES, "total"]].mean()
    out.insert(0, "seeds", per_run.groupby("arm").size())
    for s in STAGES:
        out[f"share_{s}"] = out[s] / out["total"]
    out["seconds_per_iteration"] = out["total"] / out["iterations"]
    return out.reset_index()


def group_shares(totals: pd.DataFrame) -> pd.DataFrame:
    """Per arm: mean over seeds of the share of groups trained on before B that were all wrong,
    all correct or mixed (with a 95% t interval for the mixed share), of the candidates' and the chosen
    prompts' mean predicted success, and of the distinct prompts trained (the paper's Table 7)."""
    counts = totals[[f"groups_{g}" for g in GROUPS]].to_numpy(dtype=float)
    shares = pd.DataFrame(counts / counts.sum(axis=1, keepdims=True), columns=[f"share_{g}" for g in GROUPS])
    shares["arm"] = totals["arm"].to_numpy()
    for c in (*PREDICTED, "prompts_distinct"):
        shares[c] = totals[c].to_numpy(dtype=float)
    rows = []
    for arm, g in shares.groupby("arm"):
        ci = mean_ci(g["share_mixed"])
        means = g.drop(columns="arm").mean().to_dict()  # NaN predictions stay NaN: the arm predicts nothing
        rows.append({"arm": arm, "seeds": len(g), **{f"share_{k}": means[f"share_{k}"] for k in GROUPS},
                     "mixed_low": ci["ci_low"], "mixed_high": ci["ci_high"],
                     **{c: means[c] for c in (*PREDICTED, "prompts_distinct")}})
    return pd.DataFrame(rows)
