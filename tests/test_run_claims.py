"""A stored run's claim (mcgrpo.core.run_claims): one process trains a run at a time; a finished run is not trained
again; a stale claim is taken over with a line naming its old holder. The two-Snakemake test is in
tests/test_programme.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from conftest import ROOT, SNAKEMAKE_ENV
from mcgrpo.core import run_claims

HOLD = """
import sys, time
from mcgrpo.core import run_claims
claim = run_claims.acquire(sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[2]))
if sys.argv[3] == "finish":
    (claim.folder / "evals.parquet").write_text("x")
    (claim.folder / "manifest.json").write_text('{"files": {"evals.parquet": {}}}')
"""


def holding(folder, seconds, finish=False):
    """A process that claims `folder`, says so, holds it `seconds`, then (`finish`) leaves a finished run."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), str(seconds), "finish" if finish else "-"],
                             env=SNAKEMAKE_ENV, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_claim_names_its_holder_and_is_emptied_when_released(tmp_path, capsys):
    claim = run_claims.acquire(tmp_path / "run")
    written = json.loads((tmp_path / "run" / ".claim").read_text())
    assert set(written) == {"owner", "host", "pid", "since", "slurm_job_id"} and not claim.done
    claim.release()
    assert (tmp_path / "run" / ".claim").read_text() == ""
    assert "run claimed by" in capsys.readouterr().err


def test_a_second_process_waits_for_the_claim_and_does_not_train_a_run_finished_meanwhile(tmp_path, capsys):
    folder = tmp_path / "run"
    child = holding(folder, 2, finish=True)
    other = run_claims.reserve(folder)  # what a second Snakemake finds before removing the run's files
    assert other["pid"] == child.pid and not other.get("reserved")
    with pytest.raises(BlockingIOError):
        run_claims.acquire(folder, wait=False)
    start = time.monotonic()
    claim = run_claims.acquire(folder)
    assert child.wait() == 0 and time.monotonic() - start > 0.5
    assert claim.done, "the run the first process finished is not trained again"
    err = capsys.readouterr().err
    assert f"pid {child.pid}" in err and "waiting for it" in err and "not trained again" in err


def test_a_claim_whose_holder_died_is_taken_over_with_a_line_naming_it(tmp_path, capsys):
    folder = tmp_path / "run"
    child = holding(folder, 60)
    child.kill()  # as SLURM or the OOM killer would: nothing cleans up, the lock goes with the process
    child.wait()
    assert json.loads((folder / ".claim").read_text())["pid"] == child.pid
    claim = run_claims.acquire(folder, wait=False)
    assert not claim.done
    assert "taking over the stale claim of" in capsys.readouterr().err
    assert json.loads((folder / ".claim").read_text())["pid"] != child.pid
    claim.release()


RESERVE = """
import sys, time
from mcgrpo.core import run_claims
assert run_claims.reserve(sys.argv[1]) is None
print("reserved", flush=True)
time.sleep(60)
"""


def test_a_snakemake_reservation_keeps_another_off_the_run_until_its_trainer_claims_it(tmp_path, capsys):
    """Between a train job's start and its trainer's claim, the Snakemake that started it has reserved the run:
    another Snakemake leaves its files alone; a reservation whose Snakemake is gone counts for nothing."""
    folder = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-c", RESERVE, str(folder)], env=SNAKEMAKE_ENV, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "reserved"
    found = run_claims.reserve(folder)
    assert found["reserved"] and found["pid"] == child.pid
    claim = run_claims.acquire(folder, wait=False)  # a trainer claims a reserved run, with no stale line
    assert not claim.done and "stale" not in capsys.readouterr().err
    claim.release()
    child.kill()
    child.wait()
    assert run_claims.reserve(folder) is None  # free, and now reserved by this process
    assert json.loads((folder / ".claim").read_text())["pid"] != child.pid
