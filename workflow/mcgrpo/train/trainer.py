"""The GRPO training loop: select -> generate -> credit -> update -> sync, under a budget.

A run ends at the first iteration boundary where what it spent reaches horizon x B: every token it generated
(rollouts, continuations, discarded groups), or, in an equal-iteration study (budget.iterations), the
iterations it did. It is evaluated at 0 and at the first boundary at or after each multiple of B / per_budget
(evaluation k for the k-th multiple, one record per multiple even when an iteration crosses several);
evaluation time is excluded from training time, and so is what the study measures besides (entropy and KL,
alignment along training). It checkpoints after every evaluation and when asked to stop (a preemption
signal), and resumes from its newest checkpoint.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from mcgrpo.train import along, checkpoint
from mcgrpo.train import credit as credit_rules
from mcgrpo.train import contract, engines, selection, updates
from mcgrpo.core import plugins, progress
from mcgrpo.core.store import COLUMNS
from mcgrpo.core.budget import unit as budget_unit
from mcgrpo.core.ledger import Ledger
from mcgrpo.core.clock import STAGES, StageClock, discover
from mcgrpo.train.credit import CreditContext
from mcgrpo.core.seeds import stable_seed
from mcgrpo.core.errors import ConfigError, Interrupted
from mcgrpo.train.entropy_kl import entropy_kl
from mcgrpo.train.evaluation import Evaluator
from mcgrpo.train.loss import backward_policy_loss
from mcgrpo.train.policy import PolicyView, SelectorView, frozen, log_ratio
from mcgrpo.train.rollout import (PrompterView, problem_records, rule_backend, sample_groups, study_prompter,
                                  study_rule)


@dataclass
class RunLog:
    iterations: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    samples: list[pd.DataFrame] = field(default_factory=list)
    prompts: list[dict] = field(default_factory=list)
    alignment: list[pd.DataFrame] = field(default_factory=list)  # the gradient tests along training, if measured

    def frames(self) -> dict[str, pd.DataFrame]:
        samples = pd.concat(self.samples, ignore_index=True) if self.samples else pd.DataFrame()
        out = {"iterations": pd.DataFrame(self.iterations), "evals": pd.DataFrame(self.evals),
               "samples": samples,  # no prompts: a run whose log does not name them (mcgrpo.integrations.ingest)
               "prompts": pd.DataFrame(self.prompts) if self.prompts else pd.DataFrame(columns=COLUMNS["prompts"])}
        out["alignment"] = (pd.concat(self.alignment, ignore_index=True) if self.alignment
                            else pd.DataFrame(columns=along.COLUMNS))  # every run writes it: empty if unmeasured
        return out


def adam(model, recipe: dict) -> torch.optim.Adam:
    """The recipe's Adam. On a GPU its fused kernel: one pass over the parameters, gradients and moments instead of
    a pass per elementwise operation (issue 45, item 2; tests/test_gpu_update.py holds it to the unfused step). On a
    CPU torch's default, as before, so that the CPU's runs and the default study's verdicts keep their numbers."""
    return torch.optim.Adam(model.parameters(), lr=recipe["lr"], betas=tuple(recipe["adam_betas"]),
                            eps=recipe["adam_eps"], weight_decay=0.0,
                            fused=True if model.device.type == "cuda" else None)

class Trainer:
    def __init__(self, cfg: dict, model, tokenizer, pool: pd.DataFrame,
                 eval_sets: dict[str, pd.DataFrame] | None, budget: int | None,
                 checkpoint_dir: str | None = None, config_hash: str = "", tracker=None, arm: str = "run"):
        self.cfg, self.recipe, self.arm = cfg, cfg["recipe"], arm  # arm: what messages call the run (the study's name)
        self.model, self.pad_id = model, tokenizer.pad_token_id
        self.seed, self.budget, self.unit = cfg["seed"], budget, budget_unit(cfg["budget"])
        r = self.recipe
        self.optimizer = adam(model, r)
        self.prompter = study_prompter(tokenizer, cfg)
        self.rule = study_rule(cfg)
        self.engine = engines.build(cfg["engine"]["name"], model, tokenizer, temperature=r["temperature"],
                                    top_p=r["top_p"], **{k: v for k, v in cfg["engine"].items() if k != "name"})
        self.credit = credit_rules.build(cfg["arm_config"].get("credit", {}), pool, arm)
        self.problems = problem_records(pool)
        self.selector = selection.build(cfg["arm_config"], len(pool), self.seed, r["prompts_per_iteration"],
                                        f"arms.{arm}.selection")
        # what messages about a plugin's output name (mcgrpo.train.contract)
        self.credit_subject = contract.Subject.of(
            "credit", *credit_rules.named(cfg["arm_config"].get("credit"), f"arms.{arm}.credit"))
        self.selector_subject = contract.Subject.of(
            "selection", next(iter(cfg["arm_config"].get("selection") or {}), "stream"), f"arms.{arm}.selection")
        self.verifier_key = plugins.reward_verifier(cfg["arm_config"], r, f"arms.{arm}")[1]
        # what the plugins that cannot save their state held when built: unchanged at each checkpoint, or refused
        self.built = {part: contract.unsaved_state(getattr(self, part)) for part in ("credit", "selector")}
        # each built afresh, as a resumed run builds it: what a plugin's state_dict must restore it to at a checkpoint
        self.rebuild = {"credit": functools.partial(credit_rules.build, cfg["arm_config"].get("credit", {}), None, arm),
                        "selector": functools.partial(selection.build, cfg["arm_config"], len(pool), self.seed,
                                                      r["prompts_per_iteration"], f"arms.{arm}.selection")}
        # pi_0, the initial policy: the implicit reward's pi_ref and the KL's reference, kept only when asked for
        spec = along.wanted(cfg)
        self.along = None
        needs = getattr(self.credit, "needs_reference", False)
        self.entropy_kl = bool(cfg["evaluation"].get("entropy_kl"))
        self.reference = frozen(model) if needs or self.entropy_kl or spec else None
        self.log_ratio = log_ratio(model, self.reference, self.pad_id) if needs else None
        self.view = PolicyView(model, self.prompter, self.problems, self.pad_id, r["microbatch_size"])
        # what plugins are handed of it: a selector its features and levels, a credit rule its prefix features
        self.selector_view, self.features = SelectorView(self.view), self.view.features_function()
        ev = cfg["evaluation"]
        self.evaluator = Evaluator(self.engine, self.prompter, eval_sets, ev["samples"],
                                   r["completion_limit"], self.seed, bool(ev.get("greedy")),
                                   self.rule) if eval_sets else None
        self.clock = StageClock(torch.cuda.synchronize if model.device.type == "cuda" else None)
        # what B counts, by kind: one count for both trainers (mcgrpo.core.ledger; TRL's in mcgrpo.integrations.trl)
        self.ledger = Ledger(budget, self.unit, cfg["evaluation"]["per_budget"], cfg["budget"]["horizon"])
        self.updates, self.train_seconds, self.train_cpu_seconds, self.log = 0, 0.0, 0.0, RunLog()
        self.next_iteration, self.stop_requested, self.trained_prompts = 0, False, set()
        self.resumed_at = None  # the iterations a resumed run had done
        self.checkpoint_seconds = None  # the longest checkpoint of this attempt, in seconds (none written: None)
        self.checkpoint_dir, self.config_hash = checkpoint_dir, config_hash
        self.shown = None  # the progress bar, while run() runs
        self.tracker = tracker  # mcgrpo.train.tracking: gets every row logged, outside the stage clock
        if spec:
            self.along = along.AlongTraining(cfg, spec, tokenizer, pool, self.reference)

    @property
    def tokens(self) -> dict[str, int]:
        """Generated tokens by kind (rollout, continuation, discarded), as the ledger counts them."""
        return self.ledger.tokens

    @property
    def tokens_total(self) -> int:
        return self.ledger.total

    @property
    def spent(self) -> int:
        """What B counts: every generated token, or the iterations done (an equal-iteration study)."""
        return self.ledger.spent

    def iteration(self, i: int) -> dict:
        """One GRPO iteration, each stage on the stage clock. What the selector and the credit rule return is
        checked as it enters (mcgrpo.train.contract), and the tokens they generate are counted by the engine they
        were handed: a plugin that breaks its contract stops the run here, naming itself and the iteration."""
        r = self.recipe
        with contract.during(f"training arm {self.arm} seed {self.seed}, iteration {i}"):
            with self.clock.stage("select"):
                chosen = contract.selection(self.selector_subject,
                                            self.selector_subject.call(self.selector.select, i, self.selector_view),
                                            len(self.problems), r["prompts_per_iteration"])
            with self.clock.stage("generate"):
                batch, discarded, chosen = self.generate(i, chosen)
            with self.clock.stage("credit"):
                counted = engines.Counting(self.engine)
                ctx = CreditContext(engine=counted, prompter=PrompterView(self.prompter), limit=r["completion_limit"],
                                    verifier=r["reward_verifier"], rule=self.rule, advantage_eps=r["advantage_eps"],
                                    verifier_key=self.verifier_key, seed=(self.seed, i),
                                    features=self.features, log_ratio=self.log_ratio)
                credit = contract.credit(self.credit_subject, self.credit_subject.call(self.credit, batch, ctx),
                                         batch, counted)
            self.ledger.charge(batch.n_tokens, "rollout")
            self.ledger.charge(int(credit.tokens_generated), "continuation")
            self.ledger.charge(int(discarded), "discarded")
            moved = self._entropy_kl(batch)  # measurement, outside the stage clock
            with self.clock.stage("update"):
                loss, grad_norm = self.update(i, batch, credit)
            with self.clock.stage("sync"):
                self.engine.sync(self.model)
            groups = batch.grouped(batch.rewards).mean(axis=1)
            # what the selector learns from the trained groups is selection's work, timed with it (a plugin that
            # refits here would otherwise train for free; the paper times everything but evaluation, logging and
            # checkpointing)
            with self.clock.stage("select"):
                self.selector_subject.call(self.selector.observe, i, chosen, groups, self.selector_view)
            return self._record(i, chosen, batch, groups, loss, grad_norm, credit, moved)

    def _entropy_kl(self, batch) -> dict:
        """The policy's entropy and KL from pi_0 over the batch, before its update (evaluation.entropy_kl)."""
        if not self.entropy_kl:
            return {}
        return entropy_kl(self.model, self.reference, batch.prompts, [c.tokens for c in batch.completions],
                          self.pad_id, self.recipe["microbatch_size"])

    def generate(self, i: int, chosen):
        """The iteration's groups, the tokens of groups generated but discarded, and the final Selection: checked
        against what the engine generated for them, the groups the selector sampled unchanged."""
        r = self.recipe
        counted = engines.Counting(self.engine)

        def sample(indices, chunk: int):
            problems = [self.problems[j] for j in indices]
            seeds = [stable_seed(self.seed, "rollout", i, chunk, k) for k in range(len(problems) * r["group_size"])]
            return sample_groups(counted, self.prompter, problems, r["group_size"], r["completion_limit"],
                                 seeds, r["reward_verifier"], self.rule, self.verifier_key)

        sample, as_sampled = contract.sampled(self.selector_subject, sample)
        out = contract.groups(self.selector_subject, self.selector_subject.call(self.selector.generate, i, chosen,
                                                                                 sample),
                              r["group_size"], self.problems, r["prompts_per_iteration"], counted.generated)
        as_sampled(out[0])
        return out

    def learning_rate(self) -> float:
        """The arm's learning rate now: recipe lr x scale, decayed linearly to 0 at B if asked (B in tokens:
        by the tokens generated so far, this iteration's included; B in iterations: by the iterations before
        this one, so the first step takes the full rate)."""
        spec = self.cfg["arm_config"].get("lr", {})
        lr = self.recipe["lr"] * spec.get("scale", 1.0)
        if spec.get("schedule") == "linear_decay" and self.budget:
            lr *= max(0.0, 1.0 - self.spent / self.budget)
        return lr

    def update(self, i: int, batch, credit) -> tuple[float, float]:
        """The iteration's optimizer steps: one on-policy step, or the arm's clipped reuse steps (mean
        loss and gradient norm over them)."""
        spec = self.cfg["arm_config"].get("update")
        data = updates.training_batch(batch, credit)
        steps = [self._step(data.take(rows), spec and spec["clip"])
                 for rows in updates.minibatches(len(data), spec, stable_seed(self.seed, "minibatches", i))]
        return float(np.mean([loss for loss, _ in steps])), float(np.mean([norm for _, norm in steps]))

    def _step(self, data: updates.Batch, clip: float | None) -> tuple[float, float]:
        """One optimizer step on `data` (gradient accumulated over microbatches), clipped if asked."""
        if clip and any(b is None for b in data.behaviour):
            raise ConfigError(f"arms.{self.arm}.update: clipped steps need the behaviour log-probs "
                             f"recorded at generation, which engine {self.cfg['engine']['name']!r} did not record")
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        self.optimizer.zero_grad(set_to_none=True)
        loss = backward_policy_loss(self.model, data.contexts, data.tokens, data.credit, self.pad_id,
                                    self.recipe["microbatch_size"], data.behaviour if clip else None, clip)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe["grad_clip"])
        if not self.credit_subject.builtin and not torch.isfinite(grad_norm):
            raise self.credit_subject.broken(  # stepping would make every weight NaN, and the run train on
                f"the update its credit drives has gradient norm {float(grad_norm)} (its largest |credit| is "
                f"{max((float(np.max(np.abs(c), initial=0)) for c in data.credit), default=0):.3g})", LARGE)
        self.optimizer.step()
        self.updates += 1
        return loss, float(grad_norm)

    def run(self, max_iterations: int | None = None) -> RunLog:
        """Train until the budget (or `max_iterations`), evaluating on schedule; resume if checkpointed."""
        stop = None if self.budget is None else self.cfg["budget"]["horizon"] * self.budget
        resumed = self.resume()
        with self._progress(stop, max_iterations) as self.shown:
            if not resumed:
                self.measure_along(last=False)
                self.evaluate()
            if (backend := rule_backend(self.rule)) is not None:
                backend.ready()  # its worker's start is no training time, whether or not evaluation 0 started it
            discover()  # nor is any other process's started before training: counted from here on
            while (stop is None or self.spent < stop) and (max_iterations is None
                                                            or self.next_iteration < max_iterations):
                before = self.spent
                row = self.iteration(self.next_iteration)
                self.next_iteration += 1
                points = self.ledger.end_iteration()
                self._show(row, self.spent - before if stop is not None else 1)
                self.measure_along(last=stop is not None and self.spent >= stop)
                if points or (stop is not None and self.spent >= stop):
                    self.evaluate(points)
                elif self.stop_requested:
                    self.save_checkpoint()
                if self.stop_requested:
                    raise Interrupted(f"stopped on request after iteration {self.next_iteration - 1}")
        return self.log

    def _progress(self, stop: int | None, max_iterations: int | None):
        """What B counts against horizon x B (iterations when calibrating without a budget)."""
        if stop is None:
            return progress.bar("calibration", total=max_iterations, unit="it", initial=self.next_iteration)
        return progress.bar(f"train {self.arm} seed {self.seed}", total=stop,
                            unit="tok" if self.unit == "tokens" else "it", initial=self.spent)

    def measure_along(self, last: bool) -> None:
        """The gradient tests at the policy now, where the run is measured along training and it is due."""
        if self.along is None or not self.along.due(self.next_iteration, last):
            return
        self.log.alignment.append(self.along(self.model, self.next_iteration))
        progress.note(self.shown, f"alignment at iteration {self.next_iteration}: " + ", ".join(
            f"{arm} {value:+.3f}" for arm, value in
            self.log.alignment[-1].query("measure == 'alignment'").groupby("arm", sort=False)["value"].mean().items()))

    def _show(self, row: dict, advance: int) -> None:
        last = self.log.evals[-1] if self.log.evals else None
        self.shown.set_postfix_str(
            f"iteration {row['iteration']}, {self.updates} updates, reward {row['reward_default']:.2f}"
            + (f", last eval {last['acc_default']:.3f}" if last else ""), refresh=False)
        # The last iteration ends past horizon x B: the bar ends full, at the tokens generated.
        self.shown.total = max(self.shown.total, self.shown.n + advance)
        self.shown.update(advance)

    def state_dict(self) -> dict:
        """Everything a resumed run needs to continue exactly where this one is."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "rng": checkpoint.rng_state(), "next_iteration": self.next_iteration,
                "tokens": dict(self.tokens), "updates": self.updates, "train_seconds": self.train_seconds,
                "train_cpu_seconds": self.train_cpu_seconds, "trained_prompts": set(self.trained_prompts),
                "log": self.log, "selector": self.selector_subject.call(self.selector.state_dict),
                "credit": self.credit_subject.call(getattr(self.credit, "state_dict", dict))}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        checkpoint.set_rng_state(state["rng"])
        self.next_iteration = state["next_iteration"]
        self.ledger.restore(state["tokens"], self.next_iteration)
        self.updates, self.train_seconds, self.log = state["updates"], state["train_seconds"], state["log"]
        self.train_cpu_seconds = state.get("train_cpu_seconds", 0.0)  # checkpoints from before CPU timing
        self.trained_prompts = set(state["trained_prompts"])
        for part, subject in (("selector", self.selector_subject), ("credit", self.credit_subject)):
            if state[part]:  # a plugin's own code: held to the process's global state as a call is
                subject.call(getattr(self, part).load_state_dict, state[part])

    def save_checkpoint(self) -> None:
        if self.checkpoint_dir is not None:
            with contract.during(f"training arm {self.arm} seed {self.seed}, checkpoint after iteration "
                                 f"{self.next_iteration - 1}"):
                for part, subject in (("credit", self.credit_subject), ("selector", self.selector_subject)):
                    contract.resumable(subject, getattr(self, part), self.built[part], self.rebuild[part])
            start = time.perf_counter()
            checkpoint.save(self.state_dict(), self.checkpoint_dir, self.next_iteration, self.config_hash)
            # the longest this attempt took: a train job's signal must lead its time limit by more (docs/cluster.md)
            self.checkpoint_seconds = max(self.checkpoint_seconds or 0.0, time.perf_counter() - start)

    def resume(self) -> bool:
        """Continue from the newest intact checkpoint, if there is one."""
        if self.checkpoint_dir is None:
            return False
        state = checkpoint.latest(self.checkpoint_dir, self.config_hash)
        if state is None:
            return False
        self.load_state_dict(state)
        self.resumed_at = self.next_iteration
        return True

    def evaluate(self, indices: list[int] | None = None) -> None:
        """Evaluate every held-out set at the current iteration boundary, then checkpoint.

        `indices`: the evaluation points this boundary is the first at or after (default: the next
        index). The sets are evaluated once, with the draws of the last point, and recorded under
        every index, the earlier copies with no evaluation time of their own.
        """
        if self.evaluator is None:  # nothing to evaluate, but the boundary is still the run's checkpoint
            self.save_checkpoint()
            return
        state = {"tokens_total": self.tokens_total, "iteration": self.next_iteration, "updates": self.updates,
                 "train_seconds": self.train_seconds, "train_cpu_seconds": self.train_cpu_seconds}
        indices, summaries = record_evaluation(self.log, self.evaluator, indices, state, self.shown, self.tracker)
        progress.note(self.shown, f"evaluation {', '.join(map(str, indices))} at {self.tokens_total} tokens, "
                      f"{self.updates} updates: "
                      + ", ".join(f"{s['eval_set']} acc_default {s['acc_default']:.3f} ({s['eval_seconds']:.1f} s)"
                                  for s in summaries))
        if indices == [0] and all(s["acc_default"] == 0 for s in summaries):
            progress.note(self.shown, FLOOR_WARNING)
        self.save_checkpoint()

    def _record(self, i: int, chosen, batch, groups: np.ndarray, loss: float, grad_norm: float, credit,
                moved: dict) -> dict:
        """The iteration's rows of iterations.parquet and prompts.parquet (`groups`: each group's mean reward;
        `moved`: the entropy and KL measured). The credit rule's stats are logged beside the run's own columns and
        may not overwrite one (a stat named tokens_total would rewrite the run's count of B)."""
        stages = self.clock.lap()
        self.train_seconds += sum(stages[f"t_{s}"] for s in STAGES)
        self.train_cpu_seconds += sum(stages[f"cpu_{s}"] for s in STAGES)
        self.trained_prompts.update(chosen.chosen.tolist())
        predicted = dict(zip(chosen.candidates.tolist(), chosen.predicted))
        credit_log = {**credit_rules.summary(credit), **moved}
        own = {
            "iteration": i, "tokens_total": self.tokens_total,
            **{f"tokens_{k}": v for k, v in self.tokens.items()},
            "updates": self.updates, "lr": self.optimizer.param_groups[0]["lr"], "loss": loss,
            "grad_norm": grad_norm, "reward_default": batch.scores.default.mean(),
            "reward_strict": batch.scores.strict.mean(),
            "groups_all_wrong": int((groups == 0).sum()), "groups_all_correct": int((groups == 1).sum()),
            "groups_mixed": int(((groups > 0) & (groups < 1)).sum()),
            "truncated_share": float(np.mean([not c.finished for c in batch.completions])),
            "mean_length": float(np.mean([len(c) for c in batch.completions])),
            "cand_pred_mean": _nanmean(chosen.predicted),
            "chosen_pred_mean": _nanmean([predicted.get(j, np.nan) for j in chosen.chosen.tolist()]),
            "prompts_distinct": len(self.trained_prompts),
        }
        tail = {**stages, "train_seconds": self.train_seconds, "train_cpu_seconds": self.train_cpu_seconds}
        clash = sorted(set(credit.stats) & {*own, *tail, *moved, credit_rules.VARIED})
        if clash:
            raise self.credit_subject.broken(
                f"its stats name {', '.join(clash)}, which the run logs itself", "stats named apart from the "
                f"columns of iterations.parquet the run writes (docs/outputs.md), e.g. '{clash[0]}_rule'")
        row = {**own, **credit_log, **tail}
        self.log.iterations.append(row)
        if self.tracker:
            self.tracker.log("train", row, self.tokens_total)
        self.log.prompts += _prompt_rows(i, chosen, groups, self.problems)
        return row


def _prompt_rows(i: int, chosen, groups: np.ndarray, problems: list[dict]) -> list[dict]:
    """prompts.parquet's rows of iteration i: one per candidate (the chosen where there are none), in order, with its
    prediction, and the mean reward of the group trained on it. A prompt drawn twice (a stream across an epoch's end,
    a selector's own draw) is two rows, each paired with a group of its own in training order: keyed by prompt, both
    would read the last group's mean."""
    trained: dict[int, list[float]] = {}
    for j, mean in zip(chosen.chosen.tolist(), groups):
        trained.setdefault(j, []).append(mean)
    candidates, predicted = (chosen.candidates, chosen.predicted) if len(chosen.candidates) else \
        (chosen.chosen, np.full(len(chosen.chosen), np.nan))
    return [{"iteration": i, "problem_id": problems[j]["problem_id"], "chosen": bool(trained.get(j)),
             "predicted_success": float(p), "group_mean_reward": trained[j].pop(0) if trained.get(j) else np.nan}
            for j, p in zip(candidates.tolist(), predicted)]


LARGE = ("credit whose update is finite: the loss runs in float32 (at most 3.4e38), so credit of a moderate size, "
         "a few units as a group advantage has (docs/plugins.md)")


# Said before the compute is spent: a run that starts at 0 everywhere and is never lifted makes every contrast read
# on it uninformative (analysis/informative.py), and no number of seeds helps.
FLOOR_WARNING = ("warning: the first evaluation, before any training, scored 0 on every held-out problem of every "
                 "eval set: unless training lifts it, a contrast read on this run cannot tell the arms apart "
                 "(docs/robustness.md, uninformative verdicts)")


def overran_warning(count: int, indices: list[int]) -> str:
    """The job log's line for an evaluation whose math-verify checks overran: each counted wrong, never silently."""
    return (f"warning: evaluation {', '.join(map(str, indices))}: {count} math-verify check(s) overran their CPU "
            f"budget and were counted wrong (samples.parquet math_verify_overran; docs/verifiers.md)")


def record_evaluation(log: RunLog, evaluator: Evaluator, indices: list[int] | None, state: dict, shown,
                      tracker=None) -> tuple[list[int], list[dict]]:
    """Evaluate at a boundary whose counts are `state` (tokens_total, iteration, updates, train_seconds,
    train_cpu_seconds) and record it in `log` under every index of `indices` (default: the next index). The sets
    are evaluated once, with the draws of the last index; the earlier copies have no evaluation time of their own.
    Every trainer of a run records its evaluations here (mcgrpo's, and TRL's through mcgrpo.integrations.trl), and
    tells its job log of the math-verify checks that overran and were counted wrong (above the progress bar `shown`,
    or on stderr where it is None: progress.note).
    Returns the indices and the summary rows (one per set)."""
    indices = indices or [max((row["eval_index"] for row in log.evals), default=-1) + 1]
    summaries, samples = evaluator(indices[-1])
    if overran := int(samples["math_verify_overran"].sum()):
        progress.note(shown, overran_warning(overran, indices))
    for index in indices:
        extra = {"eval_index": index} if index == indices[-1] else {"eval_index": index, "eval_seconds": 0.0}
        log.evals += [{**state, **s, **extra} for s in summaries]
        log.samples.append(samples.assign(eval_index=index))
    for s in summaries if tracker else []:  # the evaluation once, at its last index
        tracker.log(f"eval/{s['eval_set']}", {**state, **s, "eval_index": indices[-1]}, state["tokens_total"])
    return indices, summaries


def _nanmean(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.nanmean(values)) if np.isfinite(values).any() else np.nan
