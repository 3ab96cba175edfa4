# Shared paths and helpers. The package does the work; rules only wire files together.
import contextlib
import itertools
import json
import re
import shlex
import shutil
import signal
import sys

import pandas as pd
import psutil
from pathlib import Path
from snakemake.io import apply_wildcards
from snakemake.jobs import Job
from snakemake.logging import logger
from snakemake.settings.types import DeploymentMethod

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
from mcgrpo.core import config as study_config  # noqa: E402
from mcgrpo.core import layout, manifest, run_claims
from mcgrpo import studies
from mcgrpo import programme as programmes
from mcgrpo.core.errors import ConfigError, stopping

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
        self.named = layout.first_names(layout.run_keys(cfg))
        # The analysis reads the whole study config, less the switches saying how Snakemake was invoked, the images
        # its jobs run in and where training reports to (where a job runs or reports is no part of what it
        # computes, nor of the config_hash of what it writes).
        self.json = json.dumps({k: v for k, v in cfg.items()
                                if k not in ("analysis_only", "allow_templates", "containers", "tracking")},
                               sort_keys=True)
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
# Inside a SLURM job Snakemake runs twice more: the jobstep executor in the batch step and, under srun, the one
# that runs the rule. SLURM's --signal, `scancel --signal` and a preemption's SIGTERM reach only that second
# Snakemake, the step's task (seen with proctrack/cgroup): SIGUSR1's default action would end it, the step and the
# trainer with it, and SIGTERM's handler (Snakemake's scheduler installs it after this file is read) waits for the
# running jobs, which never hear of it and are killed when the grace time ends. Here both signals are passed on to
# the processes it started: the trainer, which the rule execs, checkpoints and exits.


def pass_on(signum, frame):
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child.send_signal(signum)


def passing_on_termination(graceful):
    """Snakemake's graceful SIGTERM handler, passing the signal on first."""

    def exit_gracefully(self, *args):
        pass_on(signal.SIGTERM, None)
        graceful(self, *args)

    return exit_gracefully


if workflow.remote_exec:
    from snakemake.scheduling.job_scheduler import JobScheduler

    signal.signal(signal.SIGUSR1, pass_on)
    JobScheduler.exit_gracefully = passing_on_termination(JobScheduler.exit_gracefully)


def data_file(name):
    """An input function: the data file `name` of the job's study (pool.parquet, eval_<set>.parquet)."""
    return lambda wildcards: f"{study_of(wildcards).data}/{name}"


def eval_files(wildcards):
    study = study_of(wildcards)
    return [f"{study.data}/eval_{name}.parquet" for name in study.cfg["task"]["eval_sets"]]


def model_of(wildcards):
    """The job's study's model: the tiny model's folder, or the reference to a model with a source."""
    return study_of(wildcards).model


def calibration_json(wildcards):
    return json.dumps(study_config.calibration_config(cfg_of(wildcards)), sort_keys=True)


def keeping_claimed_runs(remove):
    """Snakemake removes a job's outputs and log before it runs it. A train job's are kept while another process
    holds the run's claim (it is training the run: its log is being written) or has reserved it (its job started,
    its trainer not yet claiming), or when the run was missing as this DAG was built and is finished now (another
    process trained it meanwhile): the trainer then waits for the claim and trains only what is not finished
    (mcgrpo.core.run_claims). Otherwise this process reserves the run, then removes them."""

    async def remove_existing_output(self):
        if self.rule.name == "train":
            folder = Path(self.output[0]).parent
            other = run_claims.reserve(folder)
            if other is not None:
                logger.info(f"{folder}: claimed by {run_claims.describe(other) if other else 'another process'}; "
                            f"its files are kept and this job waits for it")
                return
            if self.dag.reason(self).missing_output and run_claims.finished(folder):
                logger.info(f"{folder}: finished by another process since this DAG was built; kept as it is")
                return
        await remove(self)

    remove_existing_output.keeps_claimed_runs = True
    return remove_existing_output


if not getattr(Job.remove_existing_output, "keeps_claimed_runs", False):  # once per process (mcgrpo.dryrun: many)
    Job.remove_existing_output = keeping_claimed_runs(Job.remove_existing_output)


def rule_targets(prepare):
    """Rules keyed by a wildcard (every rule that writes a study's or the store's files) stay targets by name, as
    they were when a study was the whole DAG: `snakemake prereg_lock`, `snakemake prepare_data`, `snakemake
    train`. Before the DAG is built, a rule name among the targets becomes the first output of each of its jobs
    in this DAG (each study's, or each stored file's); Snakemake itself takes no rule with wildcards as a target."""

    def prepare_dag(*args, **kwargs):
        targets = workflow.dag_settings.targets
        if any(workflow.is_rule(t) and workflow.get_rule(t).has_wildcards() for t in targets):
            workflow.dag_settings.targets = frozenset(
                path for t in targets
                for path in (rule_files(workflow.get_rule(t)) if workflow.is_rule(t) and workflow.get_rule(t).has_wildcards()
                             else [t]))
        return prepare(*args, **kwargs)

    return prepare_dag


def rule_files(rule):
    """The first output of each job of `rule` in this DAG: its wildcards take every value they may have here."""
    values = {"study": S, "run": RUNS, "calibration": CALIBRATIONS, "data": DATA_SETS, "model": MODELS}
    names = sorted(rule.wildcard_names)
    pattern = str(rule.output[0])
    files = [apply_wildcards(pattern, dict(zip(names, combo)))
             for combo in itertools.product(*(values.get(name, ()) for name in names))]
    return [path for path in files if rule.is_producer(path)]


workflow._prepare_dag = rule_targets(workflow._prepare_dag)


def run_files(name):
    """An input function: every stored run's file `name` (evals.parquet, samples.parquet, run.json, ...) of the
    job's study. An analysis-only run never relinks: it reads the runs the study's links point at, as trained (the
    prereg table names any stale one)."""

    def files(wildcards):
        return study_files(S[wildcards.study], name)

    return files


def study_files(study, name):
    if ANALYSIS_ONLY:
        return [str(layout.study_run(study.folder, arm, seed) / name) for arm, seed in study_config.runs(study.cfg)]
    return [f"{RUN.format(run=key)}/{name}" for key in study.named]


def reported(path, kind):
    """`path` marked for `snakemake --report`, captioned by workflow/report/<kind>_<name>.rst."""
    name = Path(path).stem
    return report(path, caption=f"../workflow/report/{kind}_{name}.rst", category=kind.capitalize() + "s",
                  labels={"name": name.replace("_", " ")})


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


def run_json(wildcards):
    """One run's effective config: editing another arm, the analysis or any name never reruns this run."""
    study, (arm, seed) = RUNS[wildcards.run]
    return json.dumps(study_config.run_config(S[study].cfg, arm, seed), sort_keys=True)


def run_label(wildcards):
    """study/arm: what the run's messages and trackers call it."""
    study, (arm, seed) = RUNS[wildcards.run]
    return f"{study}/{arm}"


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


def train_runtime(wildcards, input):
    """Minutes for a training job, from the calibrated B once it exists (dry-runs use the config's guess)."""
    budget = Path(input.budget)
    B = int(pd.read_parquet(budget)["B"].iloc[0]) if budget.exists() else None
    return study_config.train_runtime(cfg_of(wildcards), B)


def train_slurm_extra(wildcards):
    """sbatch's options of a training job. SIGUSR1 to the job step 90 s plus a checkpoint's time before the time
    limit, whatever the runtime (mcgrpo.core.config.signal_lead; a runtime too short for it is refused before any
    job). The SLURM log opened for appending: a job that requeues itself after progress (mcgrpo.train.requeue)
    runs again under its id, into the same log (%j.log), and keeps every attempt's lines. A rule resource, not a
    default one, so that overriding default-resources (partition, account) keeps it."""
    return f"--signal=USR1@{study_config.signal_lead(cfg_of(wildcards))} --open-mode=append"


def slurm_name(wildcards):
    """<study>.train.<arm>.s<seed>: the train job's SLURM comment (squeue -o %k), set by the job as it starts
    (the executor plugin names jobs by its run's UUID and owns --job-name and --comment)."""
    study, (arm, seed) = RUNS[wildcards.run]
    return f"{study}.train.{arm}.s{seed}"


# Analysis rules read the run Parquet files only; `--config analysis_only=True` leaves out every rule that
# could write them, so these never wait on (or trigger) a training job.
ANALYSIS_RESOURCES = dict(CPU_RESOURCES)
# Snakemake calls a job with existing outputs and a missing, unproducible input up to date; an analysis-only
# run must instead refuse to report on runs that were never trained.
MISSING = [path for name, study in S.items()
           for path in [STORE.format(study=name), *(p for file in RUN_FILES for p in study_files(study, file))]
           if not Path(path).exists()] if ANALYSIS_ONLY else []
if MISSING:
    raise WorkflowError(f"Missing input files for the analysis (analysis_only=True never trains): {', '.join(MISSING)}")


def lock_input(wildcards):
    """The lock is an input where it exists or can be made; an analysis-only rerun of a study that was never
    locked labels every contrast exploratory instead of failing."""
    lock = LOCK.format(study=wildcards.study)
    return [lock] if not ANALYSIS_ONLY or Path(lock).exists() else []



def analysis_step(verb):
    """The params of analysis rule `verb` (rules/drift.smk's template runs `$PYTHON -m mcgrpo <verb>`); the
    study's JSON is a function, since it holds braces that are never wildcards."""
    return dict(verb=verb, study=lambda wildcards: S[wildcards.study].json, results=folder_of("store", 1),  # runs/store.parquet
                sealed=sealed_runs)


def sealed_runs(wildcards):
    """A checksum trigger: one value that changes whenever a stored run's file does, even restored with `cp -p` to
    an mtime older than the analysis (Snakemake's mtime trigger misses it). A param of wildcards alone is recorded
    and compared on every invocation; the analysis then reruns and names the file. Only files touched since they
    were sealed are hashed (mcgrpo.core.manifest.fingerprint)."""
    return manifest.fingerprint([Path(path).parent for path in study_files(S[wildcards.study], "manifest.json")])


# The targets: figures and tables of the study, each marked for `snakemake --report report.html`.
FIGURE_NAMES = ("accuracy_vs_tokens", "accuracy_vs_time", "difference_from_base", "per_seed", "stage_seconds",
                "drift")
TABLE_NAMES = ("headline", "robustness", "prereg", "contrasts", "equal_bases", "pass_at_k", "budget_share", "stage_seconds", "groups",
               "drift", "extrapolation", "power")
FIGURES = [f"{R}/figures/{name}.png" for name in FIGURE_NAMES]
FIGURE_PDFS = [f"{R}/figures/{name}.pdf" for name in FIGURE_NAMES]  # vector copies, for papers
TABLES = [f"{R}/tables/{name}.{ext}" for name in TABLE_NAMES for ext in ("csv", "md", "html")]

# The gradient tests and their prediction table and figure, for the studies that have them.
GRADIENT_STUDIES = [name for name, study in S.items() if study.gradient]
GRADIENT_TESTS = f"{R}/analysis/gradient_tests.parquet"
PREDICTION_TARGETS = [f"{R}/figures/prediction.png"] + [f"{R}/tables/{name}.{ext}" for name in ("efficiency", "prediction")
                                                        for ext in ("csv", "md", "html")]
# Alignment along training (evaluation.alignment), for the studies that measure it.
ALIGNMENT_STUDIES = [name for name, study in S.items() if study.alignment]
ALIGNMENT_TARGETS = [f"{R}/analysis/alignment.parquet"] + [f"{R}/tables/alignment.{ext}" for ext in ("csv", "md", "html")]
# The three verifier rules side by side on every evaluation's samples (verifier.rule).
VERIFIER_TABLES = [f"{R}/tables/verifiers.{ext}" for ext in ("csv", "md", "html")]
SUMMARY, SUMMARY_RST = f"{R}/summary.md", f"{R}/summary.rst"


def gradient_tests_input(wildcards):
    """The study's gradient tests, an input of the analysis that reads them, where it has them."""
    return [GRADIENT_TESTS.format(study=wildcards.study)] if wildcards.study in GRADIENT_STUDIES else []


def targets(study):
    """Every file the analysis of `study` ends in."""
    one = [*FIGURES, *TABLES, *(PREDICTION_TARGETS if study in GRADIENT_STUDIES else []),
           *(ALIGNMENT_TARGETS if study in ALIGNMENT_STUDIES else []), *VERIFIER_TABLES, SUMMARY]
    return [path.format(study=study) for path in one]


# The programme summary: every study's preregistered verdicts in one table (mcgrpo.programme).
PROGRAMME_SUMMARY = ([f"{PROGRAMME.folder}/verdicts.parquet", f"{PROGRAMME.folder}/verdicts.md"]
                     if PROGRAMME else [])
TARGETS = [path for study in S for path in targets(study)] + PROGRAMME_SUMMARY
# The report opens with the results summary once there is one (else with the study's description alone).
_SUMMARY_RST = SUMMARY_RST.format(study=FIRST["study"])
REPORT_TEXT = (str(Path(_SUMMARY_RST).resolve()) if not PROGRAMME and Path(_SUMMARY_RST).exists()
               else "workflow/mcgrpo/analysis/report_intro.rst")


def clear_finished_checkpoints():
    """Called once every job has succeeded (the Snakefile's onsuccess). A finished run keeps its checkpoint until
    Snakemake has accepted its outputs: if SLURM ends a job just after the trainer wrote them (a time limit inside
    the kill grace), Snakemake deletes them and the retry writes them again from the final checkpoint instead of
    training from zero."""
    for key in RUNS:
        run = Path(RUN.format(run=key))
        if all((run / name).exists() for name in RUN_FILES):
            shutil.rmtree(run / "checkpoints", ignore_errors=True)
