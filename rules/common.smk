# Shared paths and helpers. The package does the work; rules only wire files together.
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))
from mcgrpo import config as study_config  # noqa: E402

# Before any job: the schema (one line per error, naming the key) and the cross-references it cannot express.
study_config.validate(config)

R = f"{config['results_dir']}/{config['study']}"
ARMS = list(config["arms"])
SEEDS = [int(s) for s in config["seeds"]]
EVAL_SETS = list(config["task"]["eval_sets"])
MODEL = f"{R}/models/{config['model']['name']}"
BUDGET = f"{R}/calibration/budget.parquet"
RUN = f"{R}/runs/{{arm}}/seed{{seed}}"
RUN_FILES = ("iterations.parquet", "evals.parquet", "samples.parquet", "prompts.parquet", "run.json")
ALL_EVALS = [f"{R}/runs/{arm}/seed{seed}/evals.parquet" for arm, seed in study_config.runs(config)]
FIGURES = [f"{R}/figures/accuracy_vs_tokens.png", f"{R}/figures/accuracy_vs_time.png"]
TABLES = [f"{R}/tables/{name}.{ext}" for name in ("contrasts", "drift") for ext in ("csv", "md")]
STUDY_JSON = json.dumps(config, sort_keys=True)
ENV = "../workflow/envs/mcgrpo.yaml"


def folder_of(name, level=0):
    """A params function: the folder holding input `name` (`level` folders further up)."""
    return lambda wildcards, input: str(Path(input[name]).parents[level])


wildcard_constraints:
    arm="|".join(ARMS),
    seed=r"\d+",


def run_json(wildcards):
    """One run's effective config: editing another arm or the analysis never reruns this run."""
    return json.dumps(study_config.run_config(config, wildcards.arm, int(wildcards.seed)), sort_keys=True)
