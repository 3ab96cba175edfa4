"""HPC: the SLURM profile from the repo root, the sbatch command of a train job, pinned container images."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from conftest import ROOT, SMALL_STUDY, snakemake
from mcgrpo import studies
from mcgrpo.core import layout


def _dry_run(workdir, *args) -> str:
    """Dry-run the workflow of the repo root (its profiles, its default study) against an empty `workdir`: what
    the repo's own results/ holds (a `make run` calibrates B and trains shared runs) must not change the DAG."""
    done = snakemake(workdir, "-n", *args, configfile=None, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def _resources(output: str, rule: str = "train") -> dict[str, str]:
    block = output[output.index(f"rule {rule}:"):]
    line = next(l for l in block.splitlines() if l.strip().startswith("resources:"))
    return dict(kv.split("=", 1) for kv in line.split(":", 1)[1].strip().split(", "))


_train_resources = _resources


def test_slurm_profile_sends_gpu_rules_to_the_gpu_partition_and_the_rest_to_the_cpu_one(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    out = _dry_run(tmp_path, "--profile", "slurm", "--forceall")
    train, data = _resources(out), _resources(out, "prepare_data")
    assert train["slurm_partition"] == "gpu" and _resources(out, "calibrate")["slurm_partition"] == "gpu"
    assert data["slurm_partition"] == "cpu" and data["slurm_account"] == train["slurm_account"]
    # The default study's train jobs ask for 35 minutes: the signal leads by a tenth of that, not by 5 minutes.
    assert train["runtime"] == "35" and train["slurm_extra"] == "--signal=USR1@210"
    assert "slurm_extra" not in data  # only the trainer checkpoints on the signal
    assert {"gpu", "cpus_per_gpu", "mem_mb", "runtime"} <= set(train)


def test_overriding_partition_and_account_keeps_the_signal(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    out = _dry_run(tmp_path, "--profile", "slurm", "--forceall", "--default-resources", "slurm_account=lab",
                   "slurm_partition=short", "--set-resources", "train:slurm_partition=a100")
    train = _resources(out)
    assert train["slurm_partition"] == "a100" and train["slurm_account"] == "lab"
    assert train["slurm_extra"] == "--signal=USR1@210"
    assert _resources(out, "prepare_data")["slurm_partition"] == "short"


def test_slurm_cpu_profile_asks_for_no_gpu_on_the_cpu_partition(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    study = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    study.update(study="gpu", resources={"train": {"gpu": 1, "runtime": 240}})
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(study))
    train = _resources(_dry_run(tmp_path, "--profile", "slurm-cpu", "--forceall", "--configfile", str(tmp_path / "gpu.yaml")))
    assert train["gpu"] == "0" and train["slurm_partition"] == "cpu"
    assert train["slurm_extra"] == "--signal=USR1@300"


def test_rules_run_with_the_interpreter_of_the_workflow_where_path_has_no_python(tmp_path):
    """A SLURM job starts with the submitting shell's PATH, which need not hold the venv: no `python` found."""
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(SMALL_STUDY))
    done = snakemake(tmp_path, "prepare_data", "--cores", "1", env={**os.environ, "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / layout.data_dir(studies.validate(copy.deepcopy(SMALL_STUDY))) / "pool.parquet").exists()


def test_the_trainer_is_the_job_steps_process_and_a_retry_appends_to_its_log(tmp_path):
    out = _dry_run(tmp_path, "--forceall", "-p")
    train = next(line.removeprefix("Shell command: ") for line in out.splitlines() if " -m mcgrpo train " in line)
    # after the check that stops a retry of a failure that is not a preemption, the trainer replaces the shell
    assert "; exec $PYTHON -m mcgrpo train " in train and train.count(" -m mcgrpo ") == 1
    assert " >> results/_shared/runs/" in train and "/train.log" in train


def test_sbatch_command_of_a_train_job_asks_for_gpus_memory_and_time(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string
    study = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    study.update(study="gpu", resources={"train": {"gpu": 1, "mem_mb": 64000, "runtime": 240}})
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(study))
    res = _train_resources(_dry_run(tmp_path, "--profile", "slurm", "--configfile", str(tmp_path / "gpu.yaml")))
    resources = SimpleNamespace(**{k: (int(v) if v.isdigit() else v) for k, v in res.items()})
    resources.get = lambda key, default=None: getattr(resources, key, default)
    job = SimpleNamespace(resources=resources, threads=1, is_group=lambda: False, name="train")
    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": "train", "account": "-A lab",
              "partition": "-p gpu", "workdir": "."}
    call = get_submit_command(job, params) + set_gres_string(job)
    assert " -t 240" in call and "--mem 64000" in call and "--gpus=1" in call
    assert "--cpus-per-gpu=8" in call and "--signal=USR1@300" in call


def _submitted_jobs(output: str) -> list[tuple[str, dict[str, str]]]:
    """(rule, resources) of every job a dry-run would submit to SLURM (local rules run in Snakemake itself)."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", output):
        rule = re.match(r"rule (\w+):", block)
        line = next((l for l in block.splitlines() if l.strip().startswith("resources:")), None)
        if rule and line:
            jobs.append((rule.group(1), dict(kv.split("=", 1) for kv in line.split(":", 1)[1].strip().split(", "))))
    return jobs


def _sbatch(rule: str, res: dict[str, str]) -> str:
    """The sbatch line the SLURM executor plugin renders for a job with these resources."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string
    resources = SimpleNamespace(**{k: (int(v) if v.isdigit() else v) for k, v in res.items()})
    resources.get = lambda key, default=None: getattr(resources, key, default)
    job = SimpleNamespace(resources=resources, threads=1, is_group=lambda: False, name=rule)
    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": rule, "workdir": ".",
              "account": f"-A {res['slurm_account']}", "partition": f"-p {res['slurm_partition']}"}
    return get_submit_command(job, params) + set_gres_string(job)


PAPER_STUDY = ROOT / "config" / "studies" / "paper" / "s01_mc_reward_qwen2.5-1.5b.yaml"


@pytest.mark.parametrize("profile", ["slurm", "slurm-cpu"])
def test_every_gpu_rule_of_a_paper_study_asks_the_gpu_partition_for_a_gpu(tmp_path, profile):
    """Each submitted job's sbatch line: the GPU rules (train, calibrate, gradient_tests) on the GPU partition with
    a GPU under `slurm`, on the CPU partition without one under `slurm-cpu`; every other job on the CPU partition
    without a GPU."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    jobs = _submitted_jobs(_dry_run(tmp_path, "--profile", profile, "--forceall", "--configfile", str(PAPER_STUDY)))
    gpu_rules = {"train", "calibrate", "gradient_tests"}
    assert gpu_rules <= {rule for rule, _ in jobs}
    for rule, res in jobs:
        call = _sbatch(rule, res)
        wants_gpu = profile == "slurm" and rule in gpu_rules
        assert (" -p gpu" in call) == wants_gpu and ("--gpus=" in call) == wants_gpu, (rule, call)
        if wants_gpu:
            assert "--gpus=1" in call and "--cpus-per-gpu=8" in call and "--mem 64000" in call, (rule, call)


def test_apptainer_arguments_are_written_in_the_form_snakemake_parses():
    """`--apptainer-args "--nv"` is refused by Snakemake 9 (a separate value starting with "-" reads as an option):
    every command the project shows writes `--apptainer-args="..."`."""
    files = [path for pattern in ("*.md", "docs/**/*.md", "config/**/*.yaml", "profiles/*/config.yaml",
                                  "containers/*/Dockerfile") for path in ROOT.glob(pattern)]
    wrong = [str(path.relative_to(ROOT)) for path in files
             if re.search(r"--(apptainer|singularity)-args +[\"']?-", path.read_text())]
    assert not wrong


DOCKERFILES = sorted((ROOT / "containers").glob("*/Dockerfile"))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_container_images_are_pinned_and_copy_what_exists(dockerfile):
    """The default base is a pinned tag (a site passes its own BASE_IMAGE); the pins: tests/test_containers.py."""
    text = dockerfile.read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.M).group(1)
    assert ":" in base and not base.endswith(":latest"), base
    for source in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for path in source.split():
            assert list(ROOT.glob(path)), path


# Loads the workflow of each study given (Snakemake's API, in a subprocess of its own) and prints, per study, its
# rules that do work and which of them are local rules (`localrules:`): on SLURM the local ones run in the
# submitting Snakemake.
_LOCALRULES = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings
root, workdir, *studies = map(Path, sys.argv[1:])
for study in studies:
    with SnakemakeApi(OutputSettings(quiet=True)) as api:
        workflow = api.workflow(resource_settings=ResourceSettings(), storage_settings=StorageSettings(),
                                config_settings=ConfigSettings(configfiles=[study]), snakefile=root / "Snakefile",
                                workdir=workdir)._workflow
        print(json.dumps({"rules": sorted(r.name for r in workflow.rules if not r.norun),
                          "local": sorted(workflow._localrules)}))
"""
# The rules that take minutes to hours: SLURM jobs of their own. Every other rule takes seconds.
JOBS = {"prepare_data", "warm_start", "calibrate", "train", "gradient_tests", "screen"}


def test_only_the_rules_that_take_minutes_are_slurm_jobs(tmp_path):
    """summary, the analysis rules, the lock, the links, the budget of an equal-iteration study and a model's
    reference: seconds each, run locally under --profile slurm (10-15 s of queueing and polling saved each)."""
    studies_ = [ROOT / "config" / "config.yaml", *(ROOT / "config" / "studies" / name
                                                 for name in ("equal_iteration.yaml", "smollm2-gsm8k.yaml"))]
    done = subprocess.run([sys.executable, "-c", _LOCALRULES, str(ROOT), str(tmp_path), *map(str, studies_)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = set()
    for line in done.stdout.splitlines():
        workflow = json.loads(line)
        remote = set(workflow["rules"]) - set(workflow["local"])
        assert remote <= JOBS, remote - JOBS
        seen |= set(workflow["rules"])
    assert {"summary", "prediction", "alignment", "iteration_budget", "resolve_model", "link_study",
            "prereg_lock", "drift", "tables"} <= seen  # every kind of rule of seconds was looked at
