"""`python -m mcgrpo <verb>`: what every Snakemake rule calls, one verb per stage."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from mcgrpo import __version__
from mcgrpo.core import config as study_config, store
from mcgrpo import studies
from mcgrpo.core.errors import CheckpointMismatch, Interrupted


def _config(args) -> dict:
    if args.config_json:
        return studies.validate(json.loads(args.config_json))
    return studies.load(args.config)


def prepare_data(args) -> None:
    """The pool and evaluation sets, and the log of what filtering and deduplication removed."""
    from mcgrpo import data
    task = json.loads(args.task_json)
    prepared = data.prepare(task)
    data.write(prepared.pool, prepared.evals, args.out, study_config.config_hash(task), prepared.removed)
    print("\n".join(prepared.lines()))
    print(f"pool: {len(prepared.pool)} problems; " + ", ".join(f"eval_{k}: {len(v)}" for k, v in prepared.evals.items()))


def data_summary(args) -> None:
    """`mcgrpo data FILE`: check a data file before spending GPU time on it."""
    from mcgrpo.data import summary
    try:
        s = summary.summarize(args.path, args.format, args.against or [], args.math_verify)
    except ImportError as e:
        raise ValueError(str(e)) from None
    print(json.dumps(s, sort_keys=True) if args.json else summary.render(s))


def _data_arguments(v: argparse.ArgumentParser) -> None:
    from mcgrpo.data.summary import FORMATS
    v.add_argument("path", help="a .jsonl, .parquet or .json file, or a folder of per-problem .json files")
    v.add_argument("--format", choices=FORMATS, help="the record fields (default: detected)")
    v.add_argument("--against", action="append", metavar="EVAL_FILE",
                   help="count the problems that deduplication would remove against this evaluation file (repeatable)")
    v.add_argument("--math-verify", action="store_true", help="also check gold solutions with math-verify")
    v.add_argument("--json", action="store_true", help="print one JSON object")


def verify(args) -> None:
    """`mcgrpo verify`: what each verifier reads from a completion and its verdict, and with
    `--claims` every arithmetic claim, so that a user can see why a completion scored as it did."""
    from mcgrpo.core.claims import claims, verdict
    from mcgrpo.core.verify import explain
    for where, text, reference in _verify_inputs(args):
        out = explain(text, reference)
        if args.claims:
            out["claims"] = [verdict(c) for c in claims(text)]
        if args.json:
            print(json.dumps(out))
            continue
        print(f"{where}: reference {reference!r}")
        for name in ("default", "strict"):
            print(f"  {name}: answer {out[name + '_answer']!r} -> {'correct' if out[name + '_correct'] else 'wrong'}")
        for c in out.get("claims", []):
            holds = "cannot parse" if c["true"] is None else "true" if c["true"] else "false"
            print(f"  claim {c['text']!r}: value {c['value']}, {holds}")


def _verify_inputs(args):
    """(where, text, reference) from TEXT and --reference, or from each line of --file."""
    if (args.text is None) == (args.file is None):
        raise ValueError("give either TEXT with --reference, or --file FILE (one JSON object per line)")
    if args.text is not None:
        if args.reference is None:
            raise ValueError("TEXT needs --reference, the answer it is checked against")
        yield "text", args.text, args.reference
        return
    with open(args.file, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{args.file} line {n}: not JSON ({e.msg})") from None
            if not (isinstance(item, dict) and isinstance(item.get("text"), str)
                    and isinstance(item.get("reference"), (str, int, float))):
                raise ValueError(f"{args.file} line {n}: needs an object with string 'text' and 'reference'")
            yield f"{args.file} line {n}", item["text"], str(item["reference"])


def _verify_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("text", nargs="?", help="a completion (or use --file)")
    v.add_argument("--reference", help="the reference answer TEXT is checked against")
    v.add_argument("--file", help="one JSON object per line, with 'text' and 'reference'")
    v.add_argument("--claims", action="store_true", help="also list each arithmetic claim and its verdict")
    v.add_argument("--json", action="store_true", help="print one JSON object per input")


def resolve_model(args) -> None:
    """The reference file that training loads a model with a source from (checked to be there)."""
    from mcgrpo.train.models import sources
    model = json.loads(args.model_json)
    where = sources.resolve(model["source"])
    store.write_json({"name": model["name"], "source": model["source"], "resolved": where}, args.out)
    print(f"model {model['name']}: {where['location']}" + (f" ({where['gguf_file']})" if where["gguf_file"] else ""))


def warm_start(args) -> None:
    """The tiny model, supervised on a fresh corpus of training-side problems."""
    import torch
    from mcgrpo import data
    from mcgrpo.train import models
    from mcgrpo.train.models.warm_start import warm_start as run_warm_start
    spec = json.loads(args.model_json)
    torch.set_num_threads(args.threads)
    ws = dict(spec["model"]["warm_start"])
    corpus = data.warm_start_corpus(spec["task"], ws.pop("problems"), ws.pop("levels"), ws["seed"], args.data)
    model, tokenizer = run_warm_start(corpus, spec["model"]["tiny"], **ws)
    models.save(model, tokenizer, args.out)


def calibrate(args) -> None:
    """B from the calibration run (the run config of the calibration arm), or as the config gives it."""
    import torch
    from mcgrpo.core import budget as budget_rules
    from mcgrpo import data
    from mcgrpo.train import models
    from mcgrpo.train.trainer import Trainer
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
    from mcgrpo.train import checkpoint, models
    from mcgrpo import data
    from mcgrpo.data.checks import check_run_data
    from mcgrpo.train.trainer import Trainer
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


def _step(name: str):
    """The verb of one analysis rule: mcgrpo.analysis.steps.<name>_step on the study config and results folder."""
    def verb(args) -> None:
        from mcgrpo.analysis import steps
        getattr(steps, f"{name}_step")(_config(args), Path(args.results))
    verb.__doc__ = f"analysis: the {name} step (mcgrpo.analysis.steps.{name}_step)"
    return verb


def prereg_lock(args) -> None:
    """Lock the study's plan before training; an existing lock is never replaced (amend the plan instead)."""
    from mcgrpo.analysis import prereg
    out = Path(args.out)
    if out.exists():
        raise ValueError(f"{out}: the study is locked already; a changed plan needs a dated "
                         f"plan.amendments entry, not a new lock")
    lock = prereg.make_lock(_config(args))
    store.write_json(lock, out)
    print(f"locked {lock['material']['study']} at {lock['locked_at']}: sha256 {lock['sha256']}")


def contrast(args) -> None:
    """Recompute one contrast from a results folder alone; print it and write it as Parquet."""
    from mcgrpo.analysis import steps
    from mcgrpo.analysis.tables import to_markdown
    table, paired = steps.contrast(Path(args.results), args.a, args.b, args.basis, args.metric,
                                   args.eval_set, args.margin, args.resamples, args.bootstrap_seed)
    row = table.iloc[0]
    out = Path(args.out or Path(args.results) / "analysis" / "contrast" /
               f"{row['contrast']}.{row['basis']}.{row['metric']}.{row['eval_set']}.parquet")
    store.write_parquet(table, out)
    store.write_parquet(paired, out.with_name(out.name.replace(".parquet", ".paired.parquet")))
    print(to_markdown(paired[["seed", "value_a", "value_b", "diff", "at", "at_b", "moved", "clamped"]]))
    print(to_markdown(table[["contrast", "label", "basis", "metric", "eval_set", "n", "mean", "ci_low", "ci_high",
                             "p", "p_holm", "tost_p", "noninferior", "crossed_low", "crossed_high",
                             "seeds_higher"]]))
    print(f"written: {out}")


def _contrast_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("--a", required=True, help="the arm under test")
    v.add_argument("--b", required=True, help="the arm it is compared with (the base)")
    v.add_argument("--basis", default="tokens", help="tokens, updates, time or time_c (default tokens)")
    v.add_argument("--metric", default="acc_default",
                   help="acc_<verifier> or pass@<k>_<verifier>, e.g. acc_strict, pass@8_default")
    v.add_argument("--eval-set", help="the evaluation set (default: the only one)")
    v.add_argument("--margin", type=float, help="equivalence margin (default: the lock's, else 0.02)")
    v.add_argument("--resamples", type=int, default=10_000, help="crossed-bootstrap resamples")
    v.add_argument("--bootstrap-seed", type=int, default=0)


VERBS = {"data": data_summary, "verify": verify, "prepare-data": prepare_data, "resolve-model": resolve_model, "warm-start": warm_start, "calibrate": calibrate, "train": train,
         "prereg-lock": prereg_lock, "contrast": contrast,
         **{name: _step(name) for name in ("drift", "contrasts", "curves", "breakdown", "figures", "tables")}}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mcgrpo", description=__doc__)
    sub = p.add_subparsers(dest="verb", required=True)
    # Each stage gets only the part of the config that can change its output, so that editing, say, the
    # analysis margin never makes Snakemake rerun training.
    spec = {"prepare-data": ("--task-json", "the study's task: block"),
            "resolve-model": ("--model-json", "the study's model: block"),
            "warm-start": ("--model-json", "the study's model: and task: blocks"),
            "calibrate": ("--run-json", "the calibration run's effective config"),
            "train": ("--run-json", "the run's effective config (mcgrpo.core.config.run_config)")}
    for name in VERBS:
        v = sub.add_parser(name)
        if name in spec:
            v.add_argument(spec[name][0], required=True, help=spec[name][1])
        elif name not in ("data", "verify", "contrast"):
            src = v.add_mutually_exclusive_group(required=True)
            src.add_argument("--config", help="study config YAML")
            src.add_argument("--config-json", help="the validated study config as JSON")
        for opt in ("--out", "--pool", "--model", "--data", "--budget", "--results"):
            v.add_argument(opt)
        v.add_argument("--threads", type=int, default=1)
    _data_arguments(sub.choices["data"])
    _verify_arguments(sub.choices["verify"])
    _contrast_arguments(sub.choices["contrast"])
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
    # On stderr, so that what a verb prints (`data --json`) can be piped as it is.
    print(f"mcgrpo {args.verb}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0
