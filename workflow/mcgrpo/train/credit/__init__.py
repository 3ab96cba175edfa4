"""Per-token credit: what each completion token is pushed by in the policy-gradient loss.

Every rule has one interface: given an iteration's rollouts (and a context to sample more with), return
per-token credit and the tokens it generated itself, which count toward the budget B. A rule may also
return further training sequences (continuation reuse) and a few numbers saying what it did, which the
trainer logs per iteration. Rules are picked by an arm's `credit:` block (`build`), by name: the built-ins here or a plugin's
(mcgrpo.core.plugins).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from mcgrpo.core import plugins
from mcgrpo.train import contract
from mcgrpo.train.engines import Completion, Engine
from mcgrpo.train.rollout import Prompter, Rollouts


@dataclass(kw_only=True)
class CreditContext:
    engine: Engine
    prompter: Prompter
    limit: int            # completion limit L
    verifier: str         # the training reward's verifier
    rule: str = "whole_box"  # how that verifier reads answers (verifier.rule)
    # the config key that names the verifier in the run (an arm's own: arms.<arm>.recipe.reward_verifier), which
    # messages about it name
    verifier_key: str = plugins.STUDY_VERIFIER
    advantage_eps: float
    seed: tuple           # (run seed, iteration): the root of every draw the rule makes
    # the policy's last hidden state at prefix ends: (sequences, prefix lengths per sequence) -> one
    # [prefixes, hidden] array per sequence (a prefill pass; what critics regress on)
    features: Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], list[np.ndarray]] | None = None
    # log pi_theta - log pi_ref per token of (contexts, completions), pi_ref the initial policy (implicit reward)
    log_ratio: Callable[[Sequence[Sequence[int]], Sequence[Sequence[int]]], list[np.ndarray]] | None = None

    @property
    def iteration(self) -> int:
        return self.seed[1]


@dataclass
class TrainingSequence:
    """A sequence trained on besides the rollouts: its context is not trained on, its completion is."""
    context: tuple[int, ...]   # the prompt, and the rollout prefix a continuation starts from
    completion: Completion
    credit: np.ndarray


@dataclass
class Credit:
    tokens: list[np.ndarray]   # per completion, one value per generated token
    tokens_generated: int = 0  # tokens the rule sampled itself (continuations), counted toward B
    sequences: list[TrainingSequence] = field(default_factory=list)  # trained with the rollouts
    stats: dict[str, float] = field(default_factory=dict)             # what the rule did, logged


class CreditRule(Protocol):
    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit: ...


def group_advantages(rewards: np.ndarray, eps: float) -> np.ndarray:
    """A_g = (R_g - mean(R)) / (population std(R) + eps), per group (rows)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    mean = rewards.mean(axis=-1, keepdims=True)
    return (rewards - mean) / (rewards.std(axis=-1, keepdims=True) + eps)


def leave_one_out_mean(values: np.ndarray) -> np.ndarray:
    """Each entry's mean of the other entries of its row: a baseline independent of the entry itself."""
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[-1]
    return (values.sum(axis=-1, keepdims=True) - values) / (n - 1)


def per_token(values: np.ndarray, rollouts: Rollouts) -> list[np.ndarray]:
    """One value per completion, on every one of its tokens."""
    return [np.full(len(c), v) for c, v in zip(rollouts.completions, np.ravel(values))]


def outcome(rollouts: Rollouts, ctx: CreditContext) -> Credit:
    """Outcome-only GRPO: every token of a completion gets its group-normalized advantage."""
    return Credit(per_token(group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps), rollouts))


def rloo(rollouts: Rollouts, ctx: CreditContext) -> Credit:
    """REINFORCE with a leave-one-out baseline: R_g minus the mean of the group's other rewards."""
    grouped = rollouts.grouped(rollouts.rewards)
    return Credit(per_token(grouped - leave_one_out_mean(grouped), rollouts))


VARIED = "credit_varied_share"  # the column summary() adds beside a rule's stats


def summary(credit: Credit) -> dict[str, float]:
    """The iteration's log of a rule: the share of completions whose credit varies within the completion
    (zero for outcome-level rules: what a dense reward adds), and the rule's own numbers."""
    varied = [len(c) > 0 and bool(np.any(c != c[0])) for c in credit.tokens]
    return {VARIED: float(np.mean(varied)) if varied else np.nan, **credit.stats}


def outcome_rule() -> CreditRule:
    return outcome


def rloo_rule() -> CreditRule:
    return rloo


def build(spec: dict, pool=None, arm: str = "") -> CreditRule:
    """The credit rule of an arm's `credit:` block (outcome-only when empty), checked against the pool: a built-in
    or a plugin (mcgrpo.core.plugins), built with the block's options as keyword arguments.

    The config's `lambda` (a Python keyword) reaches the rules as `lam`. The rule gets its own deep copy of its options:
    one that edits a list it was given in place leaves the run's config (run.json, its hash) as the study wrote it.
    """
    if not spec:
        return outcome
    (name, options), = spec.items()
    key = f"arms.{arm}.credit"
    plugin = plugins.load("credit", name, key)
    subject = contract.Subject.of("credit", name, key)  # built leaving the process's global state as it was
    rule = subject.built(plugin.factory, **{("lam" if k == "lambda" else k): v
                                            for k, v in copy.deepcopy(options or {}).items()})
    if pool is not None and hasattr(rule, "check_pool"):  # on a copy: an edit is refused, never trained on
        contract.pool_checked(subject, rule.check_pool, pool, f"{key}.{name}")
    return rule


def named(spec: dict, key: str) -> tuple[str, str]:
    """(name, config key) of the rule that computes a `credit:` block's credit at `key`: its own, or a shuffled
    control's inner rule (what a message about the credit names; outcome where the block is empty)."""
    name, options = next(iter((spec or {"outcome": {}}).items()))
    while name == "shuffled" and options:
        key = f"{key}.shuffled"
        name, options = next(iter(options.items()))
    return name, key


# Rules whose credit is one number per completion (the reward's or the group advantage's): shuffling it within
# the completion is the identity. The others vary along a completion.
CONSTANT = frozenset({"outcome", "rloo", "length", "process"})
VARYING = frozenset({"monte_carlo", "critic", "path_penalty", "implicit"})
# Rules that are outcome-only GRPO exactly, at no extra cost, when these weights are all 0 (Monte-Carlo, critic
# and implicit credit at weight 0 also update as outcome-only does, but spend continuations, fits or a reference
# pass on it: a compute control, not the same arm).
ZERO_IS_OUTCOME = {"length": ("lambda",), "process": ("lambda",), "path_penalty": ("lambda", "beta")}


def problems(key: str, spec: dict, recipe: dict, task: dict) -> list[str]:
    """What a `credit:` block at config key `key` asks that the rest of the config cannot give."""
    (name, options), = (spec or {"outcome": {}}).items()
    found = plugins.check("credit", name, options, key)  # a built-in's: only that no plugin declares its name
    if found or name not in plugins.BUILTIN["credit"]:
        return found
    where = f"config key {key}.{name}"
    if name == "shuffled":
        inner = next(iter(options or {"outcome": {}}))
        if inner in CONSTANT or inner == "shuffled":
            return [f"{where}: {inner} credit is {'shuffled already' if inner == 'shuffled' else 'constant within each completion'}, "
                    f"so shuffling it changes nothing: the arm trains as credit: {{{inner}: ...}} under another name; "
                    f"allowed: one rule whose credit varies within a completion ({', '.join(sorted(VARYING))})"]
        return problems(f"{key}.shuffled", options, recipe, task)
    options, limit, out = options or {}, recipe["completion_limit"], []
    if name in ZERO_IS_OUTCOME and all(options.get(k, 1) == 0 for k in ZERO_IS_OUTCOME[name]):
        zeros = " and ".join(f"{k} 0" for k in ZERO_IS_OUTCOME[name])
        trains = ("as outcome-only GRPO (credit: {outcome: {}}) under another name" if options.get("outcome", True)
                  else "nothing: without the outcome, every advantage is 0")
        out.append(f"{where}: with {zeros} the rule adds nothing, and the arm trains {trains}; allowed: "
                   f"{' or '.join(ZERO_IS_OUTCOME[name])} > 0")
    if "cuts" in options and options["cuts"] >= limit:
        out.append(f"{where}.cuts: {options['cuts']} cuts need recipe.completion_limit above {options['cuts']} "
                   f"(it is {limit})")
    positions = options.get("positions") or []
    if positions and (sorted(set(positions)) != positions or positions[-1] >= limit):
        out.append(f"{where}.positions: {positions} must increase strictly and stay below "
                   f"recipe.completion_limit ({limit})")
    if options.get("reuse") and options.get("k", 4) < 2:
        out.append(f"{where}.reuse: leave-one-out credit among the draws at a cut needs k >= 2 "
                   f"(it is {options['k']})")
    if options.get("min_iterations", 0) > options.get("window", np.inf):
        out.append(f"{where}.min_iterations: {options['min_iterations']} iterations never fit in "
                   f"window = {options['window']}; allowed: at most {options['window']}")
    if name == "process" and task["name"] == "math":
        out.append(f"{where}: needs reference steps (pool column 'steps'), which task.name 'math' does not "
                   f"provide; allowed tasks: arith, gsm8k")
    return out
