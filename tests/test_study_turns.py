"""A study's turns (mcgrpo.core.study_turns): the jobs of one Snakemake at a time write a study's folder."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import SMALL_STUDY, SNAKEMAKE_ENV, snakemake, snakemake_command
from mcgrpo.core import study_turns

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "workflow")}
# A job's command that holds its turn until the file `go` appears beside it.
HOLD = [sys.executable, "-c", "import os, time\nwhile not os.path.exists('go'): time.sleep(0.05)"]


def job(tmp_path, session, command, outputs=(), log="logs/job.log", grace=0.5, snakemake=None, folder="study"):
    """A job started as a wrapped rule starts it: python -m mcgrpo.core.study_turns ... -- COMMAND (another
    session's turn kept `grace` seconds after its last job, not the workflow's minute), its session's Snakemake
    `snakemake` ("host pid"; default: this test's process, which runs)."""
    argv = [sys.executable, "-m", study_turns.__name__, "--folder", folder, "--log", log, "--grace", str(grace),
            "--outputs", *outputs, "--", *command]
    mine = snakemake or f"{socket.gethostname()} {os.getpid()}"
    return subprocess.Popen(argv, cwd=tmp_path, env={**ENV, study_turns.SESSION: session, study_turns.SNAKEMAKE: mine},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def holding(tmp_path, session, snakemake=None, folder="study"):
    """A job of `session` that has taken the study's turn and holds it until `go`."""
    holder = job(tmp_path, session, HOLD, log="logs/holder.log", snakemake=snakemake, folder=folder)
    turn, deadline = tmp_path / folder / study_turns.TURN, time.monotonic() + 30
    while not turn.exists() or json.loads(turn.read_text() or "{}").get("session") != session:
        assert holder.poll() is None and time.monotonic() < deadline, holder.communicate()
        time.sleep(0.05)
    return holder


def test_a_job_removes_its_outputs_opens_its_log_and_exits_as_its_command(tmp_path):
    (tmp_path / "old.parquet").write_text("stale")
    done = job(tmp_path, "a", ["sh", "-c", "test ! -e old.parquet; echo out; echo err >&2; exit 3"],
               outputs=["old.parquet", "never-made.parquet"])
    assert done.wait(timeout=30) == 3
    assert (tmp_path / "logs" / "job.log").read_text() == "out\nerr\n"
    assert not (tmp_path / "old.parquet").exists()


def test_another_snakemakes_job_waits_and_leaves_the_files_until_the_turn_is_dropped(tmp_path):
    """The turn is dropped by the operating system when its job ends, however it ends (here SIGKILL)."""
    holder = holding(tmp_path, "first")
    (tmp_path / "stages.parquet").write_text("the first's")
    waiting = job(tmp_path, "second", ["echo", "ran"], outputs=["stages.parquet"])
    time.sleep(1.5)
    assert waiting.poll() is None, waiting.communicate()
    assert (tmp_path / "stages.parquet").read_text() == "the first's"  # not removed while the first holds it
    holder.send_signal(signal.SIGKILL)
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0
    assert "study is being written by the jobs of" in err and "(study/.turn); waiting for them" in err, err
    assert re.fullmatch(r"mcgrpo: waited \d+ s for another Snakemake.s jobs writing study\nran\n", (tmp_path / "logs" / "job.log").read_text())
    assert not (tmp_path / "stages.parquet").exists()
    assert json.loads((tmp_path / "study" / study_turns.TURN).read_text())["session"] == "second"


def test_a_turn_stays_with_its_snakemake_between_two_of_its_jobs(tmp_path):
    """The first Snakemake's job ends; before that Snakemake has checked the job's outputs and started its next
    job, the waiting job of another took the turn and removed them, failing the first ("Unable to obtain
    modification time ... although it existed before"). The turn now stays with a session `grace` seconds after
    its last job: its next job within them keeps it, and the other waits on."""
    holder = holding(tmp_path, "first")
    (tmp_path / "stages.parquet").write_text("the first's")
    waiting = job(tmp_path, "second", ["echo", "ran"], outputs=["stages.parquet"], grace=4)
    time.sleep(0.5)
    (tmp_path / "go").touch()  # the first's job ends ...
    assert holder.wait(timeout=30) == 0
    (tmp_path / "go").unlink()
    time.sleep(0.5)
    assert waiting.poll() is None and (tmp_path / "stages.parquet").exists()  # ... and the turn stays the first's
    following = holding(tmp_path, "first")  # its Snakemake's next job, within the grace
    time.sleep(5)  # past the grace counted from the first job's end: the second still waits, for this job
    assert waiting.poll() is None and (tmp_path / "stages.parquet").read_text() == "the first's"
    (tmp_path / "go").touch()
    assert following.wait(timeout=30) == 0
    assert waiting.wait(timeout=30) == 0 and not (tmp_path / "stages.parquet").exists()
    assert json.loads((tmp_path / "study" / study_turns.TURN).read_text())["session"] == "second"


def test_a_rerun_takes_the_turn_of_a_snakemake_that_ended_at_once(tmp_path):
    """The grace is for a Snakemake that still runs: a rerun after one ended (here: its process gone) never waits."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    holder = holding(tmp_path, "first", snakemake=f"{socket.gethostname()} {gone.pid}")
    (tmp_path / "go").touch()
    assert holder.wait(timeout=30) == 0
    started = time.monotonic()
    assert job(tmp_path, "second", ["true"], grace=60).wait(timeout=30) == 0
    assert time.monotonic() - started < 20


def test_the_jobs_of_one_snakemake_run_side_by_side(tmp_path):
    holder = holding(tmp_path, "one")
    try:
        sibling = job(tmp_path, "one", ["true"])
        assert sibling.wait(timeout=10) == 0  # while the holder still holds the turn
        assert holder.poll() is None
    finally:
        (tmp_path / "go").touch()
    assert holder.wait(timeout=30) == 0


def test_jobs_of_one_snakemake_that_waited_for_another_s_turn_run_side_by_side_once_one_takes_it(tmp_path):
    """A rerun on SLURM: its jobs run on other hosts than its Snakemake, and the turn names an earlier session
    whose Snakemake (on another host) cannot be told ended, so they wait out its grace. The first to take the turn
    is joined by the others at once; they used to wait for it to end, then for the grace again."""
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / study_turns.TURN).write_text(json.dumps({"session": "earlier", "snakemake": "login 1"}))
    first = job(tmp_path, "rerun", HOLD, log="logs/first.log", grace=2, snakemake="login 2")
    time.sleep(1)
    try:
        second = job(tmp_path, "rerun", ["true"], grace=2, snakemake="login 2")
        assert second.wait(timeout=15) == 0, second.communicate()
        assert first.poll() is None  # the first took the turn and holds it: the second ran beside it
        assert json.loads((tmp_path / "study" / study_turns.TURN).read_text())["session"] == "rerun"
    finally:
        (tmp_path / "go").touch()
    assert first.wait(timeout=30) == 0


def test_waiters_looking_whose_turn_it_is_do_not_hold_back_each_others_grace(tmp_path):
    """Waiters for another session's turn each hold its lock a moment at a time to look. Taken for a job's, that
    look restarted the grace of the waiter it met, and two waiters in step restarted each other's for ever (a CI
    run waited 70 minutes on an image's first two jobs). A stand-in for many waiters holds the lock three quarters
    of the time, a few milliseconds at a time: the job still takes the turn soon after its grace."""
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / study_turns.TURN).write_text(json.dumps({"session": "earlier", "snakemake": "login 1"}))
    looking = subprocess.Popen([sys.executable, "-c", """import fcntl, os, time
fd = os.open('study/.turn', os.O_RDWR)
while not os.path.exists('go'):
    fcntl.lockf(fd, fcntl.LOCK_EX); time.sleep(0.006); fcntl.lockf(fd, fcntl.LOCK_UN); time.sleep(0.002)
"""], cwd=tmp_path)
    try:
        started = time.monotonic()
        waiting = job(tmp_path, "rerun", ["true"], grace=1, snakemake="login 2")
        assert waiting.wait(timeout=60) == 0, waiting.communicate()
        assert time.monotonic() - started < 20
    finally:
        (tmp_path / "go").touch()
        looking.wait(timeout=30)


def test_a_job_without_a_command_is_refused(tmp_path):
    done = job(tmp_path, "a", [])
    _, err = done.communicate(timeout=30)
    assert done.returncode == 2 and "no COMMAND after --" in err


# Loads the default study's workflow (Snakemake's API, in a subprocess of its own) and prints each rule's output
# patterns and shell command.
_RULES = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings
root, workdir, study = map(Path, sys.argv[1:])
with SnakemakeApi(OutputSettings(quiet=True)) as api:
    workflow = api.workflow(resource_settings=ResourceSettings(), storage_settings=StorageSettings(),
                            config_settings=ConfigSettings(configfiles=[study]), snakefile=root / "Snakefile",
                            workdir=workdir)._workflow
    for rule in workflow.rules:
        print(json.dumps({"name": rule.name, "outputs": [str(o) for o in rule.output], "shell": rule.shellcmd}))
"""
WRITTEN_ONCE = {"prereg_lock"}  # protected, written once before any training: Snakemake refuses to overwrite it


def test_every_rule_that_writes_a_study_folder_runs_in_its_turn(tmp_path):
    """Any rule writing under results/<study>/ that another Snakemake's job may read: its links, the gradient
    tests, every analysis step, the figures, tables and summary."""
    study = ROOT / "config" / "config.yaml"  # the default study: gradient tests, alignment
    done = subprocess.run([sys.executable, "-c", _RULES, str(ROOT), str(tmp_path), str(study)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rules = [json.loads(line) for line in done.stdout.splitlines()]
    writers = {r["name"]: r["shell"] for r in rules
               if any(re.match(r"results/\{study[,}]", o) for o in r["outputs"]) and r["name"] not in WRITTEN_ONCE}
    assert {"link_study", "gradient_tests", "drift", "contrasts", "tables", "figures", "summary"} <= set(writers)
    for name, shell in writers.items():
        assert shell and f"-m {study_turns.__name__} " in shell, (name, shell)


RUN_JSON = json.dumps({"study": "mini", "gradient_tests": {"batches": 2}}, sort_keys=True)
# A gradient-tests job's command as the rule writes it; run, it would fail (no such model): only kept, it succeeds.
MEASURE = [sys.executable, "-m", "mcgrpo", "gradient-tests", "--run-json", RUN_JSON, "--model", "nowhere",
           "--data", "nowhere", "--out", "gradient_tests.parquet"]


def measured(path: Path, run_json: str = RUN_JSON) -> bytes:
    """gradient_tests.parquet as the stage writes it: stamped with its --run-json's config hash."""
    import pandas as pd
    from mcgrpo.core.config import config_hash
    from mcgrpo.core.store import write_parquet
    write_parquet(pd.DataFrame({"arm": ["outcome"], "value": [1.0]}), path, config_hash(json.loads(run_json)))
    return path.read_bytes()


def test_gradient_tests_another_snakemake_measured_while_this_one_waited_are_kept_not_measured_again(tmp_path):
    """The second Snakemake's DAG was built while the first measured (the file missing); its job waits for the
    turn, then finds the first's file, written since it started, for the same config: kept, nothing run."""
    started = repr(time.time() - 5)
    holder = holding(tmp_path, "first")
    waiting = subprocess.Popen(
        [sys.executable, "-m", study_turns.__name__, "--folder", "study", "--log", "logs/gradient_tests.log",
         "--grace", "0.5", "--outputs", "gradient_tests.parquet", "--", *MEASURE],
        cwd=tmp_path, env={**ENV, study_turns.SESSION: "second", study_turns.STARTED: started},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    written = measured(tmp_path / "gradient_tests.parquet")  # the first's job, done while the second waits
    (tmp_path / "go").touch()
    holder.wait(timeout=30)
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 0, err
    assert (tmp_path / "gradient_tests.parquet").read_bytes() == written
    assert "gradient_tests.parquet: written by another Snakemake since this one started, for the same config: " \
           "kept, not run again" in (tmp_path / "logs" / "gradient_tests.log").read_text()


def test_gradient_tests_from_before_the_start_of_another_config_or_of_another_stage_are_measured_again(tmp_path):
    """What the DAG scheduled to replace (older than its Snakemake), another config's measurement, and every
    other stage's outputs (the analysis: each session writes its own) are removed and run as before."""
    out = tmp_path / "gradient_tests.parquet"
    measured(out)
    after, before = repr(out.stat().st_mtime - 1), repr(out.stat().st_mtime + 1)
    assert study_turns.written_meanwhile([str(out)], MEASURE, after)
    assert not study_turns.written_meanwhile([str(out)], MEASURE, before)  # from before: what the DAG replaces
    assert not study_turns.written_meanwhile([str(out)], MEASURE, None)  # a job started without a Snakemake
    assert not study_turns.written_meanwhile([str(out), str(tmp_path / "missing")], MEASURE, after)
    other = MEASURE.copy()
    other[other.index("--run-json") + 1] = json.dumps({"study": "mini", "gradient_tests": {"batches": 3}})
    assert not study_turns.written_meanwhile([str(out)], other, after)  # another config's measurement
    contrasts = [sys.executable, "-m", "mcgrpo", "contrasts", "--config-json", "{}", "--out", str(out)]
    assert not study_turns.written_meanwhile([str(out)], contrasts, after)
    done = job(tmp_path, "a", ["sh", "-c", "test ! -e gradient_tests.parquet && echo measured"],
               outputs=["gradient_tests.parquet"])
    assert done.wait(timeout=30) == 0 and not out.exists()  # another stage's job: removed and run, as always


@pytest.mark.slow
def test_two_snakemakes_measure_the_gradient_tests_once_and_a_second_dry_run_schedules_nothing(tmp_path):
    """Two working folders, one store: both build their DAG while the file is missing (a third session holds the
    study's turn meanwhile, as the first's measuring job would). One measures; the other's job, its turn come,
    keeps that file instead of measuring the same batches again. Then neither has anything left to do."""
    store = tmp_path / "store"
    study = {**SMALL_STUDY, "results_dir": str(store / "results"), "gradient_tests": {"batches": 2, "arms": ["mc_k2"]}}
    folders = [tmp_path / "first", tmp_path / "second"]
    for folder in folders:
        folder.mkdir()
        (folder / "study.yaml").write_text(yaml.safe_dump(study))
    built = snakemake(folders[0], "--cores", "1", "warm_start")  # data and model first, as a store's second user
    assert built.returncode == 0, built.stderr[-3000:]
    gone = subprocess.Popen(["true"])
    gone.wait()  # the blocker's Snakemake has ended: no grace once its job drops the turn
    blocker = holding(store, "blocker", snakemake=f"{socket.gethostname()} {gone.pid}", folder="results/mini")
    logs = [tmp_path / f"{folder.name}.log" for folder in folders]
    runs = [subprocess.Popen(snakemake_command(folder, "--cores", "1", "gradient_tests"), cwd=ROOT, env=SNAKEMAKE_ENV,
                             stdout=log.open("w"), stderr=subprocess.STDOUT) for folder, log in zip(folders, logs)]
    deadline = time.monotonic() + 300
    while not all("waiting for them" in log.read_text() for log in logs):  # both DAGs built, both jobs waiting
        assert all(run.poll() is None for run in runs) and time.monotonic() < deadline, [log.read_text() for log in logs]
        time.sleep(0.5)
    (store / "go").touch()
    blocker.wait(timeout=30)
    while None in [run.poll() for run in runs]:  # each reaped as it ends: a zombie's pid would look alive
        assert time.monotonic() < deadline + 300, [log.read_text()[-3000:] for log in logs]
        time.sleep(0.2)
    assert [run.returncode for run in runs] == [0, 0], [log.read_text()[-3000:] for log in logs]
    kept = [log for log in logs if "gradient_tests.parquet: written by another Snakemake since this one started, for "
                                   "the same config: kept, not run again" in log.read_text()]
    assert len(kept) == 1, [log.read_text()[-3000:] for log in logs]
    for folder in folders:
        dry = snakemake(folder, "-n", "--cores", "1", "gradient_tests")
        assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]
