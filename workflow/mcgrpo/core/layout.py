"""Where a study's files live: one answer for the workflow's rules and for `mcgrpo train --config` by hand.

Everything a study computes lives under <results_dir>/<study>/, except what depends on less than the study:
the data (built from the task block alone) and the warm-started tiny model (the model and task blocks). Those
live under <results_dir>/_shared/, named by a hash of exactly the blocks they are built from, so the studies that
name the same ones (the default, dense and selection studies do) build them once, and a study that changes
either block gets files of its own instead of overwriting another study's. No study can be named `_shared`:
study names start with a letter or digit (the schema's `name` format).

A task that reads files (`task.pool.path`) is hashed by its config, not by the files' contents, as before:
editing a data file in place is not noticed (it never was within a study; now it is not across studies either).
"""

from __future__ import annotations

from pathlib import Path

from mcgrpo.core.config import config_hash

SHARED = "_shared"


def _short_hash(obj) -> str:
    return config_hash(obj)[:12]


def study_dir(cfg: dict) -> Path:
    return Path(cfg["results_dir"]) / cfg["study"]


def data_dir(cfg: dict) -> Path:
    """The pool, evaluation sets and removal log of the study's task."""
    return Path(cfg["results_dir"]) / SHARED / "data" / _short_hash(cfg["task"])


def warm_start_spec(cfg: dict) -> dict:
    """What the warm-started tiny model is built from."""
    return {"model": cfg["model"], "task": cfg["task"]}


def model_path(cfg: dict) -> Path:
    """The tiny model's folder (shared, built by warm_start), or the study's reference to a model with a source
    (written by resolve_model: cheap, and it records where the weights were found for this study)."""
    name = cfg["model"]["name"]
    if cfg["model"]["source"] is None:
        return Path(cfg["results_dir"]) / SHARED / "models" / f"{name}-{_short_hash(warm_start_spec(cfg))}"
    return study_dir(cfg) / "models" / f"{name}.json"


def shared_log(path: Path) -> Path:
    """The log of the job that writes shared `path`: beside the other shared logs, named after the file."""
    shared = next(p for p in path.parents if p.name == SHARED)
    return shared / "logs" / f"{path.relative_to(shared).parts[0]}-{path.name}.log"


def budget_path(cfg: dict) -> Path:
    return study_dir(cfg) / "calibration" / "budget.parquet"


def run_dir(cfg: dict, arm: str, seed: int) -> Path:
    return study_dir(cfg) / "runs" / arm / f"seed{seed}"
