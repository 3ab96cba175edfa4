"""Training pools and evaluation sets, stored as Parquet with the problems contract."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mcgrpo.core import store
from mcgrpo.core.errors import ConfigError, DataError


def prepare(task: dict):
    """The study's pool and evaluation sets with the log of what deduplication removed
    (a `pools.Prepared`); arith's sets are disjoint by construction, so nothing is removed."""
    from mcgrpo.data import dedup, pools
    if task["name"] != "arith":
        return pools.prepare(task)
    from mcgrpo.data import arith

    eval_sets = {name: {"size": s["size"], "levels": s.get("levels", task["pool"]["levels"])}
                 for name, s in task["eval_sets"].items()}
    pool, evals = arith.build(task["seed"], task["pool"]["size"], task["pool"]["levels"], eval_sets)
    arith.check_disjoint(pool, evals)
    return pools.Prepared(pool, evals, pd.DataFrame(columns=list(dedup.REMOVED_COLUMNS)))


def build(task: dict) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """(pool, {name: eval set}) for the study's `task:` block, checked to be disjoint."""
    prepared = prepare(task)
    return prepared.pool, prepared.evals


def warm_start_corpus(task: dict, size: int, levels: list[int], seed: int, data_dir: str | Path) -> pd.DataFrame:
    """Fresh training-side problems of `levels`, checked disjoint from the stored evaluation sets."""
    from mcgrpo.data import arith

    if task["name"] != "arith":
        raise ConfigError(f"the embedded tiny model is warm-started on the arith task, not {task['name']!r}; "
                         f"give model.source to train a real model on it")
    corpus = arith.corpus(seed, size, levels)
    arith.check_disjoint(corpus, read(data_dir, list(task["eval_sets"]))[1])
    return corpus


def write(pool: pd.DataFrame, eval_sets: dict[str, pd.DataFrame], out_dir: str | Path, config_hash: str,
          removed: pd.DataFrame | None = None) -> None:
    """pool.parquet, eval_<name>.parquet and, when given, removed.parquet (the dedup log)."""
    out_dir = Path(out_dir)
    store.write_parquet(pool, out_dir / "pool.parquet", config_hash)
    if removed is not None:
        store.write_parquet(removed, out_dir / "removed.parquet", config_hash)
    for name, df in eval_sets.items():
        store.write_parquet(df, out_dir / f"eval_{name}.parquet", config_hash)


def read(data_dir: str | Path, eval_names: list[str]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    data_dir = Path(data_dir)
    pool = store.read_contract(data_dir / "pool.parquet", "problems")
    if pool.empty:
        raise DataError(f"{data_dir / 'pool.parquet'}: the training pool is empty")
    return pool, {n: store.read_contract(data_dir / f"eval_{n}.parquet", "problems") for n in eval_names}
