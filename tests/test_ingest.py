"""`mcgrpo ingest`: a finished TRL output folder stored as a TRL arm's run (mcgrpo.integrations.ingest).

Fast tier (no TRL needed): a hand-written trainer_state.json, its token count and budget points against hand-computed
numbers, the refusals by name, and a whole ingest of tiny-model checkpoints into a run folder that verifies and that
`contrast` reads. Slow tier (TRL installed, `make test-trl`): a real TRL run saved with checkpoints, ingested, its
count equal to the protocol's own count of the same run and its store clean under `check-store`.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, SMALL_STUDY
from mcgrpo import cli, studies
from mcgrpo.core import config as study_config
from mcgrpo.core.errors import ConfigError, DataError
from mcgrpo.integrations import ingest

# A batch of 8 completions (2 prompts x 4) per step, 10 prompt tokens per completion; TRL's logged mean lengths.
MEAN_LENGTHS = [20.5, 22.0, 21.875, 24.25, 23.0]
TOKENS = [164, 176, 175, 194, 184]  # 20.5 x 8, 22 x 8, ... : the completion tokens of each step
TOTALS = [164, 340, 515, 709, 893]
_ABSENT = object()  # an _arguments edit: the field left out of training_args.bin


def _state(mean_lengths=MEAN_LENGTHS, batch: int = 8, prompt_tokens: int = 80, drop: str | None = None) -> dict:
    entries, seen = [], 0
    for step, length in enumerate(mean_lengths, start=1):
        seen += round(length * batch) + prompt_tokens
        entry = {"step": step, "loss": 0.01 * step, "grad_norm": 0.5, "learning_rate": 1e-4, "num_tokens": seen,
                 "completions/mean_length": length, "completions/clipped_ratio": 0.125, "step_time": 2.0}
        entries.append({k: v for k, v in entry.items() if k != drop})
    entries.append({"step": len(mean_lengths), "train_runtime": 10.0, "train_loss": 0.03})  # TRL's summary entry
    return {"global_step": len(mean_lengths), "train_batch_size": batch, "logging_steps": 1, "log_history": entries,
            "num_input_tokens_seen": seen}  # TRL's running count, which it logs as num_tokens


def saved_state(state: dict, step: int) -> dict:
    """The trainer_state.json TRL saves into checkpoint-<step> of the run whose newest log is `state`: the log up to
    that step and TRL's count there (the newest checkpoint's is `state` itself)."""
    if step == state["global_step"]:
        return state
    log = [e for e in state["log_history"] if e["step"] <= step and "loss" in e]
    counted = {"num_input_tokens_seen": log[-1]["num_tokens"]} if log and "num_tokens" in log[-1] else {}
    return {**state, "global_step": step, "log_history": log, **counted}


def write_states(out: Path, state: dict, saved) -> None:
    """Each checkpoint's own trainer_state.json, as TRL saves it (`saved_state`)."""
    for step in saved:
        (out / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(saved_state(state, step)))


def _folder(tmp_path: Path, state: dict, saved=(2, 4, 5)) -> Path:
    out = tmp_path / "trl-out"
    for step in saved:
        (out / f"checkpoint-{step}").mkdir(parents=True)
    write_states(out, state, saved)
    return out


def test_the_tokens_of_each_step_are_trls_mean_length_times_its_batch(tmp_path):
    """Not num_tokens' steps (which include the 80 prompt tokens), not the mean length alone."""
    log = ingest.read(_folder(tmp_path, _state()))
    assert log.steps["tokens"].tolist() == TOKENS and log.steps["tokens_total"].tolist() == TOTALS
    assert list(log.checkpoints) == [2, 4, 5]
    rows = ingest.iteration_rows(log, 4)
    assert [r["tokens_total"] for r in rows] == TOTALS[:4] and [r["updates"] for r in rows] == [1, 2, 3, 4]
    assert [r["train_seconds"] for r in rows] == [2.0, 4.0, 6.0, 8.0] and rows[0]["tokens_continuation"] == 0


def test_a_step_without_step_time_leaves_the_clock_unknown_from_it_on_not_a_step_shorter(tmp_path):
    """A step whose log entry has no step_time: its time is unknown, and so is every later running total. Before,
    the sum skipped it (pandas' cumsum), so every later evaluation recorded a clock short by that step's time, which
    the time bases read without a word; now unknown (NaN), which they refuse by name (contrasts._clocked)."""
    state = _state()
    del state["log_history"][1]["step_time"]
    rows = ingest.iteration_rows(ingest.read(_folder(tmp_path, state)), 5)
    assert rows[0]["train_seconds"] == 2.0
    assert all(r["train_seconds"] != r["train_seconds"] for r in rows[1:])  # NaN from step 2 on


def test_budget_points_fall_due_at_the_first_step_past_them_and_use_the_checkpoint_at_or_before_it(tmp_path):
    """B = 600, 4 points per B: 150, 300, 450 and 600 tokens fall due at steps 1, 2, 3 and 4 (164, 340, 515, 709);
    the run stops at step 4. Checkpoints at steps 2, 4, 5: point 1 is read on the initial model (164 tokens before
    it), point 3 on checkpoint-2 (one step, 175 tokens before), never on a checkpoint after its step."""
    log = ingest.read(_folder(tmp_path, _state()))
    stop, points = ingest.place(log, 600, "tokens", 4, 1.0)
    assert stop == 4
    assert [(p.index, p.due, p.checkpoint, p.steps_off, p.tokens_off) for p in points] == [
        (0, 0, 0, 0, 0), (1, 1, 0, -1, -164), (2, 2, 2, 0, 0), (3, 3, 2, -1, -175), (4, 4, 4, 0, 0)]
    said = ingest.unrecovered(log, points)
    assert ("evaluation point 1: due at step 1, evaluated on the initial model and recorded at its counts, 1 step(s) "
            "and 164 tokens before the point's step") in said
    assert ("evaluation point 3: due at step 3, evaluated on checkpoint-2 and recorded at its counts, 1 step(s) and "
            "175 tokens before the point's step") in said
    assert not any(s.startswith("evaluation point 2") for s in said)
    assert any(s.startswith("tokens_continuation") for s in said)
    assert any(s.startswith("the reward: TRL's log names the run's reward functions") for s in said)
    assert any(s.startswith("processes: how many ran the run (TRL's log does not say); one is assumed") for s in said)
    assert any(s.endswith("training_args.bin: not read (FileNotFoundError: [Errno 2] No such file or directory: "
                          f"'{log.checkpoints[5] / 'training_args.bin'}'), so gradient_accumulation_steps, "
                          "steps_per_generation, num_iterations = 1 is assumed, not checked, nor the GRPOConfig's "
                          "settings other than the batch and learning rate the log shows") for s in said), said


def test_the_point_at_b_is_read_on_the_first_checkpoint_at_or_after_it_and_the_run_kept_to_it(tmp_path):
    """Checkpoints at steps 2 and 5 only: B (600) falls due at step 4 (709 tokens), which has no checkpoint. The
    protocol reads a run at its first evaluation at or after B: checkpoint-5, 184 tokens later, and the stored run
    keeps its steps up to 5; never checkpoint-2 (340 tokens) under B's name."""
    log = ingest.read(_folder(tmp_path, _state(), saved=(2, 5)))
    stop, points = ingest.place(log, 600, "tokens", 4, 1.0)
    assert stop == 5 and (points[-1].index, points[-1].checkpoint, points[-1].steps_off, points[-1].tokens_off) == (
        4, 5, 1, 184)
    assert ("evaluation point 4: due at step 4, evaluated on checkpoint-5 and recorded at its counts, 1 step(s) and "
            "184 tokens after the point's step") in ingest.unrecovered(log, points)


def test_a_folder_without_a_checkpoint_at_or_after_b_is_refused_by_name(tmp_path):
    log = ingest.read(_folder(tmp_path, _state(MEAN_LENGTHS[:4]), saved=(2, 3, 4)))  # ends at step 4
    del log.checkpoints[4]  # its log kept, checkpoint-4's model not (a folder's trainer_state is its newest's)
    with pytest.raises(DataError, match=r"no checkpoint at or after step 4, where point 4 \(B x 1\) fell due "
                                        r"\(checkpoints at steps 2, 3\)"):
        ingest.place(log, 600, "tokens", 4, 1.0)


def test_an_equal_iteration_study_places_its_points_by_steps(tmp_path):
    stop, points = ingest.place(ingest.read(_folder(tmp_path, _state())), 4, "iterations", 4, 1.0)
    assert stop == 4 and [(p.index, p.due, p.checkpoint) for p in points] == [
        (0, 0, 0), (1, 1, 0), (2, 2, 2), (3, 3, 2), (4, 4, 4)]


@pytest.mark.parametrize("case, message", [
    ("no checkpoints", r"trl-out: no checkpoint-<step>/ folder"),
    ("no trainer_state", r"checkpoint-5/trainer_state.json: file not found"),
    ("no num_tokens", r"trainer_state.json: log_history lacks 'num_tokens' at step\(s\) 1, 2, 3, 4, 5"),
    ("no mean length", r"lacks 'completions/mean_length'"),
    ("every other step", r"no entry for step\(s\) 2, 4 of 1..5 \(logging_steps 2\)"),
    ("batch overstated", r"at step\(s\) 1, 2, 3, 4, 5, num_tokens grew by less than the completion tokens"),
    ("accumulating", r"checkpoint-5/training_args.bin: gradient_accumulation_steps 2; allowed: 1"),
    ("short of B", r"ends at step 5 having spent 893 tokens of horizon x B = 1000"),
    ("a step logged twice", r"log_history gives step\(s\) 3 more than once \(steps logged: 1, 2, 3, 3, 4 and 1 "
                            r"more\); allowed: one entry per step in order"),
    ("steps out of order", r"log_history gives step\(s\) out of order \(steps logged: 1, 2, 4, 3, 5\)"),
    ("a stale checkpoint", r"checkpoint-4/trainer_state.json: its log differs from the newest checkpoint's at "
                           r"step\(s\) 3, 4; allowed: checkpoints of one run"),
    ("a renamed checkpoint", r"checkpoint-4/trainer_state.json: global_step 3 in checkpoint-4; allowed: a checkpoint "
                             r"saved at the step its folder names"),
    ("a zero-padded copy", r"trl-out: checkpoint-04: not a name TRL gives a checkpoint; allowed: checkpoint-<step> as "
                           r"TRL saves it, the step without leading zeros"),
])
def test_a_folder_that_cannot_be_ingested_is_refused_by_name(tmp_path, case, message):
    state = _state(drop={"no num_tokens": "num_tokens", "no mean length": "completions/mean_length"}.get(case))
    if case == "every other step":
        state["logging_steps"] = 2
        state["log_history"] = state["log_history"][::2]
    if case == "batch overstated":  # 8 completions of 10 prompt tokens a step, the state saying 16
        state["train_batch_size"] = 16
    folder = _folder(tmp_path, state)
    if case == "no checkpoints":
        for saved in folder.iterdir():
            (saved / "trainer_state.json").unlink(missing_ok=True)
            saved.rmdir()
    if case == "accumulating":  # what a GRPOConfig pickles: its fields (trl's class needs trl to unpickle)
        import torch
        from types import SimpleNamespace
        torch.save(SimpleNamespace(gradient_accumulation_steps=2, steps_per_generation=None, num_iterations=1),
                   folder / "checkpoint-5" / "training_args.bin")
    if case == "no trainer_state":
        (folder / "checkpoint-5" / "trainer_state.json").unlink()
    if case == "a zero-padded copy":  # beside checkpoint-4: before, one or the other was read by the directory's order
        (folder / "checkpoint-04").mkdir()
        (folder / "checkpoint-04" / "trainer_state.json").write_text(json.dumps(saved_state(state, 4)))
    entries = state["log_history"]
    if case in ("a step logged twice", "steps out of order"):  # a log joined from a restarted run's two logs
        state["log_history"] = (entries[:3] + entries[2:] if case == "a step logged twice"
                                else [entries[i] for i in (0, 1, 3, 2, 4, 5)])
        (folder / "checkpoint-5" / "trainer_state.json").write_text(json.dumps(state))
    if case in ("a stale checkpoint", "a renamed checkpoint"):  # checkpoint-4 of an abandoned run, or renamed
        own = (_state([20.5, 22.0, 30.0, 30.0]) if case == "a stale checkpoint" else _state(MEAN_LENGTHS[:3]))
        (folder / "checkpoint-4" / "trainer_state.json").write_text(json.dumps(own))
    with pytest.raises(DataError, match=message):
        ingest.place(ingest.read(folder), 1000 if case == "short of B" else 600, "tokens", 4, 1.0)


# A run on 2 processes of 8 completions each: TRL gathers both (16 completions a step, these their tokens), while
# trainer_state.json's train_batch_size is one process's 8 (transformers' per-device batch).
TWO_PROCESSES = [331, 350, 347, 390, 367]


def _two_processes() -> dict:
    state = _state([t / 16 for t in TWO_PROCESSES])
    seen = 0
    for entry, tokens in zip(state["log_history"], TWO_PROCESSES):  # 16 prompts of 10 tokens a step
        seen += tokens + 160
        entry["num_tokens"] = seen
    return state


def test_a_mean_over_more_completions_than_the_batch_is_refused_not_counted_at_one_batchs_tokens(tmp_path):
    """TRL's completions/mean_length and num_tokens gather every process's completions (trl/trainer/grpo_trainer.py,
    `agg_completion_lengths`), train_batch_size is one process's: a run on 2 processes logs the mean of 16
    completions beside a batch of 8. Before, its steps were counted at mean x 8, half what it generated (166, 175,
    174, 195, 184 for 331, 350, 347, 390, 367), and only the prompt check, a difference accept_differences lets
    through, said anything: the arm's point B was read at twice the study's budget. A step of two batches (gradient
    accumulation where training_args.bin cannot be read) logs alike. A mean that x 8 is no whole number proves it."""
    with pytest.raises(DataError, match=r"checkpoint-5/trainer_state.json: at step\(s\) 1, 3, 5, "
                                        r"completions/mean_length x train_batch_size is not a whole number of tokens "
                                        r"\(20.6875 x 8 = 165.5 at step 1\): TRL's mean was over other than "
                                        r"train_batch_size completions, as in a run on several processes.*allowed: a "
                                        r"run on one process with gradient_accumulation_steps, steps_per_generation, "
                                        r"num_iterations 1"):
        ingest.read(_folder(tmp_path, _two_processes()))


def test_a_mean_over_exactly_the_batch_is_a_whole_count_at_any_batch_size(tmp_path):
    """TRL's mean is a float32 (a sum over the batch, divided by its size): 250 tokens over 12 completions logs
    20.83333396911621, whose x 12 is 250.0000076; counted as 250, never refused as uneven (a step of 4M tokens
    included), while the mean of twice the batch is seen for steps of up to 1M tokens."""
    import numpy as np
    sums = [250, 263, 301, 277, 289]
    state = _state([float(np.float32(t / 12)) for t in sums], batch=12, prompt_tokens=120)
    assert ingest.read(_folder(tmp_path, state)).steps["tokens"].tolist() == sums
    for total, batch in ((4_000_003, 1024), (1_000_003, 1024), (1_048_575, 96), (7, 3)):
        assert ingest._whole(float(np.float32(total / batch)), batch)
        assert total > 2_000_000 or not ingest._whole(float(np.float32(total / (2 * batch))), batch)


@pytest.mark.parametrize("key, step, value", [
    ("completions/mean_length", 2, -22.0),  # before: counted, the run's running total falling
    ("completions/mean_length", 3, None),  # before: TypeError
    ("completions/mean_length", 4, float("nan")),
    ("num_tokens", 2, None),
    ("num_tokens", 4, float("inf")),
])
def test_a_logged_count_that_is_no_count_is_refused_by_step(tmp_path, key, step, value):
    state = _state()
    state["log_history"][step - 1][key] = value
    with pytest.raises(DataError, match=rf"checkpoint-5/trainer_state.json: log_history's '{key}' at step\(s\) "
                                        rf"{step} is {re.escape(repr(value))} at step {step}; allowed: a finite count "
                                        rf">= 0"):
        ingest.read(_folder(tmp_path, state))


@pytest.mark.parametrize("key, value, allowed", [
    ("step_time", -1.5, "a finite number of seconds >= 0"),  # before: the clock 1.5 s short from step 2 on, unseen
    ("step_time", float("inf"), "a finite number of seconds >= 0"),  # before: every later running total infinite
    ("step_time", "2.0", "a finite number of seconds >= 0"),  # before: a string read as a number
    ("learning_rate", float("nan"), "a finite number >= 0"),  # before: left out of the constant-rate check
    ("learning_rate", None, "a finite number >= 0"),  # before: TypeError
    ("completions/clipped_ratio", 3.0, "a share from 0 to 1"),  # before: stored as truncated_share 3.0
    ("loss", "x", "a number"),  # before: ValueError
])
def test_a_logged_value_that_is_not_what_its_key_says_is_refused_by_step(tmp_path, key, value, allowed):
    state = _state()
    state["log_history"][1][key] = value
    with pytest.raises(DataError, match=rf"checkpoint-5/trainer_state.json: log_history's '{key}' at step\(s\) 2 is "
                                        rf"{re.escape(repr(value))} at step 2; allowed: {allowed}$"):
        ingest.read(_folder(tmp_path, state))


def test_a_diverged_runs_nan_loss_and_infinite_grad_norm_are_stored_as_logged(tmp_path):
    """transformers writes NaN and Infinity into trainer_state.json as the run logged them: what the run did."""
    state = _state()
    state["log_history"][1].update(loss=float("nan"), grad_norm=float("inf"))
    rows = ingest.iteration_rows(ingest.read(_folder(tmp_path, state)), 5)
    assert rows[1]["loss"] != rows[1]["loss"] and rows[1]["grad_norm"] == float("inf")


@pytest.mark.parametrize("edit, message", [
    ("a later step", r"log_history has step\(s\) 6 after its global_step 5; allowed: a log that ends at the step its "
                     r"trainer_state.json was saved at"),  # before: 'differs from the newest checkpoint's', itself
    ("batch as text", r"train_batch_size '8'; allowed: a whole number \(>= 1 for train_batch_size\)"),  # TypeError
    ("an entry without its step", r"a log entry's step None; allowed: a whole number"),  # before: KeyError
])
def test_a_log_not_shaped_as_transformers_writes_one_is_refused_by_name(tmp_path, edit, message):
    state, entries = _state(), _state()["log_history"]
    if edit == "a later step":  # global_step 5, the log going on to a step 6
        state["log_history"] = [*entries[:5], {**entries[4], "step": 6, "num_tokens": 1300}, entries[5]]
    if edit == "batch as text":
        state["train_batch_size"] = "8"
    if edit == "an entry without its step":
        del state["log_history"][1]["step"]
    folder = _folder(tmp_path, _state())
    (folder / "checkpoint-5" / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(DataError, match=r"checkpoint-5/trainer_state.json: " + message):
        ingest.read(folder)


def test_num_tokens_that_falls_is_refused_as_a_restarted_count(tmp_path):
    """A TRL that kept num_tokens on the trainer, not in the state it saves, counts again from 0 when a run resumes
    (TRL 1.16 counts it in TrainerState.num_input_tokens_seen, which transformers restores): the resumed run's
    log falls at the step it resumed at. Refused by that name (before: as a step that was not one batch)."""
    state = _state()
    seen = 0
    for entry, tokens in zip(state["log_history"][3:5], TOKENS[3:]):  # resumed at step 4 from checkpoint-3
        seen += tokens + 80
        entry["num_tokens"] = seen
    with pytest.raises(DataError, match=r"checkpoint-5/trainer_state.json: num_tokens falls at step\(s\) 4 \(755 at "
                                        r"step 3, 274 at step 4\): a count restarted .*allowed: TRL's running count, "
                                        r"which never falls"):
        ingest.read(_folder(tmp_path, state))


def _fewer_tokens(state: dict) -> dict:
    """`state`'s log with 4 tokens fewer per completion at every step, completions/mean_length and num_tokens alike
    (each step's prompt tokens as they were): the edit that would make the run look cheaper in tokens."""
    forged = copy.deepcopy(state)
    for entry in forged["log_history"]:
        if "loss" in entry:
            entry["completions/mean_length"] -= 4
            entry["num_tokens"] -= 32 * entry["step"]
    return forged


def test_token_counts_edited_in_every_checkpoints_log_but_not_trls_saved_count_are_refused(tmp_path):
    """TRL keeps one running count, logged as num_tokens and saved by transformers as num_input_tokens_seen: a log
    whose mean lengths and num_tokens were lowered alike in every checkpoint (so that the checkpoints agree and the
    prompt tokens stay in range) was counted at 32 tokens a step fewer than the run generated, unseen, before."""
    state, folder = _state(), tmp_path / "trl-out"
    for step in (2, 4, 5):
        (folder / f"checkpoint-{step}").mkdir(parents=True)
        kept = saved_state(state, step)["num_input_tokens_seen"]
        (folder / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(
            {**saved_state(_fewer_tokens(state), step), "num_input_tokens_seen": kept}))
    with pytest.raises(DataError, match=r"checkpoint-2/trainer_state.json: num_input_tokens_seen 500, while its "
                                        r"log's num_tokens at step 2 is 436; allowed: TRL's one running count"):
        ingest.read(folder)


def test_a_log_and_count_edited_alike_are_stored_as_they_say_and_the_run_says_so(tmp_path):
    """What no file of the folder can check: the run's tokens and seconds are its log's own records, and its
    run.json says so (ingested.unrecovered), the words every reader of the run sees."""
    forged = _fewer_tokens(_state())
    forged["num_input_tokens_seen"] = forged["log_history"][-2]["num_tokens"]  # step 5's
    log = ingest.read(_folder(tmp_path, forged))
    assert log.steps["tokens_total"].tolist() == [t - 32 * s for s, t in enumerate(TOTALS, start=1)]
    assert ("tokens_rollout, train_seconds: the TRL log's own records (completions/mean_length x train_batch_size, "
            "step_time), held to each other (num_tokens, num_input_tokens_seen, the prompts' lengths), not "
            "recounted: no file of the folder holds the completions' tokens or a clock, so a log edited alike in "
            "every checkpoint is stored as it says") in ingest.unrecovered(log, [])


def test_a_checkpoint_without_its_own_log_is_refused_not_evaluated_as_the_runs(tmp_path):
    """checkpoint-2 copied from another run without its trainer_state.json (TRL writes one into every checkpoint):
    nothing ties its model to the log. Before, it was evaluated as this run's model at step 2 (points 2 and 3)."""
    folder = _folder(tmp_path, _state())
    (folder / "checkpoint-2" / "trainer_state.json").unlink()
    with pytest.raises(DataError, match=r"checkpoint-2/trainer_state.json: file not found; allowed: every checkpoint "
                                        r"as TRL saves it, with its own trainer_state.json"):
        ingest.read(folder)


def test_evaluations_and_the_summary_in_the_log_leave_the_count_as_it_is(tmp_path):
    """Not a leak: TRL's own evaluations (eval_strategy 'steps') log entries of their own at a step, with eval_
    keys (eval_num_tokens, TRL's count, which only training grows), and its summary has train_loss: neither is a
    step's entry. The steps read are the same with them as without, and a step's entry missing one key is named."""
    state = _state()
    plain = ingest.read(_folder(tmp_path / "plain", state)).steps
    entries = [e for e in state["log_history"] if "loss" in e]
    evals = [{"step": s, "epoch": 0.1 * s, "eval_loss": 0.2, "eval_num_tokens": entries[s - 1]["num_tokens"],
              "eval_completions/mean_length": 40.0, "eval_runtime": 3.0} for s in (2, 4)]
    state["log_history"] = [*entries[:2], evals[0], *entries[2:4], evals[1], *state["log_history"][4:]]
    pd.testing.assert_frame_equal(ingest.read(_folder(tmp_path / "evals", state)).steps, plain)
    del entries[2]["num_tokens"]
    with pytest.raises(DataError, match=r"log_history lacks 'num_tokens' at step\(s\) 3; allowed"):
        ingest.read(_folder(tmp_path / "one", state))


# -- the stack that trained the run, as its folder records it ---------------------------------------------------------

def trl_card(name: str = "trl-out", trl: str = "1.16.0", transformers: str = "5.24.0", torch: str = "2.13.0+cpu",
             lines: tuple[str, ...] | None = None) -> str:
    """README.md as TRL 1.16's GRPOTrainer writes it into its output folder (trl/templates/lm_model_card.md, seen in a
    real run: test_a_real_trl_runs_ingested_count_is_the_protocols_and_its_store_verifies), its quick start, paper
    and citations cut; `lines`: the Framework versions section's lines instead of TRL's."""
    versions = lines if lines is not None else (f"- TRL: {trl}", f"- Transformers: {transformers}",
                                                f"- Pytorch: {torch}", "- Datasets: 5.2.0", "- Tokenizers: 0.23.3")
    return "\n".join(["---", "library_name: transformers", f"model_name: {name}", "tags:",
                      "- generated_from_trainer", "- trl", "- grpo", "licence: license", "---", "",
                      f"# Model Card for {name}", "",
                      "It has been trained using [TRL](https://github.com/huggingface/trl).", "",
                      "## Training procedure", "", "This model was trained with GRPO.", "",
                      "### Framework versions", "", *versions, "", "## Citations", "", "Cite TRL as:", ""])


def saved_with(folder: Path, **versions) -> None:
    """Each checkpoint's config.json as transformers saves it, its transformers_version {'checkpoint-2': ...}."""
    for name, version in versions.items():
        (folder / name / "config.json").write_text(json.dumps({"model_type": "llama", "transformers_version": version},
                                                              indent=2))


def _stacked(tmp_path: Path, card: str | None = None, **versions) -> Path:
    """The hand-written log's folder (checkpoints 2, 4, 5) with config.json in each (5.24.0 unless `versions` says)
    and TRL's card (`card`; None: trl_card())."""
    folder = _folder(tmp_path, _state())
    saved_with(folder, **{**{f"checkpoint-{s}": "5.24.0" for s in (2, 4, 5)}, **versions})
    (folder / "README.md").write_text(card if card is not None else trl_card())
    return folder


def test_the_stack_that_trained_the_run_is_what_its_kept_checkpoints_and_trls_card_record(tmp_path):
    """Steps 1..4 kept: checkpoint-5's config.json is training the run does not keep, not read."""
    folder = _stacked(tmp_path, **{"checkpoint-5": "5.25.0"})
    assert ingest.training_stack(ingest.read(folder), 4) == ({
        "checkpoint-2/config.json": {"transformers": "5.24.0"}, "checkpoint-4/config.json": {"transformers": "5.24.0"},
        "README.md": {"trl": "1.16.0", "transformers": "5.24.0", "torch": "2.13.0+cpu"}}, [])


@pytest.mark.parametrize("case, recorded, said", [
    ("no card", {}, "README.md: file not found (TRL's model card); the stack of the folder's last save is not "
                    "recorded"),
    ("another card", {}, "README.md: no '### Framework versions' section (TRL's model card lists its stack there); "
                         "the stack of the folder's last save is not recorded"),
    ("no torch", {"trl": "1.16.0", "transformers": "5.24.0"},
     "README.md: no single '- <name>: <version>' line under '### Framework versions' for Pytorch; the torch of the "
     "folder's last save not recorded"),
    ("two trl", {"transformers": "5.24.0", "torch": "2.13.0+cpu"},
     "README.md: no single '- <name>: <version>' line under '### Framework versions' for TRL; the trl of the "
     "folder's last save not recorded"),
    ("blank torch", {"trl": "1.16.0", "transformers": "5.24.0"}, "for Pytorch; the torch of the folder's last save"),
    ("not text", {}, "README.md: not read (UnicodeDecodeError: "),
])
def test_a_card_that_does_not_say_records_nothing_of_what_it_lacks_and_says_so(tmp_path, case, recorded, said):
    """Never a crash, never a guess: what the card lacks is not recorded, and the line names the file and the key."""
    card = {"another card": "# my model\n\n- Pytorch: 2.11.0\n",
            "no torch": trl_card(lines=("- TRL: 1.16.0", "- Transformers: 5.24.0")),
            "two trl": trl_card(lines=("- TRL: 1.16.0", "- TRL: 1.14.0", "- Transformers: 5.24.0",
                                       "- Pytorch: 2.13.0+cpu")),
            "blank torch": trl_card(torch="")}.get(case, trl_card())
    folder = _stacked(tmp_path, card)
    if case == "no card":
        (folder / "README.md").unlink()
    if case == "not text":
        (folder / "README.md").write_bytes(b"\xff\xfe### Framework versions\n- Pytorch: \x80")
    found, silent = ingest.training_stack(ingest.read(folder), 4)
    assert found.get("README.md", {}) == recorded and found["checkpoint-4/config.json"] == {"transformers": "5.24.0"}
    assert len(silent) == 1 and silent[0].startswith(str(folder)) and said in silent[0], silent


@pytest.mark.parametrize("text, said", [
    ('{"model_type": "llama"}', "checkpoint-2/config.json: transformers_version None, not a version; the "
                                "transformers that saved checkpoint-2 is not recorded"),
    ('{"transformers_version": 5}', "checkpoint-2/config.json: transformers_version 5, not a version"),
    ("{", "checkpoint-2/config.json: not read (JSONDecodeError: "),
    (None, "checkpoint-2/config.json: file not found; the transformers that saved checkpoint-2 is not recorded"),
])
def test_a_checkpoint_whose_config_does_not_name_its_transformers_records_none(tmp_path, text, said):
    folder = _stacked(tmp_path)
    path = folder / "checkpoint-2" / "config.json"
    path.unlink() if text is None else path.write_text(text)
    found, silent = ingest.training_stack(ingest.read(folder), 4)
    assert "checkpoint-2/config.json" not in found and found["checkpoint-4/config.json"] == {"transformers": "5.24.0"}
    assert len(silent) == 1 and silent[0].startswith(f"{folder}/{said}"), silent


def _alike_record(folder: Path, stop: int = 4) -> dict:
    """run.json of the folder's run ingested under STACK, as alike reads it."""
    return {"versions": STACK, "ingested": {"folder": str(folder),
                                            "trained_with": ingest.training_stack(ingest.read(folder), stop)[0]}}


STACK = {"torch": "2.13.0+cpu", "transformers": "5.24.0"}  # the evaluating stack, its pair's


def test_a_folder_whose_checkpoints_were_saved_by_different_transformers_makes_its_run_unlike(tmp_path):
    """A run resumed from checkpoint-2 under another transformers; before, its run.json held only the stack that
    evaluated it, its pair's, and the pair read alike."""
    from mcgrpo.analysis import alike
    record = _alike_record(_stacked(tmp_path, **{"checkpoint-2": "5.17.0"}))
    assert alike.unlike(record, {"versions": STACK}, timed=False) == (True, (
        "stack", "transformers 5.17.0 in checkpoint-2/config.json, transformers 5.24.0 in checkpoint-4/config.json, "
                 "transformers 5.24.0 in README.md", "transformers 5.24.0"))


def test_a_folder_trained_under_another_torch_makes_its_run_unlike_and_one_that_says_nothing_does_not(tmp_path):
    from mcgrpo.analysis import alike
    record = _alike_record(_stacked(tmp_path / "old", trl_card(torch="2.11.0+cu130")))
    assert alike.unlike(record, {"versions": STACK}, timed=False) == (
        True, ("stack", "torch 2.11.0+cu130 in README.md", "torch 2.13.0+cpu"))
    silent = _stacked(tmp_path / "silent")
    for name in ("checkpoint-2", "checkpoint-4", "checkpoint-5"):
        (silent / name / "config.json").unlink()
    (silent / "README.md").unlink()
    record = _alike_record(silent)
    assert record["ingested"]["trained_with"] == {}
    assert alike.unlike(record, {"versions": STACK}, timed=False) == (True, None)  # as before: evaluating stack only


def _arms(folder: Path | str) -> dict:
    return {"outcome": {}, "trl": {"trainer": {"trl": {}}}, "mine": {"trainer": {"ingested": {"trl_output": str(folder)}}}}


def _write_study(tmp_path: Path, folder: Path | str, **arm) -> Path:
    import yaml
    arms = _arms(folder)
    arms["mine"]["trainer"]["ingested"].update(arm)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**copy.deepcopy(SMALL_STUDY), "arms": arms, "seeds": [1]}))  # one folder
    return path


def test_the_verb_refuses_with_exit_2_naming_the_file(tmp_path, capsys):
    folder = _folder(tmp_path, _state(drop="num_tokens"))
    code = cli.main(["ingest", "--config", str(_write_study(tmp_path, folder)), "--arm", "mine", "--seed", "1",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "checkpoint-5/trainer_state.json: log_history lacks 'num_tokens'" in err
    assert not (tmp_path / "run").exists()


def _study(folder: Path | str) -> dict:
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["arms"], cfg["seeds"] = _arms(folder), [1]  # one folder: one seed's run
    return studies.validate(cfg)


def _run(folder: Path | str, arm: str = "mine", seed: int = 1) -> dict:
    return study_config.run_config(_study(folder), arm, seed)


def test_an_arm_not_declared_ingested_is_refused_and_a_protocol_arm_never_takes_a_folders_run(tmp_path, tiny, world,
                                                                                             capsys):
    """Neither mcgrpo's arm nor the TRL arm trained under the protocol can be a folder's run: the verb and ingest
    refuse them by name, and the ingested arm's run is stored under another identity than the `trl: {}` arm's."""
    folder = _folder(tmp_path, _state())
    for arm in ("outcome", "trl"):
        with pytest.raises(ConfigError, match=r"--arm: an arm not declared ingested .*allowed: an arm with trainer: "
                                              r"\{ingested: \{trl_output: \.\.\.\}\}"):
            ingest.ingest(ingest.read(folder), _run(folder, arm), 600, *tiny, *world)
        code = cli.main(["ingest", "--config", str(_write_study(tmp_path, folder)), "--arm", arm, "--seed", "1"])
        assert code == 2 and f"--arm {arm}: not declared ingested" in capsys.readouterr().err
    cfg = _study(folder)
    from mcgrpo.core import layout
    assert len({layout.run_key(cfg, arm, 1) for arm in ("outcome", "trl", "mine")}) == 3
    assert _run(folder)["ingested"]["trainer_state_sha256"] is not None


def test_an_ingested_runs_identity_is_what_its_folder_says(tmp_path):
    """Another log in the folder is another run; a study whose ingested folder is missing is refused by key."""
    from mcgrpo.core import layout
    folder = _folder(tmp_path, _state())
    before = layout.run_key(_study(folder), "mine", 1)
    (folder / "checkpoint-5" / "trainer_state.json").write_text(json.dumps(_state(MEAN_LENGTHS[::-1])))
    assert layout.run_key(_study(folder), "mine", 1) != before
    with pytest.raises(ConfigError, match=r"arms.mine.trainer.ingested.trl_output: \S*absent-seed1 \(seed 1\): not a "
                                          r"folder"):
        _study(tmp_path / "absent-seed{seed}")


def test_a_checkpoints_weights_rewritten_after_planning_make_another_run(tmp_path, tiny):
    """checkpoint-4's weights replaced (another run's copied over them) leave the newest log and arguments as they
    were: before, the run kept its key, so a run stored from the old weights stood for the folder (the workflow had
    nothing to do, a lock saw no change); now it is another run, and the train job planned before refuses by name."""
    import os
    from mcgrpo.core import layout
    folder = _checkpoints(tmp_path, *tiny)
    before, run = layout.run_key(_study(folder), "mine", 1), _run(folder)
    weights = next((folder / "checkpoint-4").glob("*.safetensors"))
    weights.write_bytes((folder / "checkpoint-2" / weights.name).read_bytes())
    os.utime(weights, ns=(weights.stat().st_mtime_ns + 10**9,) * 2)  # a later write, on a coarse clock too
    assert layout.run_key(_study(folder), "mine", 1) != before
    with pytest.raises(ConfigError, match=r"trl-out: changed since this run was planned \(its checkpoints are not the "
                                          r"ones the run's identity names"):
        ingest.store_arm_run(run, {})


def test_the_run_trained_by_its_earliest_checkpoints_time(tmp_path):
    """run.json's ingested.saved_by, which the preregistration reads as the run's start (at the latest)."""
    import os
    folder = _folder(tmp_path, _state())
    for step, when in ((2, 1.7e9), (4, 1.8e9), (5, 1.9e9)):
        os.utime(folder / f"checkpoint-{step}", (when, when))
    assert ingest.saved_by(ingest.read(folder)) == "2023-11-14T22:13:20+00:00"


def test_seeds_or_arms_that_read_one_run_are_refused_by_key(tmp_path):
    """A trl_output without {seed} gives every seed one folder, and a copied folder the same log: each would enter
    the contrasts as an independent seed (n inflated, the spread of one run). Before, both validated."""
    folder = _folder(tmp_path, _state())
    cfg = {**copy.deepcopy(SMALL_STUDY), "arms": _arms(folder), "seeds": [1, 2]}
    with pytest.raises(ConfigError, match=r"arms.<arm>.trainer.ingested.trl_output: arms.mine seed 1, arms.mine seed "
                                          r"2 read one folder, \S*trl-out; allowed: one TRL run of its own for each "
                                          r"seed of each arm"):
        studies.validate(copy.deepcopy(cfg))
    import shutil
    shutil.copytree(folder, tmp_path / "seed1")
    shutil.copytree(folder, tmp_path / "seed2")
    cfg["arms"]["mine"]["trainer"]["ingested"]["trl_output"] = str(tmp_path / "seed{seed}")
    with pytest.raises(ConfigError, match=r"arms.mine seed 1 \(\S*seed1\), arms.mine seed 2 \(\S*seed2\) read one "
                                          r"run \(logs the same at every step but its times\)"):
        studies.validate(copy.deepcopy(cfg))
    again = _state()  # the same run trained again with TRL's seed unchanged: only its times differ
    for entry in again["log_history"]:
        entry.update({k: v + 0.5 for k, v in entry.items() if k in ("step_time", "train_runtime")})
    (tmp_path / "seed2" / "checkpoint-5" / "trainer_state.json").write_text(json.dumps(again))
    with pytest.raises(ConfigError, match=r"read one run \(logs the same at every step but its times\)"):
        studies.validate(copy.deepcopy(cfg))
    (tmp_path / "seed2" / "checkpoint-5" / "trainer_state.json").write_text(json.dumps(_state(MEAN_LENGTHS[::-1])))
    studies.validate(cfg)


@pytest.mark.parametrize("edit, said, keys", [
    ({"train_batch_size": 16}, r"train_batch_size 16 \(trainer_state.json\); the recipe's 8", ["train_batch_size"]),
    ({"lr": 5e-4}, r"learning_rate 0.0005 at step 1 \(the log\); the recipe's 0.0001", ["learning_rate"]),
    ({"decay": True}, r"learning rate schedule: logged from 0.0001 to 2e-05 \(the log\); the recipe's constant",
     ["lr_scheduler_type"]),
    ({"args": {"loss_type": "dapo", "shuffle_dataset": True}},
     r"loss_type 'dapo' \(training_args.bin\); the recipe's 'dr_grpo'; shuffle_dataset True \(training_args.bin\)",
     ["loss_type", "shuffle_dataset"]),
    ({"args": {"repetition_penalty": 1.3, "min_p": 0.1, "top_entropy_quantile": 0.2}},
     r"repetition_penalty 1.3 \(training_args.bin\); the recipe's 1.0; min_p 0.1 .*; top_entropy_quantile 0.2",
     ["repetition_penalty", "min_p", "top_entropy_quantile"]),
    ({"args": {"mask_truncated_completions": True, "weight_decay": 0.1, "adam_beta2": 0.99, "optim": "sgd"}},
     r"mask_truncated_completions True .*; optim 'sgd' \(training_args.bin\); the recipe's 'adamw_torch'",
     ["mask_truncated_completions", "optim", "weight_decay", "adam_beta2"]),
    ({"args": {"loss_type": _ABSENT, "top_k": _ABSENT}},  # another TRL's GRPOConfig, without the keys
     r"loss_type '<not in training_args.bin>' \(training_args.bin\); the recipe's 'dr_grpo'", ["loss_type", "top_k"]),
    ({"unread": True}, r"training_args.bin: not read \(UnpicklingError: .*\(install trl, the mcgrpo\[trl\] extra, "
                       r"to check them\)", ["training_args.bin"]),
])
def test_a_folder_of_another_recipe_is_refused_by_key_or_stored_marked_with_the_flag(tmp_path, tiny, world, edit,
                                                                                    said, keys):
    """The batch and learning rate from the log (every folder has it); the GRPOConfig's settings from
    training_args.bin. With accept the run is stored and its differences listed in run.json's block, with the keys
    that every table using the run names."""
    state = _state(batch=edit.get("train_batch_size", 8), prompt_tokens=10 * edit.get("train_batch_size", 8))
    for i, entry in enumerate(e for e in state["log_history"] if "loss" in e):
        entry["learning_rate"] = edit.get("lr", 1e-4) * (1 - 0.2 * i if edit.get("decay") else 1)
    folder = _checkpoints(tmp_path, *tiny, state, **edit.get("args", {}),
                          per_device_train_batch_size=edit.get("train_batch_size", 8))
    if edit.get("unread"):  # a file that does not unpickle here: a GRPOConfig where trl is not installed
        (folder / "checkpoint-5" / "training_args.bin").write_bytes(b"not a pickle")
    run = _run(folder)
    with pytest.raises(DataError, match=said + r".*allowed: a run of the study's initial model and tokenizer, recipe "
                                        r"and prompts, or accept_differences: true"):
        ingest.ingest(ingest.read(folder), run, 600, *tiny, *world)
    log, block = ingest.ingest(ingest.read(folder), run, 600, *tiny, *world, accept=True)
    assert block["accepted_differences"] and re.search(said, "; ".join(block["differences"]))
    assert block["differing_keys"] == keys


def test_a_run_resumed_under_another_grpo_config_is_refused_by_the_earlier_checkpoints_settings(tmp_path, tiny,
                                                                                                   world):
    """A run that trained steps 1..4 at temperature 0.5 and was resumed from checkpoint-4 at the recipe's 1.0: its
    newest checkpoint's training_args.bin is the recipe's, its earlier ones say what steps 1..4 trained with (as
    does a folder whose newest file was replaced by another run's). Before, only the newest was read and the run
    was stored as the recipe's, unmarked."""
    folder = _checkpoints(tmp_path, *tiny)
    for step in (2, 4):
        recipe_arguments(folder / f"checkpoint-{step}" / "training_args.bin", _run(folder), temperature=0.5)
    with pytest.raises(DataError, match=r"temperature 0.5 \(training_args.bin of checkpoint\(s\) 2, 4\); the recipe's "
                                        r"1.0; allowed: a run of the study's initial model and tokenizer, recipe"):
        ingest.ingest(ingest.read(folder), _run(folder), 600, *tiny, *world)
    (folder / "checkpoint-2" / "training_args.bin").unlink()
    log = ingest.read(folder)
    assert ingest.differing(log, _run(folder), ingest.prompt_lengths(_run(folder), tiny[1], world[0])) == [
        ("temperature", "temperature 0.5 (training_args.bin of checkpoint(s) 4); the recipe's 1.0")]
    assert ("training_args.bin of checkpoint(s) 2: not read (TRL saves one into every checkpoint), so the GRPOConfig "
            "of the steps they saved is taken to be the newest checkpoint's") in log.unchecked


def test_a_run_resumed_under_another_batch_is_refused_not_counted_by_the_first_batch(tmp_path, tiny):
    """transformers keeps train_batch_size in trainer_state.json from the checkpoint a run resumes from (checked on
    a real TRL run resumed at 32 completions a step from one of 64: its log still said 64), so every step after the
    resume would be counted at the first batch's size; the resumed steps' training_args.bin says the batch."""
    folder = _checkpoints(tmp_path, *tiny)
    recipe_arguments(folder / "checkpoint-5" / "training_args.bin", _run(folder), per_device_train_batch_size=16)
    with pytest.raises(DataError, match=r"checkpoint-5/training_args.bin: per_device_train_batch_size 16, while the "
                                        r"log's train_batch_size is 8 .*allowed: one batch throughout the run"):
        ingest.read(folder)


def test_a_kl_term_or_entropy_bonus_the_log_shows_is_a_difference_whatever_training_args_says(tmp_path, tiny,
                                                                                                world):
    """TRL logs kl only where beta is not 0 and entropy_coef only with an entropy bonus: a folder whose every
    training_args.bin was replaced by a recipe run's (as here: the recipe's file, the log of a run with both) is
    still another run. Before, stored as the recipe's, unmarked."""
    state = _state()
    for entry in state["log_history"]:
        if "loss" in entry:
            entry.update({"kl": 0.002, "entropy_coef": 0.5})
    folder = _checkpoints(tmp_path, *tiny, state)
    assert ingest.differing(ingest.read(folder), _run(folder), ingest.prompt_lengths(_run(folder), tiny[1],
                                                                                      world[0])) == [
        ("beta", "beta other than 0: the log has kl at step(s) 1, 2, 3, 4, 5, which TRL logs only with a KL term; the "
                 "recipe's 0.0"),
        ("entropy_coef", "entropy_coef 0.5 at step(s) 1, 2, 3, 4, 5 (the log); the recipe's 0.0")]


def test_completions_longer_than_the_recipes_limit_in_the_log_are_a_difference_whatever_training_args_says(
        tmp_path, tiny, world):
    """TRL logs each step's longest completion (completions/max_length, end token included), at most
    max_completion_length: a log of 60-token completions (the recipe's limit is 24), its every training_args.bin the
    recipe's (a file replaced by another run's), generated under another limit. Before, stored as the recipe's."""
    state = _state()
    for entry in state["log_history"][:5]:
        entry["completions/max_length"] = 60 if entry["step"] in (2, 3) else 24
    folder = _checkpoints(tmp_path, *tiny, state)
    assert ingest.differing(ingest.read(folder), _run(folder), ingest.prompt_lengths(_run(folder), tiny[1],
                                                                                      world[0])) == [
        ("max_completion_length", "completions of up to 60 tokens at step(s) 2, 3 (the log's completions/max_length); "
                                  "the recipe's max_completion_length 24")]


def test_reward_functions_that_change_during_the_run_or_are_several_are_a_difference_by_key(tmp_path, tiny, world):
    """A run resumed at step 4 under other reward_funcs (no GRPOConfig holds them): TRL logs rewards/<name>/mean for
    each function every step, so the log names accuracy up to step 3 and length from step 4; or a run of two reward
    functions, whose sum TRL trained on. Before, each stored as the recipe's, unmarked (its identity's rewards
    listing both); one function throughout is no difference (what it computes is the user's word)."""
    state = _state()
    for entry in state["log_history"][:5]:
        entry["rewards/accuracy/mean" if entry["step"] <= 3 else "rewards/length/mean"] = 0.5
    folder = _checkpoints(tmp_path / "changed", *tiny, state)
    lengths = ingest.prompt_lengths(_run(folder), tiny[1], world[0])
    assert ingest.differing(ingest.read(folder), _run(folder), lengths) == [
        ("reward_funcs", "reward functions accuracy at step(s) 1, 2, 3; length at step(s) 4, 5 (the log's "
                         "rewards/<name>/mean): the reward changed during the run; the recipe's one reward "
                         "throughout")]
    for entry in state["log_history"][:5]:
        entry.update({"rewards/accuracy/mean": 0.5, "rewards/length/mean": 0.5, "rewards/length/std": 0.1})
    folder = _checkpoints(tmp_path / "two", *tiny, state)
    assert ingest.differing(ingest.read(folder), _run(folder), lengths) == [
        ("reward_funcs", "reward functions accuracy, length at every step (the log's rewards/<name>/mean): a reward "
                         "TRL summed from several functions (reward_weights); the recipe's one reward, "
                         "reward_verifier")]
    for entry in state["log_history"][:5]:
        del entry["rewards/length/mean"], entry["rewards/length/std"]
    folder = _checkpoints(tmp_path / "one", *tiny, state)
    assert ingest.differing(ingest.read(folder), _run(folder), lengths) == []


def test_a_grpo_setting_the_recipe_leaves_at_trls_default_is_held_to_it(tmp_path, tiny, world):
    """Every setting of the folder's GRPOConfig, not only the recipe's keys: an entropy bonus in the loss, NEFTune
    noise on the embeddings or reward weights train another run (before, each was stored as the recipe's, unmarked);
    where and how often it saved, logged or checkpointed its activations are not what it trained. Needs trl: the
    recipe's GRPOConfig gives TRL's defaults."""
    pytest.importorskip("trl")
    folder = _checkpoints(tmp_path, *tiny, entropy_coef=0.5, neftune_noise_alpha=5.0, reward_weights=[2.0],
                          save_steps=1, save_only_model=True, gradient_checkpointing=False, logging_first_step=True)
    log = ingest.read(folder)
    assert sorted(ingest.differing(log, _run(folder), ingest.prompt_lengths(_run(folder), tiny[1], world[0]))) == [
        ("entropy_coef", "entropy_coef 0.5 (training_args.bin); the recipe's 0.0"),
        ("neftune_noise_alpha", "neftune_noise_alpha 5.0 (training_args.bin); the recipe's None"),
        ("reward_weights", "reward_weights [2.0] (training_args.bin); the recipe's None")]


def test_a_setting_this_trl_does_not_have_is_a_difference_not_read_past(tmp_path, tiny, world):
    """A newer TRL's GRPOConfig unpickles here with its new keys as attributes: a key TRL 1.16 lacks (here a length
    penalty, as a newer TRL's loss, sampling or importance-sampling switch would be) changes what the run trained, or
    what its log's tokens and times count, in a way this TRL cannot tell. Before, read past: the run was stored as
    the recipe's, unmarked. A key of the families that say where a run was kept or logged is not a setting."""
    pytest.importorskip("trl")
    folder = _checkpoints(tmp_path, *tiny, length_penalty_coef=0.1, logging_new_backend="x", _cache=1)
    recipe_arguments(folder / "checkpoint-2" / "training_args.bin", _run(folder))
    from trl import __version__
    assert ingest.differing(ingest.read(folder), _run(folder), ingest.prompt_lengths(_run(folder), tiny[1],
                                                                                      world[0])) == [
        ("length_penalty_coef", f"length_penalty_coef 0.1 (training_args.bin of checkpoint(s) 5): not a setting of "
                                f"the GRPOConfig of TRL {__version__}, which ingest reads the folder by (another "
                                f"TRL's: what it does to training, or to what the log's tokens and times count, is "
                                f"not known here)")]


@pytest.mark.parametrize("per_completion, said", [
    (4, r"prompt tokens per completion 4.00 on average over steps 1..5 \(num_tokens' growth less the completion "
        r"tokens, the log, step\(s\) 1, 2, 3, 4, 5 outside 7..12\); the study's 64 training prompts rendered by its "
        r"tokenizer and chat template: 8.75 on average, 7.00..11.\d\d for 10 of them in any order"),
    (11.875, r"prompt tokens per completion 11.88 on average over steps 1..5 \(num_tokens' growth less the "
             r"completion tokens, the log\); .*: 8.75 on average, 7.00..11.40 for 10 of them in any order"),
    (12, r"prompt tokens per completion 12.00 .*7.00..11.\d\d for 10 of them in any order"),
])
def test_a_run_of_other_prompts_template_or_tokenizer_is_refused_by_its_prompt_tokens(tmp_path, tiny, world,
                                                                                     per_completion, said):
    """TRL's num_tokens less the completion tokens is the prompt tokens each step fed: the tiny world's 64 prompts,
    rendered by its chat template, have 7..12 tokens (8.75 on average); without the template 3..8 (4 a
    completion: every step outside the pool's range), and a mean the run's 10 prompts could not have in any order
    (11.875 every step, within 7..12, above the 10 longest prompts' 11.4) is another prompt set. Before, each was stored as a run of the study's prompts."""
    folder = _checkpoints(tmp_path, *tiny, _state(prompt_tokens=round(8 * per_completion)))
    with pytest.raises(DataError, match=r"trl-out: its run is not the study's: " + said + r".*allowed: a run of the "
                                        r"study's initial model and tokenizer, recipe and prompts, or "
                                        r"accept_differences: true"):
        ingest.ingest(ingest.read(folder), _run(folder), 600, *tiny, *world)
    log, block = ingest.ingest(ingest.read(folder), _run(folder), 600, *tiny, *world, accept=True)
    assert block["differing_keys"] == ["prompts"] and re.search(said, block["differences"][0])
    lengths = ingest.prompt_lengths(_run(folder), tiny[1], world[0])
    steps = ingest.read(_folder(tmp_path / "within", _state(prompt_tokens=70))).steps  # 8.75 a step: the pool's mean
    assert ingest.prompt_difference(ingest.TRLLog(folder, steps, {}, [], 8), lengths, 4) is None


def _arguments(folder: Path, **edits) -> None:
    """checkpoint-5/training_args.bin of the study's recipe, `edits` changed."""
    recipe_arguments(folder / "checkpoint-5" / "training_args.bin", _run(folder), **edits)


def recipe_arguments(path: Path, run: dict, **edits) -> None:
    """`path`, a training_args.bin of run config `run`'s recipe, `edits` changed: what a GRPOConfig pickles, its
    fields (trl's class needs trl to unpickle)."""
    import torch
    from types import SimpleNamespace
    fields = {**ingest.expected_arguments(run), **dict.fromkeys(ingest.ONE_BATCH, 1), **edits}
    torch.save(SimpleNamespace(**{k: v for k, v in fields.items() if v is not _ABSENT}), path)


def _checkpoints(tmp_path: Path, model, tokenizer, state: dict | None = None, **arguments) -> Path:
    """A TRL output folder of the hand-written log whose checkpoints (steps 2, 4, 5) hold tiny models, each the
    initial one moved further, and training_args.bin of the study's recipe (`arguments` changed)."""
    import torch
    from mcgrpo.train import models
    folder = tmp_path / "trl-out"
    for step in (2, 4, 5):
        trained = copy.deepcopy(model)
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(0.05 * step * torch.randn_like(p))
        models.save(trained, tokenizer, folder / f"checkpoint-{step}")
    write_states(folder, state or _state(), (2, 4, 5))
    _arguments(folder, **arguments)
    return folder


def test_a_run_of_another_model_is_refused_by_its_checkpoints_config_or_stored_marked(tmp_path, tiny, world):
    """Checkpoints of a tiny Llama of another size (2 layers of 48, as a TRL run of another model leaves them)
    ingested into a study of the 1-layer, 32-wide one: before, evaluated and stored as the study's arm without a
    word (its prompts are the study's, its recipe too). Now each config.json field that differs from the study's
    initial model's is a difference by key `model`; accepted, the run is evaluated and stored with them listed."""
    from mcgrpo.train.models.tiny import build_model
    model, tokenizer = tiny
    other = build_model(tokenizer, hidden_size=48, num_layers=2, num_heads=2, intermediate_size=64,
                        max_positions=96, seed=0)
    folder = _checkpoints(tmp_path, other, tokenizer)
    lines = ["head_dim 24 (config.json of every checkpoint); the study's initial model's 16",
             "hidden_size 48 (config.json of every checkpoint); the study's initial model's 32",
             "num_hidden_layers 2 (config.json of every checkpoint); the study's initial model's 1"]
    with pytest.raises(DataError, match=re.escape(f"trl-out: its run is not the study's: {'; '.join(lines)}; "
                                                  f"allowed: a run of the study's initial model and tokenizer")):
        ingest.ingest(ingest.read(folder), _run(folder), 600, model, tokenizer, *world)
    log, block = ingest.ingest(ingest.read(folder), _run(folder), 600, model, tokenizer, *world, accept=True)
    assert block["differences"] == lines and block["differing_keys"] == ["model"]
    assert sorted({row["eval_index"] for row in log.evals}) == [0, 1, 2, 3, 4]


def _permuted(tokenizer_json: dict) -> dict:
    """tokenizer.json with its characters' ids reversed: as long a prompt, every token another id."""
    vocab = tokenizer_json["model"]["vocab"]
    characters = [token for token in vocab if len(token) == 1]
    vocab.update(zip(characters, [vocab[c] for c in characters][::-1]))
    return tokenizer_json


def _doctor(folder: Path, steps, name: str, edit) -> None:
    """checkpoint-<step>/<name> of each step edited (`edit` of its JSON, or of its text), or removed (None)."""
    for step in steps:
        path = folder / f"checkpoint-{step}" / name
        if edit is None:
            path.unlink()
        elif name.endswith(".json"):
            path.write_text(json.dumps(edit(json.loads(path.read_text()))))
        else:
            path.write_text(edit(path.read_text()))


@pytest.mark.parametrize("steps, name, edit, key, said", [
    ((4, 5), "config.json", lambda c: {**c, "rms_norm_eps": 1e-3}, "model",
     r"rms_norm_eps 0.001 \(config.json of checkpoint\(s\) 4, 5\); the study's initial model's 1e-06"),
    ((2, 4, 5), "config.json", lambda c: {**c, "model_type": "mistral", "architectures": ["MistralForCausalLM"]},
     "model", r"architectures \['MistralForCausalLM'\] \(config.json of every checkpoint\); the study's initial "
              r"model's \['LlamaForCausalLM'\]; .*model_type 'mistral' \(config.json of every checkpoint\); the "
              r"study's initial model's 'llama'"),
    ((2, 4, 5), "tokenizer.json", _permuted, "tokenizer",
     r"vocabulary of 103 tokens, 96 not at the study's ids, e.g. '\\n' at 7, the study's 102 \(the tokenizer saved "
     r"in every checkpoint\); the study's tokenizer's 103 tokens"),
    ((2,), "chat_template.jinja", lambda t: t.replace("<|{{ message['role'] }}|>", "<|system|>"), "tokenizer",
     r"""chat_template "...sages %}<\|system\|>\{\{ message\['content'\] ..." at character 46 """
     r"""\(the tokenizer saved in checkpoint\(s\) 2\); the study's tokenizer's "...sages %}<\|\{\{ message\['role'\] """
     r"""\}\}\|>\{\{ mess...\""""),
    ((2, 4, 5), "tokenizer_config.json", lambda c: {**c, "eos_token": "<|assistant|>"}, "tokenizer",
     r"eos_token '<\|assistant\|>' \(the tokenizer saved in every checkpoint\); the study's tokenizer's '<\|end\|>'"),
    ((4, 5), "generation_config.json", lambda c: {**c, "no_repeat_ngram_size": 3}, "generation_config",
     r"no_repeat_ngram_size 3 \(generation_config.json of checkpoint\(s\) 4, 5\); the study's initial model's None"),
    ((2, 4, 5), "generation_config.json", lambda c: {**c, "min_p": 0.2}, "generation_config",
     r"min_p 0.2 \(generation_config.json of every checkpoint\); the study's initial model's None"),
    ((5,), "tokenizer.json", lambda t: {**t, "model": {"type": "another"}}, "tokenizer",
     r"tokenizer files not read \(Exception: data did not match any variant .*\), so its vocabulary, special tokens "
     r"and chat template could not be held to the study's \(the tokenizer saved in checkpoint\(s\) 5\)"),
])
def test_a_checkpoint_of_another_architecture_or_tokenizer_is_a_difference_by_key(tmp_path, tiny, world, steps, name,
                                                                                  edit, key, said):
    """What a checkpoint holds besides its weights, as TRL saves it (config.json; the processing class's files):
    another architecture field, family, vocabulary, chat template or special token. Before, each was evaluated as
    the study's model with the study's tokenizer, unmarked (the permuted vocabulary and the template give prompts
    of the study's lengths, so the prompt check saw nothing). generation_config.json too: transformers fills the
    sampling settings TRL leaves unset (min_p at the recipe's None, no_repeat_ngram_size) from the trained model's
    generation config, so such a run sampled its rollouts otherwise, its training_args.bin the recipe's."""
    folder = _checkpoints(tmp_path, *tiny)
    _doctor(folder, steps, name, edit)
    with pytest.raises(DataError, match=r"trl-out: its run is not the study's: " + said + r".*allowed: a run of the "
                                        r"study's initial model and tokenizer, recipe and prompts"):
        ingest.ingest(ingest.read(folder), _run(folder), 600, *tiny, *world)
    from mcgrpo.integrations import saved_model
    found, unsaid = saved_model.saved_model_differences(ingest.read(folder).checkpoints, *tiny)
    assert {k for k, _ in found} == {key} and unsaid == []


def test_bookkeeping_in_config_json_is_not_a_difference(tmp_path, tiny):
    """Where and how a checkpoint was saved or run (another transformers, bf16, no cache under gradient
    checkpointing, the path it was loaded from) is not another model."""
    from mcgrpo.integrations import saved_model
    folder = _checkpoints(tmp_path, *tiny)
    _doctor(folder, (2, 4, 5), "config.json", lambda c: {**c, "transformers_version": "4.57.0", "dtype": "bfloat16",
                                                          "use_cache": False, "_name_or_path": "elsewhere"})
    _doctor(folder, (2, 4, 5), "generation_config.json", lambda c: {**c, "transformers_version": "4.57.0",
                                                                    "_from_model_config": False})
    assert saved_model.saved_model_differences(ingest.read(folder).checkpoints, *tiny) == ([], [])


def test_a_checkpoint_without_config_is_refused_and_one_without_a_tokenizer_or_generation_config_is_said(tmp_path,
                                                                                                         tiny, world):
    """No config.json: no model to evaluate, refused by name before any is loaded (before, transformers' own
    `Unrecognized model` once the evaluation reached it). No tokenizer saved (a folder copied without it): not a
    difference; run.json says that the run's tokenizer is then the user's word."""
    folder = _checkpoints(tmp_path, *tiny)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        _doctor(folder, (2,), name, None)
    _, block = ingest.ingest(ingest.read(folder), _run(folder), 600, *tiny, *world)
    assert block["differences"] == [] and ("tokenizer: checkpoint(s) 2 saved none (TRL saves its processing class "
                                           "into every checkpoint: a folder copied without it), so that they trained "
                                           "with the study's tokenizer and chat template is the user's word, checked "
                                           "only through the prompt tokens") in block["unrecovered"]
    _doctor(folder, (2,), "generation_config.json", None)
    _, block = ingest.ingest(ingest.read(folder), _run(folder), 600, *tiny, *world)
    assert block["differences"] == [] and ("generation_config: checkpoint(s) 2 saved no generation_config.json "
                                           "(save_pretrained writes one into every checkpoint: a folder copied "
                                           "without it), so that they sampled with the study's initial model's "
                                           "generation defaults is the user's word") in block["unrecovered"]
    _doctor(folder, (4,), "config.json", None)
    with pytest.raises(DataError, match=r"checkpoint-4/config.json: file not found; allowed: every checkpoint as TRL "
                                        r"saves it, with its config.json"):
        ingest.ingest(ingest.read(folder), _run(folder), 600, *tiny, *world)


def test_the_verb_stores_the_run_where_train_would_and_prints_what_it_could_not_recover(tmp_path, tiny, capsys,
                                                                                         monkeypatch):
    """B is the config's (600 tokens): no budget.parquet is needed. The data and the model are, and where one is
    missing the message gives the one command that makes it."""
    from mcgrpo import data
    from mcgrpo.core import layout, manifest, store
    from mcgrpo.train import models
    monkeypatch.chdir(tmp_path)
    folder = _checkpoints(tmp_path, *tiny)
    _write_study(tmp_path, folder)
    cfg = _study(folder)
    data.write(*data.build(cfg["task"]), layout.data_dir(cfg), study_config.config_hash(cfg["task"]))
    assert cli.main(["ingest", "--config", "study.yaml", "--arm", "mine", "--seed", "1"]) == 2
    assert (f"{layout.model_path(cfg)}: file not found (the study's initial model); make it with: snakemake --cores 1 "
            f"--configfile study.yaml {layout.model_path(cfg)}") in capsys.readouterr().err
    models.save(*tiny, layout.model_path(cfg))
    assert not layout.budget_path(cfg).exists()
    assert cli.main(["ingest", "--trl-output", str(folder), "--config", "study.yaml", "--arm", "mine",
                     "--seed", "1"]) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert "not recovered: tokens_continuation" in said and "stored" in said and "steps 1..4 of the run, 5 points" in said
    out = layout.run_dir(cfg, "mine", 1)
    assert manifest.problems(out) == []
    record = store.read_json(out / "run.json")
    assert record["identity"] == study_config.run_identity(_run(folder), 600) and record["ingested"]["stop_step"] == 4
    assert record["attempts"] == [] and record["config"]["ingested"] == _run(folder)["ingested"]


def test_an_ingested_run_is_held_to_the_data_and_model_it_was_evaluated_with(tmp_path, tiny, capsys, monkeypatch):
    """An ingested run's numbers are mcgrpo's evaluation of its checkpoints on the study's evaluation sets, with the
    study's tokenizer, point 0 on the study's initial model. Before, its run.json recorded neither, so a data folder
    prepared again (or another model) after it was ingested went unnoticed: it was read beside runs evaluated on
    other problems. It records both, as a trained run does, and every reader holds it to them."""
    from mcgrpo import data
    from mcgrpo.core import layout, run_data, store
    from mcgrpo.train import models
    monkeypatch.chdir(tmp_path)
    folder = _checkpoints(tmp_path, *tiny)
    _write_study(tmp_path, folder)
    cfg = _study(folder)
    pool, evals = data.build(cfg["task"])
    data.write(pool, evals, layout.data_dir(cfg), study_config.config_hash(cfg["task"]))
    models.save(*tiny, layout.model_path(cfg))
    assert cli.main(["ingest", "--config", "study.yaml", "--arm", "mine", "--seed", "1"]) == 0, capsys.readouterr().err
    out = layout.run_dir(cfg, "mine", 1)
    record = store.read_json(out / "run.json")
    assert record[run_data.DATA] == run_data.fingerprint(layout.data_dir(cfg), cfg["evaluation"]["sets"])
    assert record[run_data.MODEL] == models.fingerprint(*models.load(layout.model_path(cfg)))
    assert run_data.problem(out, record, "retrain it") is None
    evals["heldout"].loc[0, "answer"] = "-1"  # the data folder prepared again after the run was ingested
    data.write(pool, evals, layout.data_dir(cfg), study_config.config_hash(cfg["task"]))
    said = run_data.problem(out, record, "ingest it again")
    assert said.startswith(f"{(layout.data_dir(cfg) / 'eval_heldout.parquet').resolve()}: its problems hash to ")
    assert f"but {out / 'run.json'} trained and was evaluated on" in said and said.endswith("ingest it again")


def test_a_calibrated_b_missing_is_named_with_the_command_that_makes_it(tmp_path):
    run = _run(_folder(tmp_path, _state()))
    run["budget"]["tokens"] = None
    with pytest.raises(DataError, match=r"budget.parquet: file not found \(the calibrated B\); make it with: "
                                        r"snakemake --cores 1 --configfile s.yaml \S*budget.parquet"):
        ingest.budget_of(run, tmp_path / "budget.parquet", "s.yaml")


def test_tiny_checkpoints_are_evaluated_at_the_points_and_stored_as_a_run_that_verifies(tmp_path, tiny, world):
    """The checkpoints' own weights are evaluated (checkpoint-4 differs from the initial model: different samples),
    each point under its index with the draws of its index, and the run folder verifies."""
    from mcgrpo.core import manifest, store
    from mcgrpo.train.job import write_run
    model, tokenizer = tiny
    folder = _checkpoints(tmp_path, model, tokenizer)
    run = _run(folder)
    log, block = ingest.ingest(ingest.read(folder), run, 600, model, tokenizer, *world)
    frames = log.frames()
    ev, samples = frames["evals"], frames["samples"]
    assert sorted(ev["eval_index"].unique()) == [0, 1, 2, 3, 4]
    # each point at the counts of the model evaluated: point 1 is the initial model (0 tokens, not step 1's 164),
    # point 3 checkpoint-2 (340, not step 3's 515)
    firsts = ev.groupby("eval_index")[["tokens_total", "iteration", "updates"]].first()
    assert firsts["tokens_total"].tolist() == [0, 0, 340, 340, 709] and firsts["iteration"].tolist() == [0, 0, 2, 2, 4]
    assert len(samples) == 5 * sum(map(len, world[1].values())) * 2
    at = {k: samples[samples["eval_index"] == k]["text"].tolist() for k in range(5)}
    assert at[1] == at[0] and at[3] == at[2]  # one model evaluated once, as the protocol evaluates one step's points
    from mcgrpo.integrations.trl import study_evaluator
    initial = study_evaluator(run, model, tokenizer, world[1])(2)[1]["text"].tolist()
    assert at[2] != initial  # point 2 is checkpoint-2's weights, not the initial model's
    assert block["stop_step"] == 4 and len(frames["iterations"]) == 4
    import transformers  # the checkpoints were saved here; no model card (TRL did not write the folder): said
    assert block["trained_with"] == {f"checkpoint-{s}/config.json": {"transformers": transformers.__version__}
                                     for s in (2, 4)}
    assert f"{folder / 'README.md'}: file not found (TRL's model card); the stack of the folder's last save is not " \
           f"recorded" in block["unrecovered"]
    out = tmp_path / "run"
    write_run(out, run, 600, log, model, {"ingested": block, "attempts": []})
    assert manifest.problems(out) == []
    assert store.read_json(out / "run.json")["ingested"]["trained_with"] == block["trained_with"]
    assert store.read_json(out / "run.json")["ingested"]["points"][3] == {
        "index": 3, "due": 3, "checkpoint": 2, "steps_off": -1, "tokens_off": -175}
    assert store.read_contract(out / "iterations.parquet", "iterations")["tokens_total"].tolist() == TOTALS[:4]
    assert store.read_contract(out / "prompts.parquet", "prompts").empty  # TRL's log names no prompts


# -- slow tier: a real TRL run ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_real_trl_runs_ingested_count_is_the_protocols_and_its_store_verifies(world, tiny, tmp_path):
    """A TRL run of the tiny model under the protocol, saved every step; ingesting its folder gives, step by step,
    the rollout tokens the protocol counted live (the hand check of completions/mean_length x train_batch_size), the
    same stopping step, and a run folder that check-store verifies."""
    pytest.importorskip("trl")
    from mcgrpo.core import layout, manifest, store
    from mcgrpo.integrations.trl import TRLRun
    from mcgrpo.train.job import write_run
    model, tokenizer = tiny
    initial = copy.deepcopy(model)
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["arms"] = {"outcome": {}, "trl": {"trainer": {"trl": {}}}}
    trl_run = TRLRun(study_config.run_config(studies.validate(cfg), "trl", 1), model, tokenizer, *world, 600,
                     tmp_path / "train")
    build = trl_run.build

    def saving(setup):
        setup.args.save_strategy = type(setup.args.save_strategy)("steps")
        setup.args.save_steps = 1
        return build(setup)
    trl_run.build = saving
    live = trl_run.run()
    folder = tmp_path / "train" / "trl"
    run = _run(folder)
    log, block = ingest.ingest(ingest.read(folder), run, 600, initial, tokenizer, *world)
    assert [r["tokens_rollout"] for r in log.iterations] == [r["tokens_rollout"] for r in live.iterations]
    assert block["stop_step"] == len(live.iterations) and block["differences"] == []
    assert not any("training_args.bin" in line for line in block["unrecovered"])  # read with trl: checked
    assert sorted({row["eval_index"] for row in log.evals}) == [0, 1, 2, 3, 4]
    store_dir = tmp_path / "runs"
    write_run(store_dir / layout.run_key(_study(folder), "mine", 1), run, 600, log, initial,
              {"ingested": block, "attempts": []})
    assert all(manifest.problems(p) == [] for p in store_dir.iterdir())
    done = subprocess.run([sys.executable, "-m", "mcgrpo", "check-store", "--store", str(store_dir)],
                          env={"PYTHONPATH": str(ROOT / "workflow"), "PATH": ""}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    held_to_its_training_stack(folder, block, store.read_json(store_dir / layout.run_key(_study(folder), "mine", 1)
                                                              / "run.json"), tmp_path)


def held_to_its_training_stack(folder: Path, block: dict, record: dict, tmp_path: Path) -> None:
    """A real TRL folder records the stack that trained it (TRL's card: its Framework versions; each checkpoint's
    config.json: transformers_version), read as this process's (which trained it) and alike to a run made here; the
    same folder with checkpoint-1 saved by another transformers (a run resumed under it) reads unlike."""
    import shutil
    from importlib.metadata import version

    import transformers
    import trl
    from mcgrpo.analysis import alike
    from mcgrpo.train.job import stack
    kept = [s for s in ingest.read(folder).checkpoints if s <= block["stop_step"]]
    assert block["trained_with"] == {
        **{f"checkpoint-{s}/config.json": {"transformers": transformers.__version__} for s in kept},
        "README.md": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": version("torch")}}
    assert not any("README.md" in line or "config.json" in line for line in block["unrecovered"])
    made_here = {"versions": stack(record["config"])}
    assert alike.unlike(record, made_here, timed=False) == (True, None)
    resumed = tmp_path / "resumed"
    shutil.copytree(folder, resumed)
    config = json.loads((resumed / "checkpoint-1" / "config.json").read_text())
    (resumed / "checkpoint-1" / "config.json").write_text(json.dumps({**config, "transformers_version": "5.17.0"}))
    trained_with, _ = ingest.training_stack(ingest.read(resumed), block["stop_step"])
    record = {**record, "ingested": {**record["ingested"], "trained_with": trained_with}}
    differ = alike.unlike(record, made_here, timed=False)[1]
    assert differ[0] == "stack" and differ[1].startswith("transformers 5.17.0 in checkpoint-1/config.json, "
                                                         f"transformers {transformers.__version__} in checkpoint-2")


@pytest.mark.slow
def test_a_real_trl_run_resumed_from_its_checkpoint_is_counted_as_the_run_it_continues(world, tmp_path):
    """Not a leak: TRL (1.16) counts num_tokens in TrainerState.num_input_tokens_seen, which transformers restores
    with log_history from the checkpoint's trainer_state.json on resume_from_checkpoint. A run stopped after
    checkpoint-2 (its later checkpoints gone) and resumed logs steps 3 and 4 after steps 1 and 2 with the count
    continued, and ingest counts it as the run trained without a stop (on CPU, the same completions)."""
    pytest.importorskip("trl")
    import shutil

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from mcgrpo.core.trl_config import grpo_arguments
    from mcgrpo.train.models.tiny import build_model, build_tokenizer
    tokenizer, run = build_tokenizer(), _run(tmp_path, "trl")
    prompts = Dataset.from_list([{"prompt": [{"role": "user", "content": run["task"]["prompt"].replace(
        "{question}", q)}]} for q in world[0]["question"]])

    def trainer(out: Path) -> GRPOTrainer:
        model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_positions=96, seed=0)
        args = GRPOConfig(**{**grpo_arguments(run, str(out), 4, False), "save_strategy": "steps", "save_steps": 1})
        return GRPOTrainer(model=model, reward_funcs=[lambda completions, **_: [len(c[-1]["content"]) % 3 * 1.0
                                                                                for c in completions]],
                           args=args, train_dataset=prompts, processing_class=tokenizer)
    trainer(tmp_path / "whole").train()
    shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
    for step in (3, 4):  # stopped after checkpoint-2 was saved
        shutil.rmtree(tmp_path / "resumed" / f"checkpoint-{step}")
    trainer(tmp_path / "resumed").train(resume_from_checkpoint=str(tmp_path / "resumed" / "checkpoint-2"))
    whole, resumed = ingest.read(tmp_path / "whole"), ingest.read(tmp_path / "resumed")
    columns = ["step", "tokens", "num_tokens", "tokens_total"]
    assert resumed.steps[columns].equals(whole.steps[columns]) and list(resumed.checkpoints) == [1, 2, 3, 4]
    assert resumed.steps["num_tokens"].is_monotonic_increasing
    assert ingest.place(resumed, 600, "tokens", 4, 1.0) == ingest.place(whole, 600, "tokens", 4, 1.0)


def trl_trained(out: Path, model, tokenizer, run: dict, questions, steps: int = 5) -> Path:
    """A real TRL run (GRPOTrainer under the recipe of `run`, a checkpoint every step) of `model` with `tokenizer`
    on the study's prompts: its output folder."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from mcgrpo.core.trl_config import grpo_arguments
    prompts = Dataset.from_list([{"prompt": [{"role": "user", "content": run["task"]["prompt"].replace(
        "{question}", q)}]} for q in questions])
    args = GRPOConfig(**{**grpo_arguments(run, str(out), steps, False), "save_strategy": "steps", "save_steps": 1})
    GRPOTrainer(model=model, reward_funcs=[lambda completions, **_: [len(c[-1]["content"]) % 3 * 1.0
                                                                      for c in completions]],
                args=args, train_dataset=prompts, processing_class=tokenizer).train()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case, key, said", [
    ("another size", "model", [r"head_dim 24 \(config.json of every checkpoint\); the study's initial model's 16",
                               r"hidden_size 48 \(config.json of every checkpoint\); the study's initial model's 32",
                               r"num_hidden_layers 2 \(config.json of every checkpoint\); the study's initial model's "
                               r"1"]),
    ("another template", "tokenizer", [r"""chat_template "...sages %}<\|system\|>\{\{ message\['content'\] ..." at """
                                       r"character 46 \(the tokenizer saved in every checkpoint\); the study's "
                                       r"tokenizer's"]),
    ("another vocabulary", "tokenizer", [r"vocabulary of 103 tokens, 96 not at the study's ids, e.g. '\\n' at 7, "
                                         r"the study's 102 \(the tokenizer saved in every checkpoint\)"]),
])
def test_a_real_trl_run_of_another_model_or_tokenizer_is_refused_by_key_or_stored_marked(tmp_path, world, case, key,
                                                                                        said):
    """TRL runs of another tiny Llama (2 layers of 48), of the study's with another chat template (the role
    markers' place, so its prompts have the study's lengths), and of the study's whose saved tokenizer.json has
    its characters at other ids: before, each was evaluated and stored as a run of the study's model, unmarked."""
    pytest.importorskip("trl")
    from mcgrpo.train.models.tiny import build_model, build_tokenizer
    tokenizer, sized = build_tokenizer(), dict(hidden_size=32, num_layers=1)
    if case == "another size":
        sized = dict(hidden_size=48, num_layers=2)
    if case == "another template":
        tokenizer.chat_template = tokenizer.chat_template.replace("<|{{ message['role'] }}|>", "<|system|>")
    trained = build_model(tokenizer, **sized, num_heads=2, intermediate_size=64, max_positions=96, seed=0)
    folder = trl_trained(tmp_path / "trl-out", trained, tokenizer, _run(tmp_path, "trl"), world[0]["question"])
    if case == "another vocabulary":
        _doctor(folder, ingest.read(folder).checkpoints, "tokenizer.json", _permuted)
    study = build_tokenizer()
    model = build_model(study, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=96,
                        seed=0)
    with pytest.raises(DataError, match=r"trl-out: its run is not the study's: " + "; ".join(said)):
        ingest.ingest(ingest.read(folder), _run(folder), 600, model, study, *world)
    _, block = ingest.ingest(ingest.read(folder), _run(folder), 600, model, study, *world, accept=True)
    assert block["differing_keys"] == [key] and len(block["differences"]) == len(said)


@pytest.mark.slow
def test_a_real_trl_run_that_gave_its_model_a_pad_token_is_the_studys_model(tmp_path, world):
    """GRPOTrainer gives a tokenizer without a pad token its eos token, and mirrors it onto the model's config
    (pad_token_id): both are saved into every checkpoint, and neither is another model or tokenizer."""
    pytest.importorskip("trl")
    from mcgrpo.integrations import saved_model
    from mcgrpo.train.models.tiny import build_model, build_tokenizer

    def unpadded():
        tokenizer = build_tokenizer()
        tokenizer.pad_token = None
        model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_positions=96, seed=0)
        return model, tokenizer
    folder = trl_trained(tmp_path / "trl-out", *unpadded(), _run(tmp_path, "trl"), world[0]["question"], steps=2)
    config = json.loads((folder / "checkpoint-2" / "config.json").read_text())
    assert config["pad_token_id"] == config["eos_token_id"]  # what TRL did
    assert saved_model.saved_model_differences(ingest.read(folder).checkpoints, *unpadded()) == ([], [])


@pytest.mark.slow
def test_the_plain_trl_example_keeps_to_the_studys_recipe(tmp_path, tiny):
    """examples/trl-ingest/plain_trl.py, a plain GRPOTrainer run of a user's kind: its folder, read as ingest reads it
    (training_args.bin with TRL installed), differs from the study's recipe in no key and its prompt tokens are the
    study's prompts' (its own order of the pool), so its runs are stored without accept_differences; a checkpoint
    every step."""
    pytest.importorskip("trl")
    import importlib.util

    import yaml
    from mcgrpo.train import models
    spec = importlib.util.spec_from_file_location("plain_trl", ROOT / "examples" / "trl-ingest" / "plain_trl.py")
    plain = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plain)
    models.save(*tiny, tmp_path / "model")
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(copy.deepcopy(SMALL_STUDY)))
    out = tmp_path / "trl-out"
    plain.main(["--study", str(tmp_path / "study.yaml"), "--seed", "1", "--out", str(out), "--steps", "2",
                "--model", str(tmp_path / "model")])
    log = ingest.read(out)
    assert list(log.checkpoints) == [1, 2] and log.arguments is not None and log.batch == 8
    from mcgrpo import data
    pool, _ = data.build(_run(out)["task"])
    assert ingest.differences(log, _run(out), ingest.prompt_lengths(_run(out), tiny[1], pool)) == []


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # a difference of exactly 0: no spread
def test_contrast_reads_ingested_runs_as_any_others(tmp_path, tiny, world, monkeypatch):
    """Two seeds of an ingested TRL run beside an arm whose runs hold the same evaluations, stored and linked as
    the workflow does: the contrast at equal tokens reads each seed at its point B (index 4, checkpoint-4) and finds
    a difference of exactly 0. Its warning says what the verdict rests on: the ingested arm's tokens and time are its
    TRL logs' own records (before, nothing said so)."""
    from mcgrpo.analysis import recompute
    from mcgrpo.core import layout, store
    from mcgrpo.core.budget import budget_table
    from mcgrpo.train.job import write_run
    monkeypatch.chdir(tmp_path)
    folder = _checkpoints(tmp_path, *tiny)
    cfg = {**_study(folder), "seeds": [1, 2]}
    for seed in (1, 2):
        log, block = ingest.ingest(ingest.read(folder), _run(folder, seed=seed), 600, *tiny, *world)
        for arm in ("mine", "outcome"):
            write_run(layout.run_dir(cfg, arm, seed), study_config.run_config(cfg, arm, seed), 600, log, tiny[0],
                      {"ingested": block})
    store.write_parquet(budget_table("tiny", [], 600, "config"), layout.budget_path(cfg),
                        study_config.config_hash(study_config.calibration_config(cfg)))  # as calibrate writes it
    results = layout.study_dir(cfg)
    layout.link_study({**cfg, "arms": {k: cfg["arms"][k] for k in ("outcome", "mine")}},
                      results / "runs" / "store.parquet")
    table, paired, _ = recompute.contrast(results, "mine", "outcome", "tokens", "acc_default", study=cfg,
                                          resamples=200)
    assert table["n"].iloc[0] == 2 and (paired["diff"] == 0).all() and paired["seed"].tolist() == [1, 2]
    assert table["warning"].iloc[0] == ("mine's tokens and training time are its TRL logs' own records (ingested, "
                                        "not counted by mcgrpo)")
    for seed, value in zip(paired["seed"], paired["value_a"]):
        ev = store.read_contract(results / "runs" / "mine" / f"seed{seed}" / "evals.parquet", "evals")
        assert value == pytest.approx(ev.loc[ev["eval_index"] == 4, "acc_default"].iloc[0])


def test_a_validated_study_with_an_ingested_arm_validates_again_as_its_jobs_do(tmp_path):
    """The rules hand each job the validated config, which is validated again: the ingested arm's trainer keeps one
    key (a default trl block filled beside it made it 'has too many properties' in every analysis job)."""
    folder = _folder(tmp_path, _state())
    cfg = _study(folder)
    assert cfg["arms"]["mine"]["trainer"] == {"ingested": {"trl_output": str(folder), "accept_differences": False}}
    assert studies.validate(json.loads(json.dumps(cfg)))["arms"]["mine"]["trainer"] == cfg["arms"]["mine"]["trainer"]
    assert cfg["arms"]["trl"]["trainer"] == {"trl": {"script": None}}
