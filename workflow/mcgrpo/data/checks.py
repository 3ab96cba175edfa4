"""Checks that a run's data can serve its config, made before any training time is spent."""

from __future__ import annotations

import pandas as pd

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
