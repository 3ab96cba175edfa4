"""A failed job's reason on the terminal (issues 47.6, 48.6, 49.3): real Snakemake runs where a job fails, and the
log-tail helper of mcgrpo.core.joblog on the logs a job can leave."""

from __future__ import annotations

import copy
import os
import threading

import yaml

from conftest import ROOT, SMALL_STUDY, snakemake
from mcgrpo import studies
from mcgrpo.core import joblog, layout
from mcgrpo.core.config import runs as study_runs

RUN_FILES = ("iterations.parquet", "evals.parquet", "samples.parquet", "prompts.parquet", "run.json",
             "alignment.parquet", "manifest.json")


def _damaged_store(workdir):
    """SMALL_STUDY's links as an analysis-only run reads them, every file there damaged (no training needed)."""
    (workdir / "study.yaml").write_text(yaml.safe_dump(SMALL_STUDY))
    study = workdir / "results" / "mini"
    for arm, seed in study_runs(studies.validate(copy.deepcopy(SMALL_STUDY))):
        folder = layout.study_run(study, arm, seed)
        folder.mkdir(parents=True)
        for name in RUN_FILES:
            (folder / name).write_text("damaged\n")
    (study / "runs" / "store.parquet").write_text("damaged\n")
    (study / "calibration").mkdir()
    (study / "calibration" / "budget.parquet").write_text("damaged\n")
    return study / "logs"


def _no_command(terminal: str) -> None:
    assert "CalledProcessError" not in terminal and "--config-json" not in terminal and "--task-json" not in terminal
    assert "Command '" not in terminal and "check log file(s)" not in terminal, terminal


def test_make_analysis_on_a_damaged_store_names_each_failed_rule_its_log_and_its_reason(tmp_path):
    """`make analysis`'s flags (--quiet=rules) with --keep-going, as the SLURM profiles run: each failed rule by its
    own name and file (not rules/drift.smk, where the shell command of every `use rule drift as` rule is), its log's
    path and the mcgrpo error line in that log, no shell command; at the end, one line per failed job."""
    logs = _damaged_store(tmp_path)
    targets = [f"results/mini/analysis/{name}.parquet" for name in ("contrasts", "stages")]
    done = snakemake(tmp_path, "--cores", "2", "--quiet=rules", "--keep-going", *targets, "--config",
                     "analysis_only=True", timeout=300)
    terminal = done.stdout + done.stderr
    assert done.returncode != 0
    for rule in ("contrasts", "breakdown"):
        log = logs / f"{rule}.log"
        last = log.read_text().splitlines()[-1]
        assert last.startswith(f"mcgrpo {rule}: error: "), last
        assert f"Error in rule {rule} (rules/contrasts.smk:" in terminal, terminal
        assert f"    log: results/mini/logs/{rule}.log, which ends:\n        {last}\n" in terminal, terminal
        assert f"    {rule} (results/mini/logs/{rule}.log): {last}" in terminal.split("2 job(s) failed:")[1], terminal
    assert "drift" not in terminal, terminal
    _no_command(terminal)


def test_plain_snakemake_shows_a_data_jobs_error_with_its_file_and_line(tmp_path):
    """Plain `snakemake` (no --quiet), a failure only the job detects (a line of the pool's file that is no JSON):
    the job's block keeps its file lists, and its error block is the reason instead of the command."""
    bad = tmp_path / "pool.jsonl"
    bad.write_text('{"question": "1 + 1?", "answer": "#### 2"}\n{not json\n')
    study = copy.deepcopy(SMALL_STUDY)
    study["task"] = {"name": "gsm8k", "pool": {"path": str(bad), "size": 8}, "eval_sets": {"heldout": {"size": 2}}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    done = snakemake(tmp_path, "--cores", "1", "prepare_data", timeout=300)
    terminal = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Error in rule prepare_data (rules/data.smk:" in terminal, terminal
    assert f"mcgrpo prepare-data: error: {bad}:2: not valid JSON" in terminal, terminal
    assert "    log: results/_shared/logs/data-" in terminal and "localrule prepare_data:" in terminal, terminal
    assert "job(s) failed:" not in terminal  # one failure, no --keep-going: no recap of what is just above
    _no_command(terminal)


def test_the_tail_is_the_error_line_and_what_follows_it(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join(f"mcgrpo train: iteration {i}\n" for i in range(100))
                   + "mcgrpo train: error: credit rule 'hit' (my_pkg:Hit), iteration 3: credit holds NaN\n"
                   + "not retried: the failure above is not a preemption\n\n")
    assert joblog.tail(log) == ["mcgrpo train: error: credit rule 'hit' (my_pkg:Hit), iteration 3: credit holds NaN",
                                "not retried: the failure above is not a preemption"]
    failures = joblog.Failures()
    failures.add("train", [str(log)])
    failures.add("train", [str(log)])  # its retry, which fails at once: one job
    assert failures.recap().splitlines() == [
        "1 job(s) failed:", f"    train ({log}): mcgrpo train: error: credit rule 'hit' (my_pkg:Hit), iteration 3: "
                            "credit holds NaN"]


def test_a_bugs_tail_is_the_end_of_its_traceback_each_line_bounded(tmp_path):
    log = tmp_path / "drift.log"
    frames = "".join(f'  File "x.py", line {i}, in f\n    f()\n' for i in range(50))
    log.write_text(f"Traceback (most recent call last):\n{frames}ValueError: {'x' * 5000}\n")
    tail = joblog.tail(log)
    assert len(tail) == joblog.TAIL_LINES and tail[-1].startswith("ValueError: xxx") and tail[-1].endswith(" [...]")
    assert len(tail[-1]) <= joblog.LINE_CHARS + 6 and tail[-2] == "    f()"


def test_a_log_that_is_missing_empty_or_a_fifo_is_described_without_blocking(tmp_path):
    (tmp_path / "empty.log").write_text("\n\n")
    os.mkfifo(tmp_path / "fifo.log")
    found = {}
    worker = threading.Thread(target=lambda: found.update(fifo=joblog.tail(tmp_path / "fifo.log")), daemon=True)
    worker.start()
    worker.join(10)
    assert found == {"fifo": ["(the log is not a regular file)"]}
    assert joblog.tail(tmp_path / "empty.log") == ["(the log is empty)"]
    assert joblog.tail(tmp_path / "absent.log") == ["(no log was written: the job failed before its command started)"]


def test_a_slurm_jobs_reason_carries_the_executors_message_and_the_slurm_log(tmp_path):
    """The SLURM executor reports a failed job with its state and the SLURM log after the rule's own log."""
    log = tmp_path / "train.log"
    log.write_text("mcgrpo train: iteration 7 of 40\n")
    block = joblog.reason("train", [str(log), ".snakemake/slurm_logs/rule_train/12.log"],
                          "SLURM-job '12' failed, SLURM status is: 'OUT_OF_MEMORY'", "rules/train.smk:3")
    assert block.splitlines() == ["Error in rule train (rules/train.smk:3):",
                                  "    SLURM-job '12' failed, SLURM status is: 'OUT_OF_MEMORY'",
                                  f"    log: {log}, which ends:", "        mcgrpo train: iteration 7 of 40",
                                  "    also: .snakemake/slurm_logs/rule_train/12.log"]


def test_no_profile_prints_every_jobs_shell_command():
    """printshellcmds would put each job's 2-5 KB command on the terminal (and in its SLURM log) as it starts."""
    for profile in (ROOT / "profiles").glob("*/config.yaml"):
        assert not yaml.safe_load(profile.read_text()).get("printshellcmds"), profile
