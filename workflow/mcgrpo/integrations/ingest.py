"""Runs already made: a finished TRL output folder stored as a run of a study's TRL arm (`mcgrpo ingest`).

TRL's GRPOTrainer writes `checkpoint-<step>/` folders, each with the model and `trainer_state.json`, whose
`log_history` holds one entry per logged optimizer step. From the newest checkpoint's log this module rebuilds what
mcgrpo's protocol would have counted (docs/trl.md, "Runs already made"):

  - the rollout tokens generated in step s: round(`completions/mean_length` x `train_batch_size`), TRL's mean
    completion length of the step's batch (the model's tokens, end token included, as the protocol counts them)
    times the batch's completions. This holds where a logged step is one optimizer step on one generated batch on
    one process (logging_steps 1, gradient_accumulation_steps = steps_per_generation = 1), the protocol's own
    condition; `num_tokens` (TRL's running count of prompt + completion tokens) checks it: what it adds in a step,
    less the completion tokens, is the step's prompt tokens, at least one per completion; and a mean that x
    train_batch_size is no whole number was over more completions (TRL gathers every process's): refused;
  - the step at which the run would have stopped (the first that reaches horizon x B) and the step at which each
    budget point k B / per_budget was due (the first step at or after it, as the protocol evaluates);
  - the checkpoint that stands for each point: before B, the one saved at that step, else the nearest before it
    (point 0, and any point before the first checkpoint, is the study's initial model); from B on, the first saved
    at or after it, as the protocol reads a run at its first evaluation at or after B. Each evaluation is recorded
    at the counts (tokens, steps, time) of the checkpoint evaluated, never at those of a model it is not.

Its identity is its own (mcgrpo.core.trl_config.ingested_identity: what its folder says it did), and it serves only
an arm declared ingested (`trainer: {ingested: {trl_output: ...}}`); a folder whose GRPOConfig differs from the
study's recipe, or whose checkpoints hold another model or tokenizer than the study's (mcgrpo.integrations.saved_model),
is refused by key, or stored with its differences listed where the arm accepts them.
The checkpoints are then evaluated with mcgrpo's Evaluator (the study's sets, samples, common random numbers and
every verifier) and the run written by the train job's writer. What the logs cannot give is listed in run.json
(`ingested.unrecovered`): tokens a reward function generated without TRL logging them, the time of each stage, the
verifiers' verdicts and groups of the training batches, the prompts trained on; and that the run's tokens and clock
are its log's own records, held to each other but not recounted (a log edited alike in every checkpoint is not seen).
"""

from __future__ import annotations

import json
import math
import pickle
import re
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import pandas as pd

from mcgrpo.core import run_data
from mcgrpo.core.budget import due_points
from mcgrpo.core.errors import ConfigError, DataError, MissingFile
from mcgrpo.core.trl_config import (NOT_SETTINGS, SAMPLING, grpo_arguments, ingested_identity, output_folder,
                                     reward_names, saved_checkpoints)

TOKEN_KEYS = ("completions/mean_length", "num_tokens")  # the log keys the token count is rebuilt from
UNRECOVERED = (
    "tokens_continuation: tokens a reward function generated itself; TRL's logs do not have them (counted as 0)",
    "t_generate, t_credit, t_update, t_select, t_sync: TRL logs only each step's whole time (step_time, summed into "
    "train_seconds)",
    "train_cpu_seconds: TRL logs no CPU time",
    "reward_default, reward_strict, groups_*: the study's verifiers on the training batches (TRL logs its reward only)",
    "prompts.parquet: which problems each step trained on (TRL logs no prompt ids)",
    "the reward: TRL's log names the run's reward functions (rewards/<name>/mean: the run's ingested.rewards), not "
    "what they compute; that the run was rewarded by the study's reward_verifier is the user's word",
    "processes: how many ran the run (TRL's log does not say); one is assumed, refused only where a step's "
    "completions/mean_length x train_batch_size is no whole number (a mean over every process's completions)",
    "tokens_rollout, train_seconds: the TRL log's own records (completions/mean_length x train_batch_size, step_time), "
    "held to each other (num_tokens, num_input_tokens_seen, the prompts' lengths), not recounted: no file of the "
    "folder holds the completions' tokens or a clock, so a log edited alike in every checkpoint is stored as it says",
)


@dataclass
class TRLLog:
    """What a TRL output folder tells: per optimizer step (1..) its counts, and the checkpoints by step."""
    folder: Path
    steps: pd.DataFrame  # step, tokens, tokens_total, loss, grad_norm, lr, mean_length, max_length, truncated_share,
    #                      seconds
    checkpoints: dict[int, Path]
    unchecked: list[str]  # what about the run's settings could not be checked
    batch: int = 0  # train_batch_size: the completions of a step
    arguments: object = None  # the GRPOConfig of the newest checkpoint's training_args.bin, where it could be read
    earlier: dict[int, object] = field(default_factory=dict)  # every other checkpoint's, by step (None: not read)
    shown: list[tuple[str, str]] = field(default_factory=list)  # (key, line): settings the log shows (`log_shows`)


@dataclass
class Point:
    """Budget point `index`: due at the end of step `due`; evaluated on the checkpoint of step `checkpoint` (0: the
    study's initial model), `steps_off` steps and `tokens_off` tokens from the due step (negative: before it)."""
    index: int
    due: int
    checkpoint: int
    steps_off: int
    tokens_off: int


def checkpoints(folder: str | Path) -> dict[int, Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder; allowed: a TRL output_dir holding checkpoint-<step>/ folders")
    found = saved_checkpoints(folder)
    renamed = sorted(p.name for p in folder.iterdir() if re.fullmatch(r"checkpoint-0\d*", p.name))
    if renamed:
        raise DataError(f"{folder}: {_few(renamed)}: not a name TRL gives a checkpoint; allowed: checkpoint-<step> "
                        f"as TRL saves it, the step without leading zeros (a copy or a renamed folder would stand for "
                        f"a step beside the checkpoint TRL saved there: remove it, or rename it checkpoint-<step>)")
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
    frame = steps(state, path)
    for step, checkpoint in saved.items():
        check_checkpoint(step, checkpoint, state)
    read_as = {step: check_arguments(checkpoint, state.get("train_batch_size")) for step, checkpoint in saved.items()}
    arguments, unchecked = read_as.pop(max(saved))
    unread = [step for step, (args, _) in read_as.items() if args is None]
    said = [unchecked] if unchecked else []
    if unread and arguments is not None:
        said.append(f"training_args.bin of checkpoint(s) {_few(unread)}: not read (TRL saves one into every "
                    f"checkpoint), so the GRPOConfig of the steps they saved is taken to be the newest checkpoint's")
    return TRLLog(Path(folder), frame, saved, said, int(state.get("train_batch_size") or 0), arguments,
                  {step: args for step, (args, _) in read_as.items()}, log_shows(state))


def log_shows(state: dict) -> list[tuple[str, str]]:
    """(key, line) for each setting other than the recipe's that the log itself shows, whatever training_args.bin
    says (a file replaced by another run's): TRL (1.16) logs `kl` only where beta is not 0, and `entropy_coef` (its
    value) only with an entropy bonus; and the reward functions (`reward_line`)."""
    entries = _step_entries(state)
    kl = sorted(s for s, e in entries.items() if "kl" in e)
    bonus = sorted(s for s, e in entries.items() if e.get("entropy_coef"))
    return [*([("beta", f"beta other than 0: the log has kl at step(s) {_few(kl)}, which TRL logs only with a KL "
                        f"term; the recipe's 0.0")] if kl else []),
            *([("entropy_coef", f"entropy_coef {entries[bonus[0]]['entropy_coef']!r} at step(s) {_few(bonus)} (the "
                                f"log); the recipe's 0.0")] if bonus else []),
            *reward_line(entries)]


def reward_line(entries: dict[int, dict]) -> list[tuple[str, str]]:
    """(`reward_funcs`, line) where the log's reward functions are not one throughout the run: TRL logs
    rewards/<name>/mean for each of its reward_funcs every step, so names that change from one step to another are
    a run resumed under other reward functions (no GRPOConfig holds them), and several names a reward TRL summed
    from several functions, where the recipe's is one (reward_verifier). What each computes is the user's word."""
    by_names: dict[str, list[int]] = {}
    for step, entry in entries.items():
        by_names.setdefault(", ".join(sorted(reward_names(entry))) or "none", []).append(step)
    if len(by_names) > 1:
        said = "; ".join(f"{names} at step(s) {_few(steps)}" for names, steps in by_names.items())
        return [("reward_funcs", f"reward functions {said} (the log's rewards/<name>/mean): the reward changed during "
                                 f"the run; the recipe's one reward throughout")]
    several = [names for names in by_names if ", " in names]
    return [("reward_funcs", f"reward functions {several[0]} at every step (the log's rewards/<name>/mean): a "
                             f"reward TRL summed from several functions (reward_weights); the recipe's one reward, "
                             f"reward_verifier")] if several else []


def _step_entries(state: dict, last: int | None = None) -> dict[int, dict]:
    """A log's per-step entries (those with a loss: not TRL's summary) by step, up to `last`."""
    return {e["step"]: e for e in state.get("log_history", []) if "loss" in e and (last is None or e["step"] <= last)}


def check_checkpoint(step: int, checkpoint: Path, newest: dict) -> None:
    """Refuses a checkpoint-<step>/ whose own trainer_state.json (which TRL saves into every checkpoint) is missing
    or not the newest log at that step: another global_step (a folder renamed), or other entries for steps 1..step
    (a checkpoint left by another run in the folder, e.g. the abandoned steps of a run resumed from an earlier one):
    its model is not the model of the run the log counts. A run resumed from one of its own checkpoints passes:
    transformers restores the checkpoint's trainer_state.json (its log_history and num_input_tokens_seen, TRL's
    num_tokens) on resume, so the resumed run's log continues the one its earlier checkpoints hold."""
    path = checkpoint / "trainer_state.json"
    if not path.is_file():  # TRL writes one into every checkpoint: without it the model is tied to no log
        raise DataError(f"{path}: file not found; allowed: every checkpoint as TRL saves it, with its own "
                        f"trainer_state.json (it ties the checkpoint's model to the newest log: a checkpoint without "
                        f"one, e.g. copied from another run, would be evaluated as this run's step {step})")
    own = json.loads(path.read_text())
    if own.get("global_step") != step:
        raise DataError(f"{path}: global_step {own.get('global_step')} in checkpoint-{step}; allowed: a checkpoint "
                        f"saved at the step its folder names")
    ours, theirs = _step_entries(own), _step_entries(newest, step)
    other = sorted(s for s in set(ours) | set(theirs) if ours.get(s) != theirs.get(s))
    if other:
        raise DataError(f"{path}: its log differs from the newest checkpoint's at step(s) {_few(other)}; allowed: "
                        f"checkpoints of one run (a checkpoint left by another run or an abandoned resume is not "
                        f"the model the log counts: remove it, or ingest a folder holding one run)")
    check_count(path, own, ours.get(step, {}).get("num_tokens"))


def check_count(path: Path, state: dict, logged) -> None:
    """Refuses a trainer_state.json whose num_input_tokens_seen is not the num_tokens its log has at its step: TRL
    (1.16) keeps one running count of prompt and completion tokens in the trainer's state, logs it as num_tokens
    and transformers saves it beside the log, so a log whose counts were edited without it (tokens made fewer in
    completions/mean_length and num_tokens alike) is not the run's. A count of 0 or none (a TRL that kept it
    outside the state) is not checked; a log and count edited alike are not seen (ingested.unrecovered)."""
    seen = state.get("num_input_tokens_seen")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (seen, logged))
    if numbers and seen and not _same(float(seen), float(logged)):
        raise DataError(f"{path}: num_input_tokens_seen {seen}, while its log's num_tokens at step "
                        f"{state.get('global_step')} is {logged}; allowed: TRL's one running count, which it logs as "
                        f"num_tokens and transformers saves as num_input_tokens_seen (a log whose token counts were "
                        f"edited without it does not say what the run generated)")


ONE_BATCH = ("gradient_accumulation_steps", "steps_per_generation", "num_iterations")  # 1: a step is one batch


def check_arguments(checkpoint: Path, batch: int | None = None) -> tuple[object, str | None]:
    """The GRPOConfig of training_args.bin (None where it cannot be read) and what could not be checked, if anything;
    refuses a run whose GRPOConfig makes a step other than one generated batch, or other than `batch` completions
    (the log's train_batch_size, which a run resumed under another batch keeps from the checkpoint it resumed
    from: its steps' tokens would be counted by the wrong batch). Unpickling the file needs trl: where it is missing
    the check is left to num_tokens, and the recipe's settings to the log (`differences`)."""
    path = checkpoint / "training_args.bin"
    try:
        import torch
        args = torch.load(path, weights_only=False)  # the user's own run folder: trusted as its script is
    except (ImportError, AttributeError, FileNotFoundError, pickle.UnpicklingError, EOFError) as e:
        return None, (f"{path}: not read ({type(e).__name__}: {e}), so {', '.join(ONE_BATCH)} = 1 is assumed, not "
                      f"checked, nor the GRPOConfig's settings other than the batch and learning rate the log shows")
    wrong = [f"{key} {getattr(args, key)}" for key in ONE_BATCH if (getattr(args, key, 1) or 1) != 1]
    per_step = getattr(args, "per_device_train_batch_size", batch)
    if batch is not None and per_step != batch:
        raise DataError(f"{path}: per_device_train_batch_size {per_step}, while the log's train_batch_size is {batch} "
                        f"(trainer_state.json: a run resumed under another batch keeps the one it resumed from, and "
                        f"its steps' tokens, completions/mean_length x train_batch_size, would be counted by it); "
                        f"allowed: one batch throughout the run")
    if wrong:
        raise DataError(f"{path}: {', '.join(wrong)}; allowed: 1 (a step of the protocol is one optimizer step on "
                        f"one generated batch, and the log's per-step lengths count it)")
    return args, None


# what a run's GRPOConfig must say to be the study's recipe (docs/trl.md, "Runs already made"): every setting a TRL
# arm of the study trains with (mcgrpo.core.trl_config.grpo_arguments), the sampling settings it leaves at TRL's
# defaults, and the share of tokens the loss keeps; not where the run was kept or logged (NOT_SETTINGS), the steps
# (ONE_BATCH, refused above), the seed, nor the batch (the log's train_batch_size, which each file must equal:
# check_arguments). A key the file lacks (another TRL's GRPOConfig) is a difference, except where its absence means
# the recipe's value; a key it has that this TRL's GRPOConfig lacks is one too (`unknown_settings`).
IGNORED = {*NOT_SETTINGS, *ONE_BATCH, "seed", "per_device_train_batch_size"}
DEFAULTS = {**SAMPLING, "top_entropy_quantile": 1.0, "mask_truncated_completions": False,
            "chat_template_kwargs": None}
SAME = {"adamw_torch_fused": "adamw_torch"}  # one algorithm, Adam in fused kernels (GRPOConfig's default optim)
ABSENT = "<not in training_args.bin>"


# GRPOConfig keys, or families of them by prefix, that say where a run was kept, logged, evaluated or pushed, how
# it fit in memory or was fed (the prompts' order is the run's own: `prompts` checks them), or how long it was asked
# to run: every other setting of a folder's GRPOConfig is compared with the recipe's (`trl_defaults`), those of
# several processes too (deepspeed, fsdp, accelerator_config: a DeepSpeed config can set its own optimizer)
NOT_TRAINING = ("save_", "logging_", "log_", "eval_", "hub_", "push_to_hub", "report_to", "run_name", "project",
                "trackio_", "dataloader_", "ddp_", "debug", "skip_memory_metrics", "do_", "resume_from_checkpoint",
                "local_rank", "per_device_eval_batch_size", "num_generations_eval", "prediction_loss_only",
                "include_for_metrics", "batch_eval_metrics", "load_best_model_at_end", "metric_for_best_model",
                "greater_is_better", "num_completions_to_print", "vllm_server_", "vllm_group_port",
                "vllm_gpu_memory_utilization", "vllm_enable_sleep_mode", "ignore_data_skip",
                "restore_callback_states_from_checkpoint", "enable_jit_checkpoint", "gradient_checkpointing",
                "activation_checkpointing", "torch_empty_cache_steps", "ds3_gather_for_generation",
                "include_num_input_tokens_seen", "num_train_epochs", "data_seed", "remove_unused_columns",
                "label_names", "length_column_name", "train_sampling_strategy", "bf16_full_eval", "fp16_full_eval")


def expected_arguments(run: dict) -> dict:
    """The GRPOConfig settings a folder of the study's recipe has, by key."""
    recipe = grpo_arguments(run, "", 0, False)
    return {k: v for k, v in {**DEFAULTS, **recipe}.items() if k not in IGNORED}


def recipe_config(run: dict):
    """The recipe's GRPOConfig under the trl installed here (None where it is not: a GRPOConfig then cannot be read
    either, and `training_args.bin` is the difference)."""
    try:
        from trl import GRPOConfig
    except ImportError:
        return None
    return GRPOConfig(**grpo_arguments(run, "", 1, False))


def trl_defaults(config, expected: dict) -> dict:
    """Every other training setting of the recipe's GRPOConfig `config`, at TRL's defaults (an entropy bonus, NEFTune
    noise, reward weights, vLLM, ...: each changes what a run trains as much as the recipe's keys): compared where a
    folder's file has the key, since a TRL without it trained without it. Empty without trl."""
    if config is None:
        return {}
    from mcgrpo.integrations.trl_held import settings
    return {k: v for k, v in settings(config).items()
            if k not in expected and k not in IGNORED and not k.startswith(NOT_TRAINING)}


def unknown_settings(log: TRLLog, config, expected: dict) -> list[tuple[str, str]]:
    """(key, line) for each setting a checkpoint's training_args.bin has that neither `expected` (compared above) nor
    the recipe's GRPOConfig `config` (the installed TRL's, _installed_trl) has: another TRL's (a newer one's
    loss, sampling or importance-sampling switch, or an older one's since removed), unpickled here as attributes
    without a word. What it does to training, or to what the log's tokens and times mean, this TRL cannot tell, so
    its value cannot be held to the recipe: a difference by its key. Private attributes and keys of the families
    that say where a run was kept or logged (NOT_TRAINING) are not settings. Empty without trl."""
    if config is None:
        return []
    known = {*expected, *vars(config), *(f.name for f in fields(config))}
    by_value: dict[tuple[str, str], list[int]] = {}
    for step, args in sorted(_read_files(log).items()):
        for key, value in vars(args).items():
            if key not in known and key not in IGNORED and not key.startswith(("_", *NOT_TRAINING)):
                by_value.setdefault((key, repr(_plain(value))), []).append(step)
    return [(key, f"{key} {value} ({_where(steps, log)}): not a setting of the GRPOConfig of TRL "
                  f"{_installed_trl()}, which ingest reads the folder by (another TRL's: what it does to training, "
                  f"or to what the log's tokens and times count, is not known here)")
            for (key, value), steps in by_value.items()]


def _plain(value):
    """An argument as it compares: an enum by its value, names of one algorithm as one."""
    value = getattr(value, "value", value)
    return SAME.get(value, value) if isinstance(value, str) else value


def _argument(arguments, key: str):
    """`key` of the folder's GRPOConfig as it compares; ABSENT where the file lacks it and its absence is not the
    recipe's value (DEFAULTS)."""
    return _plain(getattr(arguments, key, DEFAULTS.get(key, ABSENT)))


def _same(found, expected) -> bool:
    """Numbers within rounding (an int for a float), everything else equal, a bool only to a bool."""
    if isinstance(found, bool) or isinstance(expected, bool):
        return found is expected
    if all(isinstance(v, (int, float)) for v in (found, expected)):
        return math.isclose(float(found), float(expected), rel_tol=1e-9, abs_tol=1e-12)
    return found == expected


def prompt_lengths(run: dict, tokenizer, pool: pd.DataFrame) -> np.ndarray:
    """The token count of each of the study's training prompts as its Prompter renders it (task.prompt, the
    tokenizer's chat template, model.chat_template's arguments), as TRL tokenizes a conversational prompt."""
    from mcgrpo.train.rollout import study_prompter
    prompter = study_prompter(tokenizer, run)
    return np.array([len(prompter(question)) for question in pool["question"]])


def _extremes(lengths: np.ndarray, draws: int, passes: int) -> tuple[float, float]:
    """The least and greatest mean of `draws` prompts taken from `lengths` with none taken more than `passes`
    times: what any order of the pool gives."""
    ordered = np.sort(np.repeat(lengths, passes))
    return float(ordered[:draws].mean()), float(ordered[-draws:].mean())


def prompt_difference(log: TRLLog, lengths: np.ndarray, group: int) -> str | None:
    """Where the prompt tokens the log implies cannot be the study's prompts, the line that says so (else None).
    A step's prompt tokens per completion, num_tokens' growth less its completion tokens over train_batch_size, is
    the mean rendered length of its prompts (each repeated group_size times): each step's lies between the pool's
    shortest and longest, and the run's mean between the least and greatest that its steps' prompts could have,
    taken in any order with each prompt at most once per pass (TRL drops a pass's last incomplete batch)."""
    frame, batch = log.steps, log.batch
    implied = (frame["num_tokens"].diff().fillna(frame["num_tokens"]) - frame["tokens"]) / batch
    per_step = batch // group if batch % group == 0 else 1
    draws = per_step * len(frame)
    whole = len(lengths) - len(lengths) % per_step or len(lengths)
    low, high = _extremes(lengths, draws, -(-draws // whole))
    eps = 1e-9
    outside = frame.loc[(implied < lengths.min() - eps) | (implied > lengths.max() + eps), "step"].tolist()
    if not outside and low - eps <= implied.mean() <= high + eps:
        return None
    at = f", step(s) {_few(outside)} outside {lengths.min()}..{lengths.max()}" if outside else ""
    return (f"prompt tokens per completion {implied.mean():.2f} on average over steps 1..{len(frame)} (num_tokens' "
            f"growth less the completion tokens, the log{at}); the study's {len(lengths)} training prompts rendered "
            f"by its tokenizer and chat template: {lengths.mean():.2f} on average, {low:.2f}..{high:.2f} for "
            f"{draws} of them in any order (another prompt set, template or tokenizer)")


def differences(log: TRLLog, run: dict, lengths: np.ndarray) -> list[str]:
    """Where the folder's run is not the study's, one line per key (`differing`)."""
    return [line for _, line in differing(log, run, lengths)]


def differing(log: TRLLog, run: dict, lengths: np.ndarray) -> list[tuple[str, str]]:
    """(GRPOConfig key, line) wherever the folder's run is not the study's: its prompts (key `prompts`: the prompt
    tokens its log implies against `lengths`, the study's rendered training prompts, `prompt_difference`), the
    batch and the learning rate (its value and whether it stayed constant: lr_scheduler_type) from the log, which
    every folder has; every setting of expected_arguments in training_args.bin, or the file itself (key
    `training_args.bin`) where it could not be read: its settings are then unchecked. The keys name the differences
    in every table that uses the run (run.json: ingested.differing_keys)."""
    expected = expected_arguments(run)
    prompts = prompt_difference(log, lengths, expected["num_generations"])
    found = [("prompts", prompts)] if prompts else []
    batch = run["recipe"]["prompts_per_iteration"] * run["recipe"]["group_size"]
    if log.batch != batch:
        found.append(("train_batch_size", f"train_batch_size {log.batch} (trainer_state.json); the recipe's {batch} "
                                          f"(prompts_per_iteration x group_size)"))
    rates = log.steps["lr"].dropna()
    if len(rates) and not _same(float(rates.iloc[0]), expected["learning_rate"]):
        found.append(("learning_rate", f"learning_rate {rates.iloc[0]:g} at step 1 (the log); the recipe's "
                                       f"{expected['learning_rate']:g}"))
    if len(rates) and not all(_same(float(r), float(rates.iloc[0])) for r in rates):
        found.append(("lr_scheduler_type", f"learning rate schedule: logged from {rates.iloc[0]:g} to "
                                           f"{rates.iloc[-1]:g} (the log); the recipe's constant"))
    found += [*log.shown, *longer_than_limit(log, expected["max_completion_length"])]
    if log.arguments is None:
        return found + [("training_args.bin", f"{'; '.join(log.unchecked)} (install trl, the mcgrpo[trl] extra, to "
                                              f"check them)")]
    config = recipe_config(run)
    return [*found, *argument_differences(log, expected, trl_defaults(config, expected)),
            *unknown_settings(log, config, expected)]


def longer_than_limit(log: TRLLog, limit: int) -> list[tuple[str, str]]:
    """(`max_completion_length`, line) where the log's longest completion of a step (TRL's completions/max_length,
    end token included) is longer than the recipe lets one be: the run generated under another limit, whatever
    training_args.bin says (a file replaced by another run's)."""
    longer = log.steps.loc[log.steps["max_length"] > limit, "step"].tolist()
    return [("max_completion_length", f"completions of up to {log.steps['max_length'].max():g} tokens at step(s) "
                                      f"{_few(longer)} (the log's completions/max_length); the recipe's "
                                      f"max_completion_length {limit}")] if longer else []


def _read_files(log: TRLLog) -> dict[int, object]:
    """Every checkpoint's GRPOConfig that could be read, by step."""
    return {step: args for step, args in {**log.earlier, max(log.checkpoints): log.arguments}.items()
            if args is not None}


def _where(steps: list[int], log: TRLLog) -> str:
    """The files that say a value: all of them, or the checkpoints named where not all say it."""
    every = len(steps) == len(_read_files(log))
    return "training_args.bin" if every else f"training_args.bin of checkpoint(s) {_few(steps)}"


def _installed_trl() -> str:
    from trl import __version__
    return __version__


def argument_differences(log: TRLLog, expected: dict, defaults: dict) -> list[tuple[str, str]]:
    """(key, line) for each setting of `expected`, and of `defaults` where the file has it, that a checkpoint's
    training_args.bin says otherwise: every checkpoint's, since a run resumed from a checkpoint under another
    GRPOConfig trained its earlier steps by the earlier file (the newest names only the last part); a line names
    the checkpoints where not all say it."""
    recipe = {**{k: _plain(v) for k, v in defaults.items()}, **expected}
    by_value: dict[tuple[str, str], list[int]] = {}
    for step, args in sorted(_read_files(log).items()):
        for key in [*expected, *(k for k in defaults if hasattr(args, k))]:
            if not _same(_argument(args, key), recipe[key]):
                by_value.setdefault((key, repr(_argument(args, key))), []).append(step)
    return [(key, f"{key} {value} ({_where(steps, log)}); the recipe's {recipe[key]!r}")
            for (key, value), steps in by_value.items()]


def steps(state: dict, path: Path | str = "trainer_state.json") -> pd.DataFrame:
    """Per optimizer step 1..global_step: the rollout tokens generated, their running total, and what TRL logged."""
    batch, last = state.get("train_batch_size"), state.get("global_step", 0)
    if not batch:
        raise DataError(f"{path}: no train_batch_size; allowed: a trainer_state.json that transformers wrote")
    order = [e.get("step") for e in state.get("log_history", []) if "loss" in e]
    wrong = [(key, value) for key, value, least in [("train_batch_size", batch, 1), ("global_step", last, 0),
                                                    *(("a log entry's step", step, 0) for step in order)]
             if not (_number(value) and float(value).is_integer() and value >= least)]
    if wrong:
        raise DataError(f"{path}: {wrong[0][0]} {wrong[0][1]!r}; allowed: a whole number (>= 1 for "
                        f"train_batch_size), as transformers writes a trainer_state.json")
    if order != sorted(set(order)):
        twice = sorted(s for s, n in Counter(order).items() if n > 1)
        raise DataError(f"{path}: log_history gives step(s) {_few(twice) if twice else 'out of order'}"
                        f"{' more than once' if twice else ''} (steps logged: {_few(order)}); allowed: one entry "
                        f"per step in order, as one run's trainer_state.json holds (a log joined from two runs, or "
                        f"a restarted run's, would count a step's tokens twice)")
    logged = _step_entries(state)  # a step's entry, not a summary
    after = [s for s in logged if s > last]
    if after:
        raise DataError(f"{path}: log_history has step(s) {_few(after)} after its global_step {last}; allowed: a "
                        f"log that ends at the step its trainer_state.json was saved at (a log of later steps is "
                        f"not the model saved beside it)")
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
    for key, (fits, allowed) in LOGGED.items():
        wrong = [s for s, e in enumerate(rows, start=1) if key in e and not fits(e[key])]
        if wrong:
            raise DataError(f"{path}: log_history's {key!r} at step(s) {_few(wrong)} is {rows[wrong[0] - 1][key]!r} at "
                            f"step {wrong[0]}; allowed: {allowed}")
    uneven = [s for s, e in enumerate(rows, start=1) if not _whole(e["completions/mean_length"], batch)]
    if uneven:
        mean = rows[uneven[0] - 1]["completions/mean_length"]
        raise DataError(f"{path}: at step(s) {_few(uneven)}, completions/mean_length x train_batch_size is not a whole "
                        f"number of tokens ({mean!r} x {batch} = {mean * batch:.6g} at step {uneven[0]}): TRL's mean "
                        f"was over other than train_batch_size completions, as in a run on several processes (its "
                        f"mean and num_tokens count every process's completions, train_batch_size one process's) or "
                        f"one whose step is several batches, whose rollout tokens would be undercounted; allowed: a "
                        f"run on one process with {', '.join(ONE_BATCH)} 1")
    counts = [_count(e["num_tokens"], 1) for e in rows]
    fell = [s for s in range(2, last + 1) if counts[s - 1] < counts[s - 2]]
    if fell:
        s = fell[0]
        raise DataError(f"{path}: num_tokens falls at step(s) {_few(fell)} ({counts[s - 2]} at step {s - 1}, "
                        f"{counts[s - 1]} at step {s}): a count restarted (a run resumed by a TRL that kept num_tokens "
                        f"outside its saved state, or a log joined from two runs); allowed: TRL's running count, "
                        f"which never falls (a run resumed by a TRL that keeps it in trainer_state.json)")
    frame = pd.DataFrame({
        "step": range(1, last + 1),
        "tokens": [_count(e["completions/mean_length"], batch) for e in rows],
        "num_tokens": counts,
        "loss": [float(e["loss"]) for e in rows], "grad_norm": [float(e.get("grad_norm", math.nan)) for e in rows],
        "lr": [float(e.get("learning_rate", math.nan)) for e in rows],
        "mean_length": [float(e["completions/mean_length"]) for e in rows],
        "max_length": [float(e.get("completions/max_length", math.nan)) for e in rows],
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


def _number(value) -> bool:
    """A JSON number, as transformers writes a logged value (NaN and infinity included), never a string or a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _at_least_0(value) -> bool:
    return _number(value) and math.isfinite(value) and value >= 0


# what each value the stored run takes from a step's log entry must be, where the entry has it (TOKEN_KEYS it must
# have): a diverged run's loss and grad_norm may be NaN or infinite, as transformers logs them; a step's time, the
# learning rate and the counts are finite and >= 0 (a negative or infinite step_time would move every later running
# total of the clock that the time bases read), the share of truncated completions between 0 and 1
LOGGED = {"completions/mean_length": (_at_least_0, "a finite count >= 0"),
          "num_tokens": (_at_least_0, "a finite count >= 0"),
          "loss": (_number, "a number"), "grad_norm": (_number, "a number"),
          "learning_rate": (_at_least_0, "a finite number >= 0"),
          "step_time": (_at_least_0, "a finite number of seconds >= 0"),
          "completions/max_length": (_at_least_0, "a finite count >= 0"),
          "completions/clipped_ratio": (lambda v: _at_least_0(v) and v <= 1, "a share from 0 to 1")}


def _count(value: float, batch: int) -> int:
    """A logged mean x `batch` (a finite number >= 0: LOGGED) as the whole count of tokens it stands for; rounded,
    since TRL's mean is a float32 sum over the batch divided by its size."""
    return round(value * batch)


def _whole(mean: float, batch: int) -> bool:
    """Whether `mean` x `batch` is a whole number, as TRL's mean over exactly `batch` completions gives: within
    float32's rounding of the mean (2^-24 of it, here 8 times that), far below the 1/k a mean over k x batch
    completions leaves where their sum is not a multiple of k (seen for steps of up to about 2^20 tokens). A sum
    that is a multiple (each step's, by chance) is not seen: TRL's log says nothing else of the processes."""
    product = mean * batch
    return abs(product - round(product)) <= max(1e-6, 2 ** -21 * product)


def _few(steps: list[int]) -> str:
    return ", ".join(map(str, steps[:5])) + (f" and {len(steps) - 5} more" if len(steps) > 5 else "")


def place(log: TRLLog, budget: int, unit: str, per_budget: int, horizon: float) -> tuple[int, list[Point]]:
    """The last step the stored run keeps (the protocol's stop, or the checkpoint read for B where that is later),
    and its budget points on the checkpoints: before B the checkpoint at or before the point's step, from B on the
    first at or after it (the protocol reads a run at its first evaluation at or after B)."""
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
        if index < per_budget:
            used = max([0, *(c for c in log.checkpoints if c <= step)])
        else:
            later = [c for c in log.checkpoints if c >= step and c <= len(steps_)]
            if not later:
                raise DataError(f"{log.folder}: no checkpoint at or after step {step}, where point {index} (B x "
                                f"{index / per_budget:g}) fell due (checkpoints at steps "
                                f"{', '.join(map(str, log.checkpoints))}); allowed: a folder saved at or after the "
                                f"step that reached B (the protocol reads a run at its first evaluation at or after "
                                f"B), e.g. save_strategy 'steps' with a final save")
            used = min(later)
        points.append(Point(index, step, used, used - step, totals[used] - totals[step]))
    return max(stop, *(p.checkpoint for p in points)), points


def unrecovered(log: TRLLog, points: list[Point]) -> list[str]:
    """What run.json says the TRL folder could not give, the points off their step included."""
    return [*UNRECOVERED, *log.unchecked, *(
        f"evaluation point {p.index}: due at step {p.due}, evaluated on "
        f"{f'checkpoint-{p.checkpoint}' if p.checkpoint else 'the initial model'} and recorded at its counts, "
        f"{abs(p.steps_off)} step(s) and {abs(p.tokens_off)} tokens {'before' if p.steps_off < 0 else 'after'} the "
        f"point's step" for p in points if p.steps_off)]


def iteration_rows(log: TRLLog, stop: int) -> list[dict]:
    """iterations.parquet's rows of steps 1..stop, NaN where TRL logs nothing (UNRECOVERED). The clock is unknown
    from a step without step_time on: a sum that skipped it would time every later step short, unseen."""
    nan, seconds = math.nan, log.steps["seconds"].cumsum(skipna=False)
    return [{"iteration": i, "tokens_total": int(row.tokens_total), "tokens_rollout": int(row.tokens_total),
             "tokens_continuation": 0, "tokens_discarded": 0, "updates": i + 1, "lr": row.lr, "loss": row.loss,
             "grad_norm": row.grad_norm, "reward_default": nan, "reward_strict": nan, "groups_all_wrong": nan,
             "groups_all_correct": nan, "groups_mixed": nan, "truncated_share": row.truncated_share,
             "mean_length": row.mean_length, "cand_pred_mean": nan, "chosen_pred_mean": nan, "prompts_distinct": nan,
             "t_select": nan, "t_generate": nan, "t_credit": nan, "t_update": nan, "t_sync": nan,
             "train_seconds": float(seconds.iloc[i]), "train_cpu_seconds": nan}
            for i, row in enumerate(log.steps.iloc[:stop].itertuples())]


def ingest(log: TRLLog, run: dict, budget: int, model, tokenizer, pool: pd.DataFrame,
           eval_sets: dict[str, pd.DataFrame], accept: bool = False):
    """(RunLog, the `ingested` block of run.json) of a finished TRL output folder (`read`) as run `run` (an ingested
    arm's effective config) under B `budget`; `model` is the study's initial model (point 0), `pool` its training
    problems. A folder whose run differs from the study's (its checkpoints' model or tokenizer: saved_model; its
    recipe, or prompts other than the pool's rendered by the study's tokenizer: `differing`) is refused by key, unless
    `accept`: then stored with them listed."""
    from mcgrpo.core.budget import unit as budget_unit
    from mcgrpo.integrations.saved_model import saved_model_differences
    from mcgrpo.integrations.trl import study_evaluator
    from mcgrpo.train.trainer import RunLog, record_evaluation
    from transformers import AutoModelForCausalLM
    if "ingested" not in (run["arm_config"].get("trainer") or {}):
        raise ConfigError(f"--arm: an arm not declared ingested (arm config {run['arm_config']}); allowed: an arm "
                          f"with trainer: {{ingested: {{trl_output: ...}}}}, whose runs are folders TRL made (a "
                          f"protocol arm's runs are trained under the protocol, never taken from a folder)")
    # config.json, generation_config.json, the tokenizer
    held, unsaid = saved_model_differences(log.checkpoints, model, tokenizer)
    found = [*held, *differing(log, run, prompt_lengths(run, tokenizer, pool))]
    differ = [line for _, line in found]
    if differ and not accept:
        raise DataError(f"{log.folder}: its run is not the study's: {'; '.join(differ)}; allowed: a run of the "
                        f"study's initial model and tokenizer, recipe and prompts, or accept_differences: true in the "
                        f"arm's trainer.ingested (or ingest --accept-differences), which stores it with the "
                        f"differences listed")
    stop, points = place(log, budget, budget_unit(run["budget"]), run["evaluation"]["per_budget"],
                         run["budget"]["horizon"])
    out, policies = RunLog(iterations=iteration_rows(log, stop)), {0: model}
    for used in sorted({p.checkpoint for p in points}):  # one evaluation per checkpoint, at its own counts
        group = [p for p in points if p.checkpoint == used]
        if used not in policies:
            policies = {used: AutoModelForCausalLM.from_pretrained(log.checkpoints[used], dtype=model.dtype)
                        .to(model.device), 0: model}
        row = out.iterations[used - 1] if used else {"tokens_total": 0, "train_seconds": 0.0}
        state = {"tokens_total": row["tokens_total"], "iteration": used, "updates": used,
                 "train_seconds": row["train_seconds"], "train_cpu_seconds": math.nan}
        record_evaluation(out, study_evaluator(run, policies[used], tokenizer, eval_sets), [p.index for p in group],
                          state, None)
    trained_with, silent = training_stack(log, stop)
    block = {"folder": str(log.folder.resolve()), "trainer_state": str(log.checkpoints[max(log.checkpoints)]
                                                                         / "trainer_state.json"),
             "token_keys": list(TOKEN_KEYS), "steps_logged": len(log.steps), "stop_step": stop,
             "points": [vars(p) for p in points], "unrecovered": [*unrecovered(log, points), *unsaid, *silent],
             "differences": differ, "differing_keys": list(dict.fromkeys(key for key, _ in found)),
             "accepted_differences": bool(differ), "saved_by": saved_by(log),
             # the stack that trained it, where the folder says; run.json's versions stay the evaluating stack's
             # (mcgrpo.train.job.versions, this process's): its evaluations were sampled and scored under it
             "trained_with": trained_with}
    return out, block


# TRL's model card (GRPOTrainer._save_checkpoint writes it into the output folder, not the checkpoint, before each
# checkpoint save; TRL 1.16): its "### Framework versions" lines "- TRL: 1.16.0", "- Transformers: 5.24.0",
# "- Pytorch: 2.13.0+cpu" (also Datasets and Tokenizers, which no run.json records), by run.json's names.
CARD, CARD_SECTION = "README.md", "### Framework versions"
CARD_NAMES = {"TRL": "trl", "Transformers": "transformers", "Pytorch": "torch"}


def training_stack(log: TRLLog, stop: int) -> tuple[dict[str, dict[str, str]], list[str]]:
    """({file: {name: version}}, lines on what is not recorded): the stack that trained the run, as its folder
    records it, for the alike check (mcgrpo.analysis.alike), since run.json's versions are the evaluating stack's.
    Read: each checkpoint the run keeps (steps 1..`stop`) through its config.json's transformers_version (written by
    the transformers that saved it: a run resumed under another differs there), and TRL's model card, the stack of
    the folder's last save. TRL is silent on the torch and TRL of every save but the last, and on which steps the
    card's stack trained: the alike check holds the files to each other where they record one key. A file missing
    or unreadable records nothing, said in a line: never a guess."""
    found, silent = {}, []
    files = [(f"checkpoint-{step}/config.json", _saved_with) for step in sorted(log.checkpoints) if step <= stop]
    for name, reader in [*files, (CARD, _card_versions)]:
        versions, problem = reader(log.folder / name)
        if versions:
            found[name] = versions
        if problem:
            silent.append(problem)
    return found, silent


def _saved_with(path: Path) -> tuple[dict[str, str], str | None]:
    """({'transformers': version}, None) of a checkpoint's config.json; ({}, the line why) where it does not say."""
    why = f"the transformers that saved {path.parent.name} is not recorded"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, f"{path}: file not found; {why}"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return {}, f"{path}: not read ({type(e).__name__}: {e}); {why}"
    value = config.get("transformers_version") if isinstance(config, dict) else None
    if not _version(value):
        return {}, f"{path}: transformers_version {value!r}, not a version; {why}"
    return {"transformers": value}, None


def _card_versions(path: Path) -> tuple[dict[str, str], str | None]:
    """({name: version}, None) of TRL's model card's Framework versions; what it lacks is said in a line (a card
    of another writer, edited, or none: a folder copied without it)."""
    why = "the stack of the folder's last save is not recorded"
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}, f"{path}: file not found (TRL's model card); {why}"
    except (OSError, UnicodeDecodeError) as e:
        return {}, f"{path}: not read ({type(e).__name__}: {e}); {why}"
    if CARD_SECTION not in (line.strip() for line in lines):
        return {}, f"{path}: no '{CARD_SECTION}' section (TRL's model card lists its stack there); {why}"
    section = lines[[line.strip() for line in lines].index(CARD_SECTION) + 1:]
    section = section[:next((i for i, line in enumerate(section) if line.startswith("#")), len(section))]
    said = {}
    for line in section:
        label, _, value = line.strip().removeprefix("- ").partition(": ")
        if label in CARD_NAMES:
            said.setdefault(CARD_NAMES[label], set()).add(value.strip())
    versions = {name: min(values) for name, values in said.items() if len(values) == 1 and _version(*values)}
    lacking = [label for label, name in CARD_NAMES.items() if name not in versions]  # none, or two that disagree
    if not lacking:
        return versions, None
    return versions, (f"{path}: no single '- <name>: <version>' line under '{CARD_SECTION}' for "
                      f"{', '.join(lacking)}; the {', '.join(CARD_NAMES[label] for label in lacking)} of the "
                      f"folder's last save not recorded")


def _version(value) -> bool:
    """A version string as packages give theirs (no space: never a sentence or an empty line)."""
    return isinstance(value, str) and bool(value) and not any(c.isspace() for c in value)


def saved_by(log: TRLLog) -> str:
    """When the run had trained, at the latest: the UTC time its earliest checkpoint was written (a file time, which
    a copy moves later, never earlier), the preregistration's start of training for the run (mcgrpo.analysis.prereg:
    a lock after it is late)."""
    from datetime import datetime, timezone
    first = min(path.stat().st_mtime for path in log.checkpoints.values())
    return datetime.fromtimestamp(first, timezone.utc).isoformat(timespec="seconds")


def needed(path: str | Path, what: str, config: str = "STUDY.yaml") -> Path:
    """`path`, which ingest reads; where it is missing, the one command that makes it."""
    if not Path(path).exists():
        raise MissingFile(f"{path}: file not found ({what}); make it with: snakemake --cores 1 --configfile "
                          f"{config} {path}")
    return Path(path)


def budget_of(run: dict, path: str | Path, config: str = "STUDY.yaml"):
    """B: the config's, where it gives it (tokens, or iterations); else the study's calibrated budget.parquet."""
    from mcgrpo.core import store
    from mcgrpo.core.budget import budget_table, from_table
    b, name = run["budget"], run["model"]["name"]
    if b.get("iterations") is not None:
        return from_table(budget_table(name, [], b["iterations"], "iterations", unit="iterations"))
    if b.get("tokens") is not None:
        return from_table(budget_table(name, [], b["tokens"], "config"))
    return from_table(store.read_contract(needed(path, "the calibrated B", config), "budget"))


def store_run(folder: str | Path, run: dict, files: dict[str, str], accept: bool = False,
              config: str = "STUDY.yaml") -> dict:
    """Ingest `folder` as run `run` into its run folder files["out"] (the study's model and data from `files`, B from
    the config or `files`, as the train job reads them), written as the train job writes a run; the `ingested`
    block. `config` names the study file in the messages that say how to make a missing input."""
    from datetime import datetime, timezone

    from mcgrpo.train import models
    from mcgrpo.train.job import write_run
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    trl_log = read(folder)  # the refusals first, before any model is loaded
    B = budget_of(run, files["budget"], config)
    pool, evals, evaluated_on = _study_data(run, files, config)
    model, tokenizer = models.load(needed(files["model"], "the study's initial model", config))
    log, block = ingest(trl_log, run, B, model, tokenizer, pool, evals, accept)
    write_run(Path(files["out"]), run, B, log, model, {
        "started": started, "ended": datetime.now(timezone.utc).isoformat(timespec="seconds"), "attempts": [],
        "tracking": "none", "ingested": block,
        # what its numbers depend on, held as a trained run's are (mcgrpo.core.run_data): the sets its checkpoints
        # were evaluated on, and the model of point 0 whose tokenizer read every checkpoint's completions
        run_data.DATA: evaluated_on, run_data.MODEL: models.fingerprint(model, tokenizer)})
    return block


def _study_data(run: dict, files: dict[str, str], config: str) -> tuple[pd.DataFrame, dict, dict[str, str]]:
    """(pool, evaluation sets, their fingerprints) of the study's data folder, checked as a trained run's are."""
    from mcgrpo import data
    from mcgrpo.data.checks import check_run_data
    folder = needed(files["data"], "the study's data", config)
    pool, evals = data.read(folder, run["evaluation"]["sets"])
    check_run_data(pool, evals, run, str(folder))
    return pool, evals, run_data.fingerprint(folder, run["evaluation"]["sets"])


def store_arm_run(run: dict, files: dict[str, str], config: str = "STUDY.yaml", accept: bool = False) -> dict:
    """The train job of an ingested arm: its seed's folder (trainer.ingested.trl_output) stored as the run, if the
    folder still says what it said when the run was planned (its identity); `accept` as the arm's
    accept_differences (`mcgrpo ingest --accept-differences`: the run's identity stays the arm's)."""
    block = run["arm_config"]["trainer"]["ingested"]
    folder = output_folder(block, run["seed"])
    if ingested_identity(block, run["seed"]) != run["ingested"]:
        raise ConfigError(f"{folder}: changed since this run was planned (its checkpoints are not the ones the "
                          f"run's identity names: a log, arguments or weights rewritten, a checkpoint added or "
                          f"removed); allowed: rerun the workflow, which plans the folder as it is now")
    return store_run(folder, run, files, accept or bool(block.get("accept_differences")), config)
