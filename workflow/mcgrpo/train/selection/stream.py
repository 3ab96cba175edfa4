"""The prompt stream: the pool shuffled once per epoch from the run seed, consumed in order.

Iteration i's candidates depend only on (seed, i, number drawn per iteration), so an arm and its
control see the same candidates, and a resumed run needs no state beyond the iteration index.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from mcgrpo.core.seeds import stable_seed


class PromptStream:
    def __init__(self, pool_size: int, seed: int):
        if pool_size < 1:
            raise ValueError("the prompt stream needs a non-empty pool")
        self.pool_size, self.seed = pool_size, seed

    @lru_cache(maxsize=4)
    def epoch(self, e: int) -> np.ndarray:
        """The pool's order in epoch e."""
        return np.random.default_rng(stable_seed(self.seed, "stream", e)).permutation(self.pool_size)

    def slice(self, start: int, count: int) -> np.ndarray:
        """Stream positions [start, start + count) as pool indices, across epoch boundaries."""
        positions = np.arange(start, start + count)
        epochs, offsets = np.divmod(positions, self.pool_size)
        return np.array([self.epoch(int(e))[o] for e, o in zip(epochs, offsets)], dtype=np.int64)

    def candidates(self, iteration: int, per_iteration: int) -> np.ndarray:
        return self.slice(iteration * per_iteration, per_iteration)
