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


def _linked_elsewhere(tmp_path, cfg) -> tuple:
    """results/<study> as a link to a folder elsewhere (a disk with room), the store beside it under results/."""
    results = tmp_path / "work" / "results"
    real = tmp_path / "elsewhere" / cfg["study"]
    real.mkdir(parents=True)
    results.mkdir(parents=True)
    (results / cfg["study"]).symlink_to(real, target_is_directory=True)
    return {**cfg, "results_dir": str(results)}, real


@pytest.mark.parametrize("linked", ["study", "results"])
def test_links_resolve_where_the_study_folder_or_results_is_itself_a_link(tmp_path, linked):
    cfg, real = _linked_elsewhere(tmp_path, _study())
    if linked == "results":  # results/ itself a link, the study folder a real one inside it
        (tmp_path / "work" / "results" / cfg["study"]).unlink()
        (tmp_path / "work" / "results").rename(tmp_path / "moved")
        (tmp_path / "work" / "results").symlink_to(tmp_path / "moved", target_is_directory=True)
    links = layout.study_links(cfg)
    for path, target in links.items():
        target.mkdir(parents=True, exist_ok=True)
        layout.link(path, target)
        assert path.resolve() == target.resolve() and not os.path.isabs(os.readlink(path)), (path, os.readlink(path))
    assert layout.misresolved(links) == []
    layout.check_links_resolve(cfg)


def test_links_made_against_the_spelled_path_of_a_linked_study_folder_stop_the_workflow_naming_it(tmp_path):
    cfg, real = _linked_elsewhere(tmp_path, _study())
    links = layout.study_links(cfg)
    for path, target in links.items():  # as link() made them before: relative to the path as spelled
        target.mkdir(parents=True, exist_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(os.path.relpath(target, path.parent), target_is_directory=True)
    assert sorted(layout.misresolved(links)) == sorted(links) and not any(p.exists() for p in links)
    folder = layout.study_dir(cfg)
    with pytest.raises(DataError, match=rf"{re.escape(str(folder))}: 5 links into the run store do not resolve from "
                                        rf"{re.escape(str(real))}, where the folder really is .*allowed: `snakemake "
                                        r"--forcerun link_study`"):
        layout.check_links_resolve(cfg)
    layout.check_links_resolve(cfg, relinking=True)  # link_study forced: it links them again
    for path, target in links.items():
        layout.link(path, target)
    assert layout.misresolved(links) == [] and all(p.resolve() == t.resolve() for p, t in links.items())


def test_snakemake_stops_before_any_job_on_a_linked_study_folder_whose_links_do_not_resolve(tmp_path):
    """The dry-run's own message, not "Missing input files" nor a run "not in the store" from an analysis job."""
    cfg, real = _linked_elsewhere(tmp_path, _study())
    work = tmp_path / "work"
    for path, target in layout.study_links({**cfg, "results_dir": str(work / "results")}).items():
        target.mkdir(parents=True, exist_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(os.path.relpath(target, path.parent), target_is_directory=True)
    (work / "study.yaml").write_text(yaml.safe_dump({**SMALL_STUDY, "results_dir": "results"}))
    done = run_snakemake(work, "-n", "--cores", "1", timeout=300)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "results/mini: 5 links into the run store do not resolve from" in done.stderr
    assert "Building DAG" not in done.stdout + done.stderr
    for forced in ("link_study", "results/mini/runs/store.parquet", "./results/mini/runs/store.parquet"):
        done = run_snakemake(work, "-n", "--cores", "1", "--forcerun", forced, timeout=300)  # links them again
        assert "do not resolve" not in done.stderr and "Building DAG" in done.stdout + done.stderr, forced
