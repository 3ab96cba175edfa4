# What the rules that train and the analysis rules share: the studies (read and checked before any job), the run
# store's keys and paths, how a job runs the package, and the input and resource helpers of both. What one side alone
# uses is beside its rules, in train_helpers.smk or analysis_helpers.smk (snakemake --lint wants functions and rules
# in separate files); the targets are in targets.smk. The package does the work; rules only wire files together.
import hashlib
import itertools
import json
import os
import re
import shlex
import socket
import sys
import time
import uuid

from pathlib import Path
from snakemake.io import apply_wildcards
from snakemake.settings.types import DeploymentMethod


def own_code(ours: Path) -> None:
    """This checkout's package first on the path. The workflow's profile may have imported an installed mcgrpo
    already (profiles/default): where it is not this checkout's code (a venv installed from another checkout, or an
    older install), this process and every job (`$PYTHON -m mcgrpo`) would compute the study with that code, not
    the code of the Snakefile run, without a word; stop before anything is read. Held by content (.py and .yaml
    files), so an install of the same code elsewhere (pip install . of this checkout, an image's) is fine."""
    sys.path.insert(0, str(ours))
    imported = sys.modules.get("mcgrpo")
    if imported is None or Path(imported.__file__).parent.resolve() == (ours / "mcgrpo").resolve():
        return
    theirs = Path(imported.__file__).parent
    if code_digest(theirs) != code_digest(ours / "mcgrpo"):
        print(f"Error: {theirs}: the mcgrpo this Python ({sys.executable}) imports is not this workflow's "
              f"({ours / 'mcgrpo'}): its code differs, so this run's jobs would compute the study with other code "
              f"than the Snakefile's; allowed: this checkout's own environment (`make env` in {ours.parent}, or "
              f"pip install -e {ours.parent}), or PYTHONPATH={ours}", file=sys.stderr)
        sys.exit(2)  # as a user error (mcgrpo.core.errors.stopping), whose module may be the other copy's


def code_digest(package: Path) -> str:
    """The sha256 of a package's code: every .py and .yaml file below it, by relative path and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts):
        digest.update(f"{path.relative_to(package)}\0".encode() + path.read_bytes())
    return digest.hexdigest()


own_code(Path(workflow.basedir) / "workflow")
from mcgrpo.core import config as study_config  # noqa: E402
from mcgrpo.core import layout
from mcgrpo import studies
from mcgrpo import programme as programmes
from mcgrpo.core.errors import ConfigError, stopping
from mcgrpo.core import study_turns

# `snakemake screen --config screen_arm=NAME` (rules/screen.smk): a target's argument, not part of the study, so
# it leaves the config (and the command line's entries the study is read from) before the study is checked.
SCREEN_ARM = config.pop("screen_arm", None)
# Before any job: the --config values read as YAML by the schema, each config file read again strictly
# (Snakemake's YAML loader keeps the last of a key given twice; a template needs the command line's opt-in), then
# the schema (one line per error, naming the key) and the cross-references. A user error prints its message
# alone and exits 2; a bug keeps its traceback.
# A programme (`programme:` in the config: mcgrpo.programme) is several studies in one DAG; without one, Snakemake's
# config is the one study, as it always was. Either way STUDIES holds each study by its name.
CONFIG_ARGS = [e for e in workflow.config_settings.config_args or [] if not e.startswith("screen_arm=")]
if programmes.given(config):
    with stopping():
        PROGRAMME = programmes.from_snakemake(config, workflow.configfiles, CONFIG_ARGS)
    STUDIES = PROGRAMME.studies
    config[programmes.STUDIES_KEY] = STUDIES  # for the scripts, which read the study from Snakemake's config
else:
    PROGRAMME = None
    with stopping():
        studies.from_snakemake(config, workflow.configfiles, CONFIG_ARGS)
    # A study over several warm-start bases (`bases`) runs one base's study per invocation: --config base=N, else
    # the first (mcgrpo.core.config.base_study); `mcgrpo pool-bases` reads them all.
    with stopping():
        study_config.select_base(config)
    STUDIES = {config["study"]: config}
FIRST = next(iter(STUDIES.values()))  # what the whole DAG shares: results_dir (one run store), images, analysis_only
ANALYSIS_ONLY = any(cfg["analysis_only"] for cfg in STUDIES.values())
CONTAINERS = FIRST["containers"]
with stopping():
    for _name, _cfg in STUDIES.items():
        if _cfg["containers"] != CONTAINERS:
            raise ConfigError(f"{PROGRAMME.files[_name]}: config key containers: {_cfg['containers']} differs from "
                              f"{PROGRAMME.files[FIRST['study']]}'s; allowed: one set of images for a programme "
                              f"(set it in programme.overrides)")
    if SCREEN_ARM and PROGRAMME:
        raise ConfigError(f"config key screen_arm: {SCREEN_ARM!r} screens an arm of one study; allowed: "
                          f"snakemake screen --configfile STUDY.yaml --config screen_arm={SCREEN_ARM}")

# Every study's files are under <results_dir>/<study>/: the rules' paths carry the study as the {study} wildcard.
_RESULTS = str(Path(FIRST["results_dir"]))
R = "{study}" if _RESULTS == "." else f"{_RESULTS}/{{study}}"
# Data, the tiny model (no source: a folder built by warm_start), B and every run are shared by the studies that
# name the same ones, under results/_shared/ (mcgrpo.core.layout), each made by one job keyed by its name there
# (the {data}, {model}, {calibration} and {run} wildcards); a model with a source is the study's own reference file.
# The study's runs/<arm>/seed<N> and calibration/ link into the store (rule link_study).
SHARED = layout.runs_dir(FIRST).parent
RUN = f"{layout.runs_dir(FIRST)}/{{run}}"
RUN_FILES = ("iterations.parquet", "evals.parquet", "samples.parquet", "prompts.parquet", "run.json",
             "alignment.parquet",  # the gradient tests along training (evaluation.alignment): empty if unmeasured
             "manifest.json")  # written last: every file above with its sha256 (mcgrpo.core.manifest)
STORE = f"{R}/runs/store.parquet"  # which stored run each (arm, seed) is; written with the links (link_study)
LOCK = f"{R}/prereg.lock.json"


class Study:
    """What the rules need of one study: its config, folder, stored runs and JSON."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.folder = str(layout.study_dir(cfg))
        self.data = str(layout.data_dir(cfg))
        self.model = str(layout.model_path(cfg))
        self.budget = str(layout.budget_path(cfg))
        self.equal_iterations = cfg["budget"].get("iterations") is not None  # B counts iterations, not tokens
        self.alignment = bool(cfg["evaluation"].get("alignment"))  # the gradient tests along training
        # The study's stored runs, each by its name in the store and the first (arm, seed) naming it (what its
        # messages and trackers call it): two arms of a study that train the same run share one.
        self.keys = layout.run_keys(cfg)  # (arm, seed) -> its stored run's name
        self.named = layout.first_names(self.keys)
        # The analysis reads the whole study config, less the switches saying how Snakemake was invoked, the images
        # its jobs run in and where training reports to (where a job runs or reports is no part of what it
        # computes, nor of the config_hash of what it writes).
        self.json = json.dumps({k: v for k, v in cfg.items() if k not in study_config.SWITCHES}, sort_keys=True)
        self.gradient = study_config.gradient_tests_config(cfg)


S = {name: Study(cfg) for name, cfg in STUDIES.items()}
# The store's jobs, each keyed by its name there, with the config of the first study naming it: every store file
# is the output of one job however many studies share it.
RUNS = {}  # run key -> (study, (arm, seed))
CALIBRATIONS, DATA_SETS, MODELS = {}, {}, {}
for _name, _study in S.items():
    for _key, _run in _study.named.items():
        RUNS.setdefault(_key, (_name, _run))
    CALIBRATIONS.setdefault(Path(_study.budget).parent.name, _name)
    DATA_SETS.setdefault(Path(_study.data).name, _name)
    if _study.cfg["model"]["source"] is None:
        MODELS.setdefault(Path(_study.model).name, _name)


def study_of(wildcards):
    """The study whose config a job of these wildcards follows: its own, or the first naming its store file."""
    if hasattr(wildcards, "study"):
        return S[wildcards.study]
    if hasattr(wildcards, "run"):
        return S[RUNS[wildcards.run][0]]
    if hasattr(wildcards, "calibration"):
        return S[CALIBRATIONS[wildcards.calibration]]
    if hasattr(wildcards, "model"):
        return S[MODELS[wildcards.model]]
    if hasattr(wildcards, "data"):
        return S[DATA_SETS[wildcards.data]]
    return S[FIRST["study"]]  # no wildcards (screen): the one study's


def cfg_of(wildcards):
    return study_of(wildcards).cfg


ENV = "../workflow/envs/mcgrpo.yaml"
# Rules call the interpreter this workflow runs with: a SLURM job's PATH need not hold a `python`, or the right
# one. In a container or a conda env, that env's own `python`.
PYTHON = ("python" if workflow.deployment_settings.deployment_method & {DeploymentMethod.APPTAINER, DeploymentMethod.CONDA}
          else shlex.quote(sys.executable))
# As the shell variable $PYTHON of every rule (Snakemake's own prefix, `set -euo pipefail`, kept).
shell.prefix(f"set -euo pipefail; PYTHON={PYTHON}; ")
# A job that writes a study's folder (its links, gradient tests, every analysis step) runs in its Snakemake's turn
# (mcgrpo.core.study_turns): once no other Snakemake's job writes the folder, it removes its own outputs and opens
# its log (Snakemake leaves them alone: train_helpers.smk), then runs. Each Snakemake is one session; its SLURM
# jobs, and the Snakemakes SLURM starts for them, inherit the variable.
os.environ.setdefault(study_turns.SESSION, uuid.uuid4().hex)
os.environ.setdefault(study_turns.SNAKEMAKE, f"{socket.gethostname()} {os.getpid()}")  # whether it still runs
os.environ.setdefault(study_turns.STARTED, repr(time.time()))  # before its DAG: what another wrote since is kept
IN_TURN = f"$PYTHON -m {study_turns.__name__} --folder {{params.folder:q}} --log {{log:q}} --outputs {{output:q}} --"


def study_folder(wildcards):
    """The job's study's folder, whose turn it runs in (IN_TURN)."""
    return S[wildcards.study].folder


def data_file(name):
    """An input function: the data file `name` of the job's study (pool.parquet, eval_<set>.parquet)."""
    return lambda wildcards: f"{study_of(wildcards).data}/{name}"


def eval_files(wildcards):
    study = study_of(wildcards)
    return [f"{study.data}/eval_{name}.parquet" for name in study.cfg["task"]["eval_sets"]]


def model_of(wildcards):
    """The job's study's model: the tiny model's folder, or the reference to a model with a source."""
    return study_of(wildcards).model


def before_dag(prepare):
    """What must happen before Snakemake builds the DAG, the first point where its targets and --forcerun are known:
    the study folders' links into the store are checked (check_links), then rule names among the targets become
    files (rule_targets)."""

    def prepare_dag(*args, **kwargs):
        settings = workflow.dag_settings
        check_links(settings)
        settings.targets = rule_targets(settings.targets)
        return prepare(*args, **kwargs)

    return prepare_dag


def check_links(settings):
    """A study folder that is a link elsewhere, or under one, whose links into the store were made relative to its
    spelled path stops the workflow, naming it (mcgrpo.core.layout.check_links_resolve), unless its link_study job is
    forced (--forcerun link_study, or its store.parquet, or --forceall), which links them again."""
    forced = set(settings.forcerun) | {os.path.abspath(target) for target in settings.forcerun}
    with stopping():
        for name, study in S.items():
            store = os.path.abspath(apply_wildcards(STORE, {"study": name}))
            relinking = not ANALYSIS_ONLY and (settings.forceall or bool({"link_study", store} & forced))
            layout.check_links_resolve(study.cfg, study.keys, relinking)


def rule_targets(targets):
    """Rules keyed by a wildcard (every rule that writes a study's or the store's files) stay targets by name, as
    they were when a study was the whole DAG: `snakemake prereg_lock`, `snakemake prepare_data`, `snakemake
    train`. A rule name among the targets becomes the first output of each of its jobs in this DAG (each study's, or
    each stored file's); Snakemake itself takes no rule with wildcards as a target. Where the rule has no job left
    (every study locked: LOCKED), there is nothing to do, and the run says so rather than build its default target
    (an empty target list), the whole workflow, or name the existing files as having no rule."""
    keyed = [t for t in targets if workflow.is_rule(t) and workflow.get_rule(t).has_wildcards()]
    if not keyed:
        return targets
    files = frozenset(path for t in targets for path in (rule_files(workflow.get_rule(t)) if t in keyed else [t]))
    if not files:
        why = (" (every study is locked: a lock is written once, never again; a changed plan is a dated "
               "plan.amendments entry)" if "prereg_lock" in keyed else "")
        print(f"Nothing to be done: {', '.join(keyed)} has no job in this workflow{why}", file=sys.stderr)
        sys.exit(0)
    return files


def rule_files(rule):
    """The first output of each job of `rule` in this DAG: its wildcards take every value they may have here."""
    values = {"study": S, "run": RUNS, "calibration": CALIBRATIONS, "data": DATA_SETS, "model": MODELS}
    names = sorted(rule.wildcard_names)
    pattern = str(rule.output[0])
    files = [apply_wildcards(pattern, dict(zip(names, combo)))
             for combo in itertools.product(*(values.get(name, ()) for name in names))]
    return [path for path in files if rule.is_producer(path)]


workflow._prepare_dag = before_dag(workflow._prepare_dag)


def folder_of(name, level=0):
    """A params function: the folder holding input `name` (`level` folders further up)."""
    return lambda wildcards, input: str(Path(input[name]).parents[level])


def numbered(name, index):
    """The name of the `index`-th (from 0) of several rules of one kind: name, name_2, name_3, ..."""
    return name if index == 0 else f"{name}_{index + 1}"


def _alternatives(names):
    return "|".join(re.escape(name) for name in names) or "(?!)"


wildcard_constraints:
    run=_alternatives(RUNS),
    study=_alternatives(S),
    calibration=_alternatives(CALIBRATIONS),
    data=_alternatives(DATA_SETS),
    model=_alternatives(MODELS),


def cpu_resource(key):
    """A data or analysis job's resources.cpu `key`, from the job's study."""
    return lambda wildcards: cfg_of(wildcards)["resources"]["cpu"][key]


def threads_of(wildcards):
    return cfg_of(wildcards)["recipe"]["threads"]


CPU_RESOURCES = {key: cpu_resource(key) for key in ("mem_mb", "runtime")}
# What every GPU job asks for (train, calibrate, gradient_tests): one definition, so that no GPU rule can be left
# with another's request. The profiles send the same three rules to the GPU partition (tests/test_profiles.py).
GPU_RESOURCES = {key: (lambda wildcards, key=key: cfg_of(wildcards)["resources"]["train"][key])
                 for key in ("gpu", "cpus_per_gpu", "mem_mb")}


# Analysis rules read the run Parquet files only; `--config analysis_only=True` leaves out every rule that
# could write them, so these never wait on (or trigger) a training job.
ANALYSIS_RESOURCES = dict(CPU_RESOURCES)
