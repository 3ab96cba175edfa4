"""Per-token credit: what each completion token is pushed by in the policy-gradient loss.

Every rule has one interface: given an iteration's rollouts (and a context to sample more with), return
per-token credit and the tokens it generated itself, which count toward the budget B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from mcgrpo.engines import Engine
from mcgrpo.rollout import Prompter, Rollouts


@dataclass
class CreditContext:
    engine: Engine
    prompter: Prompter
    limit: int            # completion limit L
    verifier: str         # the training reward's verifier
    advantage_eps: float
    seed: tuple           # (run seed, iteration): the root of every draw the rule makes


@dataclass
class Credit:
    tokens: list[np.ndarray]   # per completion, one value per generated token
    tokens_generated: int = 0  # tokens the rule sampled itself (continuations), counted toward B


class CreditRule(Protocol):
    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit: ...


def group_advantages(rewards: np.ndarray, eps: float) -> np.ndarray:
    """A_g = (R_g - mean(R)) / (population std(R) + eps), per group (rows)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    mean = rewards.mean(axis=-1, keepdims=True)
    return (rewards - mean) / (rewards.std(axis=-1, keepdims=True) + eps)


def outcome(rollouts: Rollouts, ctx: CreditContext) -> Credit:
    """Outcome-only GRPO: every token of a completion gets its group-normalized advantage."""
    adv = group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps).ravel()
    return Credit([np.full(len(c), a) for c, a in zip(rollouts.completions, adv)])


def build(spec: dict) -> CreditRule:
    """The credit rule of an arm's `credit:` block (outcome-only when empty)."""
    from mcgrpo.credit.monte_carlo import MonteCarlo

    rules: dict[str, Callable[..., CreditRule]] = {"outcome": lambda: outcome, "monte_carlo": MonteCarlo}
    if not spec:
        return outcome
    (name, options), = spec.items()
    if name not in rules:
        raise ValueError(f"credit: unknown rule {name!r}; allowed: {', '.join(rules)}")
    return rules[name](**(options or {}))
