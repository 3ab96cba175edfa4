"""Progress is not failure: which interrupted attempts requeue their SLURM job (mcgrpo.train.requeue), the bound, the
restart count, and the signal lead a train job's runtime must leave room for. The same on a real cluster:
tests/test_slurm.py."""

from __future__ import annotations

import copy
import json
import subprocess
from types import SimpleNamespace

import pytest
import yaml

from conftest import SMALL_STUDY, edited_study, snakemake
from mcgrpo import studies
from mcgrpo.core import config as study_config
from mcgrpo.core.errors import ConfigError
from mcgrpo.train import attempts, requeue
from mcgrpo.core.store import write_json


class Scontrol:
    """A stand-in for subprocess.run of `scontrol`: records each call, answers with `status` and `stdout`."""

    def __init__(self, status: int = 0, stdout: str = "", stderr: str = ""):
        self.calls, self.status, self.stdout, self.stderr = [], status, stdout, stderr

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        return SimpleNamespace(returncode=self.status, stdout=self.stdout, stderr=self.stderr)


def _checkpointed(directory, *iterations):
    for i in iterations:
        write_json({"file": f"ckpt-{i:08d}.pt", "sha256": "x", "iteration": i, "config_hash": "h"},
                   directory / f"ckpt-{i:08d}.json")


@pytest.mark.parametrize("resumed_at, checkpointed, requeued", [
    (None, 12, True),    # the first attempt, checkpointed at 12
    (12, 30, True),      # resumed at 12, checkpointed past it
    (12, 12, False),     # signalled before its first iteration: no progress
    (None, None, False),  # no checkpoint at all
    (0, 0, False),
])
def test_only_an_attempt_that_checkpointed_past_its_start_requeues(resumed_at, checkpointed, requeued):
    decision = requeue.decide(resumed_at, checkpointed, restarts=3, job_id="812")
    assert decision.requeue is requeued
    assert ("SLURM job 812 requeued" in decision.why) is requeued
    assert ("a Snakemake retry resumes it" in decision.why) is not requeued


def test_requeues_are_bounded_even_with_progress():
    assert requeue.decide(10, 11, requeue.MAX_REQUEUES - 1, "812").requeue
    bounded = requeue.decide(10, 11, requeue.MAX_REQUEUES, "812")
    assert not bounded.requeue and f"at most {requeue.MAX_REQUEUES}" in bounded.why


def test_outside_slurm_nothing_is_requeued():
    assert not requeue.decide(None, 40, 0, None).requeue


def test_the_newest_intact_manifest_says_how_far_the_run_checkpointed(tmp_path):
    assert requeue.newest_checkpoint(tmp_path) is None
    _checkpointed(tmp_path, 4, 9)
    (tmp_path / "ckpt-00000020.json").write_text("{trunc")  # a manifest cut short vouches for nothing
    assert requeue.newest_checkpoint(tmp_path) == 9


def test_an_attempt_with_progress_is_recorded_then_requeues_its_job(tmp_path, capsys):
    _checkpointed(tmp_path, 8, 16)
    environ = {"SLURM_JOB_ID": "812", "SLURM_RESTART_COUNT": "2"}
    history = [{"attempt": 1, "started": "t", "host": "n1", "slurm_job_id": "812", "slurm_restarts": 2,
                "outcome": None}]
    scontrol = Scontrol()
    decision = requeue.end_interrupted(tmp_path, history, "s.train.a.s1", environ, scontrol, signal="SIGUSR1",
                                       resumed_at=8, iterations=16, checkpoint_seconds=0.25)
    assert decision.requeue and scontrol.calls == [  # sacct keeps each run's comment: the exit 75 is seen there
        ["scontrol", "update", "JobId=812", "Comment=s.train.a.s1: exit 75 after 16 iterations, requeued"],
        ["scontrol", "requeue", "812"]]
    recorded = json.loads((tmp_path / attempts.FILE).read_text())["attempts"][-1]
    assert recorded["requeued"] is True and recorded["checkpoint_seconds"] == 0.25
    line = capsys.readouterr().err
    assert "interrupted by SIGUSR1 after 16 iterations; checkpoint written (longest checkpoint 0.2 s)" in line
    assert "progress (8 -> 16 iterations): SLURM job 812 requeued" in line


def test_an_attempt_without_progress_spends_a_retry(tmp_path):
    _checkpointed(tmp_path, 16)
    history = [{"attempt": 2, "started": "t", "host": "n1", "slurm_job_id": "812", "outcome": None}]
    scontrol = Scontrol()
    decision = requeue.end_interrupted(tmp_path, history, "s.train.a.s1",
                                       {"SLURM_JOB_ID": "812", "SLURM_RESTART_COUNT": "1"}, scontrol,
                                       signal="SIGUSR1", resumed_at=16, iterations=16, checkpoint_seconds=None)
    # exit 75 alone: the job fails, Snakemake retries
    assert not decision.requeue and [argv[1] for argv in scontrol.calls] == ["update"]
    assert attempts.describe(history[-1]).endswith("exit 75, a Snakemake retry resumes it")


def test_a_refused_requeue_falls_back_to_a_retry(tmp_path):
    _checkpointed(tmp_path, 5)
    history = [{"attempt": 1, "started": "t", "host": "n1", "slurm_job_id": "812", "outcome": None}]
    scontrol = Scontrol(status=1, stderr="scontrol: error: Requested operation is presently disabled")
    decision = requeue.end_interrupted(tmp_path, history, "s.train.a.s1",
                                       {"SLURM_JOB_ID": "812", "SLURM_RESTART_COUNT": "0"}, scontrol,
                                       signal="SIGTERM", resumed_at=None, iterations=5, checkpoint_seconds=0.1)
    assert not decision.requeue and "presently disabled" in decision.why
    assert json.loads((tmp_path / attempts.FILE).read_text())["attempts"][-1]["requeued"] is False


def test_the_restart_count_comes_from_slurm(monkeypatch):
    assert attempts.restarts({"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "3"}, Scontrol()) == 3
    # where the variable does not reach the step, the controller says: `scontrol show job`
    shown = Scontrol(stdout="JobId=7 JobName=u\n   Requeue=1 Restarts=4 BatchFlag=1 Reboot=0 ExitCode=0:0\n")
    assert attempts.restarts({"SLURM_JOB_ID": "7"}, shown) == 4 and shown.calls == [["scontrol", "show", "job", "7"]]
    assert attempts.restarts({}, Scontrol()) == 0  # not a SLURM job

    def missing(argv, **kwargs):
        raise FileNotFoundError(argv[0])

    assert attempts.restarts({"SLURM_JOB_ID": "7"}, missing) == 0


def test_the_signal_leads_by_90_s_and_a_checkpoint_whatever_the_runtime():
    for runtime in (3, 35, 2880):
        cfg = studies.validate(edited_study(resources={"train": {"runtime": runtime, "checkpoint_seconds": 12.5}}))
        assert study_config.signal_lead(cfg) == 103 and study_config.shortest_runtime(cfg) == 3
    cfg = studies.validate(copy.deepcopy(SMALL_STUDY))
    assert study_config.signal_lead(cfg) == 120  # the default checkpoint_seconds, 30


@pytest.mark.parametrize("train, allowed", [({"runtime": 2}, 3), ({"runtime": 1, "checkpoint_seconds": 0}, 3),
                                            ({"runtime": 3, "checkpoint_seconds": 31}, 4)])
def test_a_runtime_too_short_for_one_checkpoint_is_a_config_error(train, allowed):
    with pytest.raises(ConfigError, match=rf"resources\.train\.runtime: .* allowed: at least {allowed} minutes"):
        studies.validate(edited_study(resources={"train": train}))


def test_snakemake_refuses_a_runtime_too_short_before_any_job(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(edited_study(resources={"train": {"runtime": 1}})))
    done = snakemake(tmp_path, "-n", timeout=300)
    errors = [line for line in done.stderr.splitlines() if "Error" in line or "Traceback" in line]
    assert done.returncode == 2 and len(errors) == 1, done.stderr[-2000:]
    assert errors[0].startswith(f"Error: {tmp_path / 'study.yaml'}:")  # the file and line of the key
    assert "config key resources.train.runtime: 1 minute is too short" in errors[0]
    assert "allowed: at least 3 minutes" in errors[0] and not (tmp_path / "results").exists()


def test_a_train_jobs_sbatch_options_signal_and_append_to_its_log(tmp_path):
    """What the train rule adds to sbatch (slurm_extra), and the comment its job gives itself."""
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(edited_study(resources={"train": {"runtime": 4,
                                                                                          "checkpoint_seconds": 2}})))
    done = snakemake(tmp_path, "-n", "-p", "--forceall", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "slurm_extra=--signal=USR1@92 --open-mode=append" in done.stdout
    assert "slurm_name=mini.train.outcome.s1" in done.stdout and "slurm_name=mini.train.mc_k2.s2" in done.stdout
    assert "scontrol update JobId=$SLURM_JOB_ID Comment=mini.train.outcome.s1 || true" in done.stdout


def test_scontrol_is_never_called_outside_slurm(tmp_path, monkeypatch):
    """A local run (no SLURM_JOB_ID) neither asks the controller nor requeues: no 10-s wait where none answers."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)

    def forbidden(*args, **kwargs):
        raise AssertionError("scontrol called outside SLURM")

    monkeypatch.setattr(subprocess, "run", forbidden)
    history = attempts.start(tmp_path)
    assert history[-1]["slurm_restarts"] == 0
