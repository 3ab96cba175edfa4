"""How much a neighbour's load slows the study's jobs: a warm start and a training run, alone and then beside a
CPU load that keeps one core busy (a plain Python loop this bench starts, bounded in time).

Each job runs as its rule runs it (`python -m mcgrpo <verb>` with Snakemake's thread variables), on a shrunken
copy of a study (fewer warm-start steps, a small token budget), so the whole bench takes a few minutes:

    python bench/under_load.py [--study config/config.yaml] [--warm-steps 300] [--tokens 30000] [--load 1]
                               [--wait-policy default PASSIVE ACTIVE]

It prints each job's seconds alone and loaded, the training run's own wall and CPU clocks of its training stages
(run.json), and last, on a line of its own,
`ratio under load / quiet: X`, the larger of the two jobs' ratios (the goal: at most 2).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow"))

from mcgrpo import studies  # noqa: E402
from mcgrpo.core import config as study_config  # noqa: E402
from mcgrpo.core import store  # noqa: E402
from mcgrpo.core.budget import budget_table  # noqa: E402
from mcgrpo.core.openmp import describe  # noqa: E402

JOBS = ("warm start", "training run")
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def _env(threads: int, policy: str) -> dict:
    """The environment Snakemake gives a job with `threads` threads (see snakemake/shell.py), with OpenMP's
    wait policy `policy` ("default": the project's, mcgrpo/core/openmp.py; a policy given adds no spin)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "workflow"))
    env.pop("GOMP_SPINCOUNT", None)
    env.pop("OMP_WAIT_POLICY", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    env.update({k: str(threads) for k in ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                          "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")})
    return env


def _run(args: list[str], threads: int, policy: str = "default") -> float:
    """Wall seconds of one `python -m mcgrpo` job (it must succeed)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mcgrpo", *args], env=_env(threads, policy), capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"mcgrpo {args[0]} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def jobs(cfg: dict, work: Path) -> dict[str, tuple[list[str], int]]:
    """The warm start and one training run of the study's base arm, as their rules call them."""
    data, model = work / "data", work / "model"
    run = study_config.run_config(cfg, cfg["analysis"]["base"] or next(iter(cfg["arms"])), cfg["seeds"][0])
    warm = json.dumps({"model": cfg["model"], "task": cfg["task"]})
    return {
        "warm start": (["warm-start", "--model-json", warm, "--data", str(data), "--threads", "2",
                        "--out", str(model)], 2),
        "training run": (["train", "--run-json", json.dumps(run), "--model", str(model), "--data", str(data),
                          "--budget", str(work / "budget.parquet"), "--out", str(work / "run")],
                         cfg["recipe"]["threads"]),
    }


def timed(cfg: dict, work: Path, load: int, seconds: float, policy: str) -> dict[str, float]:
    """Seconds of each job, with `load` busy loops running beside it, and the training run's own two clocks of
    its training stages (run.json: wall and process CPU seconds), under "train wall" and "train CPU"."""
    out = {}
    for name, (args, threads) in jobs(cfg, work).items():
        spinners = [subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=seconds)]) for _ in range(load)]
        try:
            out[name] = _run(args, threads, policy)
        finally:
            for s in spinners:
                s.kill()
                s.wait()
        if name == "training run":
            clock = json.loads((work / "run" / "run.json").read_text())["clock"]
            out["train wall"], out["train CPU"] = clock["train_seconds"], clock["train_cpu_seconds"]
            subprocess.run(["rm", "-rf", str(work / "run")], check=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", default=str(ROOT / "config" / "config.yaml"))
    p.add_argument("--warm-steps", type=int, default=300, help="warm-start steps (the default study: 1500)")
    p.add_argument("--tokens", type=int, default=30_000, help="the training run's budget B")
    p.add_argument("--load", type=int, default=1, help="busy loops beside each job (cores kept busy)")
    p.add_argument("--max-seconds", type=float, default=900, help="the busy loops stop after this in any case")
    p.add_argument("--wait-policy", nargs="+", default=["default"], metavar="POLICY",
                   help="OMP_WAIT_POLICY values to compare side by side, the first for the ratio line; 'default': "
                        f"the project's, {describe({})} (the default)")
    args = p.parse_args()
    cfg = studies.load(args.study)
    cfg["model"]["warm_start"]["steps"] = args.warm_steps
    with tempfile.TemporaryDirectory(prefix="mcgrpo-under-load-") as tmp:
        work = Path(tmp)
        _run(["prepare-data", "--task-json", json.dumps(cfg["task"]), "--out", str(work / "data")], 1)
        store.write_parquet(budget_table(cfg["model"]["name"], [], args.tokens, "config"), work / "budget.parquet")
        results = {policy: (timed(cfg, work, 0, args.max_seconds, policy),
                            timed(cfg, work, args.load, args.max_seconds, policy)) for policy in args.wait_policy}
    print(f"{os.cpu_count()} cores; {args.load} busy loop(s) beside each loaded job")
    for policy, (quiet, loaded) in results.items():
        for name in quiet:  # the two jobs, then the training stages' wall and CPU clocks side by side
            label = f"default ({describe({})})" if policy == "default" else f"OMP_WAIT_POLICY={policy}"
            print(f"{label:<52} {name:<13} alone {quiet[name]:6.1f} s   "
                  f"loaded {loaded[name]:6.1f} s   ratio {loaded[name] / quiet[name]:.2f}")
    quiet, loaded = results[args.wait_policy[0]]
    print(f"ratio under load / quiet: {max(loaded[n] / quiet[n] for n in JOBS):.2f}")


if __name__ == "__main__":
    main()
