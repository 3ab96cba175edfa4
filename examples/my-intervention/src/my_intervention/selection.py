"""Skip solved prompts: draw `candidates` prompts from the stream and train on the first ones whose last group
was not solved by every completion (a group with all rewards 1 has zero advantage: its tokens teach nothing).

Unseen prompts count as unsolved. When too few candidates qualify, the solved ones fill the batch in stream
order. What it remembers (the solved prompts) is kept in checkpoints, so a resumed run selects as an
uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mcgrpo.api import PolicyView, Selection, StreamSelector


@dataclass(kw_only=True)
class SkipSolved(StreamSelector):
    candidates: int = 16  # prompts drawn from the stream per iteration (at least the prompts per iteration)
    solved: set = field(default_factory=set, init=False)

    def select(self, iteration: int, view: PolicyView) -> Selection:
        drawn = self.stream.candidates(iteration, max(self.candidates, self.per_iteration))
        fresh = [j for j in drawn.tolist() if j not in self.solved]
        rest = [j for j in drawn.tolist() if j in self.solved]
        return Selection(drawn, np.array((fresh + rest)[:self.per_iteration], dtype=np.int64))

    def observe(self, iteration: int, selection: Selection, group_means: np.ndarray, view: PolicyView) -> None:
        for j, mean in zip(selection.chosen.tolist(), group_means):
            (self.solved.add if mean >= 1.0 else self.solved.discard)(j)

    def state_dict(self) -> dict:
        return {"solved": sorted(self.solved)}

    def load_state_dict(self, state: dict) -> None:
        self.solved = set(state["solved"])
