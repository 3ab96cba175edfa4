"""A format bonus: a completion that puts its final answer in \\boxed{...} earns `weight` on top of its outcome.

The shaped reward R' = R + weight * boxed replaces the outcome in the group advantage, so within a group a boxed
completion is pushed up against an unboxed one with the same outcome. It is outcome-level (every token of a
completion gets the same credit): the gradient tests will show it stays inside V, and `mcgrpo screen` whether its
shift of the advantage is worth anything per generated token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mcgrpo.api import Credit, CreditContext, Rollouts, boxed_content, group_advantages, per_token


@dataclass
class BoxedBonus:
    weight: float = 0.5  # the bonus of a boxed final answer, in units of the outcome reward

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        boxed = np.array([boxed_content(text) is not None for text in rollouts.texts], dtype=np.float64)
        shaped = rollouts.rewards + self.weight * boxed
        advantages = group_advantages(rollouts.grouped(shaped), ctx.advantage_eps)
        return Credit(per_token(advantages, rollouts), stats={"boxed_share": float(boxed.mean())})
