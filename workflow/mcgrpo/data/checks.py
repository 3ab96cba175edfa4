"""Checks that a run's data can serve its config, made before any training time is spent."""

from __future__ import annotations

import pandas as pd

from mcgrpo.data import dedup
from mcgrpo.data.arith import check_disjoint
from mcgrpo.core.errors import DataError


def check_run_data(pool: pd.DataFrame, eval_sets: dict[str, pd.DataFrame], run: dict, where: str) -> None:
    """Raise ValueError naming the file and the need when the pool or an eval set cannot serve `run`."""
    need = run["recipe"]["prompts_per_iteration"]
    if len(pool) < need:
        raise DataError(f"{where}/pool.parquet holds {len(pool)} problems; recipe.prompts_per_iteration "
                         f"needs at least {need}")
    sizes = {name: spec.get("size") for name, spec in run["task"].get("eval_sets", {}).items()}
    for name, frame in eval_sets.items():
        wanted = sizes.get(name) or 1
        if len(frame) < wanted:
            raise DataError(f"{where}/eval_{name}.parquet holds {len(frame)} problems; "
                             f"task.eval_sets.{name}.size asks for {wanted}")
    check_disjoint(pool, eval_sets)
    for name, frame in eval_sets.items():
        check_distinct(frame, f"{where}/eval_{name}.parquet", where)


def check_distinct(frame: pd.DataFrame, path: str, where: str) -> None:
    """Raise naming the file where an evaluation set holds one problem twice (as prepare_data's deduplication
    judges): it would count twice in the set's accuracy. A folder prepared before sets were kept distinct has them."""
    repeats = dedup.distinct(frame, "")[1]
    if len(repeats):
        r = repeats.iloc[0]
        raise DataError(f"{path}: problem {r.problem_id} repeats {r.match_id} ({r.reason} match, similarity "
                        f"{r.similarity:.2f}){f' and {len(repeats) - 1} more' if len(repeats) > 1 else ''}; a "
                        f"repeated problem counts twice in the set's accuracy; allowed: an evaluation set of distinct "
                        f"problems: move {where} away and rerun the workflow, which prepares it again keeping the "
                        f"first of each (its runs trained on this folder are then set aside by check-store --repair)")
