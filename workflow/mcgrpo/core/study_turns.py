"""A study's turns: the jobs of one Snakemake at a time write a study's folder, however many share the store.

Two Snakemake processes on one store (two working folders, or a programme and a study) each train a run once
(mcgrpo.core.run_claims), but both then run the analysis of a study they share, into the same folder. Snakemake
removes a job's outputs before it starts it: one process's contrasts job removed analysis/stages.parquet while the
other's tables job was reading it. So the jobs that write a study's folder (its links, gradient tests and every
analysis step) start through this module, which takes the study's turn for its Snakemake before anything is
removed, then removes the job's outputs and opens its log itself (rules/train_helpers.smk leaves them alone) and
execs the job's command, still holding the turn:

    python -m mcgrpo.core.study_turns --folder STUDY --log LOG --outputs OUT... -- COMMAND...

A turn is a POSIX lock on `<study>/.turn` naming the session (one Snakemake with its SLURM jobs: the
MCGRPO_SESSION it exports, rules/common.smk) whose turn it is. The jobs of that session share the lock and run side
by side as their DAG orders them; a job of another session waits until none of them runs, then takes the turn. A
study's outputs are each written whole by one session at a time, and each session reads what its own DAG, or the
same analysis of the same stored runs, wrote. A turn stays with a session GRACE seconds after its last job while
its Snakemake may still run (it checks that job's outputs before its next job takes the turn again). The lock, like
a run's claim, is dropped by the operating system when its job ends however it ends; the file is never removed (a
process waiting on a removed file's lock would hold a lock nobody else sees).

A stage of hours (KEPT: the gradient tests) is not run again for what another session wrote meanwhile: a second
Snakemake whose DAG was built while the first measured found the file missing, waited for the turn, and measured
the same batches again. Its job keeps outputs written since its own Snakemake started (STARTED: after its DAG
found them missing or out of date) and stamped with the config hash of its `--run-json` (the same measurement),
and runs nothing. The analysis, seconds, is written again by each session, from what its own DAG read.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import sys
import time
from pathlib import Path

from mcgrpo.core.run_claims import content, describe, holder

TURN = ".turn"
SESSION = "MCGRPO_SESSION"  # exported by each Snakemake (rules/common.smk); a job without it is a session alone
SNAKEMAKE = "MCGRPO_SNAKEMAKE"  # "host pid" of the session's Snakemake, exported with it: whether it still runs
STARTED = "MCGRPO_STARTED"  # when the session's Snakemake started (time.time()), before it built its DAG
# `python -m mcgrpo <verb>` stages whose outputs another session may have written meanwhile (written_meanwhile):
# each stamps them with the config hash of its --run-json (mcgrpo.core.store.write_parquet).
KEPT = {"gradient-tests"}
# Seconds a turn stays with its session after its last job ended: its Snakemake has yet to learn of the end (at
# once here, at its next status check on SLURM), check that job's outputs and start its next job, which takes the
# turn again. A job of another session that took it at once removed those outputs under the check, and failed the
# first Snakemake ("Unable to obtain modification time of file ... although it existed before").
# A session whose Snakemake is known to have ended (on this host) keeps nothing: a rerun takes its turn at once.
GRACE = 60.0
POLL = 0.5  # seconds between looks at whose turn it is, while another session's job holds it
LOOKS = 6  # tries of the lock, milliseconds apart, before a job is taken to hold it (_unheld)


def take(folder: Path, session: str, grace: float = GRACE) -> tuple[int, str]:
    """Wait for `session`'s turn on study folder `folder`; return the open, locked file (the turn lasts while it
    stays open, across exec, so that the job's command holds it) and a line saying what it waited for, if long.
    Another session's turn is taken once no job of it has held the turn for `grace` seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / TURN, os.O_RDWR | os.O_CREAT, 0o644)
    started, wait = time.monotonic(), {"said": False, "free_since": None}
    try:
        while True:
            fcntl.lockf(fd, fcntl.LOCK_SH)  # waits only while a job changes whose turn it is
            if (content(fd) or {}).get("session") == session:  # it changes only under LOCK_EX, so not while held
                break
            fcntl.lockf(fd, fcntl.LOCK_UN)
            if _free(fd, folder, session, grace, wait):
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps({**holder(), "session": session,
                                          "snakemake": os.environ.get(SNAKEMAKE)}).encode(), 0)
                fcntl.lockf(fd, fcntl.LOCK_SH)  # atomic: no other session's job can start in between
                break
    except BaseException:
        os.close(fd)
        raise
    waited = time.monotonic() - started
    return fd, f"mcgrpo: waited {waited:.0f} s for another Snakemake's jobs writing {folder}" if waited >= 1 else ""


def _free(fd: int, folder: Path, session: str, grace: float, wait: dict) -> bool:
    """Whether the turn can be taken now, held LOCK_EX if so: no job of any session has held it for `grace`
    seconds (`wait["free_since"]`), or none ever did, or its Snakemake has ended. Otherwise it waits a moment and
    the caller looks again whose turn it is: a sibling job of `session` may have taken it meanwhile, and this one
    then runs beside it. (Blocking here until the holders ended made a job wait for its own siblings: where jobs
    started while another session's turn was in its grace, as a rerun's on SLURM, whose jobs run on other hosts
    than their Snakemake, each waited for the one before it to end, and then for the grace again.) Says whose turn
    it is first, once, where that means waiting for a job of theirs."""
    if not _unheld(fd):  # a job holds the turn: the grace starts again after it
        wait["said"] = wait["said"] or _say(fd, folder, session)
        wait["free_since"] = None
        time.sleep(_poll())
        return False
    if not _may_run((content(fd) or {}).get("snakemake")):
        return True
    if wait["free_since"] is None:
        wait["free_since"] = time.monotonic()
    left = grace - (time.monotonic() - wait["free_since"])
    if left <= 0:
        return True
    fcntl.lockf(fd, fcntl.LOCK_UN)  # their next job may take it meanwhile: the wait starts again after it
    time.sleep(min(left, _poll()))
    return False


def _unheld(fd: int) -> bool:
    """LOCK_EX on the turn, where no job holds it. Another waiter holds it too, a millisecond at a time, to look
    whose turn it is: the lock is tried again within milliseconds before a job is taken to hold it. (Taken at once
    for a job's, that look restarted the grace of every waiter it met; two waiters in step restarted each other's
    for ever: a CI run waited 70 minutes in one image's first two jobs.)"""
    for attempt in range(LOOKS):
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except (BlockingIOError, PermissionError):
            if attempt < LOOKS - 1:
                time.sleep(random.uniform(0.002, 0.01))
    return False


def _poll() -> float:
    """Seconds until the next look: POLL, spread at random so that no two waiters stay in step."""
    return random.uniform(POLL / 2, POLL * 3 / 2)


def _may_run(snakemake) -> bool:
    """Whether the Snakemake "host pid" `snakemake` (a turn's) may still run: not where it is of this host and gone,
    or not recorded (no session held the turn, or one from before it was recorded)."""
    host, _, pid = snakemake.partition(" ") if isinstance(snakemake, str) else ("", "", "")
    if not pid.isdigit():
        return False
    if host != holder()["host"]:
        return True  # another machine's (a SLURM job's Snakemake on the login node): it cannot be told
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _say(fd: int, folder: Path, session: str) -> bool:
    """Whose jobs this one waits for, where they are another session's; whether it was said."""
    other = content(fd)
    if (other or {}).get("session") == session:  # a sibling took the turn: the caller joins it
        return False
    print(f"mcgrpo: {folder} is being written by the jobs of {describe(other) if other else 'another process'}"
          f" ({folder / TURN}); waiting for them", file=sys.stderr, flush=True)
    return True


def clear(outputs: list[str]) -> None:
    """What Snakemake would have removed before the job: its outputs (files), so that none is left stale."""
    for path in outputs:
        Path(path).unlink(missing_ok=True)


def written_meanwhile(outputs: list[str], command: list[str], started: str | None) -> bool:
    """Whether every output of a KEPT stage's job was written since its Snakemake started (`started`, STARTED's
    value), stamped with the config hash of the job's --run-json: another session's same measurement, made while
    this one's job waited for the turn. An output from before the start is one its DAG scheduled to replace (the
    comparison trusts the clocks of the hosts involved to agree within seconds, as Snakemake's own mtimes do)."""
    verb = command[command.index("mcgrpo") + 1] if "mcgrpo" in command[:-1] else None
    if verb not in KEPT or "--run-json" not in command[:-1] or not outputs or not started:
        return False
    from mcgrpo.core.config import config_hash  # only here: the analysis jobs start without these imports
    from mcgrpo.core.errors import DataError
    from mcgrpo.core.store import parquet_metadata
    stamp = config_hash(json.loads(command[command.index("--run-json") + 1]))
    try:
        return all(Path(path).stat().st_mtime >= float(started) and parquet_metadata(path).get("config_hash") == stamp
                   for path in outputs)
    except (OSError, DataError):  # missing, or unreadable: measured again
        return False


def _open_log(path: str, waited: str) -> int:
    """The job's log, emptied, starting with what its turn waited for."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if waited:
        os.write(log, f"{waited}\n".encode())
    return log


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mcgrpo.core.study_turns", description=__doc__.split("\n")[0])
    parser.add_argument("--folder", required=True, type=Path, help="the study's folder")
    parser.add_argument("--log", required=True, help="the job's log: stdout and stderr of COMMAND")
    parser.add_argument("--outputs", nargs="*", default=[], help="the job's outputs, removed in its turn")
    parser.add_argument("--grace", type=float, default=GRACE,
                        help=f"seconds another Snakemake keeps the turn after its last job (default {GRACE:g})")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...: what the job runs")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no COMMAND after --")
    fd, waited = take(args.folder, os.environ.get(SESSION) or f"{os.getpid()}@{holder()['host']}", args.grace)
    if written_meanwhile(args.outputs, command, os.environ.get(STARTED)):
        line = (f"mcgrpo: {', '.join(args.outputs)}: written by another Snakemake since this one started, for the "
                f"same config: kept, not run again")
        print(line, file=sys.stderr, flush=True)
        log = _open_log(args.log, waited)
        os.write(log, f"{line}\n".encode())
        os.close(log)
        return
    clear(args.outputs)
    log = _open_log(args.log, waited)
    sys.stdout.flush(), sys.stderr.flush()
    os.dup2(log, 1), os.dup2(log, 2)
    os.close(log)
    os.set_inheritable(fd, True)  # the lock is the process's: it outlives exec while the file stays open
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
