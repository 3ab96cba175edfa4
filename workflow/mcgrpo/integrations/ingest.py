"""Runs already made: a finished TRL output folder stored as a run of a study's TRL arm (`mcgrpo ingest`).

TRL's GRPOTrainer writes `checkpoint-<step>/` folders, each with the model and `trainer_state.json`, whose
`log_history` holds one entry per logged optimizer step. From the newest checkpoint's log this module rebuilds what
mcgrpo's protocol would have counted (docs/trl.md, "Runs already made"):

  - the rollout tokens generated in step s: round(`completions/mean_length` x `train_batch_size`), TRL's mean
    completion length of the step's batch (the model's tokens, end token included, as the protocol counts them)
    times the batch's completions. This holds where a logged step is one optimizer step on one generated batch on
    one process (logging_steps 1, gradient_accumulation_steps = steps_per_generation = 1), the protocol's own
    condition; `num_tokens` (TRL's running count of prompt + completion tokens) checks it: what it adds in a step,
    less the completion tokens, is the step's prompt tokens, at least one per completion;
  - the step at which the run would have stopped (the first that reaches horizon x B) and the step at which each
    budget point k B / per_budget was due (the first step at or after it, as the protocol evaluates);
  - the checkpoint that stands for each point: the one saved at that step, else the nearest before it (point 0,
    and any point before the first checkpoint, is the study's initial model), with its distance in steps and tokens.

The checkpoints are then evaluated with mcgrpo's Evaluator (the study's sets, samples, common random numbers and
every verifier) and the run written by the train job's writer. What the logs cannot give is listed in run.json
(`ingested.unrecovered`): tokens a reward function generated without TRL logging them, the time of each stage, the
verifiers' verdicts and groups of the training batches, the prompts trained on.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mcgrpo.core.budget import due_points
from mcgrpo.core.errors import ConfigError, DataError

TOKEN_KEYS = ("completions/mean_length", "num_tokens")  # the log keys the token count is rebuilt from
UNRECOVERED = (
    "tokens_continuation: tokens a reward function generated itself; TRL's logs do not have them (counted as 0)",
    "t_generate, t_credit, t_update, t_select, t_sync: TRL logs only each step's whole time (step_time, summed into "
    "train_seconds)",
    "train_cpu_seconds: TRL logs no CPU time",
    "reward_default, reward_strict, groups_*: the study's verifiers on the training batches (TRL logs its reward only)",
    "prompts.parquet: which problems each step trained on (TRL logs no prompt ids)",
)


@dataclass
class TRLLog:
    """What a TRL output folder tells: per optimizer step (1..) its counts, and the checkpoints by step."""
    folder: Path
    steps: pd.DataFrame  # step, tokens, tokens_total, loss, grad_norm, lr, mean_length, truncated_share, seconds
    checkpoints: dict[int, Path]
    unchecked: list[str]  # what about the run's settings could not be checked


@dataclass
class Point:
    """Budget point `index`: due at the end of step `due`; evaluated on the checkpoint of step `checkpoint` (0: the
    study's initial model), `steps_before` and `tokens_before` before it."""
    index: int
    due: int
    checkpoint: int
    steps_before: int
    tokens_before: int


def checkpoints(folder: str | Path) -> dict[int, Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder; allowed: a TRL output_dir holding checkpoint-<step>/ folders")
    found = {int(m.group(1)): p for p in folder.iterdir() if (m := re.fullmatch(r"checkpoint-(\d+)", p.name))}
    if not found:
        raise DataError(f"{folder}: no checkpoint-<step>/ folder; allowed: a TRL output_dir saved with "
                        f"save_strategy 'steps' (ingest evaluates the checkpoints)")
    return dict(sorted(found.items()))


def read(folder: str | Path) -> TRLLog:
    """The folder's checkpoints and its per-step log (the newest checkpoint's trainer_state.json)."""
    saved = checkpoints(folder)
    path = saved[max(saved)] / "trainer_state.json"
    if not path.exists():
        raise DataError(f"{path}: file not found; allowed: a checkpoint as TRL saves it, with its trainer_state.json")
    state = json.loads(path.read_text())
    unchecked = check_arguments(saved[max(saved)])
    return TRLLog(Path(folder), steps(state, path), saved, [unchecked] if unchecked else [])


ONE_BATCH = ("gradient_accumulation_steps", "steps_per_generation", "num_iterations")  # 1: a step is one batch


def check_arguments(checkpoint: Path) -> str | None:
    """Refuse a run whose GRPOConfig (training_args.bin) makes a step other than one generated batch; what could not
    be checked, if anything. Unpickling the file needs trl: where it is missing the check is left to num_tokens."""
    path = checkpoint / "training_args.bin"
    try:
        import torch
        args = torch.load(path, weights_only=False)  # the user's own run folder: trusted as its script is
    except (ImportError, AttributeError, FileNotFoundError) as e:
        return f"{path}: not read ({type(e).__name__}: {e}), so {', '.join(ONE_BATCH)} = 1 is assumed, not checked"
    wrong = [f"{key} {getattr(args, key)}" for key in ONE_BATCH if (getattr(args, key, 1) or 1) != 1]
    if wrong:
        raise DataError(f"{path}: {', '.join(wrong)}; allowed: 1 (a step of the protocol is one optimizer step on "
                        f"one generated batch, and the log's per-step lengths count it)")
    return None


def steps(state: dict, path: Path | str = "trainer_state.json") -> pd.DataFrame:
    """Per optimizer step 1..global_step: the rollout tokens generated, their running total, and what TRL logged."""
    batch, last = state.get("train_batch_size"), state.get("global_step", 0)
    if not batch:
        raise DataError(f"{path}: no train_batch_size; allowed: a trainer_state.json that transformers wrote")
    logged = {e["step"]: e for e in state.get("log_history", []) if "loss" in e}  # a step's entry, not a summary
    missing = [s for s in range(1, last + 1) if s not in logged]
    if missing:
        raise DataError(f"{path}: log_history has no entry for step(s) {_few(missing)} of 1..{last} (logging_steps "
                        f"{state.get('logging_steps')}); allowed: a run logged every step (logging_steps 1)")
    for key in TOKEN_KEYS:
        lacking = [s for s in range(1, last + 1) if key not in logged[s]]
        if lacking:
            raise DataError(f"{path}: log_history lacks {key!r} at step(s) {_few(lacking)}; allowed: TRL's "
                            f"GRPOTrainer log, which has {' and '.join(TOKEN_KEYS)} every step")
    rows = [logged[s] for s in range(1, last + 1)]
    frame = pd.DataFrame({
        "step": range(1, last + 1),
        "tokens": [round(e["completions/mean_length"] * batch) for e in rows],
        "num_tokens": [int(e["num_tokens"]) for e in rows],
        "loss": [float(e["loss"]) for e in rows], "grad_norm": [float(e.get("grad_norm", math.nan)) for e in rows],
        "lr": [float(e.get("learning_rate", math.nan)) for e in rows],
        "mean_length": [float(e["completions/mean_length"]) for e in rows],
        "truncated_share": [float(e.get("completions/clipped_ratio", math.nan)) for e in rows],
        "seconds": [float(e.get("step_time", math.nan)) for e in rows]})
    frame["tokens_total"] = frame["tokens"].cumsum()
    prompt_tokens = frame["num_tokens"].diff().fillna(frame["num_tokens"]) - frame["tokens"]
    short = frame.loc[prompt_tokens < batch, "step"].tolist()
    if short:
        raise DataError(f"{path}: at step(s) {_few(short)}, num_tokens grew by less than the completion tokens "
                        f"(completions/mean_length x train_batch_size {batch}) plus one prompt token per completion: "
                        f"a step was not one generated batch of train_batch_size completions; allowed: a run with "
                        f"{', '.join(ONE_BATCH)} 1 on one process")
    return frame


def _few(steps: list[int]) -> str:
    return ", ".join(map(str, steps[:5])) + (f" and {len(steps) - 5} more" if len(steps) > 5 else "")


def place(log: TRLLog, budget: int, unit: str, per_budget: int, horizon: float) -> tuple[int, list[Point]]:
    """The step at which the protocol would have stopped the run, and its budget points on the checkpoints."""
    steps_ = log.steps
    spent = steps_["tokens_total"] if unit == "tokens" else steps_["step"]
    reached = steps_.loc[spent >= horizon * budget, "step"]
    if reached.empty:
        raise DataError(f"{log.folder}: the run ends at step {len(steps_)} having spent "
                        f"{int(spent.iloc[-1]) if len(spent) else 0} {unit} of horizon x B = {horizon * budget:g}; "
                        f"allowed: a run that reached the study's B")
    stop = int(reached.iloc[0])
    totals = [0, *steps_["tokens_total"]]
    before, due = 0, {0: 0}
    for step, after in zip(steps_["step"][:stop], spent[:stop]):
        due.update(dict.fromkeys(due_points(before, int(after), budget, per_budget, horizon), int(step)))
        before = int(after)
    points = []
    for index, step in sorted(due.items()):
        used = max([0, *(c for c in log.checkpoints if c <= step)])
        points.append(Point(index, step, used, step - used, totals[step] - totals[used]))
    return stop, points


def unrecovered(log: TRLLog, points: list[Point]) -> list[str]:
    """What run.json says the TRL folder could not give, the points off their step included."""
    return [*UNRECOVERED, *log.unchecked, *(f"evaluation point {p.index}: due at step {p.due}, evaluated on "
                            f"{f'checkpoint-{p.checkpoint}' if p.checkpoint else 'the initial model'}, {p.steps_before} "
                            f"step(s) and {p.tokens_before} tokens before it" for p in points if p.steps_before)]


def iteration_rows(log: TRLLog, stop: int) -> list[dict]:
    """iterations.parquet's rows of steps 1..stop, NaN where TRL logs nothing (UNRECOVERED)."""
    nan, seconds = math.nan, log.steps["seconds"].cumsum()
    return [{"iteration": i, "tokens_total": int(row.tokens_total), "tokens_rollout": int(row.tokens_total),
             "tokens_continuation": 0, "tokens_discarded": 0, "updates": i + 1, "lr": row.lr, "loss": row.loss,
             "grad_norm": row.grad_norm, "reward_default": nan, "reward_strict": nan, "groups_all_wrong": nan,
             "groups_all_correct": nan, "groups_mixed": nan, "truncated_share": row.truncated_share,
             "mean_length": row.mean_length, "cand_pred_mean": nan, "chosen_pred_mean": nan, "prompts_distinct": nan,
             "t_select": nan, "t_generate": nan, "t_credit": nan, "t_update": nan, "t_sync": nan,
             "train_seconds": float(seconds.iloc[i]), "train_cpu_seconds": nan}
            for i, row in enumerate(log.steps.iloc[:stop].itertuples())]


def ingest(log: TRLLog, run: dict, budget: int, model, tokenizer, eval_sets: dict[str, pd.DataFrame]):
    """(RunLog, the `ingested` block of run.json) of a finished TRL output folder (`read`) as run `run` (a TRL arm's
    effective config) under B `budget`; `model` is the study's initial model (point 0)."""
    from mcgrpo.core.budget import unit as budget_unit
    from mcgrpo.integrations.trl import study_evaluator
    from mcgrpo.train.trainer import RunLog, record_evaluation
    from transformers import AutoModelForCausalLM
    if "trl" not in run:
        raise ConfigError(f"--arm: an arm without trainer.trl (arm config {run['arm_config']}); allowed: a TRL arm "
                          f"(trainer: {{trl: ...}}), whose run a TRL output folder can be")
    stop, points = place(log, budget, budget_unit(run["budget"]), run["evaluation"]["per_budget"],
                         run["budget"]["horizon"])
    out, policies = RunLog(iterations=iteration_rows(log, stop)), {0: model}
    for due in sorted({p.due for p in points}):  # the points one step crossed, evaluated as the protocol does
        group = [p for p in points if p.due == due]
        used = group[0].checkpoint
        if used not in policies:
            policies = {used: AutoModelForCausalLM.from_pretrained(log.checkpoints[used], dtype=model.dtype)
                        .to(model.device), 0: model}
        # the counts of the step where the points fell due, as the protocol records them (the analysis finds each
        # point where it expects it); the checkpoint that stands for them, and its distance, are in run.json
        row = out.iterations[due - 1] if due else {"tokens_total": 0, "train_seconds": 0.0}
        state = {"tokens_total": row["tokens_total"], "iteration": due, "updates": due,
                 "train_seconds": row["train_seconds"], "train_cpu_seconds": math.nan}
        record_evaluation(out, study_evaluator(run, policies[used], tokenizer, eval_sets), [p.index for p in group],
                          state)
    block = {"folder": str(log.folder.resolve()), "trainer_state": str(log.checkpoints[max(log.checkpoints)]
                                                                         / "trainer_state.json"),
             "token_keys": list(TOKEN_KEYS), "steps_logged": len(log.steps), "stop_step": stop,
             "points": [vars(p) for p in points], "unrecovered": unrecovered(log, points)}
    return out, block


def store_run(folder: str | Path, run: dict, files: dict[str, str]) -> dict:
    """Ingest `folder` as run `run` into its run folder files["out"] (the study's model, data and budget from
    `files`, as the train job reads them), written as the train job writes a run; the `ingested` block."""
    from datetime import datetime, timezone

    from mcgrpo import data
    from mcgrpo.core import store
    from mcgrpo.core.budget import from_table
    from mcgrpo.train import models
    from mcgrpo.train.job import write_run
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    trl_log = read(folder)  # the refusals first, before any model is loaded
    B = from_table(store.read_contract(files["budget"], "budget"))
    _, evals = data.read(files["data"], run["evaluation"]["sets"])
    model, tokenizer = models.load(files["model"])
    log, block = ingest(trl_log, run, B, model, tokenizer, evals)
    write_run(Path(files["out"]), run, B, log, model, {
        "started": started, "ended": datetime.now(timezone.utc).isoformat(timespec="seconds"), "attempts": [],
        "tracking": "none", "ingested": block})
    return block
