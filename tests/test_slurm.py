"""A small study through `snakemake --profile slurm` on a real SLURM cluster (tests/slurm/cluster.sh up), against the
same study run locally: identical Parquet (wall-time columns aside). One training job is signalled with
`scancel --signal=USR1`; another has its time limit cut short while it trains, so that SLURM itself sends the
train rule's `--signal=USR1@<lead>`; a third is preempted by a job of a higher partition, so that SLURM sends it
SIGTERM and a grace time. Skipped where no cluster is up; `make test-slurm` brings one up and runs it.
"""

from __future__ import annotations

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

from conftest import CLUSTER_PIDS, ROOT, SMALL_STUDY, SNAKEMAKE_ENV, own_cluster, snakemake, snakemake_command
from mcgrpo import studies as study_files
from mcgrpo.core import layout
from mcgrpo.core.store import read_parquet

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
# jobs ask for 50 minutes, so the signal leads the limit by 5 minutes (the profile's rule).
STUDY = {**SMALL_STUDY, "study": "slurm", "seeds": [1], "budget": {"tokens": 80000},
         "arms": {**SMALL_STUDY["arms"], "mc_k3": {"credit": {"monte_carlo": {"k": 3}}}},
         "resources": {"train": {"gpu": 1, "mem_mb": 1000, "cpus_per_gpu": 1, "runtime": 50}, "cpu": {"mem_mb": 1000}}}
# scancel --signal=USR1; a time limit cut to 2-3 minutes from now; outranked by a job of the `urgent` partition
PREEMPTED, LIMITED, OUTRANKED = "mc_k2", "outcome", "mc_k3"
SIGNALLED = {PREEMPTED, LIMITED, OUTRANKED}
WALL_TIME = {*(f"{clock}_{stage}" for clock in ("t", "cpu") for stage in ("select", "generate", "credit", "update", "sync")),
             "train_seconds", "train_cpu_seconds", "eval_seconds"}  # both clocks of the training stages


def _snakemake(workdir: Path, *args) -> subprocess.Popen:
    return subprocess.Popen(snakemake_command(workdir, *args), cwd=ROOT, env=SNAKEMAKE_ENV,
                            stdout=open(workdir / "snakemake.out", "w"), stderr=subprocess.STDOUT, text=True)


def _jobs(workdir: Path, rule: str) -> list[str]:
    """SLURM job ids of `rule`, oldest first, from the plugin's logs (kept: slurm-keep-successful-logs)."""
    logs = (workdir / ".snakemake" / "slurm_logs").glob(f"rule_{rule}/**/*.log")
    return sorted((p.stem for p in logs), key=int)


def _queue() -> str:
    """The cluster's queue with each pending job's reason: what a run that stalls waits on."""
    return subprocess.run(["squeue", "-o", "%i %P %j %T %R"], capture_output=True, text=True).stdout


def _sacct(job: str) -> dict:
    line = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "Partition,State,ExitCode,Start,End"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return dict(zip(("partition", "state", "exit", "start", "end"), line.split("|")))  # ISO times sort as strings


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
    """Leave the job 2-3 minutes (limits are whole minutes): less than the 5-minute lead, so slurmctld sends the
    signal at its next time-limit check, as it would near the end of a real limit."""
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
            # SIGTERM reaches the trainer from the job step's Snakemake (rules/common.smk), which alone SLURM signals
            if _pending(trainer, signal.SIGTERM if arm == OUTRANKED else signal.SIGUSR1) or _resumed_by_slurm(trainer):
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
    """`job`, the run's first, checkpointed on `signum` and exited 75 (FAILED, not TIMEOUT nor PREEMPTED); a later
    job finished the run from that checkpoint. Returns the run's folder."""
    run = slurm / "results" / "slurm" / "runs" / arm / "seed1"
    attempts = json.loads((run / "run.json").read_text())["attempts"]
    assert attempts[0]["slurm_job_id"] == job and attempts[0]["outcome"] == "interrupted"
    assert attempts[0]["signal"] == signum and attempts[-1]["outcome"] == "finished"
    assert attempts[1]["resumed_at"] == attempts[0]["iterations"] > 0
    assert _sacct(job)["state"] == "FAILED"
    return run


def test_a_signalled_job_checkpoints_and_a_new_job_resumes_it(studies):
    slurm, _, signalled, _ = studies
    preempted = signalled[PREEMPTED]
    run = _assert_resumed(slurm, PREEMPTED, preempted)
    attempts = json.loads((run / "run.json").read_text())["attempts"]
    jobs = [a["slurm_job_id"] for a in attempts]
    assert len(set(jobs)) == len(jobs)  # every retry is a job of its own, not a restart in the dying one
    log = (run / "train.log").read_text()
    assert f"attempt 1 (SLURM job {preempted}) on" in log and "interrupted by SIGUSR1 after" in log
    assert not (run / "checkpoints").exists()  # gone once Snakemake had the outputs


def test_a_job_near_its_time_limit_checkpoints_and_a_new_job_resumes_it(studies):
    slurm, _, signalled, _ = studies
    _assert_resumed(slurm, LIMITED, signalled[LIMITED])


def test_a_job_preempted_by_a_higher_partition_checkpoints_in_its_grace_time_and_a_new_job_resumes_it(studies):
    slurm, _, signalled, urgent = studies
    outranked = signalled[OUTRANKED]
    run = _assert_resumed(slurm, OUTRANKED, outranked, "SIGTERM")
    attempts = json.loads((run / "run.json").read_text())["attempts"]
    assert len({a["slurm_job_id"] for a in attempts}) == len(attempts)  # ended in its grace time: not requeued
    log = (run / "train.log").read_text()
    assert f"attempt 1 (SLURM job {outranked}) on" in log and "interrupted by SIGTERM after" in log
    urgent, outranked = _sacct(urgent), _sacct(outranked)
    assert urgent["state"] == "COMPLETED" and urgent["start"] >= outranked["end"]  # the GPU, once freed


def test_a_finished_study_schedules_nothing(studies):
    slurm, *_ = studies
    done = snakemake(slurm, "-n", "--profile", "slurm", timeout=300)
    assert done.returncode == 0 and "Nothing to be done" in done.stdout + done.stderr


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
