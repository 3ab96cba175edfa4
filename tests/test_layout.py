"""Where files live: data and the tiny model are shared by the studies that name the same blocks, and only by them."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from conftest import SMALL_STUDY, edited_study, snakemake as run_snakemake
from mcgrpo import studies
from mcgrpo.core import layout
from mcgrpo.core.errors import DataError


def _study(**edits) -> dict:
    return studies.validate(edited_study(**edits))


def test_studies_with_the_same_task_and_model_share_data_and_model_but_nothing_else():
    a, b = _study(), _study(study="other", seeds=[3], arms={"outcome": {}}, budget__tokens=900)
    assert layout.data_dir(a) == layout.data_dir(b) and layout.model_path(a) == layout.model_path(b)
    assert layout.data_dir(a).parts[:2] == ("results", "_shared")
    assert layout.budget_path(a) != layout.budget_path(b) and layout.run_dir(a, "outcome", 1) != layout.run_dir(
        b, "outcome", 1)


def test_another_task_or_warm_start_gets_files_of_its_own():
    base = _study()
    task = _study(task__seed=8)
    warm = _study(model__warm_start__steps=31)
    assert layout.data_dir(task) != layout.data_dir(base) and layout.model_path(task) != layout.model_path(base)
    assert layout.data_dir(warm) == layout.data_dir(base) and layout.model_path(warm) != layout.model_path(base)


def test_a_model_with_a_source_is_the_studys_own_reference():
    cfg = _study(model__source={"path": "/models/mine"}, model__name="mine")
    assert layout.model_path(cfg) == layout.study_dir(cfg) / "models" / "mine.json"


@pytest.mark.slow
def test_a_second_study_reuses_the_first_ones_data_and_warm_start(tmp_path):
    other = {**SMALL_STUDY, "study": "other", "arms": {"outcome": {}}}
    for name, cfg in (("first.yaml", SMALL_STUDY), ("second.yaml", other)):
        (tmp_path / name).write_text(yaml.safe_dump(cfg))

    def snakemake(config, *args):
        done = run_snakemake(tmp_path, "--cores", "1", *args, configfile=config, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout + done.stderr

    first = snakemake("first.yaml", "warm_start", "--quiet=rules")
    # make run's terminal: no job blocks, and the long job's own progress lines, timed (the rule hands them on)
    assert "localrule warm_start:" not in first and re.search(r"\d\d:\d\d:\d\d warm start: 30/30 step", first)
    second = snakemake("second.yaml", "-n")
    assert "rule train:" in second and "rule calibrate:" in second
    assert "rule warm_start:" not in second and "rule prepare_data:" not in second
    assert (tmp_path / layout.shared_log(layout.model_path(_study()))).exists()


def test_a_renamed_study_or_arm_names_the_same_stored_run_and_budget():
    a = _study()
    b = _study(study="renamed", arms=lambda arms: {"base": arms["outcome"], "dense": arms["mc_k2"]},
               analysis__base="base")
    assert layout.run_dir(a, "outcome", 1) == layout.run_dir(b, "base", 1) != layout.run_dir(b, "base", 2)
    assert layout.run_dir(a, "mc_k2", 2) == layout.run_dir(b, "dense", 2) and layout.budget_path(a) == layout.budget_path(b)
    assert layout.study_links(b)[layout.study_dir(b) / "runs" / "dense" / "seed2"] == layout.run_dir(a, "mc_k2", 2)


def test_a_link_replaces_an_older_link_but_never_a_folder(tmp_path):
    old, new = tmp_path / "store" / "old", tmp_path / "store" / "new"
    path = tmp_path / "study" / "runs" / "outcome" / "seed1"
    layout.link(path, old)
    layout.link(path, new)
    assert path.resolve() == new.resolve() and not os.path.isabs(os.readlink(path))
    folder = tmp_path / "study" / "runs" / "mc_k2" / "seed1"
    folder.mkdir(parents=True)
    (folder / "evals.parquet").write_text("weeks of GPU time")
    with pytest.raises(DataError, match="mc_k2/seed1: a folder of its own, where the run store links to"):
        layout.link(folder, new)
    assert (folder / "evals.parquet").read_text() == "weeks of GPU time"
