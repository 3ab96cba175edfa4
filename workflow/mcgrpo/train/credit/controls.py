"""The gradient tests' control rewards (paper 3.1, H.3): dense credit whose update leaves V as much as the
Monte-Carlo reward's does, but should not align with the reference gradient.

- `shuffled`: another rule's credit, permuted within each completion. The group advantage is constant within
  a completion, so this is the paper's "Monte-Carlo reward shuffled within each completion" (c = A_g + alpha
  perm(w)); it keeps the distribution of token-credit magnitudes.
- `implicit`: A_g + alpha (log pi_theta - log pi_ref) per token, PRIME-style, the actor itself in the numerator
  and the initial policy in the denominator. The paper does not scale it in its probes (cosines do not depend on
  scale) and does not say how it was weighted in training; alpha is ours. At the initial policy it is zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mcgrpo.core.seeds import stable_seed
from mcgrpo.train.credit import Credit, CreditContext, CreditRule, build, group_advantages
from mcgrpo.train.rollout import Rollouts


def shuffle_within(tokens: list[np.ndarray], seed: int) -> list[np.ndarray]:
    """Each completion's token credit permuted by its own seeded draw."""
    rng = np.random.default_rng(seed)
    return [rng.permutation(t) for t in tokens]


@dataclass
class Shuffled:
    rule: CreditRule

    @property
    def needs_reference(self) -> bool:
        return getattr(self.rule, "needs_reference", False)

    @property
    def state_dict(self):
        """The inner rule's (a critic's window of fits): a resumed run shuffles the credit it would have had; no
        such attribute where the inner rule has none."""
        return self.rule.state_dict

    @property
    def load_state_dict(self):
        return self.rule.load_state_dict

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        inner = self.rule(rollouts, ctx)
        return Credit(shuffle_within(inner.tokens, stable_seed(*ctx.seed, "shuffle")), inner.tokens_generated,
                      inner.sequences, inner.stats)


def shuffled_rule(**inner) -> Shuffled:
    """The built-in `shuffled`: the credit block it wraps (`shuffled: {monte_carlo: {...}}`), shuffled."""
    return Shuffled(build(inner))


@dataclass
class Implicit:
    alpha: float = 1.0
    needs_reference = True  # the trainer keeps a frozen copy of the initial policy for it

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        if ctx.log_ratio is None:
            raise ValueError("credit.implicit needs the policy's and the reference policy's log-probs "
                             "(CreditContext.log_ratio), which this caller does not provide")
        advantages = group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps).ravel()
        ratios = ctx.log_ratio(rollouts.prompts, [c.tokens for c in rollouts.completions])
        return Credit([a + self.alpha * np.asarray(w, dtype=np.float64) for a, w in zip(advantages, ratios)],
                      stats={"implicit_mean_abs": float(np.mean([np.abs(w).mean() for w in ratios if len(w)] or [0]))})
