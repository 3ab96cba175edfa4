# Shared paths and helpers. The package does the work; rules only wire files together.
import json
import sys

import pandas as pd
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
from mcgrpo.core import config as study_config  # noqa: E402
from mcgrpo import studies

# Before any job: the schema (one line per error, naming the key) and the cross-references it cannot express.
studies.validate(config)

R = f"{config['results_dir']}/{config['study']}"
ARMS = list(config["arms"])
SEEDS = [int(s) for s in config["seeds"]]
EVAL_SETS = list(config["task"]["eval_sets"])
# The tiny model (no source) is a folder built by warm_start; a model with a source is a reference file.
MODEL = f"{R}/models/{config['model']['name']}" + ("" if config["model"]["source"] is None else ".json")
BUDGET = f"{R}/calibration/budget.parquet"
RUN = f"{R}/runs/{{arm}}/seed{{seed}}"
RUN_FILES = ("iterations.parquet", "evals.parquet", "samples.parquet", "prompts.parquet", "run.json")
ALL_EVALS = [f"{R}/runs/{arm}/seed{seed}/evals.parquet" for arm, seed in study_config.runs(config)]
LOCK = f"{R}/prereg.lock.json"
# The analysis reads the whole study config, less the switch saying how Snakemake was invoked and the images
# its jobs run in (where a job runs is no part of what it computes, nor of the config_hash of what it writes).
STUDY_JSON = json.dumps({k: v for k, v in config.items() if k not in ("analysis_only", "containers")}, sort_keys=True)
ENV = "../workflow/envs/mcgrpo.yaml"


def run_files(name):
    """Every run's file `name` (evals.parquet, samples.parquet, run.json, ...)."""
    return [f"{R}/runs/{arm}/seed{seed}/{name}" for arm, seed in study_config.runs(config)]


def reported(path, kind):
    """`path` marked for `snakemake --report`, captioned by workflow/report/<kind>_<name>.rst."""
    name = Path(path).stem
    return report(path, caption=f"../workflow/report/{kind}_{name}.rst", category=kind.capitalize() + "s",
                  labels={"name": name.replace("_", " ")})


def folder_of(name, level=0):
    """A params function: the folder holding input `name` (`level` folders further up)."""
    return lambda wildcards, input: str(Path(input[name]).parents[level])


wildcard_constraints:
    arm="|".join(ARMS),
    seed=r"\d+",


def run_json(wildcards):
    """One run's effective config: editing another arm or the analysis never reruns this run."""
    return json.dumps(study_config.run_config(config, wildcards.arm, int(wildcards.seed)), sort_keys=True)


TRAIN_RESOURCES = config["resources"]["train"]
CPU_RESOURCES = config["resources"]["cpu"]


def train_runtime(wildcards, input):
    """Minutes for a training job, from the calibrated B once it exists (dry-runs use the config's guess)."""
    budget = Path(input.budget)
    B = int(pd.read_parquet(budget)["B"].iloc[0]) if budget.exists() else None
    return study_config.train_runtime(config, B)


# Analysis rules read the run Parquet files only; `--config analysis_only=True` leaves out every rule that
# could write them, so these never wait on (or trigger) a training job.
ANALYSIS_RESOURCES = dict(mem_mb=CPU_RESOURCES["mem_mb"], runtime=CPU_RESOURCES["runtime"])
# Snakemake calls a job with existing outputs and a missing, unproducible input up to date; an analysis-only
# run must instead refuse to report on runs that were never trained.
ANALYSIS_INPUTS = [BUDGET, *(path for name in ("evals.parquet", "samples.parquet", "iterations.parquet", "run.json")
                             for path in run_files(name))]
MISSING = [path for path in ANALYSIS_INPUTS if not Path(path).exists()] if config["analysis_only"] else []
if MISSING:
    raise WorkflowError(f"Missing input files for the analysis (analysis_only=True never trains): {', '.join(MISSING)}")
# The lock is an input where it exists or can be made; an analysis-only rerun of a study that was never
# locked labels every contrast exploratory instead of failing.
LOCK_INPUT = [LOCK] if not config["analysis_only"] or Path(LOCK).exists() else []


def analysis_step(verb):
    """The params of analysis rule `verb` (rules/drift.smk's template runs `python -m mcgrpo <verb>`); the
    study's JSON is a function, since it holds braces that are never wildcards."""
    return dict(verb=verb, study=lambda wildcards: STUDY_JSON, results=folder_of("budget", 1))


# The targets: figures and tables of the study, each marked for `snakemake --report report.html`.
FIGURE_NAMES = ("accuracy_vs_tokens", "accuracy_vs_time", "difference_from_base", "per_seed", "tokens_vs_time",
                "stage_seconds", "drift")
TABLE_NAMES = ("prereg", "contrasts", "equal_bases", "pass_at_k", "budget_share", "stage_seconds", "groups",
               "drift", "extrapolation")
FIGURES = [f"{R}/figures/{name}.png" for name in FIGURE_NAMES]
TABLES = [f"{R}/tables/{name}.{ext}" for name in TABLE_NAMES for ext in ("csv", "md", "html")]
