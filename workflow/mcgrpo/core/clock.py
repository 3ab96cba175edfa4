"""Per-stage wall time of a training iteration, and the process CPU time beside it.

Training time is the sum of the stages select, generate, credit, update and sync; evaluation, logging and
checkpointing are timed apart and never enter it, nor do the protocol's checks of a plugin's calls (`checking`). Wall time is what equal-time contrasts read; process CPU
time (`cpu_seconds`: every thread of this process, and the processes it started for the work, below) is
recorded beside it because a neighbour's load on a shared machine inflates wall time but hardly CPU time:
where the two disagree much, the machine was shared and equal-time contrasts from it are suspect. CPU time
does not see GPU kernels.

A stage's work done in another process is its work too: `time.process_time` alone would miss a reward checked by
the math-verify worker (a Monte-Carlo arm checks every continuation there) or a plugin's subprocess, and the CPU
clock would call that arm cheap. So the CPU clock adds the CPU time of this process's children: those that ended
and were waited for (`os.times`), and those still running (read from /proc/<pid>/stat on Linux) that it started
through multiprocessing, named as helpers (`helper`), or that `discover` found: every live process below this one
that neither names, looked for at the end of each stage (a plugin's worker started with subprocess.Popen, a worker's
own child), so that none is left off the clock because nobody named it. On a GPU the trainer hands in torch.cuda.synchronize,
so each stage ends with one and asynchronous kernels are charged to the stage that launched them (this
module stays free of torch: the analysis reads STAGES).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import time
from contextlib import contextmanager
from typing import Callable, Iterator

STAGES = ("select", "generate", "credit", "update", "sync")

_HELPERS: set[int] = set()  # live processes this one started for its work, outside multiprocessing
_FOUND: set[int] = set()  # live processes below this one that `discover` found, outside multiprocessing and _HELPERS
_ADOPTED: set[int] = set()  # processes below this one that `discover` saw below another: ours once that one ends
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37  # linux/prctl.h
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


@contextmanager
def adopting() -> Iterator[None]:
    """Within the block (the train job's run), this process is the subreaper of the processes below it (Linux's
    PR_SET_CHILD_SUBREAPER): one whose parent ends without waiting for it (a server started with `sh -c 'server &'`,
    a daemon's double fork) is handed to this process instead of init, so that `discover` still finds it below and
    the CPU clock counts its work. Those that ended are reaped as the block ends (`discover` reaps those it saw
    adopted), so that none stays a zombie beyond the run. Put back as it was after the block, so that a process that
    runs a job in-process (a test, a script calling mcgrpo.cli.main) does not adopt what it starts later. Nothing
    where the system has no such switch."""
    was = _subreaper()
    if was is None:
        yield
        return
    before = _children(_processes())
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        _prctl(_PR_SET_CHILD_SUBREAPER, was)
        processes = _processes()
        _reap(_unclaimed(processes, _counted(), _children(processes) - before))


def _prctl(option: int, value) -> bool:
    import ctypes
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no prctl: not Linux
        return False


def _subreaper() -> int | None:
    """Whether this process is a subreaper now (1 or 0); None where that cannot be read or set (not Linux)."""
    import ctypes
    flag = ctypes.c_int(0)
    return flag.value if _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag)) else None


def _processes() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state)} of every process in /proc; none where there is no /proc."""
    out: dict[int, tuple[int, str]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in filter(str.isdigit, names):
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state, parent = f.read().rsplit(b")", 1)[1].split()[:2]
            out[int(name)] = (int(parent), state.decode())
        except (OSError, ValueError):  # ended meanwhile
            continue
    return out


def descendants(processes: dict[int, tuple[int, str]] | None = None) -> set[int]:
    """The processes below this one (its children, theirs, ...), from the parent of each in /proc."""
    below: dict[int, list[int]] = {}
    for pid, (parent, _) in (_processes() if processes is None else processes).items():
        below.setdefault(parent, []).append(pid)
    found, todo = set(), [os.getpid()]
    while todo:
        new = [pid for pid in below.get(todo.pop(), ()) if pid not in found]
        found.update(new)
        todo += new
    return found


def _children(processes: dict[int, tuple[int, str]]) -> set[int]:
    me = os.getpid()
    return {pid for pid, (parent, _) in processes.items() if parent == me}


def _counted() -> set[int]:
    """The live processes this one counts as its own by name: multiprocessing's and the named helpers."""
    return {p.pid for p in multiprocessing.active_children()} | _HELPERS


def _unclaimed(processes: dict[int, tuple[int, str]], known: set[int], among: set[int]) -> set[int]:
    """Which of `among` are this process's ended children (zombies) that nothing here will wait for: none of `known`
    (multiprocessing's and the named helpers), nor of a subprocess.Popen still waiting for its child."""
    me = os.getpid()
    ended = {pid for pid in among - known if processes.get(pid) == (me, "Z")}
    if ended:  # a scan of the heap, only where a child ended unwaited (about 0.1 s with torch loaded)
        ended -= {o.pid for o in gc.get_objects() if issubclass(type(o), subprocess.Popen) and o.returncode is None}
    return ended


def _reap(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # waited for meanwhile
            pass


def discover() -> float:
    """Count from now on every live process below this one that the clock does not count yet (`cpu_seconds`), and
    return the CPU seconds they had used so far, which no reading counted. StageClock calls it as each stage ends
    (outside both of the stage's readings, so that looking costs no stage anything) and adds them to that stage:
    a process found then started within it, or, where it started between two stages (an evaluation), before it,
    which charges it the conservative way. Training starts by calling it once: what started before (a plugin's
    worker, evaluation 0's) is counted from then on, its start no training time.

    An ended process is counted from /proc while it is a zombie, and from os.times once waited for. One seen below
    another process and adopted since (`adopting`) is reaped here once it ended: nobody else will wait for it. One
    that was this process's child when first seen may be a plugin's own (os.fork, os.posix_spawn), which the plugin
    waits for by pid: it is left to the plugin, or to `adopting`'s end."""
    global _FOUND, _ADOPTED
    processes = _processes()
    live = descendants(processes)
    counted = _counted()
    new = live - counted - _FOUND
    charged = sum(_live_cpu(pid) for pid in new)
    reaped = _unclaimed(processes, counted, _ADOPTED)
    _reap(reaped)
    live -= reaped
    _ADOPTED = (_ADOPTED & live) | (live - _children(processes))
    _FOUND = (_FOUND & live) - counted | (new & live)
    return charged


def cpu_seconds() -> float:
    """CPU seconds of this process (every thread) and of the children it started: ended ones it waited for, and
    running ones started through multiprocessing, named by `helper` or found by `discover`."""
    # active_children joins the children that ended: read before os.times, so that one ended since the last
    # reading is counted there (after, it was in neither, and its seconds were lost to the stage)
    pids = _counted() | _FOUND
    ended = os.times()
    return (time.process_time() + ended.children_user + ended.children_system
            + sum(_live_cpu(pid) for pid in pids if pid))


_CHECKS = [0.0, 0.0]  # wall and CPU seconds of mcgrpo's own checks of plugins so far (`checking`)


@contextmanager
def checking() -> Iterator[None]:
    """Time a check the protocol makes of a plugin's call (its inputs and the process's state and code as it found
    them: mcgrpo.train.contract), which no stage is charged: it is instrumentation, as logging is (the paper's stack
    makes none), and an arm whose rules are called more often would otherwise pay for being checked more often."""
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        _CHECKS[0] += time.perf_counter() - wall
        _CHECKS[1] += time.process_time() - cpu


def checked() -> tuple[float, float]:
    """Wall and CPU seconds of the protocol's checks so far (`checking`): what a timed interval that holds some of
    them subtracts."""
    return _CHECKS[0], _CHECKS[1]


class StageClock:
    def __init__(self, synchronize: Callable[[], None] | None = None):
        self.synchronize = synchronize
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self.cpu_seconds = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            raise ValueError(f"unknown stage {name!r}; allowed: {', '.join(STAGES)}")
        start, cpu, checks = time.perf_counter(), cpu_seconds(), tuple(_CHECKS)
        try:
            yield
        finally:
            if self.synchronize is not None:
                self.synchronize()
            self.seconds[name] += time.perf_counter() - start - (_CHECKS[0] - checks[0])
            self.cpu_seconds[name] += cpu_seconds() - cpu - (_CHECKS[1] - checks[1])
            self.cpu_seconds[name] += discover()

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
