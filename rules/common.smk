# Shared paths and helpers. The package does the work; rules only wire files together.
import contextlib
import json
import shlex
import shutil
import signal
import sys

import pandas as pd
import psutil
from pathlib import Path
from snakemake.settings.types import DeploymentMethod

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
from mcgrpo.core import config as study_config  # noqa: E402
from mcgrpo.core import layout, manifest
from mcgrpo import studies
from mcgrpo.core.errors import stopping

# `snakemake screen --config screen_arm=NAME` (rules/screen.smk): a target's argument, not part of the study, so
# it leaves the config (and the command line's entries the study is read from) before the study is checked.
SCREEN_ARM = config.pop("screen_arm", None)
# Before any job: the --config values read as YAML by the schema, each config file read again strictly
# (Snakemake's YAML loader keeps the last of a key given twice; a template needs the command line's opt-in), then
# the schema (one line per error, naming the key) and the cross-references. A user error prints its message
# alone and exits 2; a bug keeps its traceback.
with stopping():
    studies.from_snakemake(config, workflow.configfiles,
                           [e for e in workflow.config_settings.config_args or [] if not e.startswith("screen_arm=")])
# A study over several warm-start bases (`bases`) runs one base's study per invocation: --config base=N, else the
# first (mcgrpo.core.config.base_study); `mcgrpo pool-bases` reads them all.
with stopping():
    study_config.select_base(config)

R = str(layout.study_dir(config))
EVAL_SETS = list(config["task"]["eval_sets"])
# Data, the tiny model (no source: a folder built by warm_start), B and every run are shared by the studies that
# name the same ones, under results/_shared/ (mcgrpo.core.layout); a model with a source is the study's own
# reference file. The study's runs/<arm>/seed<N> and calibration/ link into the store (rule link_study).
DATA = str(layout.data_dir(config))
MODEL = str(layout.model_path(config))
BUDGET = str(layout.budget_path(config))
EQUAL_ITERATIONS = config["budget"].get("iterations") is not None  # B counts iterations, not tokens
ALIGNMENT = bool(config["evaluation"].get("alignment"))  # the gradient tests along training
# The study's stored runs, each by its name in the store and the first (arm, seed) naming it (what its messages and
# trackers call it): two arms of a study that train the same run share one.
RUN_KEYS = layout.run_keys(config)
NAMED = layout.first_names(RUN_KEYS)
RUN = f"{layout.runs_dir(config)}/{{run}}"
RUN_FILES = ("iterations.parquet", "evals.parquet", "samples.parquet", "prompts.parquet", "run.json",
             "alignment.parquet",  # the gradient tests along training (evaluation.alignment): empty if unmeasured
             "manifest.json")  # written last: every file above with its sha256 (mcgrpo.core.manifest)
STORE = f"{R}/runs/store.parquet"  # which stored run each (arm, seed) is; written with the links (link_study)
LOCK = f"{R}/prereg.lock.json"
# The analysis reads the whole study config, less the switches saying how Snakemake was invoked, the images its
# jobs run in and where training reports to (where a job runs or reports is no part of what it computes, nor of
# the config_hash of what it writes).
STUDY_JSON = json.dumps({k: v for k, v in config.items()
                         if k not in ("analysis_only", "allow_templates", "containers", "tracking")},
                        sort_keys=True)
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


def run_files(name):
    """Every stored run's file `name` (evals.parquet, samples.parquet, run.json, ...). An analysis-only run never
    relinks: it reads the runs the study's links point at, as trained (the prereg table names any stale one)."""
    if config["analysis_only"]:
        return [str(layout.study_run(R, arm, seed) / name) for arm, seed in study_config.runs(config)]
    return [f"{RUN.format(run=key)}/{name}" for key in NAMED]


def reported(path, kind):
    """`path` marked for `snakemake --report`, captioned by workflow/report/<kind>_<name>.rst."""
    name = Path(path).stem
    return report(path, caption=f"../workflow/report/{kind}_{name}.rst", category=kind.capitalize() + "s",
                  labels={"name": name.replace("_", " ")})


def folder_of(name, level=0):
    """A params function: the folder holding input `name` (`level` folders further up)."""
    return lambda wildcards, input: str(Path(input[name]).parents[level])


wildcard_constraints:
    run="|".join(NAMED),


def run_json(wildcards):
    """One run's effective config: editing another arm, the analysis or any name never reruns this run."""
    return json.dumps(study_config.run_config(config, *NAMED[wildcards.run]), sort_keys=True)


def run_label(wildcards):
    """study/arm: what the run's messages and trackers call it."""
    return f"{config['study']}/{NAMED[wildcards.run][0]}"


TRAIN_RESOURCES = config["resources"]["train"]
CPU_RESOURCES = config["resources"]["cpu"]
# What every GPU job asks for (train, calibrate, gradient_tests): one definition, so that no GPU rule can be left
# with another's request. The profiles send the same three rules to the GPU partition (tests/test_profiles.py).
GPU_RESOURCES = {key: TRAIN_RESOURCES[key] for key in ("gpu", "cpus_per_gpu", "mem_mb")}


def train_runtime(wildcards, input):
    """Minutes for a training job, from the calibrated B once it exists (dry-runs use the config's guess)."""
    budget = Path(input.budget)
    B = int(pd.read_parquet(budget)["B"].iloc[0]) if budget.exists() else None
    return study_config.train_runtime(config, B)


def train_slurm_extra(wildcards):
    """sbatch's options of a training job. SIGUSR1 to the job step 90 s plus a checkpoint's time before the time
    limit, whatever the runtime (mcgrpo.core.config.signal_lead; a runtime too short for it is refused before any
    job). The SLURM log opened for appending: a job that requeues itself after progress (mcgrpo.train.requeue)
    runs again under its id, into the same log (%j.log), and keeps every attempt's lines. A rule resource, not a
    default one, so that overriding default-resources (partition, account) keeps it."""
    return f"--signal=USR1@{study_config.signal_lead(config)} --open-mode=append"


def slurm_name(wildcards):
    """<study>.train.<arm>.s<seed>: the train job's SLURM comment (squeue -o %k), set by the job as it starts
    (the executor plugin names jobs by its run's UUID and owns --job-name and --comment)."""
    arm, seed = NAMED[wildcards.run]
    return f"{config['study']}.train.{arm}.s{seed}"


# Analysis rules read the run Parquet files only; `--config analysis_only=True` leaves out every rule that
# could write them, so these never wait on (or trigger) a training job.
ANALYSIS_RESOURCES = dict(mem_mb=CPU_RESOURCES["mem_mb"], runtime=CPU_RESOURCES["runtime"])
# Snakemake calls a job with existing outputs and a missing, unproducible input up to date; an analysis-only
# run must instead refuse to report on runs that were never trained.
ANALYSIS_INPUTS = [STORE, *(path for name in RUN_FILES for path in run_files(name))]
MISSING = [path for path in ANALYSIS_INPUTS if not Path(path).exists()] if config["analysis_only"] else []
if MISSING:
    raise WorkflowError(f"Missing input files for the analysis (analysis_only=True never trains): {', '.join(MISSING)}")
# The lock is an input where it exists or can be made; an analysis-only rerun of a study that was never
# locked labels every contrast exploratory instead of failing.
LOCK_INPUT = [LOCK] if not config["analysis_only"] or Path(LOCK).exists() else []


def analysis_step(verb):
    """The params of analysis rule `verb` (rules/drift.smk's template runs `$PYTHON -m mcgrpo <verb>`); the
    study's JSON is a function, since it holds braces that are never wildcards."""
    return dict(verb=verb, study=lambda wildcards: STUDY_JSON, results=folder_of("store", 1),  # runs/store.parquet
                sealed=sealed_runs)


def sealed_runs(wildcards):
    """A checksum trigger: one value that changes whenever a stored run's file does, even restored with `cp -p` to
    an mtime older than the analysis (Snakemake's mtime trigger misses it). A param of wildcards alone is recorded
    and compared on every invocation; the analysis then reruns and names the file. Only files touched since they
    were sealed are hashed (mcgrpo.core.manifest.fingerprint)."""
    return manifest.fingerprint([Path(path).parent for path in run_files("manifest.json")])


# The targets: figures and tables of the study, each marked for `snakemake --report report.html`.
FIGURE_NAMES = ("accuracy_vs_tokens", "accuracy_vs_time", "difference_from_base", "per_seed", "stage_seconds",
                "drift")
TABLE_NAMES = ("headline", "robustness", "prereg", "contrasts", "equal_bases", "pass_at_k", "budget_share", "stage_seconds", "groups",
               "drift", "extrapolation", "power")
FIGURES = [f"{R}/figures/{name}.png" for name in FIGURE_NAMES]
FIGURE_PDFS = [f"{R}/figures/{name}.pdf" for name in FIGURE_NAMES]  # vector copies, for papers
TABLES = [f"{R}/tables/{name}.{ext}" for name in TABLE_NAMES for ext in ("csv", "md", "html")]

# The gradient tests and their prediction table and figure, when the study has them.
GRADIENT_CONFIG = study_config.gradient_tests_config(config)
GRADIENT_TESTS = [f"{R}/analysis/gradient_tests.parquet"] if GRADIENT_CONFIG else []
PREDICTION_TARGETS = ([f"{R}/figures/prediction.png"] + [f"{R}/tables/{name}.{ext}" for name in ("efficiency", "prediction")
                                                          for ext in ("csv", "md", "html")]) if GRADIENT_CONFIG else []
# Alignment along training (evaluation.alignment), when the study measures it.
ALIGNMENT_TARGETS = ([f"{R}/analysis/alignment.parquet"] + [f"{R}/tables/alignment.{ext}" for ext in ("csv", "md", "html")]
                     if ALIGNMENT else [])
# The three verifier rules side by side on every evaluation's samples (verifier.rule).
VERIFIER_TABLES = [f"{R}/tables/verifiers.{ext}" for ext in ("csv", "md", "html")]
SUMMARY, SUMMARY_RST = f"{R}/summary.md", f"{R}/summary.rst"
# The report opens with the results summary once there is one (else with the study's description alone).
REPORT_TEXT = str(Path(SUMMARY_RST).resolve()) if Path(SUMMARY_RST).exists() else "workflow/mcgrpo/analysis/report_intro.rst"


def clear_finished_checkpoints():
    """Called once every job has succeeded (the Snakefile's onsuccess). A finished run keeps its checkpoint until
    Snakemake has accepted its outputs: if SLURM ends a job just after the trainer wrote them (a time limit inside
    the kill grace), Snakemake deletes them and the retry writes them again from the final checkpoint instead of
    training from zero."""
    for key in NAMED:
        run = Path(RUN.format(run=key))
        if all((run / name).exists() for name in RUN_FILES):
            shutil.rmtree(run / "checkpoints", ignore_errors=True)
