"""The paper's studies (config/studies/paper/, S1-S35) each build their DAG, with one train job per arm and seed.

All of them are dry-run together (mcgrpo.dryrun: one worker per core); bench/dry_run_studies.py times the same batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from mcgrpo.dryrun import DryRun, _claimed, dry_run

PAPER = ROOT / "config" / "studies" / "paper"
STUDIES = sorted(PAPER.glob("*.yaml"))
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=LOADER)


def test_every_study_of_the_paper_has_a_config():
    assert {p.name[:3] for p in STUDIES if p.name.startswith("s")} == {f"s{i:02d}" for i in range(1, 36)}
    # besides S1-S35, the equal-iteration study of Section 3.1 and appendix G
    assert [p.name for p in STUDIES if not p.name.startswith("s")] == ["g01_equal_iteration_qwen2.5-1.5b.yaml"]
    names = [_load(p)["study"] for p in STUDIES]
    assert len(set(names)) == len(names), "two paper studies would share results/<study>/"


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory) -> dict[Path, DryRun]:
    # against an empty workdir, not the repo's results/: a fresh clone's DAGs
    return dry_run(STUDIES, workdir=tmp_path_factory.mktemp("fresh"))


@pytest.mark.slow
def test_workers_dry_run_what_one_process_does(tmp_path):
    few = [ROOT / "config" / "config.yaml", *STUDIES[:2], tmp_path / "missing.yaml"]
    alone, split = dry_run(few, workdir=tmp_path, workers=1), dry_run(few, workdir=tmp_path, workers=2)
    assert list(split) == few and split == alone
    assert alone[few[0]].runs and "missing.yaml" in alone[few[-1]].error


def test_workers_claim_each_study_once_and_the_quicker_one_claims_more(tmp_path):
    first, second = _claimed(STUDIES[:5], str(tmp_path)), _claimed(STUDIES[:5], str(tmp_path))
    got = [next(first), next(second), next(first), next(first), next(second)]  # the second one is slower
    assert sorted(i for i, _ in got) == [0, 1, 2, 3, 4] and [study for _, study in sorted(got)] == STUDIES[:5]
    assert next(first, None) is None and next(second, None) is None


def test_a_worker_that_fails_raises_with_its_exit_status(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match="dry-run worker exited 1"):
        dry_run(STUDIES[:2], workdir=tmp_path, workers=2)


@pytest.mark.slow
@pytest.mark.parametrize("study", STUDIES, ids=[p.stem for p in STUDIES])
def test_study_dry_runs_with_one_train_job_per_arm_and_seed(dry_runs, study):
    result = dry_runs[study]
    assert result.error is None, f"{study.relative_to(ROOT)}: {result.error}"
    cfg = _load(study)
    assert result.runs == sorted((arm, seed) for arm in cfg["arms"] for seed in cfg["seeds"])


def test_the_miniature_lr_decay_arm_decays_from_twice_the_rate_as_s32():
    """S32 decays from 2x the base rate to 0 at B (mean = the base rate); the miniature arm must too."""
    mini = yaml.safe_load((ROOT / "config" / "studies" / "selection.yaml").read_text())["arms"]["lr_decay"]
    s32 = yaml.safe_load((ROOT / "config" / "studies" / "paper" / "s32_lr_decay_qwen2.5-1.5b.yaml").read_text())
    assert mini["lr"] == s32["arms"]["outcome_decay"]["lr"] == {"scale": 2.0, "schedule": "linear_decay"}


def test_every_paper_file_reads_answers_by_the_papers_rule():
    """C.1, H.1: the paper's verifier reads the last number inside the final box (tolerance 1e-4), not the box
    whole; a reproduction needs its rule."""
    import yaml
    from conftest import ROOT
    files = sorted((ROOT / "config" / "studies" / "paper").glob("*.yaml"))
    assert files and all(yaml.safe_load(f.read_text())["verifier"] == {"rule": "paper"} for f in files)
