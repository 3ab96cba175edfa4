"""A stored run's claim: one process trains a run of the store at a time, however many Snakemake processes share it.

Two Snakemake processes on one store (two studies, or a programme and a study, each in its own working directory,
or one started with --nolock) can both schedule a run that neither has yet. Before training, `mcgrpo train` claims
the run's folder: it takes a POSIX lock (`fcntl.lockf`) on `<run>/.claim` and writes there who holds it (owner,
host, pid, time, SLURM job id). The operating system drops the lock when its holder exits, however it exits
(a SIGKILL, a node lost to SLURM), so:

- a second trainer that finds the run claimed logs who holds it and waits; once the lock is free it trains the run
  only if it is not finished: a finished run (its manifest, written last, and every file it lists) is left as the
  first trainer wrote it and the second exits 0, "trained by another process";
- a claim whose holder is gone (the file names an owner, but nobody holds the lock) is taken over, with a line
  naming the old owner; the checkpoints it left resume as a preempted run's do.

The file is emptied, never removed, when its holder is done: a process waiting on the lock of a removed file would
hold a lock nobody else sees. Snakemake removes a job's existing outputs and log before it starts it; rules/
train_helpers.smk leaves a train job's alone while another process holds the run's claim, or when the run was finished
by another process since this one built its DAG; before removing them it reserves the run (`reserve`), so that
another Snakemake leaves them alone in the seconds before this job's trainer claims it. POSIX locks hold across hosts on NFS v4
and on Lustre or GPFS mounted with locking (flock/localflock is enough on one node); docs/programmes.md.
"""

from __future__ import annotations

import atexit
import fcntl
import getpass
import json
import os
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

CLAIM = ".claim"
POLL_SECONDS = 2.0  # how often a waiting trainer tries the lock again
LOG_EVERY = 300.0  # and says again that it waits


def _say(message: str) -> None:
    print(f"mcgrpo train: {message}", file=sys.stderr, flush=True)


def holder() -> dict:
    """Who claims: owner, host, pid, time and SLURM's job id (None outside SLURM)."""
    try:
        owner = getpass.getuser()
    except (KeyError, OSError):  # a container's uid with no name
        owner = str(os.getuid())
    return {"owner": owner, "host": socket.gethostname(), "pid": os.getpid(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID")}


def describe(claim: dict) -> str:
    job = f", SLURM job {claim['slurm_job_id']}" if claim.get("slurm_job_id") else ""
    who = "the Snakemake of " if claim.get("reserved") else ""
    return f"{who}{claim.get('owner')}@{claim.get('host')} pid {claim.get('pid')} since {claim.get('since')}{job}"


def content(fd: int) -> dict | None:
    """Who a lock file (a run's claim, a study's turn: mcgrpo.core.study_turns) names: None where it is empty, an
    owner of '?' where it holds no JSON object."""
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        found = json.loads(raw) if raw.strip() else None
    except ValueError:
        found = []
    return found if found is None or isinstance(found, dict) else \
        {"owner": "?", "host": "?", "pid": "?", "since": "? (an unreadable file)"}


def finished(folder: Path) -> bool:
    """A run the trainer finished: its manifest (written last) and every file it lists are there."""
    from mcgrpo.core.manifest import MANIFEST  # here: study_turns imports this module at each job's start

    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all((folder / name).is_file() for name in files)


class Claim:
    """A held claim (`done`: False), or the news that another process finished the run meanwhile (`done`: True)."""

    def __init__(self, folder: Path, fd: int | None, done: bool):
        self.folder, self.fd, self.done = folder, fd, done

    def release(self) -> None:
        """Empty the claim and drop the lock (also at exit: `acquire` registers it)."""
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
        finally:
            os.close(self.fd)  # drops the lock
            self.fd = None


def acquire(folder: str | Path, wait: bool = True) -> Claim:
    """Claim run folder `folder` for this process, waiting while another holds it (`wait`: False raises
    BlockingIOError instead). Returns a Claim whose `done` says another process finished the run meanwhile."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / CLAIM, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        waited, said = False, 0.0
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (BlockingIOError, PermissionError):
                if not wait:
                    raise
                if time.monotonic() - said >= LOG_EVERY:
                    other = content(fd)
                    _say(f"{folder.name} is claimed by {describe(other) if other else 'another process'} "
                         f"({folder / CLAIM}); waiting for it")
                    said = time.monotonic()
                waited = True
                time.sleep(POLL_SECONDS)
        if finished(folder):
            _say(f"{folder.name} was trained by another process{' while this one waited' if waited else ''}; "
                 f"not trained again")
            os.close(fd)
            return Claim(folder, None, True)
        stale = content(fd)
        if stale and not stale.get("reserved"):  # a Snakemake's reservation (`reserve`) is no trainer's claim
            _say(f"taking over the stale claim of {describe(stale)} on {folder.name}: its holder is gone")
        mine = holder()
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(mine).encode(), 0)
        os.fsync(fd)
        _say(f"{folder.name} claimed by {describe(mine)}")
    except BaseException:
        os.close(fd)
        raise
    claim = Claim(folder, fd, False)
    atexit.register(claim.release)
    return claim


RESERVED_SECONDS = 600  # how long another host's reservation is honoured (its job's trainer claims in seconds)


def _live_reservation(claim: dict | None) -> bool:
    """A reservation (`reserve`) by another Snakemake that may still start the run's job."""
    if not claim or not claim.get("reserved") or (claim["host"], claim["pid"]) == (socket.gethostname(), os.getpid()):
        return False
    if claim["host"] == socket.gethostname():
        try:
            os.kill(int(claim["pid"]), 0)
            return True
        except (OSError, ValueError):
            return False
    try:
        since = datetime.fromisoformat(claim["since"])
    except (TypeError, ValueError):
        return False
    return (datetime.now(timezone.utc) - since).total_seconds() < RESERVED_SECONDS


def reserve(folder: str | Path) -> dict | None:
    """Called by Snakemake before it removes a train job's outputs and log: None when this process may (it
    reserved the run: the claim file names it, unlocked, until its trainer claims the run), else who holds or
    reserved the run (a trainer's claim, or another Snakemake's reservation made since its trainer started), whose
    files are then left alone. The reservation closes the seconds between a job's start and its trainer's claim."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / CLAIM, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):
            return content(fd) or {}
        other = content(fd)
        if _live_reservation(other):
            return other
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({**holder(), "reserved": True}).encode(), 0)
        return None
    finally:
        os.close(fd)  # drops the lock
