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


SETTINGS = ("temperature", "top_p")  # what engines.sampling sets: every engine reads them at each generate call


class Counting:
    """An engine that counts every token it hands back (`generated`), whoever asks: what a trainer gives a credit
    rule or a selector as its engine, so that the budget B is charged by the engine's own count, not by what a
    plugin says it sampled (mcgrpo.train.contract). It keeps what it handed back (`handed_out`: a credit rule's
    extra training sequences must be among them) and exposes only what mcgrpo.api documents: `generate` and the
    sampling settings (SETTINGS), which reach the engine it wraps. Not that engine, nor its model: their own generate
    would sample tokens that nothing counts toward B; nor `sync`, which would load another model into the engine the
    run samples its rollouts with (the gradient tests' batches after it, which nothing re-syncs)."""

    __slots__ = ("_engine", "generated", "_handed_out", "_closed")

    def __init__(self, engine):
        object.__setattr__(self, "_engine", engine)
        object.__setattr__(self, "generated", 0)
        object.__setattr__(self, "_handed_out", [])
        object.__setattr__(self, "_closed", False)

    def close(self) -> None:
        """End the call it served: its count is read, so what it generated later would count toward nothing (a rule
        that kept ctx.engine and samples with it in a later call); it refuses to generate from now on."""
        object.__setattr__(self, "_closed", True)

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int],
                 seeds: Sequence[int]) -> list[Completion]:
        if self._closed:
            raise RuntimeError(STALE)
        out = self._engine.generate(prompts, max_new_tokens, seeds)
        object.__setattr__(self, "generated", self.generated + sum(len(c) for c in out))
        self._handed_out.extend(out)
        return out

    def handed_out(self) -> set[int]:
        """The identities (id) of the completions it handed back, each kept alive by it."""
        return set(map(id, self._handed_out))

    def __getattr__(self, name: str):
        if name in SETTINGS:
            return getattr(self._engine, name)
        raise AttributeError(refused(name))

    def __setattr__(self, name: str, value) -> None:
        if name not in SETTINGS:
            raise AttributeError(refused(name))
        setattr(self._engine, name, value)


STALE = ("this engine served an earlier call, whose tokens are counted already: what it generated now would count "
         "toward no budget; allowed: sampling through the ctx.engine of the call in progress (docs/plugins.md)")


def refused(name: str) -> str:
    return (f"the engine a plugin is handed (ctx.engine) has no attribute {name!r}: it samples only through its "
            f"own generate, which counts every token toward the budget B; allowed: generate(prompts, limits, seeds), "
            f"{', '.join(SETTINGS)} (docs/plugins.md)")
