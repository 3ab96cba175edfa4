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


class Counting:
    """An engine that counts every token it hands back (`generated`), whoever asks: what a trainer gives a credit
    rule or a selector as its engine, so that the budget B is charged by the engine's own count, not by what a
    plugin says it sampled (mcgrpo.train.contract). Everything else (sync, sampling settings such as temperature
    and top_p, which engines.sampling sets) reaches the engine it wraps."""

    def __init__(self, engine):
        object.__setattr__(self, "engine", engine)
        object.__setattr__(self, "generated", 0)

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int],
                 seeds: Sequence[int]) -> list[Completion]:
        out = self.engine.generate(prompts, max_new_tokens, seeds)
        object.__setattr__(self, "generated", self.generated + sum(len(c) for c in out))
        return out

    def sync(self, model) -> None:
        self.engine.sync(model)

    def __getattr__(self, name: str):
        return getattr(self.engine, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self.engine, name, value)
