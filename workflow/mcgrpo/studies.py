"""A whole study config, validated before any job: the schema, then every domain's own checks.

Each domain knows what its blocks mean and says what is wrong with them (`problems`, one line per
problem naming the key); this module only collects them, so no domain imports another to validate.
"""

from __future__ import annotations

from pathlib import Path

from mcgrpo.analysis import plan
from mcgrpo.core import config, templating
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
    _raise(_positions(cfg))
    return cfg


def _positions(cfg: dict) -> list[str]:
    """The tiny model (no model.source) sees a rendered prompt and then up to recipe.completion_limit tokens, one
    token a character: max_positions must hold both. The prompt is its chat markers (4 tokens), task.prompt and
    the longest question (arith's, from its levels; a file's is known once read, so only task.prompt counts)."""
    if cfg["model"]["source"] is not None:
        return []
    from mcgrpo.data import arith
    task, limit = cfg["task"], cfg["recipe"]["completion_limit"]
    levels = {lv for spec in (task["pool"], *task["eval_sets"].values()) for lv in spec.get("levels") or arith.LEVELS}
    question = arith.longest_question(sorted(levels)) if task["name"] == "arith" else 0
    prompt = 4 + len(task["prompt"].replace("{question}", "")) + question
    most = cfg["model"]["tiny"]["max_positions"]
    if prompt + limit <= most:
        return []
    longest = f"the longest level-{max(levels)} question's" if question else "task.prompt's"
    return [f"config key model.tiny.max_positions: {most} positions cannot hold {longest} prompt ({prompt} tokens) "
            f"and recipe.completion_limit ({limit}); allowed: at least {prompt + limit}, or a shorter completion_limit"]


def load(path: str | Path, overrides: dict | None = None) -> dict:
    """Read a YAML study config (never rendered: a template is refused), merge `overrides` into it (a programme's,
    recursively, as Snakemake merges --config) and validate it; errors name the file."""
    cfg = config.read(path)
    templating.refuse(path, cfg, allowed=False)
    if overrides and isinstance(cfg, dict):  # (not a mapping: validate says so)
        from snakemake.utils import update_config
        update_config(cfg, overrides)
    try:
        return validate(cfg)
    except ConfigError as e:
        raise ConfigError(f"{path}:\n{e}") from None


def from_snakemake(cfg: dict, configfiles: list, entries: list[str] | str | None) -> dict:
    """The Snakefile's study, validated before any job: the `--config` entries (`entries`, Snakemake's raw
    words) read as YAML where the schema expects no string, then each config file read again strictly (no key
    twice, no template without the command line's opt-in; Snakemake's loader would keep the last of a key given
    twice), then `validate`. Fills `cfg` in place and returns it."""
    from snakemake.utils import update_config  # Snakemake's own merge: recursive into blocks, as `--config` merges
    update_config(cfg, config.command_line(entries if isinstance(entries, list) else None))
    allowed = cfg.get(templating.OPT_IN) is True
    for path in configfiles:
        templating.refuse(path, config.read(path), allowed)
    try:
        return validate(cfg)
    except ConfigError as e:
        raise ConfigError(config.located(str(e), list(configfiles))) from None

