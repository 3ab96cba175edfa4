"""A run's attempts (start, resume, preemption, finish), recorded across the jobs that train it.

The record lives beside the checkpoints, which outlive a failed job (Snakemake deletes a failed job's declared
outputs, never the checkpoint folder), and goes into run.json when the run finishes. An attempt that never
recorded its end was killed (SIGKILL, a node failure) after its last checkpoint.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from mcgrpo.core.store import read_json, write_json

FILE = "attempts.json"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def start(directory: str | Path) -> list[dict]:
    """The record with this attempt appended (and written); names the SLURM job where there is one, and how often
    SLURM requeued it (the job itself, after progress, or a preemption under PreemptMode=REQUEUE: each runs the job
    again under its own id)."""
    path = Path(directory) / FILE
    history = read_json(path)["attempts"] if path.exists() else []
    history.append({"attempt": len(history) + 1, "started": _now(), "host": platform.node(),
                    "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                    "slurm_restarts": restarts(), "resumed_at": None, "ended": None,
                    "outcome": None, "signal": None, "iterations": None})
    write_json({"attempts": history}, path)
    return history


def restarts(environ=os.environ, run=subprocess.run) -> int:
    """How often SLURM has requeued this job: SLURM_RESTART_COUNT where SLURM sets it (the batch step, and the
    steps it launches), else the job's Restarts= from `scontrol show job` (0 outside SLURM)."""
    if environ.get("SLURM_RESTART_COUNT", "").isdigit():
        return int(environ["SLURM_RESTART_COUNT"])
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return 0
    try:
        shown = run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    found = re.search(r"\bRestarts=(\d+)", shown or "")
    return int(found.group(1)) if found else 0


def note(directory: str | Path, history: list[dict], **fields) -> None:
    """Add `fields` to this attempt's record (written at once: an attempt killed later kept its checkpoints)."""
    history[-1].update(fields)
    write_json({"attempts": history}, Path(directory) / FILE)


def end(directory: str | Path, history: list[dict], outcome: str, **fields) -> None:
    """Record how this attempt ended: `finished` or `interrupted` (with the signal), the iterations done, the
    longest checkpoint's seconds and, when interrupted, whether its SLURM job was requeued (mcgrpo.train.requeue)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    note(directory, history, ended=_now(), outcome=outcome, **fields)


def describe(entry: dict) -> str:
    """One line for the run's log."""
    restarts = entry.get("slurm_restarts")  # absent from records written before it was kept
    where = (f" (SLURM job {entry['slurm_job_id']}" + (f", requeued {restarts}x" if restarts else "") + ")"
             if entry["slurm_job_id"] else "")
    head = f"attempt {entry['attempt']}{where} on {entry['host']}"
    if entry["outcome"] is None:
        return f"{head}, started {entry['started']}: killed before it recorded an end"
    resumed = "" if entry["resumed_at"] is None else f", resumed after {entry['resumed_at']} iterations"
    took = entry.get("checkpoint_seconds")  # absent from records written before it was kept
    took = "" if took is None else f" (longest checkpoint {took:.1f} s)"
    if entry["outcome"] == "interrupted":
        # `then`: what came of it (mcgrpo.train.requeue), absent from records written before
        return (f"{head}{resumed}: interrupted by {entry['signal']} after {entry['iterations']} iterations; "
                f"checkpoint written{took}; " + entry.get("then", "exit 75"))
    return f"{head}{resumed}: finished after {entry['iterations']} iterations{took}"
