"""A small study through `snakemake --profile slurm` on a real SLURM cluster (tests/slurm/cluster.sh up), against the
same study run locally: identical Parquet (wall-time columns aside). One training job is signalled with
`scancel --signal=USR1`; another has its time limit cut short while it trains, so that SLURM itself sends the
train rule's `--signal=USR1@<lead>`; a third is preempted by a job of a higher partition, so that SLURM sends it
SIGTERM and a grace time. Skipped where no cluster is up; `make test-slurm` brings one up and runs it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml

from conftest import (CLUSTER_PIDS, ROOT, SMALL_STUDY, SNAKEMAKE_ENV, assert_contrasts_as_alone, own_cluster, snakemake,
                      snakemake_command)
from mcgrpo import studies as study_files
from mcgrpo.core import layout
from mcgrpo.core.store import read_parquet
from mcgrpo.train import requeue

CLUSTER = ROOT / "tests" / "slurm" / "cluster.sh"


def _cluster_up() -> bool:
    return (shutil.which("sbatch") is not None and os.geteuid() == 0
            and subprocess.run([str(CLUSTER), "status"], capture_output=True).returncode == 0)


# The condition is a string, so that it is evaluated only where the tests were asked for (tests/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.slurm,
              pytest.mark.skipif("not _cluster_up()", reason="no SLURM cluster up (tests/slurm/cluster.sh up, as root)")]
# The tests that stop, kill or restart the daemons, or edit /etc/slurm: only on a cluster this checkout started.
restarts_the_cluster = pytest.mark.skipif(not own_cluster(), reason=(
    "restarts the cluster's daemons: only where this checkout's tests/slurm/cluster.sh up started them (.cluster/pids)"))

# Training long enough (outcome: some 500 iterations, half a minute or more) for a signal to land mid-run. Train
# jobs ask for 50 minutes; the signal leads the limit by 120 s (90 s + the default checkpoint_seconds, 30).
STUDY_RUNTIME = 50
STUDY = {**SMALL_STUDY, "study": "slurm", "seeds": [1], "budget": {"tokens": 80000},
         "arms": {**SMALL_STUDY["arms"], "mc_k3": {"credit": {"monte_carlo": {"k": 3}}}},
         "resources": {"train": {"gpu": 1, "mem_mb": 1000, "cpus_per_gpu": 1, "runtime": STUDY_RUNTIME},
                       "cpu": {"mem_mb": 1000}}}
# scancel --signal=USR1; a time limit cut to 2-3 minutes from now; outranked by a job of the `urgent` partition
PREEMPTED, LIMITED, OUTRANKED = "mc_k2", "outcome", "mc_k3"
SIGNALLED = {PREEMPTED, LIMITED, OUTRANKED}
WALL_TIME = {*(f"{clock}_{stage}" for clock in ("t", "cpu") for stage in ("select", "generate", "credit", "update", "sync")),
             "train_seconds", "train_cpu_seconds", "eval_seconds"}  # both clocks of the training stages


def _snakemake(workdir: Path, *args, configfile="study.yaml") -> subprocess.Popen:
    return subprocess.Popen(snakemake_command(workdir, *args, configfile=configfile), cwd=ROOT, env=SNAKEMAKE_ENV,
                            stdout=open(workdir / "snakemake.out", "w"), stderr=subprocess.STDOUT, text=True)


def _jobs(workdir: Path, rule: str) -> list[str]:
    """SLURM job ids of `rule`, oldest first, from the plugin's logs (kept: slurm-keep-successful-logs)."""
    logs = (workdir / ".snakemake" / "slurm_logs").glob(f"rule_{rule}/**/*.log")
    return sorted((p.stem for p in logs), key=int)


def _queue() -> str:
    """The cluster's queue with each pending job's reason: what a run that stalls waits on."""
    return subprocess.run(["squeue", "-o", "%i %P %j %T %R"], capture_output=True, text=True).stdout


def _sacct(job: str) -> dict:
    """The job's latest run (a requeued job's last), as sacct records it."""
    return _runs(job)[-1]


def _runs(job: str) -> list[dict]:
    """Every run of the job, oldest first (sacct --duplicates: a requeued job keeps one record per run)."""
    lines = subprocess.run(["sacct", "-n", "-X", "-D", "-P", "-j", job, "-o",
                            "Partition,State,ExitCode,Start,End,Comment"],
                           capture_output=True, text=True, check=True).stdout.strip().splitlines()
    return [dict(zip(("partition", "state", "exit", "start", "end", "comment"), line.split("|", 5)))
            for line in lines]  # ISO times sort as strings


def _stored(workdir: Path, arm: str) -> str:
    """The run store's name of the study's run (arm, seed 1): the train job's wildcard."""
    return layout.run_key(study_files.load(workdir / "study.yaml"), arm, 1)


def _past_first_evaluation(workdir: Path, arm: str) -> bool:
    """Whether the arm's run has checkpointed after its first evaluation (read through the study's link)."""
    checkpoints = workdir / "results" / "slurm" / "runs" / arm / "seed1" / "checkpoints"
    return bool(list(checkpoints.glob("ckpt-0*[1-9]*.json")))


def _trainer(job: str) -> psutil.Process:
    """The `mcgrpo train` process of SLURM job `job` (the cluster is this machine)."""
    trainers = [p for p in _processes(job) if "mcgrpo" in p.cmdline() and "train" in p.cmdline()]
    assert len(trainers) == 1, (job, _queue())
    return trainers[0]


def _processes(job: str) -> list[psutil.Process]:
    """The processes of SLURM job `job` (`scontrol listpids`: the cluster is this machine)."""
    listed = subprocess.run(["scontrol", "listpids", job], capture_output=True, text=True, check=True).stdout
    return [psutil.Process(int(line.split()[0])) for line in listed.splitlines()[1:] if line.split()[0].isdigit()]


def _pending(trainer: psutil.Process, signum: int) -> bool:
    """Whether `signum` is pending on the stopped `trainer`: delivered, not yet handled."""
    status = Path(f"/proc/{trainer.pid}/status").read_text()
    pending = {line.split(":")[0]: int(line.split()[1], 16) for line in status.splitlines()
               if line.startswith(("SigPnd:", "ShdPnd:"))}
    return bool((pending["SigPnd"] | pending["ShdPnd"]) & (1 << (signum - 1)))


def _resumed_by_slurm(trainer: psutil.Process) -> bool:
    """Whether the stopped `trainer` runs again, or is gone (SLURM's SIGCONT or SIGKILL: the assertions on its
    attempts then fail)."""
    try:
        return trainer.status() != psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return True


def _cut_time_limit(job: str) -> None:
    """Leave the job 2-3 minutes (limits are whole minutes): at most the 2-minute lead and slurmctld's 30-s check
    period, so that it sends the signal within a minute, as it would near the end of a real limit."""
    elapsed = subprocess.run(["squeue", "-h", "-j", job, "-o", "%M"], capture_output=True, text=True,
                             check=True).stdout.strip()
    seconds = sum(int(x) * 60 ** i for i, x in enumerate(reversed(elapsed.split("-")[-1].split(":"))))
    subprocess.run(["scontrol", "update", f"JobId={job}", f"TimeLimit={math.ceil(seconds / 60) + 2}"], check=True)


def _outrank(job: str) -> str:
    """Submit a job to the `urgent` partition that needs the GPU `job` holds (the node's one): SLURM preempts
    `job` (SIGCONT and SIGTERM to the step's task, then GraceTime to end). Returns the urgent job's id."""
    return subprocess.run(["sbatch", "--parsable", "-p", "urgent", "--gpus=1", "-c", "1", "--mem=100",
                           "-A", "mcgrpo", "-o", "/dev/null", "--wrap", "true"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """(SLURM workdir, local workdir, {arm: the job signalled}, the urgent job): one study run twice."""
    slurm, local = tmp_path_factory.mktemp("slurm"), tmp_path_factory.mktemp("local")
    for workdir in (slurm, local):
        (workdir / "study.yaml").write_text(yaml.safe_dump(STUDY))
    on_slurm = _snakemake(slurm, "--profile", "slurm", "--retries", "6",
                          "--slurm-init-seconds-before-status-checks", "2", "--seconds-between-status-checks", "2")
    at_home = _snakemake(local, "--cores", "1")
    # Each run is held (SIGSTOP) once past its first evaluation, so that it cannot finish before its signal
    # reaches it: SLURM checks time limits only every 30 s, and a quiet machine trains these runs in less. Its
    # clock, unlike `scontrol suspend`, keeps running. The runs share the one GPU: one at a time, in any order.
    waiting, signalled, urgent, deadline = {}, {}, None, time.time() + 900
    while len(signalled) < len(SIGNALLED):
        for arm in sorted(SIGNALLED - waiting.keys() - signalled.keys()):
            if _past_first_evaluation(slurm, arm):
                job = _jobs(slurm, f"train/{_stored(slurm, arm)}")[0]
                trainer = _trainer(job)
                trainer.suspend()
                if arm == OUTRANKED:
                    urgent = _outrank(job)
                elif arm == LIMITED:
                    _cut_time_limit(job)
                else:
                    subprocess.run(["scancel", "--signal=USR1", job], check=True)
                waiting[arm] = job, trainer
        for arm, (job, trainer) in list(waiting.items()):
            # SIGTERM reaches the trainer from the job step's Snakemake (rules/train_helpers.smk), which alone SLURM signals
            if _pending(trainer, signal.SIGTERM if arm == OUTRANKED else signal.SIGUSR1) or _resumed_by_slurm(trainer):
                if arm == LIMITED:  # the job, requeued, runs again under this limit: the study's own, as before
                    subprocess.run(["scontrol", "update", f"JobId={job}", f"TimeLimit={STUDY_RUNTIME}"], check=True)
                trainer.resume()
                signalled[arm] = waiting.pop(arm)[0]
        assert on_slurm.poll() is None and time.time() < deadline, (
            f"signalled {signalled}, waiting {list(waiting)}\n{_queue()}\n"
            + (slurm / "snakemake.out").read_text()[-3000:])
        time.sleep(0.1)
    for workdir, proc in ((slurm, on_slurm), (local, at_home)):
        assert proc.wait(timeout=1500) == 0, (workdir / "snakemake.out").read_text()[-4000:]
    return slurm, local, signalled, urgent


def _parquet(workdir: Path) -> dict[str, Path]:
    """The study's Parquet files, and the shared data's (results/_shared), by path under results/slurm/."""
    results = workdir / "results" / "slurm"
    return {str(p.relative_to(results)) if p.is_relative_to(results) else str(p.relative_to(workdir / "results")): p
            for p in sorted((workdir / "results").glob("**/*.parquet"))}


def test_slurm_run_writes_the_same_parquet_as_a_local_run(studies):
    slurm, local, *_ = studies
    a, b = _parquet(slurm), _parquet(local)
    assert a.keys() == b.keys() and any(k.startswith("_shared/runs/") for k in a) and "runs/store.parquet" in a
    for name in a:
        fa, fb = read_parquet(a[name]), read_parquet(b[name])
        if name.startswith("analysis/") and "basis" in fa.columns:  # the time basis rests on wall time
            fa, fb = (f[f["basis"] != "time"].reset_index(drop=True) for f in (fa, fb))
        keep = [c for c in fa.columns if c not in WALL_TIME and not c.startswith("share_")
                and c not in ("select", "generate", "credit", "update", "sync", "total", "seconds_per_iteration")]
        if name.startswith(("analysis/stages", "analysis/budget_share", "analysis/extrapolation")):
            continue  # stage seconds, and shares of the time axis
        pd.testing.assert_frame_equal(fa[keep], fb[keep], check_exact=True, obj=name)


def test_train_jobs_run_on_the_gpu_partition_and_the_rest_on_the_cpu_one(studies):
    slurm, *_ = studies
    for rule, partition in (("prepare_data", "cpu"), ("warm_start", "cpu"), ("calibrate", "gpu"), ("train", "gpu")):
        jobs = _jobs(slurm, rule)
        assert jobs and {_sacct(job)["partition"] for job in jobs} == {partition}, rule
    for rule in ("drift", "contrasts", "figures", "tables", "prereg_lock"):
        assert not _jobs(slurm, rule)  # run in the submitting Snakemake


def _assert_resumed(slurm: Path, arm: str, job: str, signum: str = "SIGUSR1") -> Path:
    """`job`, the run's first, checkpointed on `signum` past where it started and requeued itself; SLURM ran it
    again under its id (SLURM_RESTART_COUNT 1), which finished the run from that checkpoint, and no Snakemake retry
    was spent. Returns the run's folder."""
    run = slurm / "results" / "slurm" / "runs" / arm / "seed1"
    attempts = json.loads((run / "run.json").read_text())["attempts"]
    assert [a["slurm_job_id"] for a in attempts] == [job, job] and [a["slurm_restarts"] for a in attempts] == [0, 1]
    assert attempts[0]["outcome"] == "interrupted" and attempts[0]["requeued"] is True
    assert attempts[0]["signal"] == signum and attempts[-1]["outcome"] == "finished"
    assert attempts[1]["resumed_at"] == attempts[0]["iterations"] > 0
    assert [r["state"] for r in _runs(job)] == ["REQUEUED", "COMPLETED"]
    return run


def test_a_signalled_job_checkpoints_and_a_new_job_resumes_it(studies):
    slurm, _, signalled, _ = studies
    preempted = signalled[PREEMPTED]
    run = _assert_resumed(slurm, PREEMPTED, preempted)
    log = (run / "train.log").read_text()
    assert f"attempt 1 (SLURM job {preempted}) on" in log and "interrupted by SIGUSR1 after" in log
    assert f"SLURM job {preempted} requeued" in log and f"attempt 2 (SLURM job {preempted}, requeued 1x) on" in log
    assert not (run / "checkpoints").exists()  # gone once Snakemake had the outputs


def test_a_job_near_its_time_limit_checkpoints_and_a_new_job_resumes_it(studies):
    slurm, _, signalled, _ = studies
    _assert_resumed(slurm, LIMITED, signalled[LIMITED])


def test_a_job_preempted_by_a_higher_partition_checkpoints_in_its_grace_time_and_a_new_job_resumes_it(studies):
    slurm, _, signalled, urgent = studies
    outranked = signalled[OUTRANKED]
    run = _assert_resumed(slurm, OUTRANKED, outranked, "SIGTERM")  # requeued by itself, within its grace time
    log = (run / "train.log").read_text()
    assert f"attempt 1 (SLURM job {outranked}) on" in log and "interrupted by SIGTERM after" in log
    urgent, first, last = _sacct(urgent), *(_runs(outranked)[i] for i in (0, -1))
    assert urgent["state"] == "COMPLETED" and first["end"] <= urgent["start"] <= last["start"]  # the GPU, once freed


def test_a_finished_study_schedules_nothing(studies):
    slurm, *_ = studies
    done = snakemake(slurm, "-n", "--profile", "slurm", timeout=300)
    assert done.returncode == 0 and "Nothing to be done" in done.stdout + done.stderr


# A run longer than five job lengths (issue 34). Train jobs of 3 minutes, the shortest that the signal's lead allows
# (120 s: 90 s + the default checkpoint_seconds, 30; SLURM may signal up to 60 s earlier), so that SLURM itself
# signals each job some 30-60 s after it starts. How far a job gets in that time depends on the machine: so that
# the run needs five job lengths on any machine, each of the first HELD jobs is held (SIGSTOP) once it checkpointed
# past where it started, until SLURM's own signal reaches it; an evaluation (and checkpoint) every B/32 tokens.
# The fifth job (or a sixth, on a busy machine) trains the rest. Some 60 s per job length on the test cluster (the
# signal 30-45 s after a start, the next run 16 s after an end): 6 min here at load 5-6. `retries: 2` (the
# profile's) would have let it run three job lengths.
LONG_RUNTIME, HELD = 3, 4
LONG = {**SMALL_STUDY, "study": "requeue", "seeds": [1], "arms": {"outcome": {}}, "budget": {"tokens": 60000},
        "evaluation": {**SMALL_STUDY["evaluation"], "per_budget": 32},
        "resources": {"train": {"gpu": 1, "mem_mb": 1000, "cpus_per_gpu": 1, "runtime": LONG_RUNTIME},
                      "cpu": {"mem_mb": 1000}}}


def _attempts(run: Path) -> list[dict]:
    path = run / "checkpoints" / "attempts.json"
    try:
        return json.loads(path.read_text())["attempts"]
    except (OSError, ValueError):
        return []


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    """(SLURM workdir, local workdir, the train job's id, the comments squeue showed for it): one run trained to
    its manifest through `--profile slurm` in one Snakemake command, and locally."""
    slurm, local = tmp_path_factory.mktemp("long-slurm"), tmp_path_factory.mktemp("long-local")
    for workdir in (slurm, local):
        (workdir / "study.yaml").write_text(yaml.safe_dump(LONG))
    cfg = study_files.load(slurm / "study.yaml")
    target, run = str(layout.run_dir(cfg, "outcome", 1) / "manifest.json"), slurm / layout.run_dir(cfg, "outcome", 1)
    started = time.time()
    on_slurm = _snakemake(slurm, "--profile", "slurm", target, "--slurm-init-seconds-before-status-checks", "2",
                          "--seconds-between-status-checks", "2")
    at_home = _snakemake(local, "--cores", "1", target)
    comments, held = {}, {}  # held: attempt number -> its trainer, stopped until SLURM's signal is pending
    while on_slurm.poll() is None:
        history = _attempts(run)
        if history and history[-1]["ended"] is None and len(history) <= HELD and len(history) not in held:
            past = (history[-2]["iterations"] if len(history) > 1 else 0)
            if (requeue.newest_checkpoint(run / "checkpoints") or 0) > past:
                trainer = held[len(history)] = _trainer(history[-1]["slurm_job_id"])
                trainer.suspend()
                while trainer.status() != psutil.STATUS_STOPPED:  # else it would pass for resumed by SLURM below
                    time.sleep(0.01)
        for attempt, trainer in held.items():
            if trainer is not None and (_resumed_by_slurm(trainer) or _pending(trainer, signal.SIGUSR1)):
                with contextlib.suppress(psutil.NoSuchProcess):
                    trainer.resume()
                held[attempt] = None  # released: SLURM's signal reached it
        for line in subprocess.run(["squeue", "-h", "-o", "%i %k"], capture_output=True, text=True).stdout.splitlines():
            job, _, comment = line.partition(" ")
            comments.setdefault(job, set()).add(comment)
        assert time.time() < started + 900, _queue() + (slurm / "snakemake.out").read_text()[-3000:]
        time.sleep(0.2)
    assert on_slurm.returncode == 0, (slurm / "snakemake.out").read_text()[-4000:]
    print(f"long run on SLURM: {time.time() - started:.0f} s, "
          f"{len(json.loads((run / 'run.json').read_text())['attempts'])} job lengths")
    assert at_home.wait(timeout=900) == 0, (local / "snakemake.out").read_text()[-4000:]
    job = _jobs(slurm, f"train/{layout.run_key(cfg, 'outcome', 1)}")
    assert len(job) == 1, job  # one SLURM job, run again and again under its id
    return slurm, local, job[0], comments.get(job[0], set())


def test_a_run_of_five_job_lengths_finishes_in_one_command_requeued_after_each(long_run):
    slurm, local, job, comments = long_run
    cfg = study_files.load(slurm / "study.yaml")
    run = slurm / layout.run_dir(cfg, "outcome", 1)
    attempts = json.loads((run / "run.json").read_text())["attempts"]
    assert len(attempts) >= 5, attempts
    assert {a["slurm_job_id"] for a in attempts} == {job}
    assert [a["slurm_restarts"] for a in attempts] == list(range(len(attempts)))  # SLURM_RESTART_COUNT
    *interrupted, last = attempts
    assert all(a["outcome"] == "interrupted" and a["signal"] == "SIGUSR1" and a["requeued"] for a in interrupted)
    assert all(b["resumed_at"] == a["iterations"] > (a["resumed_at"] or 0) for a, b in zip(attempts, attempts[1:]))
    assert last["outcome"] == "finished" and all(a["checkpoint_seconds"] < 30 for a in attempts)
    # sacct keeps each run of the job, each with the comment it ended with (the trainer's exit 75); the last completed
    runs = _runs(job)
    assert [r["state"] for r in runs] == ["REQUEUED"] * len(interrupted) + ["COMPLETED"]
    assert [r["comment"] for r in runs[:-1]] == [f"requeue.train.outcome.s1: exit 75 after {a['iterations']} "
                                                 f"iterations, requeued" for a in interrupted]
    # squeue names the run: the comment the job gave itself (before it first ran, the executor plugin's)
    assert {c.partition(":")[0] for c in comments} <= {"requeue.train.outcome.s1", f"rule_train_wildcards_{run.name}"}
    assert "requeue.train.outcome.s1" in comments, comments
    a, b = (workdir / layout.run_dir(cfg, "outcome", 1) for workdir in (slurm, local))
    for name in ("iterations", "evals", "samples", "prompts"):
        fa, fb = read_parquet(a / f"{name}.parquet"), read_parquet(b / f"{name}.parquet")
        keep = [c for c in fa.columns if c not in WALL_TIME]
        pd.testing.assert_frame_equal(fa[keep], fb[keep], check_exact=True, obj=name)


def test_each_run_of_a_requeued_job_keeps_its_lines_in_the_slurm_log(long_run):
    slurm, _, job, _ = long_run
    log = next((slurm / ".snakemake" / "slurm_logs").glob(f"rule_train/**/{job}.log")).read_text()
    runs = len(_runs(job))
    for restart in range(runs):  # appended to (--open-mode=append), each run marked by the job as it starts
        assert f"mcgrpo: requeue.train.outcome.s1, SLURM job {job}, Restarts={restart}, on " in log
    assert log.count("Building DAG of jobs") >= runs


# A programme on the cluster (issue 33): config/programmes/tiny-pair.yaml, two tiny studies that share their outcome
# runs on seeds 1 and 2 (8 runs study by study, 6 distinct), submitted with one command, while each study runs alone
# on this machine (--cores 1, a store of its own) beside it. 217 s here (2-core VM, 2026-12-03), the load (uptime)
# rising from 1.6 to 9 with the test's own three Snakemakes and their jobs; 121 s within the whole file (load 3.5).
PAIR = {"tiny-mc": ("outcome", "mc_k2"), "tiny-lr": ("lr_x3",)}  # the arms each study's train jobs are named by


def test_a_programme_trains_each_shared_run_once_in_one_submission_with_the_contrasts_of_its_studies_alone(tmp_path):
    programme = tmp_path / "programme"
    shutil.copytree(ROOT / "config" / "programmes", programme / "programmes")
    started = time.time()
    on_slurm = _snakemake(programme, "--profile", "slurm", "--slurm-init-seconds-before-status-checks", "2",
                          "--seconds-between-status-checks", "2", configfile="programmes/tiny-pair.yaml")
    alone = {}
    for study in PAIR:
        alone[study] = tmp_path / study
        alone[study].mkdir()
        shutil.copy(programme / "programmes" / "tiny-pair" / f"{study.removeprefix('tiny-')}.yaml",
                    alone[study] / "study.yaml")
    at_home = [_snakemake(folder, "--cores", "1") for folder in alone.values()]
    assert on_slurm.wait(timeout=1200) == 0, _queue() + (programme / "snakemake.out").read_text()[-4000:]
    print(f"tiny-pair on SLURM: {time.time() - started:.0f} s; {os.getloadavg()[0]:.1f} load")
    for folder, proc in zip(alone.values(), at_home):
        assert proc.wait(timeout=1200) == 0, (folder / "snakemake.out").read_text()[-4000:]
    # one SLURM job per distinct run, each run once (COMPLETED, never requeued), named by the first study naming it
    jobs = _jobs(programme, "train")
    runs = {job: _runs(job) for job in jobs}
    assert len(jobs) == 6 and all([r["state"] for r in job_runs] == ["COMPLETED"] for job_runs in runs.values()), runs
    assert sorted(job_runs[0]["comment"] for job_runs in runs.values()) == sorted(
        f"{study}.train.{arm}.s{seed}" for study, arms in PAIR.items() for arm in arms for seed in (1, 2))
    results = programme / "results"
    assert len([p for p in (results / "_shared" / "runs").iterdir() if p.is_dir()]) == 6
    verdicts = pd.read_parquet(results / "_programmes" / "tiny-pair" / "verdicts.parquet")
    assert sorted(verdicts["study"]) == sorted(PAIR)
    for study, folder in alone.items():
        assert (results / study / "summary.md").is_file()
        assert_contrasts_as_alone(programme, folder, study)


@restarts_the_cluster
def test_another_clusters_config_is_left_alone():
    """On a machine whose slurm.conf names another cluster, `up` and `down` refuse, touching neither its daemons nor
    its config, and `status` fails, so that these tests skip there."""
    conf = Path("/etc/slurm/slurm.conf")
    ours = conf.read_text()
    site = ours.replace("ClusterName=mcgrpo", "ClusterName=site")
    try:
        conf.write_text(site)
        for verb in ("up", "down"):
            done = subprocess.run([str(CLUSTER), verb], capture_output=True, text=True, timeout=60)
            assert done.returncode == 1 and "another cluster's (ClusterName=site): not touching it" in done.stderr
        assert subprocess.run([str(CLUSTER), "status"]).returncode != 0
        assert conf.read_text() == site
        assert subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True).returncode == 0
    finally:
        conf.write_text(ours)
    assert subprocess.run([str(CLUSTER), "status"]).returncode == 0


@restarts_the_cluster
def test_the_cluster_comes_up_past_a_pid_file_left_from_before_a_reboot():
    """A daemon's pid file that names a live process of another program (as after a reboot, where /run is not a
    tmpfs) does not pass for the daemon: `up` starts it. Near the end of this file: it restarts the cluster."""
    subprocess.run([str(CLUSTER), "down"], check=True, capture_output=True)
    other = subprocess.Popen(["sleep", "300"])
    try:
        Path("/run/slurm/slurmd.pid").write_text(f"{other.pid}\n")
        up = subprocess.run([str(CLUSTER), "up"], capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        assert subprocess.run([str(CLUSTER), "status"]).returncode == 0
        assert int(Path("/run/slurm/slurmd.pid").read_text()) != other.pid
    finally:
        other.kill()


@restarts_the_cluster
def test_the_cluster_comes_up_without_the_jobs_that_ran_before_a_reboot():
    """A job that held the GPU when the machine went down (every daemon and process killed at once) does not come
    back as running and hold it for good: `up` starts a cluster with no jobs, and a GPU job runs at once. Last in
    this file: it kills the cluster and brings it up again."""
    gpu_job = ["sbatch", "--parsable", "-o", "/dev/null", "-p", "gpu", "--gpus=1"]
    held = subprocess.run([*gpu_job, "--wrap", "sleep 600"], check=True, capture_output=True, text=True).stdout.strip()
    try:
        deadline = time.time() + 60
        while subprocess.run(["squeue", "-h", "-j", held, "-o", "%T"],
                             capture_output=True, text=True).stdout.strip() != "RUNNING":
            assert time.time() < deadline, _queue()
            time.sleep(0.5)
        # As a power cut would, but only what this checkout's cluster.sh started and the held job's own processes
        # (its step daemon, its script, its `sleep`): never a process of the same name that is someone else's.
        daemons = [int(pid) for name, pid in map(str.split, CLUSTER_PIDS.read_text().splitlines())
                   if name in ("slurmctld", "slurmd", "slurmdbd")]
        job = _processes(held)
        while not any(proc.name() == "sleep" for proc in job):  # RUNNING comes before the step spawns its script
            assert time.time() < deadline, _queue()
            time.sleep(0.2)
            job = _processes(held)
        steps = {p for proc in job for p in proc.parents() if p.name() == "slurmstepd"}
        for proc in [*map(psutil.Process, daemons), *steps, *job]:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        up = subprocess.run([str(CLUSTER), "up"], capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        assert held not in _queue().split(), _queue()
        ran = subprocess.run([*gpu_job, "--wait", "--time=1", "--wrap", "true"], capture_output=True, text=True,
                             timeout=120)
        assert ran.returncode == 0, ran.stderr + _queue()
    finally:
        subprocess.run(["scancel", "--name=wrap"])
