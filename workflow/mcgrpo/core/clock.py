"""Per-stage wall time of a training iteration.

Training time is the sum of the stages select, generate, credit, update and sync; evaluation, logging and
checkpointing are timed apart and never enter it. On a GPU the trainer hands in torch.cuda.synchronize,
so each stage ends with one and asynchronous kernels are charged to the stage that launched them (this
module stays free of torch: the analysis reads STAGES).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

STAGES = ("select", "generate", "credit", "update", "sync")


class StageClock:
    def __init__(self, synchronize: Callable[[], None] | None = None):
        self.synchronize = synchronize
        self.seconds = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            raise ValueError(f"unknown stage {name!r}; allowed: {', '.join(STAGES)}")
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.synchronize is not None:
                self.synchronize()
            self.seconds[name] += time.perf_counter() - start

    def lap(self) -> dict[str, float]:
        """Seconds per stage since the last lap (as t_<stage> columns), and reset."""
        out = {f"t_{k}": v for k, v in self.seconds.items()}
        self.seconds = dict.fromkeys(STAGES, 0.0)
        return out


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """Seconds spent in the block, for work outside the training stages (evaluation)."""
    box = [0.0]
    start = time.perf_counter()
    try:
        yield box
    finally:
        box[0] = time.perf_counter() - start
