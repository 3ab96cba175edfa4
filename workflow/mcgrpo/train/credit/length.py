"""The length term (the paper's S6-S9): a correct completion is pushed toward its group's correct length.

Every token of a correct completion gets -lambda (L_i - m_g) / L on top of the group advantage, L_i its
length, m_g the mean length of the correct completions of its group, L the completion limit. Wrong
completions are unchanged, and the term sums to zero over each group's correct completions. The paper
reports it for the drift it caused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mcgrpo.train.credit import Credit, CreditContext, group_advantages, per_token
from mcgrpo.train.rollout import Rollouts


def length_term(lengths: np.ndarray, correct: np.ndarray, limit: int) -> np.ndarray:
    """-(L_i - m_g) / L for the correct completions of each group (rows), 0 for the others."""
    counts = correct.sum(axis=1, keepdims=True)
    mean = (lengths * correct).sum(axis=1, keepdims=True) / np.maximum(counts, 1)
    return np.where(correct, -(lengths - mean) / limit, 0.0)


@dataclass
class Length:
    lam: float = 0.1

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        grouped = rollouts.grouped(rollouts.rewards)
        lengths = rollouts.grouped(np.array([len(c) for c in rollouts.completions], dtype=np.float64))
        term = self.lam * length_term(lengths, grouped > 0, ctx.limit)
        credit = per_token(group_advantages(grouped, ctx.advantage_eps) + term, rollouts)
        return Credit(credit, stats={"length_term_mean_abs": float(np.abs(term).mean())})
