"""HPC: the SLURM profile from the repo root, the sbatch command of a train job, pinned container images."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml

from conftest import ROOT


def _dry_run(*args) -> str:
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", *args], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def _train_resources(output: str) -> dict[str, str]:
    block = output[output.index("rule train:"):]
    line = next(l for l in block.splitlines() if l.strip().startswith("resources:"))
    return dict(kv.split("=", 1) for kv in line.split(":", 1)[1].strip().split(", "))


def test_slurm_profile_is_found_from_the_repo_root_and_sets_train_resources():
    pytest.importorskip("snakemake_executor_plugin_slurm")
    resources = _train_resources(_dry_run("--profile", "slurm", "--forceall"))
    assert resources["slurm_extra"] == "--signal=USR1@300"
    assert {"gpu", "cpus_per_gpu", "mem_mb", "runtime"} <= set(resources)


def test_sbatch_command_of_a_train_job_asks_for_gpus_memory_and_time(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string
    study = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    study.update(study="gpu", resources={"train": {"gpu": 1, "mem_mb": 64000, "runtime": 240}})
    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(study))
    res = _train_resources(_dry_run("--profile", "slurm", "--configfile", str(tmp_path / "gpu.yaml")))
    resources = SimpleNamespace(**{k: (int(v) if v.isdigit() else v) for k, v in res.items()})
    resources.get = lambda key, default=None: getattr(resources, key, default)
    job = SimpleNamespace(resources=resources, threads=1, is_group=lambda: False, name="train")
    params = {"run_uuid": "u", "slurm_logfile": "log", "comment_str": "train", "account": "-A lab",
              "partition": "-p gpu", "workdir": "."}
    call = get_submit_command(job, params) + set_gres_string(job)
    assert " -t 240" in call and "--mem 64000" in call and "--gpus=1" in call
    assert "--cpus-per-gpu=8" in call and "--signal=USR1@300" in call


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
