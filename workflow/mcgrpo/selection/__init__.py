"""Prompt selection: which problems an iteration trains on.

Every selector reads candidates from the prompt stream and returns a Selection; what a selector saw and
did is logged to prompts.parquet. Outcome-only GRPO trains on the candidates as they come.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mcgrpo.selection.stream import PromptStream


@dataclass
class Selection:
    candidates: np.ndarray                       # pool indices drawn from the stream this iteration
    chosen: np.ndarray                           # the subset trained on, in training order
    predicted: np.ndarray = field(default=None)  # predicted success per candidate (NaN if none)

    def __post_init__(self):
        if self.predicted is None:
            self.predicted = np.full(len(self.candidates), np.nan)


class TakeAll:
    """Train on the next prompts of the stream, in order."""

    def __init__(self, stream: PromptStream, per_iteration: int):
        self.stream, self.per_iteration = stream, per_iteration

    def select(self, iteration: int) -> Selection:
        candidates = self.stream.candidates(iteration, self.per_iteration)
        return Selection(candidates, candidates)


def build(arm: dict, pool_size: int, seed: int, per_iteration: int) -> TakeAll:
    return TakeAll(PromptStream(pool_size, seed), per_iteration)
