"""The GPU check in one command (issue 45): on a machine whose python's torch sees CUDA, with the interpreter it is
started with and nothing installed, it

  1. measures the card's ceilings (bf16 matmul TFLOP/s, device copy TB/s: bench/gpu/ceilings.py);
  2. times the paper-shape iteration (Qwen2.5-1.5B's architecture with random weights, 8 prompts x 8 completions,
     120-token prompts, 380 new tokens; bench/iteration_profile.py --shape) with the new decode (a static cache,
     the step replayed as a CUDA graph), the old one (dynamic) and torch.compile's (reduce-overhead);
  3. runs the GPU tests (tests/test_gpu_decode.py, tests/test_static_decode.py, tests/test_policy.py);
  4. times the paper-shape update alone, the trainer's and the variants an item-2 change would choose from, and
     where one update's kernel time goes (bench/gpu/update_profile.py);
  5. prints one table (generate and update against Table 14 and against the floor the ceilings give) and writes
     bench/gpu/measured/<date>-<card>.json.

A step whose packages this interpreter lacks is reported with their names and not run (the tests need jsonschema
and its dependencies: docs/performance.md says which wheels to carry). Every step has a cap and the caps add up
to STEPS_SECONDS, within 8 minutes of device time with the interpreter's start.

  python3 bench/gpu/run.py [--out DIR]
  python bench/gpu/run.py --dry-run [--work DIR]   # a CPU: the same steps at a tiny shape (compile left out)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAPER = {"generate": 604 / 584, "update": 940 / 584}  # Table 14, H200: seconds per iteration
STEPS_SECONDS = 420  # the caps below add up to this
PROFILE = [sys.executable, str(ROOT / "bench" / "iteration_profile.py"), "--shape", "qwen2.5-1.5b"]
TESTS = ["tests/test_gpu_decode.py", "tests/test_gpu_update.py", "tests/test_static_decode.py", "tests/test_policy.py"]
# import name -> what to carry (the tests import the package, whose config checks need jsonschema)
PACKAGES = {"torch": "torch", "transformers": "transformers", "pytest": "pytest", "jsonschema": "jsonschema",
            "referencing": "referencing", "rpds": "rpds-py", "jsonschema_specifications": "jsonschema-specifications"}
SHAPE_NEEDS = ("torch", "transformers")


@dataclass
class Step:
    name: str
    what: str
    argv: list[str]
    cap: int                    # seconds
    needs: tuple[str, ...]      # import names
    figures: Path | None = None  # the step's --json file
    run: bool = True            # False: a GPU step that a dry run only lists


def plan(work: Path, dry_run: bool) -> list[Step]:
    """The steps, in order: what the table needs most first (a step that overruns never starves the new decode)."""
    tiny = ["--device", "cpu", "--layers", "1", "--vocab", "1000", "--narrow", "8", "--limit", "4"]
    shape = tiny + ["--warmup", "0", "--iterations", "1"] if dry_run else ["--device", "cuda", "--warmup", "1",
                                                                         "--iterations", "3"]
    old = [] if dry_run else ["--iterations", "2"]  # 12 s an iteration (issue 45): one fewer
    ceilings = ["--size", "256", "--copy-gib", "0.01"] if dry_run else []

    def decode(mode: str, cap: int, extra=(), run: bool = True) -> Step:
        return Step(f"decode {mode}", f"paper shape, decode {mode}: generate and update timed",
                    PROFILE + [*shape, *extra, "--decode", mode, "--json", str(work / f"{mode}.json")], cap,
                    SHAPE_NEEDS, work / f"{mode}.json", run)
    return [
        Step("ceilings", "bf16 matmul and device copy", [sys.executable, str(ROOT / "bench" / "gpu" / "ceilings.py"),
             *ceilings, "--json", str(work / "ceilings.json")], 30, ("torch",), work / "ceilings.json"),
        decode("static" if dry_run else "graph", 110),
        Step("gpu tests", " ".join(TESTS), [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
             "not slow", *TESTS], 60, tuple(PACKAGES)),
        Step("update", "paper shape, the update alone: the trainer's, microbatch 64, each change undone; by kernel kind",
             [sys.executable, str(ROOT / "bench" / "gpu" / "update_profile.py"), *(tiny if dry_run else []),
              "--json", str(work / "update.json")], 60, SHAPE_NEEDS, work / "update.json"),
        decode("dynamic", 75, old),
        decode("compile", 85, run=not dry_run),
    ]


def lacking(step: Step) -> list[str]:
    return [PACKAGES[m] for m in step.needs if importlib.util.find_spec(m) is None]


DRY_RUN_SLACK = 10  # a dry run's caps, times this: a CPU shared at nice 19 (CI's make test-all) took the update's 61 s


def run_steps(steps: list[Step], work: Path, total: int, slack: int = 1) -> dict[str, str]:
    """Each step to be run, from the repository root, within its cap and what is left of `total` (each times
    `slack`: the caps budget a GPU's device time, and a dry run only shows that every step runs): name -> ok,
    or why not."""
    outcome, deadline = {}, time.monotonic() + total * slack
    for step in steps:
        left, missing = int(deadline - time.monotonic()), lacking(step)
        if not step.run or missing or left <= 0:
            outcome[step.name] = ("planned (dry run)" if not step.run else
                                  f"not run: needs {', '.join(missing)}" if missing else "skipped: no time left")
            print(f"== {step.name}: {outcome[step.name]}", flush=True)
            continue
        cap = min(step.cap * slack, left)
        print(f"\n== {step.name}: {step.what} (at most {cap} s)", flush=True)
        if step.figures:
            step.figures.unlink(missing_ok=True)  # a reused --work never shows an earlier run's figures
        start = time.monotonic()
        try:
            done = subprocess.run(step.argv, cwd=ROOT, timeout=cap, capture_output=True, text=True)
            print(done.stdout[-4000:] + done.stderr[-2000:], flush=True)
            outcome[step.name] = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
            if step.name == "gpu tests":
                summary = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?)\s*=*$", done.stdout, re.M)
                outcome[step.name] += f": {summary[-1] if summary else 'no summary'}"
        except subprocess.TimeoutExpired:
            outcome[step.name] = f"stopped at its {cap} s cap"
        print(f"== {step.name}: {outcome[step.name]} in {time.monotonic() - start:.0f} s", flush=True)
    return outcome


def figures(step: Step) -> dict | None:
    return json.loads(step.figures.read_text()) if step.figures and step.figures.exists() else None


def floors(shape: dict, ceilings: dict) -> dict[str, float]:
    """Seconds per iteration no implementation beats on this card: generation reads the bf16 weights once per
    decode step (at the copy ceiling), the update does 6 x parameters x tokens FLOP (at the matmul ceiling)."""
    params, limit = shape["parameters"], shape["limit"]
    return {"generate": 2 * params * (limit - 1) / (ceilings["copy_tbps"] * 1e12),
            "update": 6 * params * 64 * (shape["prompt"] + limit) / (ceilings["matmul_tflops"] * 1e12)}


def table(steps: list[Step], outcome: dict[str, str]) -> tuple[str, dict]:
    """The comparison, and the figures for the measured file."""
    by_name = {s.name: s for s in steps}
    ceilings = figures(by_name["ceilings"])
    decodes = [s for s in steps if s.name.startswith("decode ")]
    lines = [f"{'':<30}{'s/it':>9}{'paper':>9}{'x paper':>9}{'floor':>9}{'x floor':>9}"]
    found: dict = {}
    if ceilings:
        lines.insert(0, f"ceilings: bf16 matmul {ceilings['matmul_tflops']:.1f} TFLOP/s, device copy "
                        f"{ceilings['copy_tbps']:.2f} TB/s")
        found.update(ceilings)
    for step in decodes:
        shape = figures(step)
        if shape is None:
            lines.append(f"{'generate, ' + step.name:<30}  {outcome[step.name]}")
            continue
        floor = floors(shape, ceilings) if ceilings else {}
        for stage in ("generate", "update") if step is decodes[0] else ("generate",):
            measured = shape["seconds"][stage]
            cells = f"{measured:>9.3f}{PAPER[stage]:>9.3f}{measured / PAPER[stage]:>9.2f}"
            if stage in floor:
                cells += f"{floor[stage]:>9.3f}{measured / floor[stage]:>9.1f}"
            lines.append(f"{stage + ', ' + step.name:<30}{cells}")
            found[f"{stage}_s" if step is decodes[0] else f"generate_{step.name.split()[1]}_s"] = measured
    if "generate_s" in found and "generate_dynamic_s" in found:
        found["generate_before_s"] = found.pop("generate_dynamic_s")
        lines.append(f"{'iteration, new decode':<30}{found['generate_s'] + found['update_s']:>9.3f}"
                     f"{sum(PAPER.values()):>9.3f}")
    lines += update_lines(figures(by_name["update"]), ceilings, found)
    lines.append(f"GPU tests: {outcome['gpu tests']}")
    return "\n".join(lines), found


def update_lines(update: dict | None, ceilings: dict | None, found: dict) -> list[str]:
    """The update step's rows (each variant against the paper and the floor) and its kernel time by kind."""
    if update is None:
        return []
    floor = floors(update, ceilings)["update"] if ceilings else None
    lines = []
    for name, measured in update["update_s"].items():
        if not isinstance(measured, float):
            lines.append(f"{'update alone, ' + name:<30}  {measured}")
            continue
        cells = f"{measured:>9.3f}{PAPER['update']:>9.3f}{measured / PAPER['update']:>9.2f}"
        lines.append(f"{'update alone, ' + name:<30}{cells}" + (f"{floor:>9.3f}{measured / floor:>9.1f}" if floor
                                                                 else ""))
    kinds = sorted(update["by_kind_s"].items(), key=lambda kv: -kv[1])
    lines.append("one update by kernel kind (s): " + ", ".join(f"{k} {v:.3f}" for k, v in kinds))
    found.update(update_variants_s=update["update_s"], update_by_kind_s=update["by_kind_s"])
    return lines


def versions() -> dict:
    import torch
    import transformers
    card = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu"
    return {"card": card, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "date": datetime.date.today().isoformat()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="on a CPU: every step a CPU can take, at a tiny shape")
    p.add_argument("--work", type=Path, default=None, help="where the steps' figures go (default: a new temp dir)")
    p.add_argument("--out", type=Path, default=None, help="where the measured JSON goes (default: "
                   "bench/gpu/measured on a GPU, the work dir in a dry run)")
    args = p.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="mcgrpo-gpu-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    steps = plan(work, args.dry_run)
    print(f"bench/gpu/run.py{' --dry-run' if args.dry_run else ''}: {len(steps)} steps within {STEPS_SECONDS} s, "
          f"with {sys.executable}, figures in {work}")
    for step in steps:
        print(f"  {step.name:<16} at most {step.cap:>3} s  {step.what}{'' if step.run else '  [not in a dry run]'}")
    if importlib.util.find_spec("torch") is None:
        print("cannot run: this interpreter has no torch", file=sys.stderr)
        return 2
    import torch
    if not args.dry_run and not torch.cuda.is_available():
        print(f"cannot run: torch {torch.__version__} sees no CUDA GPU; --dry-run on a CPU", file=sys.stderr)
        return 2
    outcome = run_steps(steps, work, STEPS_SECONDS, DRY_RUN_SLACK if args.dry_run else 1)
    text, found = table(steps, outcome)
    print("\n" + text)
    measured = {**versions(), **found, "steps": outcome}
    out = args.out or (work if args.dry_run else ROOT / "bench" / "gpu" / "measured")
    out.mkdir(parents=True, exist_ok=True)
    name = out / f"{measured['date']}-{re.sub(r'[^A-Za-z0-9]+', '-', measured['card']).strip('-').lower()}.json"
    name.write_text(json.dumps(measured, indent=1) + "\n")
    print(f"wrote {name}")
    return 0 if all(o.startswith("ok") or o.startswith("planned") for o in outcome.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
