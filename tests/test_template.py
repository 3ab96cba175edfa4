"""The template project (examples/my-intervention/) as a user takes it: copied, `pip install -e` into a fresh
venv, its own tests, screened, dry-run (the SLURM profile included), one run trained. Nothing is installed
into the test's own environment."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, SMALL_STUDY

pytestmark = pytest.mark.slow


def _run(python: Path, *args, cwd=ROOT, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "workflow"),
           "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(python.parent.parent)}
    done = subprocess.run([str(python), *map(str, args)], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=timeout)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """(the venv's python, the copied template): a fresh venv seeing this environment's packages (torch,
    snakemake) through a .pth file, as --system-site-packages would over a system install (this environment is
    itself a venv, whose packages --system-site-packages would not reach), with the template installed into it,
    editable."""
    root = tmp_path_factory.mktemp("template")
    project = root / "my-intervention"
    shutil.copytree(ROOT / "examples" / "my-intervention", project)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)  # its pip too
    python = root / "venv" / "bin" / "python"
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    Path(purelib, "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "-e", project)
    return python, project


def _small_study(project: Path, results: Path, **changes) -> Path:
    """The template's study in the test suite's small world (a one-layer model, 600 tokens), warm-started long
    enough to answer some problems (an all-wrong batch has no gradient to measure), results elsewhere."""
    cfg = yaml.safe_load((project / "study.yaml").read_text())
    cfg.update({k: SMALL_STUDY[k] for k in ("task", "model", "recipe", "budget", "evaluation")})
    cfg.update(seeds=[1], results_dir=str(results), gradient_tests={"batches": 4, "arms": ["boxed"]}, **changes)
    cfg["model"] = {**cfg["model"], "warm_start": {**cfg["model"]["warm_start"], "steps": 400}}  # some correct
    cfg["arms"]["skip"]["selection"] = {"skip_solved": {"candidates": 4}}
    path = results.parent / "small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_the_template_is_tested_screened_and_dry_run(template, tmp_path):
    python, project = template
    _run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", project / "tests", cwd=project)
    study = _small_study(project, tmp_path / "results")
    # the Snakemake target builds the data and the model, then screens
    out = _run(python, "-m", "snakemake", "screen", "--cores", "1", "--directory", tmp_path, "--config",
               "screen_arm=boxed", "--configfile", study).stdout
    assert "boxed: per update" in out
    done = _run(python, "-m", "mcgrpo", "screen", "--config", study, "--arm", "boxed", "--json", "--out",
                tmp_path / "screened", cwd=tmp_path)
    report = json.loads(done.stdout)
    rules = {r["arm"]: r for r in report["rules"]}
    assert list(rules) == ["outcome", "boxed", "boxed_shuffled"] and rules["outcome"]["per_update"] == 1.0
    # a format bonus is outcome-level: its update lies in V (Proposition 1), as its shuffled control's does
    assert rules["boxed"]["share_outside_v"] < 1e-3 and rules["boxed"]["alignment"] is None
    assert "batch 1" in done.stderr  # progress while it runs
    assert (tmp_path / "screened" / "screen.parquet").exists()
    # the whole study, dry-run on a laptop and with the SLURM profile (the cluster needs only the same venv)
    assert "rule train" in _run(python, "-m", "snakemake", "-n", "--directory", tmp_path, "--configfile", study).stdout
    if _run(python, "-c", "import snakemake_executor_plugin_slurm", check=False).returncode == 0:
        (tmp_path / "hpc").mkdir()
        slurm = _run(python, "-m", "snakemake", "-n", "--directory", tmp_path / "hpc", "--profile", "slurm",
                     "--configfile", project / "study.yaml")
        assert "rule train" in slurm.stdout + slurm.stderr


def test_a_misconfigured_plugin_fails_before_any_job(template, tmp_path):
    python, project = template
    study = _small_study(project, tmp_path / "results",
                         arms={"outcome": {}, "boxed": {"credit": {"boxed_bonus": {"wieght": 0.5}}},
                               "skip": {"selection": {"skip_solved": {}}}})
    done = _run(python, "-m", "snakemake", "-n", "--directory", tmp_path, "--configfile", study, check=False)
    text = done.stdout + done.stderr
    assert done.returncode != 0
    assert "config key arms.boxed.credit.boxed_bonus: unknown option 'wieght' of credit rule 'boxed_bonus'" in text


def test_one_tiny_run_of_the_template_trains(template, tmp_path):
    python, project = template
    study = _small_study(project, tmp_path / "results")
    where = _run(python, "-c", "from mcgrpo import studies; from mcgrpo.core import layout; "
                 f"print(layout.run_dir(studies.load({str(study)!r}), 'boxed', 1))", cwd=tmp_path).stdout.strip()
    _run(python, "-m", "snakemake", f"{where}/run.json", "--cores", "1", "--directory", tmp_path, "--configfile",
         study)
    run = json.loads((tmp_path / where / "run.json").read_text())
    (plugin,) = run["config"]["plugins"]
    assert plugin["name"] == "boxed_bonus" and plugin["distribution"] == "my-intervention"
    assert plugin["version"] == "0.1.0" and len(plugin["source_sha256"]) == 64
    assert run["finished"]
