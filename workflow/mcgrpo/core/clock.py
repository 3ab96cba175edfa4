"""Per-stage wall time of a training iteration, and the process CPU time beside it.

Training time is the sum of the stages select, generate, credit, update and sync; evaluation, logging and
checkpointing are timed apart and never enter it. Wall time is what equal-time contrasts read; process CPU
time (`cpu_seconds`: every thread of this process, and the processes it started for the work, below) is
recorded beside it because a neighbour's load on a shared machine inflates wall time but hardly CPU time:
where the two disagree much, the machine was shared and equal-time contrasts from it are suspect. CPU time
does not see GPU kernels.

A stage's work done in another process is its work too: `time.process_time` alone would miss a reward checked by
the math-verify worker (a Monte-Carlo arm checks every continuation there) or a plugin's subprocess, and the CPU
clock would call that arm cheap. So the CPU clock adds the CPU time of this process's children: those that ended
and were waited for (`os.times`), and those still running that it started through multiprocessing or named as
helpers (`helper`, read from /proc/<pid>/stat on Linux). On a GPU the trainer hands in torch.cuda.synchronize,
so each stage ends with one and asynchronous kernels are charged to the stage that launched them (this
module stays free of torch: the analysis reads STAGES).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from contextlib import contextmanager
from typing import Callable, Iterator

STAGES = ("select", "generate", "credit", "update", "sync")

_HELPERS: set[int] = set()  # live processes this one started for its work, outside multiprocessing
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def helper(pid: int, running: bool = True) -> None:
    """Count process `pid`, a child started for this process's work (a worker fed through a pipe), in
    `cpu_seconds` while it runs; `running=False` once it was waited for (os.times counts it from then on)."""
    (_HELPERS.add if running else _HELPERS.discard)(pid)


def _live_cpu(pid: int) -> float:
    """CPU seconds of a running child and of its own children it waited for, from /proc (0 where there is none)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return sum(int(v) for v in fields[11:15]) / _TICK  # utime, stime, cutime, cstime


def cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of the children it started: ended ones it waited for, and
    running ones started through multiprocessing or named by `helper`."""
    # active_children joins the children that ended: read before os.times, so that one ended since the last
    # reading is counted there (after, it was in neither, and its seconds were lost to the stage)
    pids = {p.pid for p in multiprocessing.active_children()} | _HELPERS
    ended = os.times()
    return (time.process_time() + ended.children_user + ended.children_system
            + sum(_live_cpu(pid) for pid in pids if pid))


class StageClock:
    def __init__(self, synchronize: Callable[[], None] | None = None):
        self.synchronize = synchronize
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self.cpu_seconds = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            raise ValueError(f"unknown stage {name!r}; allowed: {', '.join(STAGES)}")
        start, cpu = time.perf_counter(), cpu_seconds()
        try:
            yield
        finally:
            if self.synchronize is not None:
                self.synchronize()
            self.seconds[name] += time.perf_counter() - start
            self.cpu_seconds[name] += cpu_seconds() - cpu

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
