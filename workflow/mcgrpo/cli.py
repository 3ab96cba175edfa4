"""`python -m mcgrpo <verb>`: what every Snakemake rule calls, one verb per stage."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from mcgrpo import __version__, config as study_config, store
from mcgrpo.errors import CheckpointMismatch, Interrupted


def _config(args) -> dict:
    if args.config_json:
        return study_config.validate(json.loads(args.config_json))
    return study_config.load(args.config)


def prepare_data(args) -> None:
    from mcgrpo import data
    task = json.loads(args.task_json)
    pool, evals = data.build(task)
    data.write(pool, evals, args.out, study_config.config_hash(task))
    print(f"pool: {len(pool)} problems; " + ", ".join(f"eval_{k}: {len(v)}" for k, v in evals.items()))


def warm_start(args) -> None:
    """The tiny model, supervised on a fresh corpus of training-side problems."""
    import torch
    from mcgrpo import data, models
    from mcgrpo.models.warm_start import warm_start as run_warm_start
    spec = json.loads(args.model_json)
    torch.set_num_threads(args.threads)
    ws = dict(spec["model"]["warm_start"])
    corpus = data.warm_start_corpus(spec["task"], ws.pop("problems"), ws.pop("levels"), ws["seed"], args.data)
    model, tokenizer = run_warm_start(corpus, spec["model"]["tiny"], **ws)
    models.save(model, tokenizer, args.out)


def calibrate(args) -> None:
    """B from the calibration run (the run config of the calibration arm), or as the config gives it."""
    import torch
    from mcgrpo import budget as budget_rules, data, models
    from mcgrpo.trainer import Trainer
    run = json.loads(args.run_json)
    b = run["budget"]
    if b["tokens"] is not None:
        table = budget_rules.budget_table(run["model"]["name"], [], b["tokens"], "config")
    else:
        torch.set_num_threads(run["recipe"]["threads"])
        model, tokenizer = models.load(args.model)
        pool, _ = data.read(args.data, [])
        log = Trainer(run, model, tokenizer, pool, None, None).run(max_iterations=b["calibration_iterations"])
        totals = [row["tokens_total"] for row in log.iterations]
        per_iteration = [t - s for t, s in zip(totals, [0] + totals[:-1])]
        B = budget_rules.budget_from_tokens(per_iteration, b["multiplier"], b["round_to"])
        table = budget_rules.budget_table(run["model"]["name"], per_iteration, B, "calibrated")
    store.write_parquet(table, args.out, study_config.config_hash(run))
    print(f"B = {int(table['B'].iloc[0])} generated tokens ({table['source'].iloc[0]})")


def train(args) -> None:
    """One run (arm, seed): resume from its newest checkpoint, train to the budget, write its Parquet.

    SIGTERM or SIGUSR1 (what SLURM sends before a time limit or a preemption) makes the trainer checkpoint
    at the next iteration boundary and exit with status 75, so that Snakemake's retry resumes the run.
    """
    import signal

    import torch
    import transformers
    from mcgrpo import checkpoint, data, models
    from mcgrpo.data.checks import check_run_data
    from mcgrpo.trainer import Trainer
    run = json.loads(args.run_json)
    cfg_hash = study_config.config_hash(run)
    torch.set_num_threads(run["recipe"]["threads"])
    B = int(store.read_contract(args.budget, "budget")["B"].iloc[0])
    pool, evals = data.read(args.data, run["evaluation"]["sets"])
    check_run_data(pool, evals, run, args.data)
    model, tokenizer = models.load(args.model)
    out = Path(args.out)
    started = datetime.now(timezone.utc).isoformat()
    trainer = Trainer(run, model, tokenizer, pool, evals, B, checkpoint_dir=out / "checkpoints",
                      config_hash=cfg_hash)

    def request_stop(signum, frame):
        trainer.stop_requested = True

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, request_stop)
    log = trainer.run()
    for name, frame in log.frames().items():
        store.write_parquet(frame, out / f"{name}.parquet", cfg_hash)
    store.write_json({
        "config": run, "config_hash": cfg_hash, "B": B, "finished": True,
        "started": started, "ended": datetime.now(timezone.utc).isoformat(),
        "versions": {"mcgrpo": __version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "python": platform.python_version()},
        "hardware": {"device": str(model.device), "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                     "cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads()},
        "git_sha": store.git_sha(),
    }, out / "run.json")
    checkpoint.clear(out / "checkpoints")


def _analysis_inputs(args):
    from mcgrpo.contrasts import load_evals
    cfg = _config(args)
    results = Path(args.results)
    B = int(store.read_contract(results / "calibration" / "budget.parquet", "budget")["B"].iloc[0])
    return cfg, results, B, load_evals(results, list(cfg["arms"]), cfg["seeds"])


def drift(args) -> None:
    from mcgrpo.drift import drift_table
    cfg, results, _, evals = _analysis_inputs(args)
    store.write_parquet(drift_table(evals, cfg["analysis"]["drift_gap"]), results / "analysis" / "drift.parquet")


def contrasts(args) -> None:
    from mcgrpo.contrasts import build
    cfg, results, B, _ = _analysis_inputs(args)
    table, paired = build(results, study_config.pairs(cfg), cfg["seeds"], B, cfg["evaluation"]["sets"],
                          cfg["analysis"]["margin"])
    store.write_parquet(table, results / "analysis" / "contrasts.parquet")
    store.write_parquet(paired, results / "analysis" / "paired.parquet")


def figures(args) -> None:
    from mcgrpo.figures import accuracy_curves
    cfg, results, B, evals = _analysis_inputs(args)
    name = cfg["evaluation"]["sets"][0]
    accuracy_curves(evals, "tokens_total", B, results / "figures" / "accuracy_vs_tokens.png", eval_set=name)
    accuracy_curves(evals, "train_seconds", B, results / "figures" / "accuracy_vs_time.png", eval_set=name)


def tables(args) -> None:
    from mcgrpo.tables import write_table
    results = Path(args.results)
    table = store.read_contract(results / "analysis" / "contrasts.parquet", "contrasts")
    write_table(table, results / "tables" / "contrasts",
                ["contrast", "basis", "metric", "eval_set", "n", "mean", "ci_low", "ci_high", "p", "seeds_higher"])
    write_table(store.read_contract(results / "analysis" / "drift.parquet", "drift"), results / "tables" / "drift")


VERBS = {"prepare-data": prepare_data, "warm-start": warm_start, "calibrate": calibrate, "train": train,
         "drift": drift, "contrasts": contrasts, "figures": figures, "tables": tables}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mcgrpo", description=__doc__)
    sub = p.add_subparsers(dest="verb", required=True)
    # Each stage gets only the part of the config that can change its output, so that editing, say, the
    # analysis margin never makes Snakemake rerun training.
    spec = {"prepare-data": ("--task-json", "the study's task: block"),
            "warm-start": ("--model-json", "the study's model: and task: blocks"),
            "calibrate": ("--run-json", "the calibration run's effective config"),
            "train": ("--run-json", "the run's effective config (mcgrpo.config.run_config)")}
    for name in VERBS:
        v = sub.add_parser(name)
        if name in spec:
            v.add_argument(spec[name][0], required=True, help=spec[name][1])
        elif name != "tables":
            src = v.add_mutually_exclusive_group(required=True)
            src.add_argument("--config", help="study config YAML")
            src.add_argument("--config-json", help="the validated study config as JSON")
        for opt in ("--out", "--pool", "--model", "--data", "--budget", "--results"):
            v.add_argument(opt)
        v.add_argument("--threads", type=int, default=1)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    start = time.perf_counter()
    try:
        VERBS[args.verb](args)
    except Interrupted as e:
        print(f"mcgrpo {args.verb}: {e}; checkpoint written, rerun to resume", file=sys.stderr)
        return 75  # EX_TEMPFAIL: Snakemake's retry resumes from the checkpoint
    except (study_config.ConfigError, store.SchemaError, FileNotFoundError, ValueError,
            CheckpointMismatch) as e:
        print(f"mcgrpo {args.verb}: error: {e}", file=sys.stderr)
        return 2
    print(f"mcgrpo {args.verb}: done in {time.perf_counter() - start:.1f} s")
    return 0
