"""A study config's schema, its study-wide cross-references, arms x seeds, and each run's effective config.

The JSON Schema (shipped in the package) checks keys and types and fills defaults; the references that tie
one top-level block to another (evaluation sets, analysis arms, sizes) are checked here. What a domain's own
blocks ask (task sources, credit rules, the plan) each domain checks itself: `mcgrpo.study` runs them all.
Every error names the key path, the value given and what is allowed.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from mcgrpo.core.errors import ConfigError

SCHEMA_PATH = Path(__file__).resolve().parent / "config.schema.yaml"  # package data


@functools.cache
def schema() -> dict:
    """The parsed study schema, read once per process (a dry-run of many studies parses it once). Read-only."""
    return yaml.load(SCHEMA_PATH.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def _validator() -> jsonschema.Validator:
    return _with_defaults(jsonschema.Draft202012Validator)(schema())


def _with_defaults(validator_class):
    """A validator that fills in each property's schema default before descending into it."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, subschema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from validate_properties(validator, properties, instance, subschema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path]
    return "".join(parts).lstrip(".") or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    """One line naming the key path, the value given and what is allowed."""
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return (f"config key {_key_path(error)}: unknown key(s) {', '.join(map(repr, unknown))}; "
                f"allowed: {', '.join(allowed)}")
    return f"config key {_key_path(error)}: {error.message}"


def validate_schema(cfg: dict) -> dict:
    """Fill defaults into `cfg` (in place, and returned); raise ConfigError listing every schema error."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"a study config must be a mapping of keys, got {type(cfg).__name__}")
    errors = sorted(_validator().iter_errors(cfg), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise ConfigError("\n".join(_describe(e) for e in errors))
    return cfg


def check_references(cfg: dict) -> None:
    """The rules that tie one top-level block to another."""
    arms, sets = list(cfg["arms"]), list(cfg["task"]["eval_sets"])
    for i, name in enumerate(cfg["evaluation"]["sets"]):
        if name not in sets:
            raise ConfigError(f"config key evaluation.sets[{i}]: {name!r} is not a task.eval_sets entry; "
                              f"allowed: {', '.join(sets)}")
    base = cfg["analysis"]["base"]
    if base is not None and base not in arms:
        raise ConfigError(f"config key analysis.base: {base!r} is not an arm; allowed: {', '.join(arms)}")
    for i, pair in enumerate(cfg["analysis"]["pairs"]):
        for j, arm in enumerate(pair):
            if arm not in arms:
                raise ConfigError(f"config key analysis.pairs[{i}][{j}]: {arm!r} is not an arm; "
                                  f"allowed: {', '.join(arms)}")
        if pair[0] == pair[1]:
            raise ConfigError(f"config key analysis.pairs[{i}]: an arm cannot be contrasted with itself ({pair[0]!r})")
    _check_sizes(cfg)


def _check_sizes(cfg: dict) -> None:
    recipe = cfg["recipe"]
    if (cfg["task"]["pool"]["size"] or recipe["prompts_per_iteration"]) < recipe["prompts_per_iteration"]:
        raise ConfigError(f"config key task.pool.size: {cfg['task']['pool']['size']} is smaller than "
                          f"recipe.prompts_per_iteration ({recipe['prompts_per_iteration']})")
    tokens = cfg["budget"]["tokens"]
    if tokens is not None and cfg["evaluation"]["per_budget"] > tokens:
        raise ConfigError(f"config key evaluation.per_budget: {cfg['evaluation']['per_budget']} evaluations "
                          f"cannot fit in budget.tokens = {tokens}; allowed: at most {tokens}")


def read(path: str | Path) -> dict:
    """The YAML study config at `path`, parsed but not validated."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    try:
        cfg = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    return cfg


def pairs(cfg: dict) -> list[tuple[str, str]]:
    """The (arm, base) contrasts of the study: the explicit pairs, else every arm against the base."""
    if cfg["analysis"]["pairs"]:
        return [tuple(p) for p in cfg["analysis"]["pairs"]]
    base = cfg["analysis"]["base"]
    return [(arm, base) for arm in cfg["arms"] if base is not None and arm != base]


def runs(cfg: dict) -> list[tuple[str, int]]:
    """Every (arm, seed) training run of the study."""
    return [(arm, seed) for arm in cfg["arms"] for seed in cfg["seeds"]]


def run_config(cfg: dict, arm: str, seed: int) -> dict[str, Any]:
    """The effective config of one run: everything that can change what it trains."""
    if arm not in cfg["arms"]:
        raise ConfigError(f"unknown arm {arm!r}; allowed: {', '.join(cfg['arms'])}")
    keys = ("study", "task", "model", "engine", "budget", "evaluation")
    spec = copy.deepcopy(cfg["arms"][arm])
    return {**{k: copy.deepcopy(cfg[k]) for k in keys}, "recipe": {**cfg["recipe"], **spec.get("recipe", {})},
            "arm": arm, "seed": seed, "arm_config": spec}


def config_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of `obj`."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def calibration_config(cfg: dict) -> dict[str, Any]:
    """The run config of budget calibration: the calibration credit rule on the first seed."""
    arm = {"description": "budget calibration", "credit": cfg["budget"]["calibration_credit"]}
    return run_config({**cfg, "arms": {"calibration": arm}}, "calibration", cfg["seeds"][0])


def gradient_tests_config(cfg: dict) -> dict[str, Any] | None:
    """What the gradient-test stage reads (None when the study has none): editing anything else never reruns it."""
    tests = cfg.get("gradient_tests")
    if not tests or not tests["enabled"]:
        return None
    keys = ("study", "task", "model", "engine", "recipe", "gradient_tests")
    return {**{k: copy.deepcopy(cfg[k]) for k in keys},
            "arms": {arm: copy.deepcopy(cfg["arms"][arm]) for arm in tests["arms"]}}


def train_runtime(cfg: dict, budget: int | None) -> int:
    """Minutes to ask for one training job: the configured value, else B over the throughput with 50% slack."""
    spec = cfg["resources"]["train"]
    if spec["runtime"]:
        return spec["runtime"]
    tokens = cfg["budget"]["horizon"] * (budget or cfg["budget"]["tokens"] or spec["budget_guess"])
    return math.ceil(1.5 * tokens / spec["tokens_per_second"] / 60) + 10
