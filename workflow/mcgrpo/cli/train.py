"""The verbs of mcgrpo/train: the model resolved or warm-started, B calibrated, one run trained, and the gradient
tests run (of a study, or to screen one arm before training)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys

from mcgrpo.cli.common import (_as_planned, _config, _files, _format, _json, _positive, _run, _seed, _stage,
                               _study_source, _threads, _tracking, _training_run, _typed)
from mcgrpo.cli.integrations import _train_run
from mcgrpo.core import clock, config as study_config, sealed, store


def _named_when_stopped(verb):
    """`verb` run inside job.named_when_stopped: a job with plugins to call and no trainer to checkpoint, whose log
    then names the plugin call a stop signal (SLURM's time limit) came during."""
    @functools.wraps(verb)
    def run(args) -> None:
        from mcgrpo.train import job
        with job.named_when_stopped():
            verb(args)
    return run


# What the stages that load a model read (the rules name the files).
MODEL = "the model folder or reference file"
DATA = "the study's data folder"


def resolve_model(args) -> None:
    """Write the reference file that training loads a model with a source from, checked to be there.

    The source is a hub id, a folder or a GGUF file (the study's model.source); nothing is downloaded here.

    Example:
      python -m mcgrpo resolve-model --model-json '{"name": "qwen2.5-1.5b", "source": "Qwen/Qwen2.5-1.5B"}' \\
        --out qwen2.5-1.5b.json
    """
    from mcgrpo.train.models import sources
    model = _json(args.model_json, "--model-json", ("name", "source"))
    study_config.validate_blocks({"model": model}, ("model",), "--model-json")
    where = sources.resolve(model["source"])
    store.write_json({"name": model["name"], "source": model["source"], "resolved": where}, args.out)
    print(f"model {model['name']}: {where['location']}" + (f" ({where['gguf_file']})" if where["gguf_file"] else ""))


def _resolve_model_arguments(v: argparse.ArgumentParser) -> None:
    _stage(v, "--model-json", "the study's model: block as JSON", {"--out": "the reference file to write"})


def warm_start(args) -> None:
    """Warm-start the tiny model on a fresh corpus of training-side problems, or copy the shipped checkpoint.

    Where the spec (the study's model and task blocks) is the one the shipped checkpoint was built from
    (mcgrpo.train.models.shipped), its files are copied byte for byte; --rebuild warm-starts anyway.
    `snakemake -n -p warm_start` prints the command the workflow runs.

    Example:
      python -m mcgrpo warm-start --model-json "$(cat spec.json)" --data data-arith --out model --threads 2
    """
    from mcgrpo.train.models import shipped
    spec = _json(args.model_json, "--model-json", ("model", "task"))
    study_config.validate_blocks(json.loads(json.dumps(spec)), ("model", "task"), "--model-json")  # a copy
    if not args.rebuild and shipped.matches(spec):  # before torch is imported: seconds, not half a minute
        shipped.copy_to(args.out)
        print(f"warm start: the shipped checkpoint of this model and task ({shipped.FOLDER.name}), copied")
        return
    import torch
    from pathlib import Path

    from mcgrpo import data
    from mcgrpo.train import models
    from mcgrpo.train.models.warm_start import warm_start as run_warm_start
    torch.set_num_threads(args.threads)
    ws = dict(spec["model"]["warm_start"])
    corpus = data.warm_start_corpus(spec["task"], ws.pop("problems"), ws.pop("levels"), ws["seed"], args.data)
    model, tokenizer = run_warm_start(corpus, spec["model"]["tiny"], **ws, study=spec)
    models.save(model, tokenizer, args.out)
    # what the folder is and holds, as the shipped one records it: every load holds the folder to it (shipped.held)
    store.write_json(shipped.describe(Path(args.out), spec, args.threads), Path(args.out) / shipped.BUILT_FROM)


def _warm_start_arguments(v: argparse.ArgumentParser) -> None:
    _stage(v, "--model-json", "the study's model: and task: blocks as JSON",
           {"--data": DATA, "--out": "the model folder to write"})
    v.add_argument("--threads", type=_threads, default=1, help="torch threads (default 1)")
    v.add_argument("--rebuild", action="store_true",
                   help="warm-start even where the shipped checkpoint is this model's (make tiny-model)")


@_named_when_stopped
def calibrate(args) -> None:
    """Write the budget B, from the calibration run or as the config gives it.

    The calibration run is the run config of the calibration arm; a study that gives B in tokens, or an
    equal-iteration study (its iterations), needs no calibration run. `snakemake -n -p calibrate` prints the
    command the workflow runs.

    Example:
      python -m mcgrpo calibrate --run-json "$(cat calibration.json)" --model model --data data-arith \\
        --out budget.parquet
    """
    import torch
    from mcgrpo.core import budget as budget_rules
    from mcgrpo import data
    from mcgrpo.train import models
    from mcgrpo.train.trainer import Trainer
    from mcgrpo.data.checks import check_run_data
    from mcgrpo.train.job import ran_as_planned
    run, imported = _run(args), set(sys.modules)  # the plugins' code, as the job checked it (ran_as_planned)
    b = run["budget"]
    pool, _ = data.read(args.data, [])
    check_run_data(pool, {}, run, args.data)  # a pool too small for one iteration fails here, before any run
    if b.get("iterations") is not None:
        table = budget_rules.budget_table(run["model"]["name"], [], b["iterations"], "iterations", unit="iterations")
    elif b["tokens"] is not None:
        table = budget_rules.budget_table(run["model"]["name"], [], b["tokens"], "config")
    else:
        torch.set_num_threads(run["recipe"]["threads"])
        model, tokenizer = models.load(args.model)
        log = Trainer(run, model, tokenizer, pool, None, None).run(max_iterations=b["calibration_iterations"])
        totals = [row["tokens_total"] for row in log.iterations]
        per_iteration = [t - s for t, s in zip(totals, [0] + totals[:-1])]
        B = budget_rules.budget_from_tokens(per_iteration, b["multiplier"], b["round_to"])
        table = budget_rules.budget_table(run["model"]["name"], per_iteration, B, "calibrated")
    ran_as_planned(run, imported)
    store.write_parquet(table, args.out, study_config.config_hash(run))
    B = budget_rules.from_table(table)
    print(f"B = {int(B)} {'generated tokens' if B.unit == 'tokens' else 'iterations'} ({table['source'].iloc[0]})")


def _calibrate_arguments(v: argparse.ArgumentParser) -> None:
    _stage(v, "--run-json", "the calibration run's effective config as JSON",
           {"--model": MODEL, "--data": DATA, "--out": "budget.parquet to write"})


def train(args) -> None:
    """Train one run (arm, seed) to the budget and write its Parquet files, resuming from its newest checkpoint.

    By hand: `mcgrpo train --config STUDY.yaml --arm A --seed N` trains the run where the workflow would
    (once `snakemake` has built the study's data, model and budget); --out puts it elsewhere.

    SIGTERM or SIGUSR1 (what SLURM sends before a time limit or a preemption) makes the trainer checkpoint
    at the next iteration boundary and exit with status 75; under SLURM an attempt that made progress first
    requeues its job, which resumes the run under its id (mcgrpo.train.requeue), and one without progress leaves it
    to Snakemake's retry. The final checkpoint stays (the workflow removes it once Snakemake has the outputs): a run ended by its job
    after finishing is written again from it, not trained again. Each attempt is logged and kept in run.json.
    A failure that is not a preemption is left in --failed-log, if given (mcgrpo.train.job).

    Example:
      python -m mcgrpo train --config config/config.yaml --arm mc_k4 --seed 1
    """
    from mcgrpo.train import job
    stops = job.Stops.catch()  # before the plugins are checked (imported): a preemption then still exits 75
    with clock.adopting():  # before any plugin starts a worker: one orphaned below the job stays on its CPU clock
        job.logged(args.failed_log, lambda: _train_run(*_training_run(args), _tracking(args), stops))


def _train_arguments(v: argparse.ArgumentParser) -> None:
    src = v.add_mutually_exclusive_group(required=True)
    src.add_argument("--run-json", help="the run's effective config as JSON (what the rule passes)")
    src.add_argument("--config", metavar="STUDY.yaml", help="by hand: the study config; with --arm and --seed")
    v.add_argument("--arm", type=_format("key"), help="with --config: the arm to train")
    v.add_argument("--seed", type=_seed, help="with --config: the seed")
    v.add_argument("--label", metavar="STUDY/ARM",
                   help="with --run-json: what messages and trackers call the run (the rule's study and arm; a stored "
                        "run is one run whichever studies name it)")
    from mcgrpo.train.tracking import BACKENDS
    v.add_argument("--tracking", choices=BACKENDS,
                   help="log every iteration and evaluation to TensorBoard or offline W&B, in <out>/tracking/ "
                        "(default: the study's `tracking`, else none)")
    _files(v, {"--model": "the model (default: the study's, as the workflow places it)",
               "--data": "the data folder (default: the study's, under results/_shared/data/)",
               "--budget": "budget.parquet (default: the study's, under results/_shared/calibrations/)",
               "--out": "the run folder (default: the run store's, results/_shared/runs/<hash>, which "
                        "results/<study>/runs/<arm>/seed<N> links to)",
               "--failed-log": "where a failure that is not a preemption leaves its traceback (the rule's)"})


GRADIENT_BLOCKS = ("task", "model", "engine", "recipe", "gradient_tests", "arms")  # gradient_tests_config's


@_named_when_stopped
def gradient_tests(args) -> None:
    """Run the gradient tests at the initial policy, one row per arm, batch and measure.

    What the gradient_tests rule runs for a study with a gradient_tests block (paper 2.4, A, H.3); `snakemake -n -p
    gradient_tests` prints its command.

    Example:
      python -m mcgrpo gradient-tests --run-json "$(cat gradient_tests.json)" --model model --data data-arith \\
        --out gradient_tests.parquet
    """
    import torch
    from mcgrpo import data
    from mcgrpo.train import gradients, models
    from mcgrpo.train.job import ran_as_planned
    run = _as_planned(study_config.validate_blocks(_json(args.run_json, "--run-json"), GRADIENT_BLOCKS, "--run-json"),
                      "--run-json")
    imported = set(sys.modules)  # the plugins' code, as the job checked it (ran_as_planned)
    torch.set_num_threads(run["recipe"]["threads"])
    pool, _ = data.read(args.data, [])
    model, tokenizer = models.load(args.model)
    table = gradients.run(run, model, tokenizer, pool)
    ran_as_planned(run, imported)
    store.write_parquet(table, args.out, study_config.config_hash(run), {sealed.KEY: sealed.of_frame(table)})
    means = table.pivot_table(index="arm", columns="measure", values="value", sort=False)
    # reindex: a measure undefined on every batch (all groups one outcome: NaN) is a column of NaN, not a KeyError
    print(means.reindex(columns=["alignment", "share_outside_v", "projection_residual", "cos_full", "tokens"]).to_string())


def _gradient_tests_arguments(v: argparse.ArgumentParser) -> None:
    _stage(v, "--run-json", "what the stage reads (mcgrpo.core.config.gradient_tests_config)",
           {"--model": MODEL, "--data": DATA, "--out": "gradient_tests.parquet to write"})


@_named_when_stopped
def screen(args) -> None:
    """Screen one arm before training, by its gradient tests against outcome-only.

    On the study's model and data: efficiency per update and per generated token, alignment and share outside V,
    the shuffled control, and the equal-tokens difference its per-token efficiency predicts; no training
    (mcgrpo.screen).

    An arm that is not in the study: add it on Snakemake's command line, `snakemake screen --configfile STUDY.yaml
    --config 'arms={"mine": {"credit": {"my_rule": {}}}}' screen_arm=mine` (docs/plugins.md).

    Example:
      python -m mcgrpo screen --config config/studies/dense.yaml --arm mc_k4
    """
    from mcgrpo import screen as screening
    from mcgrpo.train import contract
    with contract.imports_checked():  # its plugins' first import, held to what the jobs hold theirs to
        cfg = _config(args)
    # with --json, stdout holds the one object alone: what a plugin prints while it is measured goes to stderr
    with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
        table, folder, curve_from = screening.screen(cfg, args.arm, args.batches, args.out, args.curve, args.budget,
                                                     log=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        rows = table.astype(object).where(table.notna(), None).to_dict(orient="records")
        print(json.dumps({"study": cfg["study"], "arm": args.arm, "curve": curve_from, "folder": str(folder),
                          "rules": rows}))
    else:
        print("\n".join(screening.render(table, args.arm, curve_from)))
        print(f"written: {folder}/screen.parquet, {folder}/gradient_tests.parquet")


def _screen_arguments(v: argparse.ArgumentParser) -> None:
    _study_source(v)
    v.add_argument("--arm", required=True, type=_format("key"), help="the study's arm to screen")
    v.add_argument("--batches", type=_positive, help="fixed batches, at least 2 (default: the study's "
                   "gradient_tests.batches)")
    v.add_argument("--curve", metavar="FILE", help="the base's accuracy curve (CSV or Parquet: tokens, accuracy) "
                   "to predict the equal-tokens difference on (default: the study's trained base runs)")
    v.add_argument("--budget", type=_typed(float, lambda v: v > 0, "a number above 0"),
                   help="with --curve: B in generated tokens (default: the curve's last point)")
    v.add_argument("--out", help="the folder to write (default: results/<study>/screen/<arm>/)")
    v.add_argument("--json", action="store_true", help="print one JSON object")


COMMANDS = {"resolve-model": (resolve_model, _resolve_model_arguments),
            "warm-start": (warm_start, _warm_start_arguments), "calibrate": (calibrate, _calibrate_arguments),
            "train": (train, _train_arguments), "gradient-tests": (gradient_tests, _gradient_tests_arguments),
            "screen": (screen, _screen_arguments)}
