"""Time the full analysis at the paper's scale on synthetic results (not a test).

Builds (once, under --root) 35 studies with 1,668 runs in all, each run with 17 evaluations of
200 problems x 8 samples, an iterations log, run.json, the study's B and a preregistration lock;
then runs every analysis step but figures (drift, every contrast with its crossed bootstrap,
equal time, curves, group and stage breakdowns, tables) study after study in one process, and
prints the time of each step and the total.

    python bench/analysis_scale.py [--root /tmp/mcgrpo_scale] [--studies 35]
    python bench/analysis_scale.py --tiny --studies 2 --root /tmp/x   # the smoke test's scale: seconds
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

# As Snakemake runs every analysis rule (threads: 1): one BLAS thread, set before numpy loads BLAS.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "workflow"))
from mcgrpo.core import config as study_config, layout, manifest, store, study_runs  # noqa: E402
from mcgrpo import studies  # noqa: E402
from mcgrpo.analysis import prereg, steps  # noqa: E402
from mcgrpo.core.clock import STAGES  # noqa: E402

RUNS, ITERATIONS, B = 1668, 200, 17_000_000
STEPS = ("drift", "contrasts", "robustness", "curves", "breakdown", "tables")


@dataclasses.dataclass(frozen=True)
class Scale:
    """The paper's scale by default; `--tiny` shrinks every axis (the smoke test's)."""
    evals: int = 17
    problems: int = 200
    samples: int = 8
    resamples: int = 10_000
    max_seeds: int | None = None


TINY = Scale(evals=3, problems=6, samples=2, resamples=100, max_seeds=2)


def designs(studies: int, scale: Scale) -> list[tuple[int, int]]:
    """(arms, seeds) per study, cycling 2x24, 3x16, 4x12; the last trimmed so 35 studies hold 1,668 runs."""
    out = [((2, 24), (3, 16), (4, 12))[i % 3] for i in range(studies)]
    excess = sum(a * s for a, s in out) - round(RUNS * studies / 35)
    arms, seeds = out[-1]
    out[-1] = (arms, seeds - excess // arms)
    return [(a, min(s, scale.max_seeds or s)) for a, s in out]


def study_config_for(i: int, arms: int, seeds: int, scale: Scale) -> dict:
    names = ["outcome", *(f"arm{j}" for j in range(1, arms))]
    cfg = {"study": f"S{i + 1}", "seeds": list(range(seeds)),
           # each arm its own learning rate: arms that train the same thing are refused
           "arms": {n: ({"lr": {"scale": 1.0 + j}} if j else {}) for j, n in enumerate(names)},
           "evaluation": {"samples": scale.samples, "per_budget": scale.evals - 1},
           "budget": {"tokens": B}, "analysis": {"base": "outcome", "resamples": scale.resamples},
           "plan": {"primary": [{"id": f"T{j}", "a": n, "b": "outcome", "family": "H1", "direction": "less"}
                                for j, n in enumerate(names[1:], 1)],
                    "secondary": [{"id": f"U{j}", "a": n, "b": "outcome", "basis": "time"}
                                  for j, n in enumerate(names[1:], 1)]}}
    return studies.validate(cfg)


def write_run(folder: Path, rng: np.random.Generator, skill: float, started: datetime, scale: Scale,
              config: dict) -> None:
    """One run's evals, samples, iterations and run.json (`config`: its run config), shaped like the trainer's: each
    evaluation after the first iteration to reach its share of B, at that iteration's counts (as the run reader holds
    a run to: mcgrpo.analysis.runs)."""
    EVALS, PROBLEMS, SAMPLES = scale.evals, scale.problems, scale.samples
    it_tokens = np.cumsum(rng.integers(B // ITERATIONS, 11 * B // (10 * ITERATIONS), ITERATIONS))  # reaches B
    stage = rng.uniform(0.5, 2.0, (ITERATIONS, len(STAGES)))
    it_seconds = stage.sum(axis=1).cumsum()
    after = np.searchsorted(it_tokens, np.arange(1, EVALS) * B / (EVALS - 1)) + 1  # iterations before each evaluation
    tokens, seconds, updates = (np.r_[0, values[after - 1]]
                                for values in (it_tokens, it_seconds, np.arange(1, ITERATIONS + 1)))
    difficulty = rng.normal(0, 1.5, PROBLEMS)
    p = 1 / (1 + np.exp(-(difficulty[None, :] + skill * np.linspace(0, 1, EVALS)[:, None] - 0.5)))
    correct = rng.random((EVALS, PROBLEMS, SAMPLES)) < p[:, :, None]
    boxed = rng.random(correct.shape) < 0.9
    e, q, s = np.meshgrid(np.arange(EVALS), np.arange(PROBLEMS), np.arange(SAMPLES), indexing="ij")
    samples = pd.DataFrame({"eval_index": e.ravel(), "eval_set": "heldout", "problem_id": np.char.add(
        "p", q.ravel().astype(str)), "sample": s.ravel(), "correct_default": correct.ravel(),
        "correct_strict": (correct & boxed).ravel(), "boxed": boxed.ravel(), "truncated": False,
        "length": rng.integers(50, 380, correct.size)})
    acc = correct.mean(axis=(1, 2))
    evals = pd.DataFrame({"eval_index": np.arange(EVALS), "tokens_total": tokens, "iteration": updates,
                          "updates": updates, "train_seconds": seconds, "eval_set": "heldout", "acc_default": acc,
                          "acc_strict": (correct & boxed).mean(axis=(1, 2)), "boxed_share": boxed.mean(axis=(1, 2)),
                          "truncated_share": 0.0, "mean_length": 200.0, "eval_seconds": 30.0})
    groups = rng.multinomial(8, [0.3, 0.2, 0.5], ITERATIONS)
    iterations = pd.DataFrame({
        "iteration": np.arange(ITERATIONS), "tokens_total": it_tokens, "tokens_rollout": it_tokens,
        "tokens_continuation": 0, "tokens_discarded": 0, "updates": np.arange(1, ITERATIONS + 1), "lr": 1e-6,
        "loss": 0.0, "grad_norm": 1.0, "reward_default": 0.4, "reward_strict": 0.35,
        "groups_all_wrong": groups[:, 0], "groups_all_correct": groups[:, 1], "groups_mixed": groups[:, 2],
        "truncated_share": 0.0, "mean_length": 200.0, "cand_pred_mean": np.nan, "chosen_pred_mean": np.nan,
        "prompts_distinct": np.arange(1, ITERATIONS + 1) * 8,
        **{f"t_{n}": stage[:, j] for j, n in enumerate(STAGES)}, "train_seconds": it_seconds})
    store.write_parquet(evals, folder / "evals.parquet")
    store.write_parquet(samples, folder / "samples.parquet")
    store.write_parquet(iterations, folder / "iterations.parquet")
    store.write_json({"started": started.isoformat(), "finished": True, "config": config}, folder / "run.json")
    manifest.seal(folder, ["evals.parquet", "samples.parquet", "iterations.parquet", "run.json"], "")


def build(root: Path, studies: int, scale: Scale) -> list[tuple[dict, Path]]:
    """The synthetic results tree (written once; a tree already there is reused)."""
    out, rng = [], np.random.default_rng(0)
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    for i, (arms, seeds) in enumerate(designs(studies, scale)):
        cfg = study_config_for(i, arms, seeds, scale)
        results = root / cfg["study"]
        out.append((cfg, results))
        if (results / "prereg.lock.json").exists():
            continue
        store.write_parquet(pd.DataFrame({"model": ["synthetic"], "iteration": [0], "tokens_generated": [B // 48],
                                          "B": [B]}), results / "calibration" / "budget.parquet")
        # As link_study leaves a study: each run stored once (here under <root>/_store), linked from the study's
        # runs/<arm>/seed<N> and listed in runs/store.parquet, the index every analysis step reads the runs from.
        rows = {}
        for j, arm in enumerate(cfg["arms"]):
            for seed in cfg["seeds"]:
                stored = root / "_store" / cfg["study"] / f"{arm}-seed{seed}"
                write_run(stored, rng, 1.0 - 0.1 * j, start + timedelta(hours=1), scale,
                          study_config.run_config(cfg, arm, seed))
                layout.link(layout.study_run(results, arm, seed), stored)
                rows[arm, seed] = (stored.name, "synthetic")
        layout.write_index(study_runs.index_path(results), rows)
        store.write_json(prereg.make_lock(cfg, now=start), results / "prereg.lock.json")
        print(f"built {cfg['study']}: {arms} arms x {seeds} seeds", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=Path("/tmp/mcgrpo_scale"))
    p.add_argument("--studies", type=int, default=35)
    p.add_argument("--tiny", action="store_true", help="a few problems, samples, seeds and resamples: seconds")
    args = p.parse_args()
    scale = TINY if args.tiny else Scale()
    t0 = time.perf_counter()
    tree = build(args.root, args.studies, scale)
    runs = sum(len(c["arms"]) * len(c["seeds"]) for c, _ in tree)
    print(f"tree: {len(tree)} studies, {runs} runs ({time.perf_counter() - t0:.0f} s to build or find)")
    spent = dict.fromkeys(STEPS, 0.0)
    start, cpu = time.perf_counter(), time.process_time()
    for cfg, results in tree:
        for name in STEPS:
            t = time.perf_counter()
            getattr(steps, f"{name}_step")(copy.deepcopy(cfg), results)
            spent[name] += time.perf_counter() - t
    total, cpu = time.perf_counter() - start, time.process_time() - cpu
    contrasts = sum(len(store.read_parquet(r / "analysis" / "contrasts.parquet")) for _, r in tree)
    print("; ".join(f"{k} {v:.1f} s" for k, v in spent.items()))
    print(f"full analysis (no figures): {total:.1f} s wall, {cpu:.1f} s CPU for {len(tree)} studies, {runs} runs, "
          f"{contrasts} contrasts with a {scale.resamples:,}-resample crossed bootstrap each")


if __name__ == "__main__":
    main()
