"""Keep your trainer: a `trl.GRPOTrainer` run counted, stopped, evaluated and stored by mcgrpo's protocol.

`Protocol` is a `transformers.TrainerCallback` that, attached to a GRPOTrainer (`Protocol.attach`), makes its run
obey the protocol mcgrpo's own trainer obeys (mcgrpo.train.trainer):

  - it counts every generated token: the rollouts TRL samples in training, and what a reward function samples
    itself, which it charges through `mcgrpo.api.charge` (mcgrpo.core.ledger);
  - it stops at the first optimizer step at which the run reaches horizon x B;
  - it evaluates at step 0 and at every step that crossed a point k B / per_budget, on the study's evaluation sets
    with the study's samples, common random numbers and every verifier (mcgrpo.train.evaluation, the same code);
  - it times the steps' generation ("generate"), rewards ("credit") and the rest of the step ("update"), never
    evaluation (mcgrpo.core.clock);
  - its RunLog is the one mcgrpo's trainer keeps, which the train job writes into the run store as it writes
    mcgrpo's (mcgrpo.train.job): the same Parquet, run.json and manifest.

An iteration is one optimizer step on one generated batch (steps_per_generation = num_iterations = 1); the
protocol reaches into two of TRL's methods (`_generate`, `_calculate_rewards`) to count and time, which is why
the extra pins TRL's version (mcgrpo.core.trl_config.TRL_VERSION); it also counts the policy's `generate` for the
whole run (a callback's sampling too) and the optimizer's steps (a step post-hook: one a step). One process: no
distributed TRL.
What the trainer is held to when the protocol attaches and at every step (the recipe's settings, its copies of
them, its optimizer, generation defaults, tokenizer and starting policy) is `trl_held`'s; the process's global state
`trl_globals`'s.

`TRLRun` is what the train job drives for an arm with `trainer: {trl: ...}`: the model, the prompt stream as a
dataset, the GRPOConfig of the study's recipe (trl_config) and the study's verifier as the reward (`Setup`),
handed to the arm's script (`def trainer(setup: Setup) -> GRPOTrainer`) or to `default_trainer`.
A preempted TRL run does not resume: its next attempt trains it again from step 0 (docs/trl.md).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import sys
import time
import traceback
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial, wraps
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
from transformers import TrainerCallback

from mcgrpo.core import plugins
from mcgrpo.core.budget import unit as budget_unit
from mcgrpo.core.clock import STAGES, StageClock, checked, checking, cpu_seconds, discover
from mcgrpo.core.errors import ConfigError, Interrupted, McgrpoError
from mcgrpo.core.ledger import Ledger, counting
from mcgrpo.core.trl_config import TRL_VERSION, edited, grpo_arguments, identity
from mcgrpo.integrations.trl_globals import Held
from mcgrpo.integrations.trl_held import (copies_differing, defaults_differing, initial, optimizer_differing, reading,
                                           refusals, same_start, sampling_defaults, settings, settings_changed,
                                           settings_differing, short, tokenizer_differing, weights)
from mcgrpo.train import engines, patches
from mcgrpo.train.evaluation import Evaluator
from mcgrpo.train.rollout import reward as training_reward, score, study_prompter, study_rule
from mcgrpo.train.selection.stream import PromptStream
from mcgrpo.train.trainer import RunLog, record_evaluation

__all__ = ["Protocol", "Setup", "TRLRun", "default_trainer", "study_evaluator", "study_reward"]


def _trl():
    """The trl module, of the pinned version (a run's identity names it)."""
    try:
        import trl
    except ImportError as e:
        raise ConfigError(f"a TRL arm needs the trl package ({e}); allowed: pip install 'mcgrpo[trl]'") from None
    if trl.__version__ != TRL_VERSION:
        raise ConfigError(f"a TRL arm trains with trl=={TRL_VERSION} (its runs' identity names it); this "
                          f"environment has trl {trl.__version__}; allowed: pip install 'mcgrpo[trl]'")
    return trl


class Protocol(TrainerCallback):
    """The protocol of one run (its effective config `run`, B `budget`) as a callback of a GRPOTrainer."""

    def __init__(self, run: dict, budget: int, tokenizer, eval_sets: dict[str, pd.DataFrame] | None,
                 tracker=None):
        self.run, self.tokenizer, self.eval_sets, self.tracker = run, tokenizer, eval_sets, tracker
        self.ledger = Ledger(budget, budget_unit(run["budget"]), run["evaluation"]["per_budget"],
                             run["budget"]["horizon"])
        self.log, self.clock, self.evaluator = RunLog(), StageClock(), None
        self.updates, self.train_seconds, self.train_cpu_seconds = 0, 0.0, 0.0
        self.stop_requested, self.trained, self.scored = False, set(), None
        self._step_start, self._stepped = None, False  # where the step's clock started (_now); a step to log
        self.record: dict = {}  # what run.json adds: the settings of the trainer that differ from the recipe
        self.uncharged, self.warned = 0, set()  # tokens generated but neither returned nor charged; kinds warned of
        self.outside: list[int] = []  # what the policy's generate made outside the steps' generation and rewards
        self._seen = self.outside  # where the policy's generate counts now (_watching)
        self._models, self._depth = {}, 0  # the models whose generate is counted (watch); its calls under way
        self.eos_ids = {tokenizer.eos_token_id}  # the study's end token; the trainer's (attach) from then on
        self._continuation, self._charged = 0, 0  # continuation tokens at the last step's end; the rewards' since
        self._refused: Callable[[], list[str]] = list  # what attach checks, again at every step
        self.rows = 0  # completions generated in training since the last step ended
        self.optimizer_steps = 0  # the optimizer's steps since the last step ended (on_train_begin's hook)
        self.stream: Callable[[int, int], list[dict]] | None = None  # the prompt stream's rows (start, count)
        self.settings: dict | None = None  # the recipe's GRPOConfig, every key (settings()), where TRLRun built it
        self.held: Held | None = None  # the global state a script arm's code must leave as it is (TRLRun's)
        self.defaults: dict | None = None  # the study's initial model's generation_config (TRLRun's), else attach's
        self.reading: dict | None = None  # the study's tokenizer, as it reads (TRLRun's), else attach's

    # -- attaching to a trainer -------------------------------------------------------------------------------
    def attach(self, trainer) -> "Protocol":
        """Count and time `trainer`'s generation and rewards, and call this back; refuses, before the first step,
        what breaks the count or the comparison with the study's other arms (`refusals`), and keeps every other
        setting that differs from the recipe for run.json (`record`)."""
        args = trainer.args
        r = self.run["recipe"]
        bound = self.ledger.iterations_at_most(r["prompts_per_iteration"] * r["group_size"])
        recipe = grpo_arguments(self.run, args.output_dir, bound, False)  # use_cpu, bf16: not compared
        defaults = self.defaults or sampling_defaults(trainer.accelerator.unwrap_model(trainer.model))
        kept, read = settings(args), self.reading or reading(trainer.processing_class)  # kept: what run.json records
        self._refused = lambda: refusals(trainer.args, recipe, bound) or [
            *settings_changed(trainer.args, kept), *copies_differing(trainer), *optimizer_differing(trainer),
            *defaults_differing(trainer, defaults), *tokenizer_differing(trainer, read)]
        wrong = self._refused()
        if trainer.accelerator.num_processes != 1:
            wrong.append(f"TRL on {trainer.accelerator.num_processes} processes; allowed: one")
        if wrong:
            raise ConfigError("; ".join(wrong))
        self.record = {"trl_settings": {"differ_from_recipe": settings_differing(args, self.settings or recipe)}}
        self.group_size = args.num_generations
        self.reward_weights = trainer.reward_weights
        self.eos_ids = set(trainer.eos_token_ids)
        self.watch(trainer.model, trainer.accelerator.unwrap_model(trainer.model))
        self._weights = weights(trainer.accelerator.unwrap_model(trainer.model))  # as same_start found them
        trainer._generate = self._counted(trainer, trainer._generate)
        trainer._calculate_rewards = self._scoring(trainer, trainer._calculate_rewards)
        trainer.add_callback(self)
        return self

    def _stage(self, trainer, name: str):
        return self.clock.stage(name) if trainer.model.training else nullcontext()

    def _counted(self, trainer, generate: Callable) -> Callable:
        @wraps(generate)
        def counted(prompts):
            training = trainer.model.training  # as TRL reads it at the step's start: eval mode is its own evaluation
            with self._stage(trainer, "generate"), self._watching() as seen:
                out = generate(prompts)
            if training:  # TRL's own evaluation generates in eval mode: not the run's tokens
                completion_ids, tool_mask = out[1], out[2]
                self.rows += len(completion_ids)
                returned = (int(sum(map(sum, tool_mask))) if tool_mask is not None  # the model's, not tools'
                            else sum(map(len, completion_ids)))
                self.ledger.charge(returned, "rollout")
                if tool_mask is None:  # with tools, one completion is several generate calls and the tools' tokens
                    self._sampled_by_the_policy(trainer, sum(seen), returned)
                    self._charge_unseen(sum(seen), returned, "discarded", (
                        f"the trainer's _generate generated more tokens than it returned in step "
                        f"{self.ledger.iterations + 1} ({sum(seen)} with the policy's generate, {returned} returned: "
                        f"a draw it discarded, best-of-n or rejection sampling); the rest is counted toward B as "
                        f"discarded tokens (docs/trl.md)"))
            return out
        return counted

    def _sampled_by_the_policy(self, trainer, seen: int, returned: int) -> None:
        """Refuse a step's generation that returned more completion tokens than the policy's generate made in it (a
        subclass that puts completions of its own among them: a demonstration, an edited or extended completion): B
        would count tokens nobody sampled, as if the policy had, and the step would train on them. Not checked where
        the trainer samples otherwise than by the policy's generate (vLLM, continuous batching, a rollout_func)."""
        if trainer.use_vllm or trainer.use_transformers_continuous_batching or trainer.rollout_func is not None:
            return
        if returned > seen:
            raise ConfigError(f"in step {self.ledger.iterations + 1}: GRPOTrainer's _generate returned {returned} "
                              f"completion tokens, but the policy's generate made {seen} in it; allowed: the "
                              f"completions the policy sampled in the step (one of the script's own, a demonstration "
                              f"or an edited completion, is neither sampled by the policy nor generated; docs/trl.md)")

    def _scoring(self, trainer, calculate: Callable) -> Callable:
        @wraps(calculate)
        def scoring(inputs, prompts, completions, completion_ids_list):
            charged = self.ledger.tokens["continuation"]
            training = trainer.model.training  # before the rewards run: one that calls model.eval() and leaves it so
            if training:  # is still in a training step, its tokens the run's
                self._fed_the_stream(inputs)
            with self._stage(trainer, "credit"), self._watching() as seen:
                rewards = calculate(inputs, prompts, completions, completion_ids_list)
            if training:
                charged = self.ledger.tokens["continuation"] - charged
                self._charged += charged + max(0, sum(seen) - charged)  # what the rest of the step is not to match
                self._charge_unseen(sum(seen), charged, "continuation", (
                    f"a reward function generated {sum(seen)} tokens with the policy's generate in step "
                    f"{self.ledger.iterations + 1} and charged {charged}; the rest is counted toward B anyway (call "
                    f"mcgrpo.api.charge for what it generates; docs/trl.md says what the count cannot see)"))
                self.scored = self._score(inputs, completions, completion_ids_list, rewards)
            return rewards
        return scoring

    def _fed_the_stream(self, inputs: list[dict]) -> None:
        """Refuse a step fed other prompts than the run's prompt stream has there (`stream`; every arm of the study
        trains on that stream, in order): a script's dataset in another order, of another prompt set, or of the
        held-out problems every arm is evaluated on would train otherwise than the arms it is compared with, or on the
        test itself. Checked before the step's rewards and update."""
        if self.stream is None:
            return
        step, per = self.ledger.iterations, len(inputs) // self.group_size
        expected = self.stream(step * per, per)
        for k, row in enumerate(inputs):
            want = expected[k // self.group_size]
            wrong = [f"{key} {short(row.get(key))} (the stream's: {short(want[key])})" for key in want
                     if row.get(key) != want[key]]
            if wrong:
                raise ConfigError(f"in step {step + 1}: GRPOTrainer trained on prompt {k // self.group_size} of its "
                                  f"batch with {', '.join(wrong)}; allowed: setup.dataset as it is, the run's prompt "
                                  f"stream in order (what every arm of the study trains on; another prompt set is "
                                  f"another study's task)")

    def watch(self, *models) -> None:
        """From now to the run's end: count what each model's own `generate` makes (the new tokens of each row, up
        to and including its end token) into `_seen`: the step's generation's or its rewards' while they run
        (`_watching`), else `outside` (trainer(setup)'s, a callback's, between them), whether or not the code that
        generated charges them. A generate inside another watched one (a PEFT wrapper's, its model's) counts once.
        mcgrpo's evaluation samples by the model's forward, not `generate`, and is not seen."""
        for model in models:
            if id(model) in self._models:
                continue
            self._models[id(model)], generate = model, model.generate

            def counted(*args, _generate=generate, **kwargs):
                self._depth += 1
                try:
                    out = _generate(*args, **kwargs)
                finally:
                    self._depth -= 1
                prompt = kwargs.get("input_ids", args[0] if args else None)
                sequences = getattr(out, "sequences", out)
                if not self._depth and prompt is not None and torch.is_tensor(sequences):
                    self._seen.append(sum(self._generated(row) for row in sequences[:, prompt.shape[1]:].tolist()))
                return out
            model.generate = counted

    def on_train_end(self, args, state, control, **kwargs):
        for model in self._models.values():
            model.__dict__.pop("generate", None)  # the instance's wrapper (watch): the class's generate again

    @contextmanager
    def _watching(self):
        """What the policy's `generate` makes in the block, counted apart from the rest of the step."""
        seen, kept = [], self._seen
        self._seen = seen
        try:
            yield seen
        finally:
            self._seen = kept

    def _charge_outside(self) -> None:
        """At the end of a step: charge what the policy's `generate` made outside its generation and rewards (a
        callback that samples) beyond what was charged outside the rewards (mcgrpo.api.charge in a callback)."""
        charged = self.ledger.tokens["continuation"] - self._continuation - self._charged
        self._charge_unseen(sum(self.outside), charged, "continuation", (
            f"the script's code (trainer(setup), its callbacks, its trainer's methods) generated {sum(self.outside)} "
            f"tokens with the policy's generate outside the steps' generation and rewards by step "
            f"{self.ledger.iterations + 1} and charged {charged}; the rest is counted toward B anyway (call "
            f"mcgrpo.api.charge for what it generates; docs/trl.md)"), "outside")
        self.outside.clear()
        self._continuation, self._charged = self.ledger.tokens["continuation"], 0

    def _generated(self, row: list[int]) -> int:
        """A generated row's tokens up to and including its first end token (what follows was never used)."""
        return next((i + 1 for i, t in enumerate(row) if t in self.eos_ids), len(row))

    def _charge_unseen(self, generated: int, counted: int, kind: str, warning: str, where: str = "") -> None:
        """Charge, as `kind`, what the policy's `generate` made beyond what was `counted` (charged by the rewards, or
        returned by the step's generation), and say so once per run, kind and `where` (`warning`): B counts every
        generated token, charged, returned or not."""
        missing = generated - counted
        if missing <= 0:
            return
        self.ledger.charge(missing, kind)
        self.uncharged += missing
        if (kind, where) not in self.warned:
            self.warned.add((kind, where))
            print(f"mcgrpo: warning: {warning}", file=sys.stderr)

    def _score(self, inputs, completions, ids, rewards: torch.Tensor) -> dict:
        """The batch as iterations.parquet describes it: the study's verifiers on every completion, the training
        reward (TRL's weighted sum), the groups' composition, truncation and length."""
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        answers = [str(x["answer"]) for x in inputs]
        scores = score(texts, answers, study_rule(self.run))
        trained = (rewards * self.reward_weights.to(rewards.device)).nansum(dim=1).cpu().numpy()
        groups = trained.reshape(-1, self.group_size).mean(axis=1)
        return {"reward_default": float(scores.default.mean()), "reward_strict": float(scores.strict.mean()),
                "groups_all_wrong": int((groups == 0).sum()), "groups_all_correct": int((groups == 1).sum()),
                "groups_mixed": int(((groups > 0) & (groups < 1)).sum()),
                "truncated_share": float(np.mean([not c or c[-1] not in self.eos_ids for c in ids])),
                "mean_length": float(np.mean([len(c) for c in ids])),
                "problems": [x.get("problem_id") for x in inputs[::self.group_size]], "groups": groups}

    # -- the callback ---------------------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, processing_class=None, optimizer=None, **kwargs):
        optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's wrapper: the optimizer that steps
        optimizer.register_step_post_hook(lambda *_: setattr(self, "optimizer_steps", self.optimizer_steps + 1))
        self._weights_kept(model)
        if self.eval_sets:
            self.evaluator = study_evaluator(self.run, model, self.tokenizer, self.eval_sets)
        self.evaluate(model)
        discover()  # a process started before training (a reward's worker) is counted from here on, not its start
        self._step_start = self._now()

    def on_step_begin(self, args, state, control, **kwargs):
        with checking():  # no stage's time
            self._still_the_recipe(f"before step {state.global_step + 1}")

    def _weights_kept(self, model) -> None:
        """Refuse a policy whose weights changed between attach and the first step, by the callbacks' on_train_begin
        that ran before this one (a warm-up of their own, weights edited): the arm would start elsewhere than the
        study's initial model, with time and tokens the protocol never saw."""
        now = weights(model)
        if now.shape != self._weights.shape or not torch.equal(now, self._weights):
            changed = int((now != self._weights).sum()) if now.shape == self._weights.shape else "some"
            raise ConfigError(f"before step 1: the GRPOTrainer's callbacks (on_train_begin) changed {changed} of its "
                              f"model's parameters; allowed: the model as trainer(setup) returned it (the study's "
                              f"initial policy), changed only by the steps the protocol counts")

    def _still_the_recipe(self, when: str) -> None:
        """Refuse, at every step, settings changed since `attach` checked them (a callback or a reward function of
        the script that sets the trainer's temperature, its completion limit or its args mid-run): the step would
        sample or update otherwise than the arms it is compared with, and the record would not say so."""
        wrong = self._refused()
        if wrong:
            raise ConfigError(f"{when}: " + "; ".join(wrong))
        self._global_state_kept(when)

    def _global_state_kept(self, when: str = "",
                           doing: str = "its trainer (its callbacks, reward functions)") -> None:
        """Refuse the process's global state, or the code, changed by a script arm's code (trl_globals.Held) as it
        was `doing` (at its import, after trainer(setup), at every step, before every evaluation and after training):
        this arm's steps and mcgrpo's evaluation of it would run under it. `when` prefixes the message."""
        if self.held is not None:
            self.held.check(doing, f"{when}: " if when else "")

    def _generated_its_batch(self, batch: int, when: str) -> None:
        """Refuse a step that trained on completions it did not generate (a subclass that replays an earlier step's
        batch, or samples elsewhere than `_generate`, which the protocol counts): its update would be one that B
        does not pay for, sample reuse in code where the config's num_iterations is refused."""
        rows, self.rows = self.rows, 0
        if rows < batch:
            raise ConfigError(f"{when}: GRPOTrainer trained on a batch of {batch} completions, but generated {rows} "
                              f"in the step (through its _generate, which B counts); allowed: every step on a batch "
                              f"generated in it (a step on an earlier step's completions is sample reuse, an update "
                              f"the budget B does not pay for; docs/trl.md)")

    def _one_update(self, when: str) -> None:
        """Refuse a step in which the optimizer did not step once (a subclass whose training_step steps it again
        on the step's batch, or skips it): the run's records count one update per step, which equal-update
        contrasts read, and a second update on a generated batch is sample reuse B does not pay for."""
        steps, self.optimizer_steps = self.optimizer_steps, 0
        if steps != 1:
            raise ConfigError(f"{when}: GRPOTrainer's optimizer stepped {steps} times; allowed: once a step (an "
                              f"iteration of the protocol is one optimizer step on one generated batch; docs/trl.md)")

    def on_step_end(self, args, state, control, **kwargs):
        with checking():  # no stage's time
            self._still_the_recipe(f"in step {state.global_step}")
            self._generated_its_batch(args.per_device_train_batch_size, f"in step {state.global_step}")
            self._one_update(f"in step {state.global_step}")
        self.updates, self._stepped = self.updates + 1, True
        control.should_log = True  # every step logs its loss and gradient norm: on_log closes the iteration

    def on_log(self, args, state, control, logs=None, model=None, **kwargs):
        if not logs or "loss" not in logs or not self._stepped:  # a summary, not a step
            return
        stages, self._stepped = self._lap(), False
        self._charge_outside()
        points = self.ledger.end_iteration()
        self._record(logs, stages)
        if points or self.ledger.done:
            self.evaluate(model, points)
        if self.ledger.done or self.stop_requested:
            control.should_training_stop = True
        self._step_start = self._now()  # the next step's clock starts after this one's evaluation

    @staticmethod
    def _now() -> tuple[float, float, tuple[float, float]]:
        return time.perf_counter(), cpu_seconds(), checked()

    def _lap(self) -> dict[str, float]:
        """The step's stages, from the end of the last step's log and evaluation (or of the evaluation before
        training) to its own log: generate and credit as timed, update the rest, the script's callbacks' work
        before, in and after the step included; the protocol's checks (mcgrpo.core.clock.checking) and evaluation
        are no stage's time."""
        wall, cpu, (check_wall, check_cpu) = self._step_start
        checks = checked()
        wall = time.perf_counter() - wall - (checks[0] - check_wall)
        cpu = cpu_seconds() - cpu + discover() - (checks[1] - check_cpu)
        stages = self.clock.lap()
        stages["t_update"] = max(0.0, wall - sum(stages[f"t_{s}"] for s in STAGES if s != "update"))
        stages["cpu_update"] = max(0.0, cpu - sum(stages[f"cpu_{s}"] for s in STAGES if s != "update"))
        self.train_seconds += sum(stages[f"t_{s}"] for s in STAGES)
        self.train_cpu_seconds += sum(stages[f"cpu_{s}"] for s in STAGES)
        return stages

    # -- records --------------------------------------------------------------------------------------------------
    def state(self) -> dict:
        return {"tokens_total": self.ledger.total, "iteration": self.ledger.iterations, "updates": self.updates,
                "train_seconds": self.train_seconds, "train_cpu_seconds": self.train_cpu_seconds}

    def evaluate(self, model, indices: list[int] | None = None) -> None:
        """mcgrpo's evaluation of the policy now (outside the stage clock), then back to training mode."""
        if self.evaluator is None:
            return
        self._global_state_kept(f"before evaluating at step {self.ledger.iterations}")
        training = model.training
        record_evaluation(self.log, self.evaluator, indices, self.state(), None, self.tracker)
        model.train(training)

    def _record(self, logs: dict, stages: dict[str, float]) -> None:
        """The iteration's rows of iterations.parquet and prompts.parquet."""
        scored, i = self.scored or {}, self.ledger.iterations - 1
        self.trained.update(scored.get("problems", []))
        row = {"iteration": i, "tokens_total": self.ledger.total,
               **{f"tokens_{k}": v for k, v in self.ledger.tokens.items()},
               "updates": self.updates, "lr": float(logs.get("learning_rate", np.nan)), "loss": float(logs["loss"]),
               "grad_norm": float(logs.get("grad_norm", np.nan)),
               **{k: v for k, v in scored.items() if k not in ("problems", "groups")},
               "cand_pred_mean": np.nan, "chosen_pred_mean": np.nan, "prompts_distinct": len(self.trained),
               **stages, "train_seconds": self.train_seconds, "train_cpu_seconds": self.train_cpu_seconds}
        self.log.iterations.append(row)
        if self.tracker:
            self.tracker.log("train", row, self.ledger.total)
        self.log.prompts += [{"iteration": i, "problem_id": p, "chosen": True, "predicted_success": np.nan,
                              "group_mean_reward": float(g)}
                             for p, g in zip(scored.get("problems", []), scored.get("groups", []))]
        self.scored = None


def study_evaluator(run: dict, model, tokenizer, eval_sets: dict[str, pd.DataFrame]) -> Evaluator:
    """mcgrpo's evaluation of `model` for run `run`: the study's sets, samples, draws and verifiers (a TRL run's
    policy as it trains, or a finished one's checkpoints: mcgrpo.integrations.ingest)."""
    r = run["recipe"]
    engine = engines.build("hf", model, tokenizer, temperature=r["temperature"], top_p=r["top_p"],
                           batch_size=run["engine"]["batch_size"])
    return Evaluator(engine, study_prompter(tokenizer, run), eval_sets, run["evaluation"]["samples"],
                     r["completion_limit"], run["seed"], bool(run["evaluation"].get("greedy")), study_rule(run))


# -- a TRL arm of a study ---------------------------------------------------------------------------------------------
@dataclass
class Setup:
    """What an arm's script builds its GRPOTrainer from (it may change any of it; the protocol refuses what breaks
    its count when it attaches)."""
    run: dict  # the run's effective config (mcgrpo.core.config.run_config)
    model: Any  # the study's model, loaded
    tokenizer: Any
    args: Any  # trl.GRPOConfig from the study's recipe (mcgrpo.core.trl_config)
    dataset: Any  # datasets.Dataset: the run's prompt stream in order, columns prompt, answer, problem_id
    reward: Callable[..., list[float]]  # the study's verifier as a TRL reward function


def study_reward(run: dict, arm: str = "run") -> Callable[..., list[float]]:
    """The study's training reward (the arm's reward_verifier under verifier.rule) as a TRL reward function; `arm`:
    the arm's name, which names the verifier's config key where the arm sets its own (plugins.reward_verifier)."""
    verifier, key = plugins.reward_verifier(run.get("arm_config") or {}, run["recipe"], f"arms.{arm}")
    rule = study_rule(run)

    def reward(completions, answer, **_) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        answers = [str(a) for a in answer]
        return training_reward(score(texts, answers, rule), texts, answers, verifier, key).tolist()

    reward.__name__ = f"mcgrpo_{verifier}"  # what TRL's logs call it
    return reward


def default_trainer(setup: Setup):
    """The GRPOTrainer of an arm without a script: the study's model, recipe, prompt stream and verifier."""
    return _trl().GRPOTrainer(model=setup.model, reward_funcs=[setup.reward], args=setup.args,
                              train_dataset=setup.dataset, processing_class=setup.tokenizer)


def stream_dataset(run: dict, pool: pd.DataFrame, iterations: int):
    """The prompt stream of an outcome-only arm of mcgrpo (the same prompts in the same order), `iterations` long."""
    from datasets import Dataset
    return Dataset.from_list(stream_rows(run, pool, 0, iterations * run["recipe"]["prompts_per_iteration"]))


def stream_rows(run: dict, pool: pd.DataFrame, start: int, count: int) -> list[dict]:
    """Rows start .. start + count - 1 of that stream as the dataset holds them: prompt, answer, problem_id."""
    template = run["task"].get("prompt", "{question}")
    rows = pool.iloc[PromptStream(len(pool), run["seed"]).slice(start, count)]
    return [{"prompt": [{"role": "user", "content": template.replace("{question}", q)}], "answer": str(a),
             "problem_id": str(p)} for q, a, p in zip(rows["question"], rows["answer"], rows["problem_id"])]


def _first_change(given: Any, kept: Any, key: str = "") -> tuple[str, Any, Any] | None:
    """(dotted key, value in `given`, value in `kept`) of the first difference between two configs, else None."""
    if not (isinstance(given, dict) and isinstance(kept, dict)):
        return None if given == kept else (key, given, kept)
    return next((found for k in sorted({*given, *kept}, key=str)
                 if (found := _first_change(given.get(k), kept.get(k), f"{key}.{k}" if key else str(k)))), None)


def _shown_once(show: Callable) -> Callable:
    """`warnings.showwarning` that shows each (category, message) once."""
    shown: set[tuple[type, str]] = set()

    def once(message, category, *args, **kwargs):
        if (category, str(message)) not in shown:
            shown.add((category, str(message)))
            show(message, category, *args, **kwargs)
    return once


def _script_trainer(path: str) -> Callable[[Setup], Any]:
    spec = importlib.util.spec_from_file_location(f"mcgrpo_trl_script_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    with _in_script(path, "importing it"):
        spec.loader.exec_module(module)
    if not callable(getattr(module, "trainer", None)):
        raise ConfigError(f"trainer.trl.script {path}: defines no function trainer(setup) -> GRPOTrainer")
    return module.trainer


@contextmanager
def _in_script(path: str, doing: str):
    """A user script's own failure as one line naming its file and line (the user's to fix), not a traceback
    through mcgrpo; a failure elsewhere (mcgrpo, TRL) keeps its traceback."""
    try:
        yield
    except McgrpoError:
        raise
    except Exception as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename).resolve() == Path(path).resolve()]
        if not frames:
            raise
        raise ConfigError(f"trainer.trl.script {path}:{frames[-1].lineno}: {doing} raised {type(e).__name__}: "
                          f"{e}") from e


def _checked_trainer(path: str, built):
    """What the script's trainer(setup) returned, if it is a GRPOTrainer."""
    if not isinstance(built, _trl().GRPOTrainer):
        raise ConfigError(f"trainer.trl.script {path}: trainer(setup) returned {type(built).__name__}; allowed: a "
                          f"trl.GRPOTrainer")
    return built


class TRLRun:
    """What the train job drives for a TRL arm (as it drives mcgrpo's Trainer): run() -> RunLog."""

    resumed_at = None  # a TRL run never resumes: an interrupted one trains again from step 0
    checkpoint_seconds = None

    def __init__(self, run: dict, model, tokenizer, pool: pd.DataFrame, eval_sets, budget: int,
                 checkpoint_dir: str | Path, tracker=None, arm: str = "run"):
        _trl()
        self.cfg, self.model, self.tokenizer, self.pool, self.arm = run, model, tokenizer, pool, arm
        self.checkpoint_dir = Path(checkpoint_dir)
        self.protocol = Protocol(run, budget, tokenizer, eval_sets, tracker)
        self.protocol.stream = partial(stream_rows, run, pool)  # what each step must train on

    @classmethod
    def for_job(cls, run, model, tokenizer, pool, evals, B, checkpoint_dir, tracker, arm, identity) -> "TRLRun":
        """The train job's runner (mcgrpo.train.job.train, given it by the CLI): a TRL run never resumes, so the
        identity its checkpoints would carry is not needed."""
        return cls(run, model, tokenizer, pool, evals, B, checkpoint_dir, tracker=tracker, arm=arm)

    @property
    def stop_requested(self) -> bool:
        return self.protocol.stop_requested

    @stop_requested.setter
    def stop_requested(self, value: bool) -> None:
        self.protocol.stop_requested = value

    @property
    def next_iteration(self) -> int:
        return self.protocol.ledger.iterations

    @property
    def record(self) -> dict:
        """What run.json adds for a TRL run (mcgrpo.train.job): the trainer's settings that differ from the recipe,
        and the tokens the policy generated that neither a reward charged nor _generate returned (counted all the
        same)."""
        return {**self.protocol.record, "uncharged_tokens_counted": self.protocol.uncharged}

    def setup(self) -> Setup:
        r = self.cfg["recipe"]
        steps = self.protocol.ledger.iterations_at_most(r["prompts_per_iteration"] * r["group_size"])
        args = _trl().GRPOConfig(**grpo_arguments(self.cfg, str(self.checkpoint_dir / "trl"), steps,
                                                  self.model.device.type == "cuda"))
        self.protocol.settings = settings(args)  # before the script sees it: what a change is recorded against
        return Setup(copy.deepcopy(self.cfg), self.model, self.tokenizer, args,  # the script's own copy: `run`
                     stream_dataset(self.cfg, self.pool, steps), study_reward(self.cfg, self.arm))

    def build(self, setup: Setup):
        """The arm's GRPOTrainer: its script's (the script the run's identity names) or the default one."""
        block = self.cfg["arm_config"]["trainer"]["trl"]
        if block.get("script") and (now := identity(block)) != self.cfg["trl"]:
            raise ConfigError(f"trainer.trl.script {block['script']}: edited since the workflow planned this run: "
                              f"{'; '.join(edited(self.cfg['trl'], now))}; allowed: rerun the workflow, which plans "
                              f"the edited script or module as another run")
        if not block.get("script"):
            return default_trainer(setup)
        build = _script_trainer(block["script"])
        self.protocol._global_state_kept(doing="importing it")
        with _in_script(block["script"], "trainer(setup)"):
            built = build(setup)
        return _checked_trainer(block["script"], built)

    def _read_only(self, given: dict) -> None:
        """Refuse a script that changed setup.run (its copy of the run's config): the protocol evaluates, compares
        and stores the run by the run's own, so a change there (greedy evaluation, another temperature) either did
        nothing the script meant or, read by the protocol, would measure this arm by another yardstick."""
        changed = _first_change(given, self.cfg)
        if changed:
            key, new, old = changed
            raise ConfigError(f"trainer(setup) changed setup.run: {key} {short(new)} (the run's: {short(old)}); "
                              f"allowed: setup.run read only (the run's effective config, which the protocol "
                              f"evaluates and stores the run by; a GRPOConfig setting is set in setup.args)")

    def run(self) -> RunLog:
        """Train to horizon x B under the protocol; its RunLog, as mcgrpo's Trainer.run returns it."""
        ledger = self.protocol.ledger
        with warnings.catch_warnings():
            # TRL toggles gradient checkpointing around every step's generation, and transformers warns of the
            # deprecated names each time (3 FutureWarnings a step; Python's "once" filter does not hold across
            # the warning state TRL resets): each warning is shown once
            warnings.showwarning = _shown_once(warnings.showwarning)
            setup = self.setup()
            start = initial(self.model, self.tokenizer)  # before the script, which may change either in place
            self.protocol.defaults, self.protocol.reading = sampling_defaults(self.model), start[1]
            script = self.cfg["arm_config"]["trainer"]["trl"].get("script")
            with (patches.held() if script else contextlib.nullcontext()) as code:  # its import, build and steps
                # the global state as a script arm starts, read after setup() built the recipe's GRPOConfig (what
                # transformers sets for the recipe's arguments is part of it); none for the default trainer, which
                # runs only mcgrpo's and TRL's code (a verifier plugin it rewards with is held by train.contract)
                self.protocol.held = Held(script, code) if script else None
                self.protocol.watch(self.model)  # what trainer(setup) generates with the policy counts too
                trainer = self.build(setup)
                self.protocol._global_state_kept(doing="trainer(setup)")
                self._read_only(setup.run)
                same_start(trainer, start)
                self.protocol.attach(trainer)
                with counting(ledger):
                    trainer.train()
                self.protocol._global_state_kept("after training")
        if self.stop_requested:
            raise Interrupted(f"stopped on request after iteration {ledger.iterations - 1}")
        if not ledger.done:
            raise McgrpoError(f"TRL arm {self.arm!r} ended after {ledger.iterations} steps at {ledger.spent} of "
                              f"horizon x B = {ledger.horizon * ledger.budget} ({ledger.unit}): a run trains to B; "
                              f"allowed: a GRPOConfig whose max_steps and dataset reach it")
        return self.protocol.log

