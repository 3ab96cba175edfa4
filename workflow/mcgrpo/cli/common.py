"""What the verbs share: the study config and the JSON objects the rules pass, a training run named by the rule or
by hand, and the options' validators (one small set: docs/validation.md)."""

from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path

from mcgrpo import studies
from mcgrpo.core import config as study_config, layout, plugins
from mcgrpo.core.errors import ConfigError


def _json(text: str, option: str, required: tuple[str, ...] = ()) -> dict:
    """The JSON object an option carries (what a rule passes), with the keys the verb reads."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{option}: not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{option}: expected a JSON object, got {type(value).__name__}")
    return _require(value, option, required)


def _require(value: dict, option: str, required: tuple[str, ...]) -> dict:
    missing = [k for k in required if k not in value]
    if missing:
        raise ConfigError(f"{option}: missing key(s) {', '.join(missing)}; allowed: the object the workflow's "
                          f"rule passes (a run's: mcgrpo.core.config.run_config)")
    return value


def _config(args, every_base: bool = False) -> dict:
    """The study config; of a study over `bases`, the first base's study, as Snakemake runs it by default (unless
    `every_base`: pool-bases reads them all)."""
    if getattr(args, "config_json", None):
        cfg = studies.validate(_json(args.config_json, "--config-json"))
    else:
        cfg = _study(args.config)
    return cfg if every_base else study_config.select_base(cfg)


def _study(path: str) -> dict:
    """The study config at `path`; a path that is not there names the studies that are (nearest first)."""
    if not Path(path).exists():
        here = Path(path).parent if Path(path).parent.is_dir() else Path(".")
        found = sorted({str(p) for folder in (here, Path("config"), Path("config/studies"), Path("config/studies/paper"))
                        for p in folder.glob("*.yaml")})
        near = difflib.get_close_matches(str(path), found, n=1, cutoff=0.6)
        listed = [f for f in found if "paper/" not in f]
        raise ConfigError(f"{path}: config file not found" + (f"; did you mean {near[0]}?" if near else "")
                          + (f" Studies: {', '.join(listed)}" if listed else "")
                          + (f" and {len(found) - len(listed)} under config/studies/paper/" if len(found) > len(listed)
                             else ""))
    return studies.load(path)


def _study_source(v: argparse.ArgumentParser) -> None:
    """--config or --config-json: the study a verb reads, named by hand or passed whole by a rule."""
    src = v.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", metavar="STUDY.yaml", help="study config YAML")
    src.add_argument("--config-json", help="the validated study config as JSON (what the rules pass)")


# The study blocks of a run's effective config checked against the schema (its evaluation block is resolved for
# the run: mcgrpo.core.config.run_config).
RUN_BLOCKS = ("task", "model", "engine", "budget", "recipe")


def _run(args) -> dict:
    """The run's effective config a rule passes (--run-json), its blocks checked against the schema."""
    return _as_planned(study_config.validate_blocks(_json(args.run_json, "--run-json", study_config.RUN_KEYS),
                                                    RUN_BLOCKS, "--run-json"), "--run-json")


def _as_planned(run: dict, option: str, arm: str | None = None) -> dict:
    """`run` (what a rule passes), refused where a plugin it names changed since the workflow planned the job, or where
    importing one (its first import in the job: here) changed the process's global state (contract.imported)."""
    if run.get("plugins"):
        from mcgrpo.train import contract
        keys = _plugin_keys(run, arm)
        for plugin in run["plugins"]:
            key = keys.get((plugin["kind"], plugin["name"]), option)
            contract.imported(contract.Subject(plugin["kind"], plugin["name"], key),
                              lambda plugin=plugin, key=key: plugins.load(plugin["kind"], plugin["name"], key))
    changed = plugins.changed_since(run.get("plugins", []))
    if changed:
        raise ConfigError(f"{option}: edited since the workflow planned this job: {'; '.join(changed)}; allowed: "
                          f"rerun the workflow, which plans the edited plugin's runs as other runs (its identity "
                          f"is part of their key)")
    return run


def _plugin_keys(run: dict, arm: str | None) -> dict[tuple[str, str], str]:
    """(kind, name) -> the config key that names each plugin of the run's arm (arms.<arm>.credit, ...; `arm`: its
    name, which the rule's --label gives), what messages name; without one (a stage of several arms) none."""
    if arm is None or "arm_config" not in run:
        return {}
    return {(kind, name): key for kind, name, _, key in
            plugins.run_uses(arm, run["arm_config"], run["recipe"], run["evaluation"])}


def _training_run(args) -> tuple[dict, dict[str, str], tuple[str, str]]:
    """The run's effective config, files and names (study, arm): from the rule (--run-json, every file and
    --label), or by hand (--config STUDY.yaml --arm A --seed N, files defaulting to where the workflow puts them:
    the run store, mcgrpo.core.layout)."""
    given = {k: getattr(args, k) for k in ("model", "data", "budget", "out")}
    if args.run_json:
        run, problems = _json(args.run_json, "--run-json"), []
        try:
            _require(run, "--run-json", study_config.RUN_KEYS)
        except ConfigError as e:
            problems.append(str(e))
        missing = [f"--{k}" for k, v in given.items() if v is None]
        if missing:
            problems.append(f"train --run-json also needs {', '.join(missing)}")
        if problems:
            raise ConfigError("\n".join(problems))
        names = _names(args.label)
        return _as_planned(study_config.validate_blocks(run, RUN_BLOCKS, "--run-json"), "--run-json",
                           names[1] if args.label else None), given, names
    if args.arm is None or args.seed is None:
        raise ConfigError("train --config names the run with --arm A --seed N")
    from mcgrpo.train import contract
    with contract.imports_checked():  # its plugins' first import, held to what a job holds its own to
        cfg = study_config.select_base(_study(args.config))
    run = study_config.run_config(cfg, args.arm, args.seed)
    defaults = {"model": layout.model_path(cfg), "data": layout.data_dir(cfg), "budget": layout.budget_path(cfg),
                "out": layout.run_dir(cfg, args.arm, args.seed)}
    files = {k: str(default if given[k] is None else given[k]) for k, default in defaults.items()}
    return run, files, (cfg["study"], args.arm)


def _names(label: str | None) -> tuple[str, str]:
    """(study, arm) of --label STUDY/ARM: what messages and trackers call a run the rule passes."""
    study, slash, arm = (label or "run/run").rpartition("/")
    if not slash:
        raise ConfigError(f"--label {label!r}: expected STUDY/ARM, e.g. default/mc_k4")
    return study, arm


def _tracking(args) -> str:
    """The experiment tracker: --tracking, else (by hand) the study's `tracking` key, else none. The rule passes
    the key as an option, not in the run's config: switching tracking on never makes a finished run out of date."""
    if args.tracking is None and args.config:
        return _study(args.config)["tracking"]
    return args.tracking or "none"


def _typed(convert, ok, allowed: str):
    """An argparse type: `convert(text)` where `ok` holds of it, else argparse's message naming the option, the
    value and what is allowed (exit 2, no traceback)."""
    def parse(text: str):
        try:
            value = convert(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: {allowed}")
        return value
    return parse


def _format(name: str):
    """An argparse type: a string of the study schema's format `name` (a metric, an arm or set key)."""
    check, allowed = study_config.FORMATS[name]
    return _typed(str, check, allowed)


# The options' values, one validator per kind (the study schema's bounds where an option mirrors a key).
_positive = _typed(int, lambda v: v >= 1, "an integer of at least 1")
_resamples = _typed(int, lambda v: 1 <= v <= 1_000_000, "an integer from 1 to 1000000")
_threads = _typed(int, lambda v: 1 <= v <= 1024, "an integer from 1 to 1024")
_seed = _typed(int, lambda v: 0 <= v < 2 ** 32, "an integer from 0 to 4294967295")
_share = _typed(float, lambda v: 0 < v < 1, "a number strictly between 0 and 1")
_folder = _typed(Path, Path.is_dir, "an existing folder (a study's results folder, results/<study>)")
BASES = tuple(study_config.schema()["$defs"]["basis"]["enum"])


def _files(v: argparse.ArgumentParser, files: dict[str, str], required: tuple[str, ...] = ()) -> None:
    """The files a verb reads and writes, option: help (the rules name them; by hand, see `train --config`)."""
    for option, text in files.items():
        v.add_argument(option, help=text, required=option in required)


def _stage(v: argparse.ArgumentParser, json_option: str, json_help: str, files: dict[str, str]) -> None:
    """A stage's options: the one part of the config that can change its output, as JSON (so that editing, say,
    the analysis margin never makes Snakemake rerun training), then its files, --out required."""
    v.add_argument(json_option, required=True, help=json_help)
    _files(v, files, required=("--out",))
