"""What a run has spent against horizon x B: the one count of both trainers, mcgrpo's own (mcgrpo.train.trainer) and
TRL's (mcgrpo.integrations.trl).

Every generated token by kind (rollouts;
continuations that a reward or credit rule samples itself; groups generated and discarded), or, in an
equal-iteration study, the iterations done. A run stops at the first iteration boundary where it reaches
horizon x B, and is evaluated at every point k B / per_budget that an iteration crossed (mcgrpo.core.budget).

A reward function that generates (a Monte-Carlo or process reward) has no handle on its run: it calls
`charge(tokens)` (mcgrpo.api.charge), which adds to the ledger of the run now training (`counting`). Light: no
torch, so that mcgrpo.api stays light.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from mcgrpo.core.budget import due_points

KINDS = ("rollout", "continuation", "discarded")  # as iterations.parquet's tokens_<kind> columns


class Ledger:
    def __init__(self, budget: int | None, unit: str, per_budget: int, horizon: float = 1.0):
        self.budget, self.unit, self.per_budget, self.horizon = budget, unit, per_budget, horizon
        self.tokens = dict.fromkeys(KINDS, 0)
        self.iterations = 0
        self._boundary = 0  # what B counts at the last iteration boundary
        self._lock = threading.Lock()  # a reward may run in a thread of its own (an async reward function)

    def charge(self, tokens: int, kind: str = "continuation") -> None:
        """Add `tokens` generated tokens of `kind` (one of KINDS) to the iteration under way."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind of generated tokens {kind!r}; allowed: {', '.join(KINDS)}")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"charge takes a count of generated tokens, an int >= 0, not {tokens!r}")
        with self._lock:
            self.tokens[kind] += tokens

    def restore(self, tokens: dict[str, int], iterations: int) -> None:
        """Continue from a checkpoint's counts (tokens by kind, iterations done), at an iteration boundary."""
        self.tokens = {kind: int(tokens[kind]) for kind in KINDS}
        self.iterations = iterations
        self._boundary = self.spent

    @property
    def total(self) -> int:
        return sum(self.tokens.values())

    @property
    def spent(self) -> int:
        """What B counts: every generated token, or the iterations done (an equal-iteration study)."""
        return self.total if self.unit == "tokens" else self.iterations

    @property
    def done(self) -> bool:
        """Whether the run has reached horizon x B (at an iteration boundary: the run stops there)."""
        return self.spent >= self.horizon * self.budget

    def end_iteration(self) -> list[int]:
        """Close an iteration: the evaluation points it crossed (empty: none due)."""
        before, self.iterations = self._boundary, self.iterations + 1
        self._boundary = self.spent
        return due_points(before, self._boundary, self.budget, self.per_budget, self.horizon)

    def iterations_at_most(self, per_iteration: int) -> int:
        """An upper bound on the iterations before the run stops, if every iteration generates at least
        `per_iteration` tokens (one per completion): what a trainer that wants a step count up front is given."""
        stop = self.horizon * self.budget
        return int(-(-stop // per_iteration)) if self.unit == "tokens" else int(-(-stop // 1))


_active: Ledger | None = None


@contextmanager
def counting(ledger: Ledger) -> Iterator[Ledger]:
    """Make `ledger` the one that `charge` adds to while the block runs (one run trains at a time per process)."""
    global _active
    if _active is not None:
        raise RuntimeError("a run is already counting its tokens in this process")
    _active = ledger
    try:
        yield ledger
    finally:
        _active = None


def charge(tokens: int) -> None:
    """Charge `tokens` tokens that a reward function generated itself (continuations) to the run now training."""
    if _active is None:
        raise RuntimeError("mcgrpo.api.charge: no run is counting tokens in this process (charge is called from a "
                           "reward function while mcgrpo.integrations.trl trains a run)")
    _active.charge(tokens)
