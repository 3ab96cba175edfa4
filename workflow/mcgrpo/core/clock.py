"""Per-stage wall time of a training iteration, and the process CPU time beside it.

Training time is the sum of the stages select, generate, credit, update and sync; evaluation, logging and
checkpointing are timed apart and never enter it. Wall time is what equal-time contrasts read; process CPU
time (every thread of this process, `time.process_time`) is recorded beside it because a neighbour's load
on a shared machine inflates wall time but hardly CPU time: where the two disagree much, the machine was
shared and equal-time contrasts from it are suspect. CPU time does not see GPU kernels. On a GPU the trainer hands in torch.cuda.synchronize,
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
        self.cpu_seconds = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            raise ValueError(f"unknown stage {name!r}; allowed: {', '.join(STAGES)}")
        start, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            if self.synchronize is not None:
                self.synchronize()
            self.seconds[name] += time.perf_counter() - start
            self.cpu_seconds[name] += time.process_time() - cpu

    def lap(self) -> dict[str, float]:
        """Wall seconds (t_<stage>) and process CPU seconds (cpu_<stage>) per stage since the last lap; reset."""
        out = {**{f"t_{k}": v for k, v in self.seconds.items()},
               **{f"cpu_{k}": v for k, v in self.cpu_seconds.items()}}
        self.seconds, self.cpu_seconds = dict.fromkeys(STAGES, 0.0), dict.fromkeys(STAGES, 0.0)
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
