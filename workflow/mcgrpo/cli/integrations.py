"""The verbs of mcgrpo/integrations: which trainer makes a run (mcgrpo's, TRL's, or none: a finished TRL output
folder stored as the run of an ingested arm)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from mcgrpo.cli.common import _files, _format, _seed, _training_run
from mcgrpo.core.errors import ConfigError

if TYPE_CHECKING:
    from mcgrpo.train.job import Stops


def ingest(args) -> None:
    """Store a finished TRL output folder as a run of an ingested arm, its checkpoints evaluated at budget points.

    The arm declares itself ingested in the study (`trainer: {ingested: {trl_output: DIR}}`, `{seed}` in DIR standing
    for the seed); the run takes an identity of its own, from what the folder says it did. The run's generated tokens
    per step are rebuilt from TRL's log (completions/mean_length x train_batch_size, checked against num_tokens); each
    budget point k B / per_budget is evaluated on a checkpoint (before B the one at or before its step, from B on the
    first at or after it) and recorded at that checkpoint's counts. A folder whose recipe differs from the study's is
    refused by key, unless --accept-differences (or the arm's accept_differences). The run is written where `train
    --config` would write it (--out elsewhere), which is also what the workflow's train job does for the arm. What
    the log cannot give is printed and kept in run.json (`ingested`): see docs/trl.md, "Runs already made".

    Example:
      python -m mcgrpo ingest --config my-study.yaml --arm mine --seed 1
    """
    from mcgrpo.integrations import ingest as trl_ingest
    run, files, _ = _training_run(args)
    block = (run["arm_config"].get("trainer") or {}).get("ingested")
    if block is None:
        raise ConfigError(f"--arm {args.arm}: not declared ingested in {args.config}; allowed: an arm with trainer: "
                          f"{{ingested: {{trl_output: DIR}}}} (a protocol arm's runs are trained under the "
                          f"protocol, never taken from a folder)")
    if args.trl_output is not None and Path(args.trl_output).resolve() != trl_ingest.output_folder(
            block, args.seed).resolve():
        raise ConfigError(f"--trl-output {args.trl_output}: not the arm's folder of seed {args.seed} "
                          f"({trl_ingest.output_folder(block, args.seed)}, arms.{args.arm}.trainer.ingested."
                          f"trl_output); allowed: that folder, or leave --trl-output out")
    _report_ingest(trl_ingest.store_arm_run(run, files, args.config, args.accept_differences))


def _ingest_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("--trl-output", metavar="DIR", help="the TRL output_dir (default: the arm's trl_output of the seed; "
                                                       "if given, it must be that folder)")
    v.add_argument("--config", required=True, metavar="STUDY.yaml", help="the study config")
    v.add_argument("--arm", type=_format("key"), required=True, help="the study's ingested arm to store it as")
    v.add_argument("--seed", type=_seed, required=True, help="the seed to store it as")
    v.add_argument("--accept-differences", action="store_true",
                   help="store a run whose GRPOConfig, prompts, model or tokenizer differ from the study's, its "
                        "differences listed")
    v.set_defaults(run_json=None)
    _files(v, {"--model": "the study's initial model (point 0; default: the study's)",
               "--data": "the data folder (default: the study's)",
               "--budget": "budget.parquet (default: the study's)",
               "--out": "the run folder (default: the run store's, as train --config)"})


def _report_ingest(block: dict) -> None:
    """What an ingest stored, and what it could not recover or found different from the recipe."""
    for line in block["unrecovered"]:
        print(f"not recovered: {line}")
    for line in block["differences"]:
        print(f"differs from the recipe (accepted): {line}")
    print(f"stored {block['folder']} as steps 1..{block['stop_step']} of the run, {len(block['points'])} points")


def _train_run(run: dict, files: dict[str, str], names: tuple[str, str], backend: str,
               stops: Stops | None = None) -> None:
    """The train job of a run, by who makes it: mcgrpo's trainer, TRL's (a TRL arm), or a finished TRL folder
    stored (an ingested arm: mcgrpo.integrations.ingest). `stops`: the stop signals caught since the job began
    (mcgrpo.train.job.Stops)."""
    from mcgrpo.train import job
    trainer = run["arm_config"].get("trainer") or {}
    if "ingested" in trainer:
        if stops:
            stops.release()
        from mcgrpo.integrations import ingest as trl_ingest
        return _report_ingest(trl_ingest.store_arm_run(run, files))
    runner = None
    if "trl" in trainer:  # TRL's GRPOTrainer under the protocol
        from mcgrpo.integrations.trl import TRLRun
        runner = TRLRun.for_job
    job.train(run, files, names, backend, runner, stops)


COMMANDS = {"ingest": (ingest, _ingest_arguments)}
