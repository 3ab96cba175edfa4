"""What an iteration trains on, and in which optimizer steps.

The recipe takes one on-policy step on the rollouts. A credit rule may add sequences (continuation
reuse trains on every continuation after its prompt and prefix); the loss is then divided by the number
of all of them. An arm's `update: {epochs, minibatches, clip}` reuses the batch instead: each epoch
shuffles the sequences into minibatches and takes one clipped step on each (PPO-style), the ratio taken
against the behaviour log-probs the engine recorded at generation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mcgrpo.train.credit import Credit
from mcgrpo.train.rollout import Rollouts


@dataclass
class Batch:
    contexts: list[tuple[int, ...]]        # prompts (and rollout prefixes), not trained on
    tokens: list[tuple[int, ...]]          # the trained tokens
    credit: list[np.ndarray]
    behaviour: list[tuple[float, ...] | None]

    def __len__(self) -> int:
        return len(self.tokens)

    def take(self, rows) -> "Batch":
        return Batch(*([getattr(self, f)[r] for r in rows] for f in ("contexts", "tokens", "credit", "behaviour")))


def training_batch(rollouts: Rollouts, credit: Credit) -> Batch:
    """The rollouts with their credit, then the rule's extra sequences."""
    extra = credit.sequences
    return Batch(list(rollouts.prompts) + [s.context for s in extra],
                 [c.tokens for c in rollouts.completions] + [s.completion.tokens for s in extra],
                 list(credit.tokens) + [s.credit for s in extra],
                 [c.logprobs for c in rollouts.completions] + [s.completion.logprobs for s in extra])


def minibatches(n: int, spec: dict | None, seed: int) -> list[np.ndarray]:
    """The rows of each optimizer step: all of them once, or `epochs` shuffles cut into `minibatches`."""
    if not spec:
        return [np.arange(n)]
    rng = np.random.default_rng(seed)
    return [rows for _ in range(spec["epochs"]) for rows in np.array_split(rng.permutation(n), spec["minibatches"])]
