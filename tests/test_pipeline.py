"""One miniature study end to end through Snakemake, checking every Parquet contract it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, SMALL_STUDY
from mcgrpo.store import COLUMNS, parquet_metadata, read_contract

pytestmark = pytest.mark.slow


def snakemake(workdir, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(workdir / "study.yaml"), "--cores", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("study")
    study = {**SMALL_STUDY, "budget": {"tokens": None, "multiplier": 3, "round_to": 100}}
    (workdir / "study.yaml").write_text(yaml.safe_dump(study))
    done = snakemake(workdir)
    assert done.returncode == 0, done.stderr[-4000:]
    return workdir / "results" / "mini"


def test_every_stage_writes_its_contract(finished_study):
    r = finished_study
    for path in (r / "data/pool.parquet", r / "data/eval_heldout.parquet"):
        assert len(read_contract(path, "problems")) > 0
    budget = read_contract(r / "calibration/budget.parquet", "budget")
    assert budget["iteration"].tolist() == [0, 1, 2] and budget["B"].nunique() == 1
    B = int(budget["B"].iloc[0])
    assert B % 100 == 0 and B >= 3 * budget["tokens_generated"].mean()
    for arm in ("outcome", "mc_k2"):
        for seed in (1, 2):
            run = r / "runs" / arm / f"seed{seed}"
            frames = {k: read_contract(run / f"{k}.parquet", k) for k in ("iterations", "evals", "samples", "prompts")}
            assert frames["iterations"]["tokens_total"].iloc[-1] >= B > frames["iterations"]["tokens_total"].iloc[-2]
            assert frames["evals"]["tokens_total"].iloc[0] == 0 and frames["evals"]["tokens_total"].iloc[-1] >= B
            assert len(frames["samples"]) == len(frames["evals"]) * 6 * 2
            meta = parquet_metadata(run / "evals.parquet")
            assert meta["schema_version"] == "1" and len(meta["config_hash"]) == 64 and "mcgrpo_version" in meta
            info = json.loads((run / "run.json").read_text())
            assert info["finished"] and info["config"]["arm"] == arm and info["B"] == B
    for kind in ("drift", "contrasts", "paired"):
        assert len(read_contract(r / "analysis" / f"{kind}.parquet", kind)) > 0
    contrasts = read_contract(r / "analysis/contrasts.parquet", "contrasts")
    assert set(contrasts["basis"]) == {"tokens", "updates", "time"}
    assert set(contrasts["contrast"]) == {"mc_k2-vs-outcome"} and (contrasts["n"] == 2).all()
    for name in ("figures/accuracy_vs_tokens.png", "figures/accuracy_vs_time.png",
                 "tables/contrasts.md", "tables/contrasts.csv", "tables/drift.md"):
        assert (r / name).stat().st_size > 0


def test_arms_of_a_seed_share_their_first_evaluation(finished_study):
    runs = finished_study / "runs"
    a = read_contract(runs / "outcome/seed1/samples.parquet", "samples")
    b = read_contract(runs / "mc_k2/seed1/samples.parquet", "samples")
    assert a[a.eval_index == 0].reset_index(drop=True).equals(b[b.eval_index == 0].reset_index(drop=True))


def test_a_finished_study_has_nothing_left_to_do(finished_study):
    workdir = finished_study.parent.parent
    dry = snakemake(workdir, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr


def test_a_bad_config_fails_before_any_job_naming_the_key(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**SMALL_STUDY, "recipe": {"group_sise": 4}}))
    done = snakemake(tmp_path, "-n")
    assert done.returncode != 0
    assert "config key recipe: unknown key(s) 'group_sise'" in done.stdout + done.stderr
    assert not (tmp_path / "results").exists()
