"""A study config's schema, its study-wide cross-references, arms x seeds, and each run's effective config.

The JSON Schema (shipped in the package) checks keys and types and fills defaults; the references that tie
one top-level block to another (evaluation sets, analysis arms, sizes) are checked here. What a domain's own
blocks ask (task sources, credit rules, the plan) each domain checks itself: `mcgrpo.study` runs them all.
Every error names the key path, the value given and what is allowed.
"""

from __future__ import annotations

import copy
import datetime
import functools
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from mcgrpo.core import plugins
from mcgrpo.core.errors import ConfigError
from mcgrpo.core.verify import VERIFIERS

SCHEMA_PATH = Path(__file__).resolve().parent / "config.schema.yaml"  # package data
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Names become folder names, wildcard values and shell words: one strict pattern (fullmatch, so a
# trailing newline never passes as `$` would let it), with no dot-only or dot-leading name and no `..`.
_NAME = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,63}")  # arms and eval sets: also regex alternatives
# acc_greedy: the greedy evaluation's accuracy (evaluation.greedy), default verifier (paper G, H.1)
_METRIC = re.compile(rf"(?:acc|pass@[1-9][0-9]{{0,3}})_(?:{'|'.join(VERIFIERS)})|acc_greedy")
_PART = r"[A-Za-z0-9_][A-Za-z0-9_.+-]*"
_RESULTS_DIR = re.compile(rf"/?{_PART}(?:/{_PART})*")
# Folders of the workflow itself: a results_dir there would write outputs (and deletions) into the code.
_RESERVED = frozenset({"workflow", "rules", "config", "tests", "profiles", "containers", "bench", "slurm"})
FORMATS = {  # format name -> (check, what is allowed), the schema's `format:` values
    "name": (lambda s: bool(_NAME.fullmatch(s)),
             "letters, digits, '_', '.' and '-' (at most 64), starting with a letter or digit, no '..'"),
    "key": (lambda s: bool(_KEY.fullmatch(s)), "letters, digits and '_' (at most 64), starting with a letter or digit"),
    "results-dir": (lambda s: bool(_RESULTS_DIR.fullmatch(s)) and Path(s).parts[0] not in _RESERVED,
                    "a relative folder inside the working directory (or an absolute one) of names made of "
                    "letters, digits, '_', '.', '+' and '-', none starting with '.', and not one of the "
                    f"workflow's own folders ({', '.join(sorted(_RESERVED))})"),
    "date": (lambda s: _is_date(s), "a real calendar date YYYY-MM-DD"),
    "metric": (lambda s: bool(_METRIC.fullmatch(s)),
               f"acc_<verifier> or pass@<k>_<verifier>, verifier one of {', '.join(VERIFIERS)}; or acc_greedy "
               f"(with evaluation.greedy)"),
}


def _is_date(s: str) -> bool:
    try:
        return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", s)) and bool(datetime.date.fromisoformat(s))
    except ValueError:
        return False


@functools.cache
def schema() -> dict:
    """The parsed study schema, read once per process (a dry-run of many studies parses it once). Read-only."""
    return yaml.load(SCHEMA_PATH.read_text(), Loader=_LOADER)


def _is_integer(checker, value) -> bool:
    """Integers are written as integers: 8.0 is a number, not a group size (JSON Schema would accept it)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(checker, value) -> bool:
    """Numbers are finite: .inf and .nan train to garbage or give NaN statistics with exit 0."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or isinstance(value, float) and math.isfinite(value)


@functools.cache
def _validator() -> jsonschema.Validator:
    base = jsonschema.Draft202012Validator
    types = base.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
    formats = jsonschema.FormatChecker(formats=())
    for name, (check, _) in FORMATS.items():  # a format constrains strings; `type` reports anything else
        formats.checks(name)(lambda value, check=check: not isinstance(value, str) or check(value))
    strict = jsonschema.validators.extend(base, type_checker=types)
    return _with_defaults(strict)(schema(), format_checker=formats)


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
    where, value = f"config key {_key_path(error)}", error.instance
    if error.validator == "additionalProperties" and isinstance(value, dict):
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(value) - set(allowed))
        return f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}"
    if error.validator == "propertyNames":
        return f"{where}: {error.message}"
    if error.validator == "format":
        return f"{where}: {value!r} is not allowed; allowed: {FORMATS[error.validator_value][1]}"
    if error.validator == "type" and isinstance(value, float):
        if not math.isfinite(value):
            return f"{where}: {value} is not allowed; allowed: a finite number"
        if "integer" in error.validator_value:
            return f"{where}: {value!r} is not allowed; allowed: an integer (written without a decimal point)"
    return f"{where}: {error.message}"


def validate_schema(cfg: dict) -> dict:
    """Fill defaults into `cfg` (in place, and returned); raise ConfigError listing every schema error."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"a study config must be a mapping of keys, got {type(cfg).__name__}")
    if expands_past(cfg):
        raise ConfigError(TOO_LARGE.format(where="the study config"))
    errors = sorted(_validator().iter_errors(cfg), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise ConfigError("\n".join(_describe(e) for e in errors))
    order_eval_sets(cfg["task"])
    return cfg


def validate_blocks(value: dict, keys: tuple[str, ...], option: str) -> dict:
    """The study blocks `keys` of a JSON option (what a rule passes, or a hand-written part of it): each checked
    against its schema, defaults filled in place (a no-op on what a rule passes, which is validated already)."""
    sub = {"type": "object", "required": list(keys), "$defs": schema()["$defs"],
           "properties": {k: schema()["properties"][k] for k in keys}}
    errors = sorted(_validator().evolve(schema=sub).iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise ConfigError("\n".join(f"{option}: {_describe(e)}" for e in errors))
    if "task" in keys:
        order_eval_sets(value["task"], option)
    return value


def order_eval_sets(task: dict, option: str = "") -> dict:
    """`task` (in place, and returned) with its evaluation sets in the order they are built, each without the problems
    of the earlier ones: task.eval_set_order where given, else eval_sets' own order, which is then written into
    eval_set_order where it is not alphabetical. Every job is handed its config as JSON with sorted keys, which
    would otherwise build the sets alphabetically (as the workflow did, whatever their order, before the order was
    part of the config), and every hash of the task (the data folder's, each run's) would not tell two orders apart.
    Alphabetical sets get no eval_set_order: their hashes, and the folders named by them, stay as they were."""
    names, order = list(task["eval_sets"]), task.get("eval_set_order")
    if order is not None and sorted(order) != sorted(names):
        where = f"{option}: " if option else ""
        raise ConfigError(f"{where}config key task.eval_set_order: {order} does not name each of task.eval_sets once "
                          f"({', '.join(names)}); allowed: those names, in the order the sets are built")
    order = list(order or names)
    task["eval_sets"] = {name: task["eval_sets"][name] for name in order}
    if order == sorted(order):
        task.pop("eval_set_order", None)
    else:
        task["eval_set_order"] = order
    return task


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
        if list(reversed(pair)) in cfg["analysis"]["pairs"][:i]:
            raise ConfigError(f"config key analysis.pairs[{i}]: {pair} is pair "
                              f"{cfg['analysis']['pairs'].index(list(reversed(pair)))} reversed (the same contrast, "
                              f"its sign flipped); allowed: each pair once")
    _check_sizes(cfg)
    _check_runtime(cfg)
    _check_results_dir(cfg["results_dir"])
    _check_study_dir(cfg)


# A study's folder holds these; a results_dir inside one would nest a study in another's outputs.
STUDY_MARKERS = ("prereg.lock.json", "runs/store.parquet")


def _check_results_dir(results_dir: str) -> None:
    """results_dir must be a folder of study folders: not a file, not the run store (mcgrpo.core.layout keeps
    it at <results_dir>/_shared) and not inside another study's folder."""
    path, where = Path(results_dir), f"config key results_dir: {results_dir!r}"
    if "_shared" in path.parts:
        raise ConfigError(f"{where} is inside a run store (_shared/, which only the workflow writes); allowed: "
                          f"the folder holding it, e.g. {Path(*path.parts[:path.parts.index('_shared')]) or '.'}")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{where} is a file, not a folder; allowed: a folder (or a path not there yet)")
    for folder in (path, *path.parents):
        marker = next((m for m in STUDY_MARKERS if (folder / m).is_file()), None)
        if marker:
            raise ConfigError(f"{where} is inside the study folder {str(folder)!r} (it holds {marker}); allowed: "
                              f"a folder of studies, e.g. {str(folder.parent)!r}")


# The repository's root where the package runs from a checkout (its Snakefile beside workflow/), else None: a
# results_dir reaching one of its own folders however written (absolute, through a link) is refused.
_REPO = next((p for p in Path(__file__).resolve().parents[2:4] if (p / "Snakefile").is_file()), None)


def _reserved(path: Path) -> Path | None:
    """The workflow's own folder (_RESERVED, in this checkout) that `path` is or lies in, resolved from the working
    directory with links followed; None where it is none."""
    if _REPO is None:
        return None
    resolved = path.resolve()
    return next((folder for folder in (_REPO / name for name in sorted(_RESERVED))
                 if resolved == folder or folder in resolved.parents), None)


def _check_study_dir(cfg: dict) -> None:
    """The study's folder, <results_dir>/<study>, must be a folder (or not there yet) outside the workflow's own
    folders, however results_dir is written (`snakemake -n` would trip on a file there)."""
    path = Path(cfg["results_dir"]) / cfg["study"]
    for key, where in (("results_dir", Path(cfg["results_dir"])), ("study", path)):
        reserved = _reserved(where)
        if reserved:
            raise ConfigError(f"config key {key}: {str(where)!r} is the workflow's own folder {reserved}; allowed: "
                              f"a folder outside the workflow's own folders ({', '.join(sorted(_RESERVED))})")
    if path.exists() and not path.is_dir() or path.is_symlink() and not path.exists():
        what = "a file" if path.exists() else "a broken link"
        raise ConfigError(f"config key study: {cfg['study']!r}: {path} is {what}, where the study's folder belongs; "
                          f"allowed: a study name whose folder under results_dir is a folder or not there yet")


def _check_sizes(cfg: dict) -> None:
    recipe = cfg["recipe"]
    if (cfg["task"]["pool"]["size"] or recipe["prompts_per_iteration"]) < recipe["prompts_per_iteration"]:
        raise ConfigError(f"config key task.pool.size: {cfg['task']['pool']['size']} is smaller than "
                          f"recipe.prompts_per_iteration ({recipe['prompts_per_iteration']})")
    tokens, iterations = cfg["budget"]["tokens"], cfg["budget"].get("iterations")
    if tokens is not None and iterations is not None:
        raise ConfigError(f"config key budget.iterations: an equal-iteration study stops after {iterations} "
                          f"iterations and has no token budget, but budget.tokens is {tokens}; allowed: one of "
                          f"budget.tokens and budget.iterations")
    for key, size in (("tokens", tokens), ("iterations", iterations)):
        if size is not None and cfg["evaluation"]["per_budget"] > size:
            raise ConfigError(f"config key evaluation.per_budget: {cfg['evaluation']['per_budget']} evaluations "
                              f"cannot fit in budget.{key} = {size}; allowed: at most {size}")
    if tokens is not None:
        _check_one_iteration(cfg, tokens)


def _check_one_iteration(cfg: dict, tokens: int) -> None:
    """Refuses a B in tokens that no iteration fits in: every iteration generates at least one token per completion
    (its end token), recipe.prompts_per_iteration x group_size (an arm's recipe sets only its verifier), and a run
    stops at the first iteration that reaches B, so every run would stop after its first (B given in thousands)."""
    least = cfg["recipe"]["prompts_per_iteration"] * cfg["recipe"]["group_size"]
    if tokens <= least:
        raise ConfigError(f"config key budget.tokens: {tokens} generated tokens, but every iteration generates at "
                          f"least {least} (recipe.prompts_per_iteration x group_size completions, one token each), "
                          f"so every run would stop after its first iteration; allowed: more than {least} (B counts "
                          f"generated tokens, not thousands), or null to calibrate it")


_MERGE = "tag:yaml.org,2002:merge"


class _Duplicate(yaml.YAMLError):
    def __init__(self, line: int, message: str):
        super().__init__(message)
        self.line = line


class _StrictLoader(_LOADER):
    """YAML's safe loader, but a key given twice in one mapping is an error (YAML would keep the last)."""

    def construct_mapping(self, node, deep=False):
        first: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:  # `<<: *defaults`: the keys given beside it override the merged ones
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in first:
                    raise _Duplicate(line, f"key {key!r} is given twice (first at line {first[key]}); "
                                           f"allowed: each key once per block")
            except TypeError:  # an unhashable key: the constructor below says so
                break
            first[key] = line
        return super().construct_mapping(node, deep)


def text(path: str | Path, what: str = "config file") -> str:
    """A text file's content; an error naming the file (`what` it is) and line where it is missing, a folder or
    not UTF-8."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: a folder, not a file; allowed: a {what} saved as UTF-8 text")
    if not path.is_file():
        raise ConfigError(f"{path}: {what} not found")
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ConfigError(f"{path}:{line}: byte 0x{raw[e.start]:02x} at column {column} is not UTF-8 text; "
                          f"allowed: a file saved as UTF-8") from None


# The most values (keys, items, scalars) a config may hold once its YAML aliases are expanded: a real study holds
# thousands; an alias repeated inside an alias multiplies (ten levels of ten: 10^10), and every later step
# (validation, hashing, an error message quoting it) would expand it in memory.
MAX_VALUES = 1_000_000
TOO_LARGE = (f"{{where}}: more than {MAX_VALUES:,} values once its YAML aliases (*name) are expanded; allowed: a config "
             f"of at most {MAX_VALUES:,} (an alias repeated inside an alias multiplies them)")


def expands_past(value: Any, limit: int = MAX_VALUES) -> bool:
    """Whether `value`, its shared parts (YAML aliases) counted each time they occur, holds more than `limit`
    values: counted without expanding, stopping at the limit, so a billion-value alias bomb costs `limit` steps."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(item, dict):
            seen += len(item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def read(path: str | Path) -> dict:
    """The YAML study config at `path`, parsed (strictly: no key twice) but not validated; one whose aliases
    expand past MAX_VALUES is refused, naming the file."""
    loader = _StrictLoader(text(path))
    try:
        data = loader.get_single_data()
        if expands_past(data):
            raise ConfigError(TOO_LARGE.format(where=path))
        return data
    except _Duplicate as e:
        raise ConfigError(f"{path}:{e.line}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    finally:
        loader.dispose()


def pairs(cfg: dict) -> list[tuple[str, str]]:
    """The (arm, base) contrasts of the study: the explicit pairs, else every arm against the base."""
    if cfg["analysis"]["pairs"]:
        return [tuple(p) for p in cfg["analysis"]["pairs"]]
    base = cfg["analysis"]["base"]
    return [(arm, base) for arm in cfg["arms"] if base is not None and arm != base]


def runs(cfg: dict) -> list[tuple[str, int]]:
    """Every (arm, seed) training run of the study."""
    return [(arm, seed) for arm in cfg["arms"] for seed in cfg["seeds"]]


RUN_KEYS = ("task", "model", "engine", "budget", "evaluation", "recipe", "seed", "arm_config")


def run_config(cfg: dict, arm: str, seed: int) -> dict[str, Any]:
    """The effective config of one run: everything that can change what it trains, and nothing else.

    A plugin's identity (name, distribution version, source hash: mcgrpo.core.plugins) is part of it, so that
    editing the plugin makes a new run. Not the study's name, nor the arm's description (free text), nor the arm's name, except in a run measured
    along training (its alignment.parquet names the arm): the same run in two studies is one run, trained once
    (the run store, mcgrpo.core.layout). `evaluation.alignment` is resolved for the run: its spec where the run
    is measured, else absent, as in a study without it."""
    if arm not in cfg["arms"]:
        raise ConfigError(f"unknown arm {arm!r}; allowed: {', '.join(cfg['arms'])}")
    spec = copy.deepcopy(cfg["arms"][arm])
    spec.pop("description", None)
    evaluation = copy.deepcopy(cfg["evaluation"])
    along = evaluation.pop("alignment", None)
    measured = bool(along) and arm in along["arms"] and (not along.get("seeds") or seed in along["seeds"])
    if measured:
        evaluation["alignment"] = {k: v for k, v in along.items() if k not in ("arms", "seeds")}
    run = {**{k: copy.deepcopy(cfg[k]) for k in ("task", "model", "engine", "budget")}, "evaluation": evaluation,
           "recipe": {**cfg["recipe"], **spec.get("recipe", {})}, "seed": seed, "arm_config": spec}
    if "trl" in (spec.get("trainer") or {}):  # TRL's version and the script's hash: another of either, another run
        from mcgrpo.core.trl_config import identity
        run["trl"] = identity(spec["trainer"]["trl"])
    if "ingested" in (spec.get("trainer") or {}):  # a finished TRL run stored: what its folder says it did
        from mcgrpo.core.trl_config import ingested_identity
        run["ingested"] = ingested_identity(spec["trainer"]["ingested"], seed)
    # its arm's and the controls it measures along training (none for built-ins: their runs keep their hash)
    used = plugins.identities(plugins.run_uses(arm, spec, run["recipe"], evaluation))
    if used:
        run["plugins"] = used
    if cfg.get("verifier"):  # absent where the study sets none: its runs keep their hashes
        run["verifier"] = copy.deepcopy(cfg["verifier"])
    return {**run, "arm": arm} if measured else run


def base_study(cfg: dict, base: int) -> dict[str, Any]:
    """The study of one warm-start base of a study over `bases`: the same study warm-started with seed `base`,
    named <study>-base<N>. Its model, B and runs are keyed by what they compute (mcgrpo.core.layout), so each base
    gets its own, and a base equal to another study's warm-start seed shares that study's runs."""
    out = copy.deepcopy({k: v for k, v in cfg.items() if k not in ("bases", "base")})
    out["study"] = f"{cfg['study']}-base{base}"
    out["model"]["warm_start"]["seed"] = base
    return out


def bases_problems(cfg: dict) -> list[str]:
    """`bases` needs the warm-started tiny model; `base` must name one of them; a base's study name must fit."""
    bases, base = cfg.get("bases"), cfg.get("base")
    if bases is None:
        return [] if base is None else [f"config key base: {base} given without bases; allowed: set bases (a list "
                                        f"of warm-start seeds), or leave out base"]
    found = []
    if cfg["model"]["source"] is not None:
        found.append("config key bases: repeats the warm start of the embedded tiny model, and model.source "
                     f"{cfg['model']['source']!r} is not warm-started here; allowed: model.source null, or no bases")
    if base is not None and base not in bases:
        found.append(f"config key base: {base} is not one of bases; allowed: {', '.join(map(str, bases))}")
    longest = f"{cfg['study']}-base{max(bases)}"
    if not FORMATS["name"][0](longest):
        found.append(f"config key study: the bases' study names ({longest}) must be {FORMATS['name'][1]}")
    return found


# How Snakemake was invoked, where a job runs and where training reports: no part of what an analysis job computes,
# so rules/common.smk leaves them out of each analysis job's config (and of the config_hash of what it writes).
SWITCHES = ("analysis_only", "allow_templates", "containers", "tracking")


def select_base(cfg: dict) -> dict[str, Any]:
    """`cfg` made, in place, the study of its selected base (`base`, else the first of `bases`); unchanged without
    bases. Snakemake's `config` is this dict: one base's study per invocation."""
    if cfg.get("bases"):
        chosen = base_study(cfg, cfg.get("base", cfg["bases"][0]))
        cfg.clear()
        cfg.update(chosen)
    return cfg


def config_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of `obj`."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def run_identity(run: dict, budget: int) -> str:
    """What a run's checkpoints and outputs belong to: its effective config and the B it trains to.

    B lives in budget.parquet, not in the config, so a recalibrated B must be part of the identity or an
    interrupted run would resume into a hybrid of two budgets."""
    return config_hash({"run": run, "B": int(budget)})


def calibration_seed(cfg: dict) -> int:
    """budget.calibration_seed, else the smallest seed: reordering the seeds list never recalibrates."""
    seed = cfg["budget"].get("calibration_seed")
    return min(cfg["seeds"]) if seed is None else seed


def calibration_config(cfg: dict) -> dict[str, Any]:
    """The run config of budget calibration: the calibration credit rule on the calibration seed."""
    arm = {"credit": cfg["budget"]["calibration_credit"]}
    return run_config({**cfg, "arms": {"calibration": arm}}, "calibration", calibration_seed(cfg))


def gradient_tests_config(cfg: dict) -> dict[str, Any] | None:
    """What the gradient-test stage reads (None when the study has none): editing anything else never reruns it."""
    tests = cfg.get("gradient_tests")
    if not tests or not tests["enabled"]:
        return None
    keys = ("study", "task", "model", "engine", "recipe", "gradient_tests", *(("verifier",) if cfg.get("verifier") else ()))
    out = {**{k: copy.deepcopy(cfg[k]) for k in keys},
           "arms": {arm: copy.deepcopy(cfg["arms"][arm]) for arm in tests["arms"]}}
    blocks = {**{f"arms.{name}": arm for name, arm in out["arms"].items()},
              **{f"gradient_tests.controls.{name}": {"credit": c} for name, c in tests["controls"].items()}}
    used = [p for key, block in blocks.items() for p in plugins.identities(plugins.uses(block, cfg["recipe"], key))]
    # outcome-only, always measured, is rewarded by the recipe's verifier: a plugin's, with no arm or control listed
    used += [p for p in plugins.identities(plugins.uses({}, cfg["recipe"], "gradient_tests")) if p not in used]
    return {**out, "plugins": used} if used else out


def train_runtime(cfg: dict, budget: int | None) -> int:
    """Minutes to ask for one training job: the configured value, else B over the throughput with 50% slack;
    never more than resources.train.max_runtime (a longer run is signalled before the limit, checkpoints
    and resumes on the retry)."""
    spec = cfg["resources"]["train"]
    if spec["runtime"]:
        return min(spec["runtime"], spec["max_runtime"])
    if cfg["budget"].get("iterations") is not None:
        budget = None  # B counts iterations: the tokens a run generates are budget_guess's to guess
    tokens = cfg["budget"]["horizon"] * (budget or cfg["budget"]["tokens"] or spec["budget_guess"])
    return min(math.ceil(1.5 * tokens / spec["tokens_per_second"] / 60) + 10, spec["max_runtime"])


# A train job is signalled this many seconds, plus its checkpoint's, before its time limit: SLURM may send the signal
# up to 60 s before the time asked for (its event resolution), and the trainer stops at the end of the iteration
# under way (sbatch --signal).
SIGNAL_MARGIN = 90
# SLURM's event resolution: a job no longer than its lead plus this could be signalled as it starts.
SIGNAL_RESOLUTION = 60


def signal_lead(cfg: dict) -> int:
    """Seconds before its time limit at which a train job is sent SIGUSR1: SIGNAL_MARGIN plus the time a
    checkpoint takes (resources.train.checkpoint_seconds), whatever the runtime."""
    return SIGNAL_MARGIN + math.ceil(cfg["resources"]["train"]["checkpoint_seconds"])


def shortest_runtime(cfg: dict) -> int:
    """The shortest train job, in minutes, that SLURM cannot signal before it has started: the lead plus SLURM's
    resolution."""
    return math.ceil((signal_lead(cfg) + SIGNAL_RESOLUTION) / 60)


def _check_runtime(cfg: dict) -> None:
    """A train job too short to train and checkpoint once before its signal is refused before any job runs."""
    spec, shortest = cfg["resources"]["train"], shortest_runtime(cfg)
    minutes = train_runtime(cfg, None)  # never below min(11, max_runtime) when runtime is not given
    if minutes >= shortest:
        return
    lead = (f"the job is signalled {signal_lead(cfg)} s before its time limit ({SIGNAL_MARGIN} s + "
            f"resources.train.checkpoint_seconds {spec['checkpoint_seconds']:g}), and SLURM may send the signal up "
            f"to {SIGNAL_RESOLUTION} s earlier")
    if spec["runtime"] is None and minutes < spec["max_runtime"]:  # the estimate, at least 11 minutes
        raise ConfigError(f"config key resources.train.checkpoint_seconds: {spec['checkpoint_seconds']:g} leaves no "
                          f"time to train in a job of the estimated {minutes} minutes: {lead}; allowed: "
                          f"resources.train.runtime of at least {shortest} minutes")
    key = "max_runtime" if minutes == spec["max_runtime"] else "runtime"
    raise ConfigError(f"config key resources.train.{key}: {minutes} minute{'s' * (minutes != 1)} is too short for a "
                      f"train job to checkpoint once: {lead}; allowed: at least {shortest} minutes (or a smaller "
                      f"resources.train.checkpoint_seconds, if checkpoints take less)")


def command_line(entries: list[str] | None) -> dict[str, Any]:
    """The `--config key=value ...` entries (Snakemake's raw words), each value read as YAML where the schema
    expects anything but a string (as `--set` in other tools): `seeds=[1,2]` is two integers and
    `model={"warm_start": {"steps": 200}}` a block, while `study=1e3` stays the name '1e3'. Snakemake itself keeps
    the leaves of a list or block as strings, which the schema would refuse."""
    overrides: dict[str, Any] = {}
    for entry in entries or []:
        key, sep, text = entry.partition("=")
        if sep:
            overrides[key] = None if text == "" else _typed(_plain(text), schema()["properties"].get(key, {}))
    return overrides


def _plain(text: str) -> Any:
    """`text` as YAML with every scalar kept as its text (the schema decides what each one is); text that is
    not YAML stays text."""
    try:
        return yaml.load(text, Loader=yaml.BaseLoader)
    except yaml.YAMLError:
        return text


def _typed(node: Any, sub: dict) -> Any:
    """`node` (from `_plain`) with each leaf read as YAML unless `sub`, its schema, wants a string."""
    sub = _resolved(sub)
    if _wants_text(sub):
        return node
    if isinstance(node, dict):
        return {k: _typed(v, _property(sub, k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_typed(v, _resolved(sub.get("items", {}))) for v in node]
    try:
        value = yaml.load(node, Loader=_LOADER)
    except yaml.YAMLError:
        return node
    kinds = sub.get("type") if isinstance(sub.get("type"), list) else [sub.get("type")]
    if isinstance(value, str) and "number" in kinds:  # YAML 1.1 reads 1e-3 (no dot) as text
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _resolved(sub: dict) -> dict:
    ref = sub.get("$ref", "")
    return {**schema()["$defs"][ref.rsplit("/", 1)[-1]], **{k: v for k, v in sub.items() if k != "$ref"}} if ref else sub


def _property(sub: dict, key: str) -> dict:
    if key in sub.get("properties", {}):
        return sub["properties"][key]
    extra = sub.get("additionalProperties")
    return extra if isinstance(extra, dict) else {}


def _wants_text(sub: dict) -> bool:
    """The schema allows a string and nothing else here (a name, a path, a choice of words)."""
    kind = sub.get("type")
    if kind is not None:
        return kind == "string" or kind == ["string"]
    choices = sub.get("enum")
    return bool(choices) and all(isinstance(c, str) for c in choices)


_KEY_LINE = re.compile(r"^config key ([A-Za-z0-9_.@\[\]-]+)")


def located(message: str, paths: list) -> str:
    """`message` with each `config key a.b[0]` line prefixed by the file and line that gives that key (the last
    of `paths` that does: later files override earlier ones), where one does."""
    def where(line: str) -> str:
        match = _KEY_LINE.match(line)
        found = [f"{p}:{n}" for p in paths if match and (n := _line_of(p, match.group(1)))]
        return f"{found[-1]}: {line}" if found else line
    return "\n".join(map(where, message.split("\n")))


def _line_of(path, key: str) -> int | None:
    """The line of config key `key` (a.b[0].c) in the YAML file at `path`, or None."""
    try:
        node = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=_LOADER)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    line = None
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", key):
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if k.value == part), None)
            if hit is None:
                return line
            line, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and part.startswith("["):
            i = int(part[1:-1])
            if i >= len(node.value):
                return line
            node = node.value[i]
            line = node.start_mark.line + 1
        else:
            return line
    return line
