"""The path penalty (seed 003): a verifiable per-line channel beside the outcome.

Every arithmetic claim a completion writes (`expression = c`, one per solution step) is checked: the tokens
of a false claim get -lambda, those of a true one +beta. The channel is normalized within each group
separately from the outcome, by its own token count (as the paper's code does): x (the group's tokens /
the group's tokens that carry a path signal), so a sparse channel is not diluted by the outcome's. It is
then added to the group advantage; `outcome: false` drops the advantage, the penalty-only ablation whose
optimum is to claim nothing (the inaction trap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from mcgrpo.train.credit import Credit, CreditContext, group_advantages
from mcgrpo.core.claims import claims
from mcgrpo.train.rollout import Rollouts


def char_ends(decode: Callable[[Sequence[int]], str], tokens: Sequence[int]) -> np.ndarray:
    """Where each token's text ends in the decoded completion (exact even when tokens merge on decoding)."""
    ends = np.cumsum([len(decode([t])) for t in tokens])
    if len(tokens) and ends[-1] != len(decode(tokens)):
        ends = np.array([len(decode(tokens[:i + 1])) for i in range(len(tokens))])
    return ends


def line_signal(text: str, ends: np.ndarray, lam: float, beta: float) -> tuple[np.ndarray, int, int]:
    """Per token: -lam on the tokens of a false claim, +beta on a true one's (a token overlapping its
    characters); and the counts of false and true claims."""
    starts = np.concatenate([[0], ends[:-1]])
    signal = np.zeros(len(ends))
    found = [c for c in claims(text) if c.parsed]  # an unparsable claim is neither true nor false
    for claim in found:
        signal[(starts < claim.end) & (ends > claim.start)] = beta if claim.holds else -lam
    false = sum(not c.holds for c in found)
    return signal, false, len(found) - false


def normalize_within_groups(channel: list[np.ndarray], group_size: int) -> list[np.ndarray]:
    """Scale each group's channel by its tokens / its tokens with a signal (unchanged if it has none)."""
    out = []
    for g in range(0, len(channel), group_size):
        group = channel[g:g + group_size]
        marked = sum(int(np.count_nonzero(c)) for c in group)
        scale = sum(len(c) for c in group) / marked if marked else 1.0
        out += [c * scale for c in group]
    return out


@dataclass
class PathPenalty:
    lam: float = 0.5
    beta: float = 0.5
    outcome: bool = True

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        lines = [line_signal(text, char_ends(ctx.prompter.decode, c.tokens), self.lam, self.beta)
                 for text, c in zip(rollouts.texts, rollouts.completions)]
        path = normalize_within_groups([signal for signal, _, _ in lines], rollouts.group_size)
        adv = group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps).ravel()
        credit = [(adv[r] if self.outcome else 0.0) + p for r, p in enumerate(path)]
        false, true = (sum(line[i] for line in lines) for i in (1, 2))
        return Credit(credit, stats={
            "path_mean": float(np.mean([self.beta * t - self.lam * f for _, f, t in lines])),
            "path_false_share": false / (false + true) if false + true else np.nan})
