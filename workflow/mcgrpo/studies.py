"""A whole study config, validated before any job: the schema, then every domain's own checks.

Each domain knows what its blocks mean and says what is wrong with them (`problems`, one line per
problem naming the key); this module only collects them, so no domain imports another to validate.
"""

from __future__ import annotations

from pathlib import Path

from mcgrpo.analysis import plan
from mcgrpo.core import config
from mcgrpo.core.errors import ConfigError
from mcgrpo.data import spec as task_spec
from mcgrpo.train import spec as train_spec
from mcgrpo.train.models import sources as model_sources


def _raise(problems: list[str]) -> None:
    if problems:
        raise ConfigError("\n".join(problems))


def validate(cfg: dict) -> dict:
    """Fill defaults into `cfg` (in place, and returned); raise ConfigError listing what is wrong."""
    config.validate_schema(cfg)
    _raise(task_spec.problems(cfg["task"]) + model_sources.problems(cfg["model"]["source"]))
    config.check_references(cfg)
    _raise(config.bases_problems(cfg))
    _raise(plan.problems(cfg))
    _raise(train_spec.problems(cfg))
    return cfg


def load(path: str | Path) -> dict:
    """Read a YAML study config and validate it; errors name the file."""
    cfg = config.read(path)
    try:
        return validate(cfg)
    except ConfigError as e:
        raise ConfigError(f"{path}:\n{e}") from None
