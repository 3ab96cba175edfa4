"""The engine contract shared by every backend.

Each request carries its own seed, and a backend must draw request r's tokens from randomness that
depends on that seed alone (never on the batch it shares), so that evaluations of different arms use
common random numbers and a rollout is reproducible whatever the batching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence


@dataclass(frozen=True)
class Completion:
    tokens: tuple[int, ...]   # generated ids, the end-of-turn token included when it was produced
    finished: bool            # ended with end-of-turn (False: stopped at its token limit)
    # the sampler's log-prob of each token (the behaviour policy, for clipped reuse); None if not recorded
    logprobs: tuple[float, ...] | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return len(self.tokens)


class Engine(Protocol):
    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int],
                 seeds: Sequence[int]) -> list[Completion]: ...

    def sync(self, model) -> None: ...
