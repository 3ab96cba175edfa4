# Shared paths and helpers. The package does the work; rules only wire files together.
import json
import sys

import pandas as pd
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
from mcgrpo import config as study_config  # noqa: E402

# Before any job: the schema (one line per error, naming the key) and the cross-references it cannot express.
study_config.validate(config)

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
# The analysis reads the whole study config, less the switch saying how Snakemake was invoked.
STUDY_JSON = json.dumps({k: v for k, v in config.items() if k != "analysis_only"}, sort_keys=True)
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
