"""Progress is not failure: a SLURM train job that checkpointed past where its attempt started requeues itself.

A run longer than a job's time limit is signalled before the limit, checkpoints and exits 75. Ended so, the job
counts as failed and Snakemake's `retries` run out after a few job lengths. Instead, an attempt that made progress
(its newest checkpoint lies past the iteration it resumed at) runs `scontrol requeue $SLURM_JOB_ID` before it
exits: SLURM runs the same job again under its id, the executor plugin takes REQUEUED and PENDING for a job still
running, and the run resumes from the checkpoint with no retry spent. An attempt without progress (a signal before
its first iteration, a crash) is not requeued: it fails, and only those spend Snakemake's retries. So a job cannot
requeue forever without progress; MAX_REQUEUES bounds even a run that creeps forward an iteration at a time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mcgrpo.core.store import read_json
from mcgrpo.train import attempts

MAX_REQUEUES = 100  # a job requeued this often (SLURM_RESTART_COUNT) fails instead: 100 days of 24-hour limits


@dataclass(frozen=True)
class Decision:
    requeue: bool
    why: str  # one line for the run's log and its attempts record


def newest_checkpoint(directory: str | Path) -> int | None:
    """The iteration of the newest checkpoint whose manifest (the commit marker) was written, or None."""
    iterations = []
    for path in Path(directory).glob("ckpt-*.json"):
        try:
            iterations.append(int(read_json(path)["iteration"]))
        except (ValueError, KeyError, TypeError, OSError):
            continue  # a damaged manifest vouches for nothing
    return max(iterations, default=None)


def decide(resumed_at: int | None, checkpointed: int | None, restarts: int, job_id: str | None) -> Decision:
    """Whether an interrupted attempt requeues its SLURM job: it resumed at `resumed_at` iterations (None: from the
    start), its newest checkpoint holds `checkpointed`, and SLURM has requeued the job `restarts` times."""
    start = resumed_at or 0
    if not job_id:
        return Decision(False, "not a SLURM job: exit 75, rerun to resume")
    if checkpointed is None or checkpointed <= start:
        return Decision(False, f"no progress (checkpoint at {checkpointed or 0} iterations, resumed at {start}): "
                               f"exit 75, a Snakemake retry resumes it")
    if restarts >= MAX_REQUEUES:
        return Decision(False, f"requeued {restarts} times already (at most {MAX_REQUEUES}): exit 75, a Snakemake "
                               f"retry resumes it")
    return Decision(True, f"progress ({start} -> {checkpointed} iterations): SLURM job {job_id} requeued")


def requeue(job_id: str, run=subprocess.run) -> str:
    """`scontrol requeue JOB`: '' once SLURM has taken it, else what went wrong."""
    try:
        done = run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"scontrol requeue {job_id}: {e}"
    return "" if done.returncode == 0 else f"scontrol requeue {job_id}: {(done.stderr or done.stdout).strip()}"


def end_interrupted(checkpoints: str | Path, history: list[dict], name: str = "", environ=os.environ,
                    run=subprocess.run, **fields) -> Decision:
    """Record how the attempt (the last of `history`) was interrupted (`fields`: attempts.end's), decide, and
    requeue its SLURM job where it made progress: decided and recorded first, since SLURM ends the job's
    processes once it takes the requeue. A refused requeue falls back to the exit status (a Snakemake retry).
    Under SLURM the job's comment then says how the run ended, `<name>: exit 75 after N iterations, ...`: sacct
    keeps each run's comment (AccountingStoreFlags=job_comment), and its ExitCode is the executor's, not the
    trainer's."""
    job_id = environ.get("SLURM_JOB_ID")
    decision = decide(fields.get("resumed_at"), newest_checkpoint(checkpoints), attempts.restarts(environ, run),
                      job_id)
    attempts.end(checkpoints, history, "interrupted", requeued=decision.requeue, then=decision.why, **fields)
    print(attempts.describe(history[-1]), file=sys.stderr, flush=True)
    if job_id:
        comment(job_id, f"{name}: exit 75 after {fields.get('iterations')} iterations, "
                        + ("requeued" if decision.requeue else "not requeued"), run)
    if decision.requeue:
        refused = requeue(job_id, run)
        if refused:
            decision = Decision(False, f"progress, but {refused}: exit 75, a Snakemake retry resumes it")
            attempts.end(checkpoints, history, "interrupted", requeued=False, then=decision.why, **fields)
            print(decision.why, file=sys.stderr, flush=True)
            comment(job_id, f"{name}: exit 75 after {fields.get('iterations')} iterations, not requeued", run)
    return decision


def comment(job_id: str, text: str, run=subprocess.run) -> None:
    """Set the SLURM job's comment (squeue -o %k, sacct -o Comment); a refusal changes nothing else."""
    try:
        run(["scontrol", "update", f"JobId={job_id}", f"Comment={text}"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        pass
