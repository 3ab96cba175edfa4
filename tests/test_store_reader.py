"""A store that cannot be made to lie (issue 48): a study's runs come from its plan and index, never a glob; every
link, index row, manifest and run.json agree or the disagreement is named; each repair check-store advises is a
command that makes the store verify. On a store laid out as the workflow lays it out (layout.run_dir, link_study),
with synthetic runs: no training."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, SMALL_STUDY
from mcgrpo import data, studies
from mcgrpo.cli import main
from mcgrpo.core import config as study_config, layout, run_data, study_runs
from mcgrpo.core.errors import DataError, IntegrityError
from mcgrpo.core.store import read_parquet, write_json, write_parquet
from test_runs import seal_run, write_run

B = 100  # write_run's evaluations sit at 0, 50, 100, 150 tokens


def make_study(root, seeds=(1, 2, 3, 4)) -> dict:
    """The study config of `root`/results, its runs trained (synthetic: mc_k2 a little worse than outcome, by a
    different amount in each seed) and stored where the workflow stores them, B calibrated, the study linked."""
    cfg = studies.validate({**copy.deepcopy(SMALL_STUDY), "seeds": list(seeds), "results_dir": str(root / "results")})
    for arm, seed in study_config.runs(cfg):
        folder = layout.run_dir(cfg, arm, seed)
        if folder.exists():
            continue
        rng = np.random.default_rng(seed)
        skill = np.linspace(0.4, 0.7 if arm == "outcome" else 0.6 - 0.05 * seed, 4)[:, None, None]
        write_run(folder, rng.random((4, 6, 2)) < skill, eval_sets=("heldout",))
        write_json({"config": study_config.run_config(cfg, arm, seed)}, folder / "run.json")
        seal_run(folder)
    write_budget(cfg, B)
    relink(cfg)
    return cfg


def relink(cfg) -> list:
    """What the workflow's link_study rule runs."""
    return layout.link_study(cfg, study_runs.index_path(layout.study_dir(cfg)))


def contrast(cfg, tmp_path, capsys) -> tuple[int, pd.Series | None, str]:
    """`mcgrpo contrast` mc_k2 against outcome at equal tokens: (exit status, its row, stderr)."""
    out = tmp_path / "contrast.parquet"
    out.unlink(missing_ok=True)
    status = main(["contrast", "--results", str(layout.study_dir(cfg)), "--a", "mc_k2", "--b", "outcome",
                   "--resamples", "50", "--out", str(out)])
    err = capsys.readouterr().err
    return status, read_parquet(out).iloc[0] if status == 0 else None, err


def check_store(cfg, capsys, *more) -> tuple[int, str, str]:
    status = main(["check-store", "--results", cfg["results_dir"], *more])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def study(tmp_path):
    return make_study(tmp_path)


def test_a_clean_store_verifies_and_the_contrast_reads_every_seed(study, tmp_path, capsys):
    assert check_store(study, capsys)[0] == 0
    status, row, _ = contrast(study, tmp_path, capsys)
    assert status == 0 and row["n"] == 4


def test_seeds_cut_from_the_plan_are_unlinked_and_never_read(study, tmp_path, capsys):
    """seeds: [1, 2, 3] on a study that had 4: link_study removes the seed4 links (never their runs), and the
    contrast reads 3 seeds, as the workflow's summary does (before: n = 4, from a glob of runs/<arm>/seed*)."""
    _, four, _ = contrast(study, tmp_path, capsys)
    cut = {**study, "seeds": [1, 2, 3]}
    removed = relink(cut)
    assert sorted(p.relative_to(layout.study_dir(study)).as_posix() for p in removed) == [
        "runs/mc_k2/seed4", "runs/outcome/seed4"]
    assert layout.run_dir(study, "mc_k2", 4).is_dir()  # the stored run is kept
    status, row, _ = contrast(cut, tmp_path, capsys)
    assert status == 0 and row["n"] == 3 and row["mean"] != four["mean"]


def test_a_leftover_link_is_never_read_named_by_check_store_and_removed_by_repair(study, tmp_path, capsys):
    """Two seed5 links left over (pointing at seed 1's runs): the contrast still reads the index's 4 seeds
    (before: 5); check-store names them, and --repair removes the links, after which the store verifies."""
    folder = layout.study_dir(study)
    for arm in ("outcome", "mc_k2"):
        layout.link(layout.study_run(folder, arm, 5), layout.run_dir(study, arm, 1))
    status, row, _ = contrast(study, tmp_path, capsys)
    assert status == 0 and row["n"] == 4
    status, out, err = check_store(study, capsys)
    assert status == 2 and f"STALE {folder}/runs/mc_k2/seed5: a link its study's index does not list" in out
    assert "2 stale link(s); rerun with --repair" in err
    status, out, _ = check_store(study, capsys, "--repair")
    assert status == 0 and f"removed {folder}/runs/outcome/seed5" in out
    assert not layout.study_run(folder, "outcome", 5).is_symlink() and layout.run_dir(study, "outcome", 1).is_dir()
    assert check_store(study, capsys)[0] == 0


def swap_index_rows(cfg):
    """The `run` values of mc_k2 seed 1 and outcome seed 1 swapped in runs/store.parquet, and the links made to
    match: every link agrees with the index, every manifest with its folder."""
    folder = layout.study_dir(cfg)
    keys = layout.run_keys(cfg)
    keys[("mc_k2", 1)], keys[("outcome", 1)] = keys[("outcome", 1)], keys[("mc_k2", 1)]
    layout.write_index(study_runs.index_path(folder), {run: (key, "c") for run, key in keys.items()})
    for (arm, seed), key in keys.items():
        layout.link(layout.study_run(folder, arm, seed), layout.runs_dir(cfg) / key)


def test_a_swapped_index_row_is_named_by_the_runs_own_run_json_and_repaired(study, tmp_path, capsys):
    """Before: check-store verified 16 of 16 and the contrast read outcome's run as mc_k2's."""
    swap_index_rows(study)
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2 and "runs/mc_k2/seed1/run.json: trained with arm config" in err
    assert "reads another arm's run as mc_k2" in err and "check-store --repair" in err
    with pytest.raises(IntegrityError, match=r"runs/mc_k2/seed1/run.json: trained as arm outcome of the plan, but "
                                             r".*store.parquet reads it as mc_k2/seed1"):
        study_runs.folders(layout.study_dir(study), ["mc_k2"], [1], study["arms"])
    status, out, err = check_store(study, capsys)
    assert status == 2 and "BAD mini/mc_k2/seed1:" in out and "BAD mini/outcome/seed1:" in out
    assert "2 study run(s) disagree with their study's index: mini/mc_k2/seed1, mini/outcome/seed1" in err
    status, out, _ = check_store(study, capsys, "--repair")
    assert status == 0 and "runs/store.parquet to " in out and "link_study relinks mini from its plan" in out
    assert not study_runs.index_path(layout.study_dir(study)).exists()
    relink(study)  # what the workflow's next run does: link_study's output is gone
    assert check_store(study, capsys)[0] == 0
    status, row, _ = contrast(study, tmp_path, capsys)
    assert status == 0 and row["n"] == 4


def test_a_link_to_another_run_is_repaired_by_the_advised_commands(study, capsys):
    """Before, the advice was 'relink it (rerun the workflow)', which schedules no link_study."""
    folder = layout.study_dir(study)
    layout.link(layout.study_run(folder, "outcome", 2), layout.run_dir(study, "outcome", 1))
    status, out, _ = check_store(study, capsys)
    assert status == 2 and f"{folder}/runs/outcome/seed2: links to stored run " in out
    assert check_store(study, capsys, "--repair")[0] == 0
    relink(study)
    assert check_store(study, capsys)[0] == 0


def test_a_manifest_whose_run_was_changed_is_the_stored_runs_fault_and_repair_sets_it_aside(study, capsys):
    """A folder copied over another (its manifest's `run` another's): before, named as a wrong study link, and
    --repair moved nothing."""
    target = layout.run_dir(study, "mc_k2", 3)
    sealed = json.loads((target / "manifest.json").read_text())
    sealed["run"] = layout.run_key(study, "mc_k2", 2)
    (target / "manifest.json").write_text(json.dumps(sealed))
    status, out, err = check_store(study, capsys)
    assert status == 2 and f"BAD {target.name}:\n  {target}/manifest.json: belongs to run {sealed['run']}, not " \
                           f"{target.name}" in out
    assert f"1 run(s) to retrain: {target.name}" in err and "mini/mc_k2/seed3" not in err
    status, out, _ = check_store(study, capsys, "--repair")
    assert status == 0 and f"moved {target} to " in out and not target.exists()
    status, out, _ = check_store(study, capsys)
    assert status == 0 and f"unfinished mini/mc_k2/seed3: {layout.study_dir(study)}/runs/mc_k2/seed3: its run " \
                           f"{target.name} is not in the store (never trained, or set aside to retrain): rerun the " \
                           f"workflow to train it" in out


def test_a_manifest_without_evals_fails_check_store_as_it_fails_the_analysis(study, tmp_path, capsys):
    target = layout.run_dir(study, "outcome", 2)
    sealed = json.loads((target / "manifest.json").read_text())
    del sealed["files"]["evals.parquet"]
    (target / "manifest.json").write_text(json.dumps(sealed))
    status, out, _ = check_store(study, capsys)
    assert status == 2 and f"{target}/manifest.json: lists no evals.parquet, which every analysis reads" in out
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2 and "manifest.json: lists no evals.parquet" in err


def test_a_failed_runs_leftovers_are_named_unfinished_with_the_advice_that_fits(study, capsys):
    """Issue 47.6: a training job that failed (a config error in a user's script) leaves its log and checkpoints/
    only; before, check-store called its link one that points at the wrong run and advised --repair."""
    target = layout.run_dir(study, "mc_k2", 1)
    for path in target.iterdir():
        path.unlink()
    (target / "train.log").write_text("ConfigError: arms.mc_k2.trainer.trl.script: ...\n")
    (target / "checkpoints").mkdir()
    status, out, err = check_store(study, capsys)
    assert status == 0 and f"unfinished {target.name}:" in out and "BAD" not in out and "wrong" not in out + err
    assert (f"unfinished mini/mc_k2/seed1: {layout.study_dir(study)}/runs/mc_k2/seed1: its run {target.name} never "
            f"finished (no manifest.json): still training, or its job failed: see ") in out
    assert "train.log, fix what it names (the study's config, or a script it runs), then rerun the workflow" in out


@pytest.mark.parametrize("sha256", [12345, None, "abc", ["x"]])
def test_a_manifest_with_a_wrong_type_is_named_not_a_traceback(study, tmp_path, capsys, sha256):
    """Before: TypeError in check-store, contrast and the DAG build (the analysis rules' fingerprint)."""
    target = layout.run_dir(study, "outcome", 1)
    sealed = json.loads((target / "manifest.json").read_text())
    sealed["files"]["samples.parquet"]["sha256"] = sha256
    (target / "manifest.json").write_text(json.dumps(sealed))
    status, out, _ = check_store(study, capsys)
    assert status == 2 and (f"{target}/manifest.json: not a run manifest (files.samples.parquet.sha256 is not 64 "
                            f"hexadecimal digits): set it aside to retrain it: python -m mcgrpo check-store --repair") in out
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2 and "files.samples.parquet.sha256 is not 64 hexadecimal digits" in err
    from mcgrpo.core import manifest
    assert manifest.fingerprint([target])  # the Snakefile's param: a value, not a traceback


def test_a_run_file_that_is_a_folder_is_named(study, tmp_path, capsys):
    target = layout.run_dir(study, "outcome", 3) / "samples.parquet"
    target.unlink()
    target.mkdir()
    status, out, _ = check_store(study, capsys)
    assert status == 2 and f"{target}: a folder, where manifest.json lists a file: set it aside" in out
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2 and "runs/outcome/seed3/samples.parquet: a folder, where manifest.json lists a file" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_run_file_is_named_with_the_command_that_fixes_it(study, tmp_path, capsys):
    target = layout.run_dir(study, "outcome", 3) / "evals.parquet"
    target.chmod(0)
    status, out, _ = check_store(study, capsys)
    assert status == 2 and f"{target}: cannot be read (Permission denied); allowed: a file this user can read " \
                           f"(chmod u+r {target})" in out


def test_a_fifo_in_place_of_a_run_file_never_blocks(study, tmp_path):
    """Before, check-store and contrast waited forever for a writer."""
    target = layout.run_dir(study, "mc_k2", 2) / "evals.parquet"
    target.unlink()
    os.mkfifo(target)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "workflow")}
    for verb in (["check-store", "--results", study["results_dir"]],
                 ["contrast", "--results", str(layout.study_dir(study)), "--a", "mc_k2", "--b", "outcome",
                  "--resamples", "20", "--out", str(tmp_path / "c.parquet")]):
        done = subprocess.run([sys.executable, "-m", "mcgrpo", *verb], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 2, done.stderr
        assert "/evals.parquet: a FIFO (named pipe), where manifest.json lists a file" in done.stdout + done.stderr


def test_contrast_out_an_existing_folder_is_named(study, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken.parquet").mkdir()
    status = main(["contrast", "--results", str(layout.study_dir(study)), "--a", "mc_k2", "--b", "outcome",
                   "--resamples", "20", "--out", str(tmp_path / "taken")])
    assert status == 2
    assert f"--out {tmp_path}/taken: allowed: a file name ending in .parquet" in capsys.readouterr().err
    status = main(["contrast", "--results", str(layout.study_dir(study)), "--a", "mc_k2", "--b", "outcome",
                   "--resamples", "20", "--out", str(tmp_path / "taken.parquet")])
    assert status == 2
    assert (f"{tmp_path}/taken.parquet exists and was not written by `mcgrpo contrast`; allowed: a new file"
            in capsys.readouterr().err)


def test_a_seed_the_index_lacks_is_named_with_its_repair(study, capsys):
    """The plan names a seed the index does not (an index from an older plan): refused, naming both."""
    with pytest.raises(DataError, match=r"store.parquet: lists no run for outcome/seed7, mc_k2/seed7, which the "
                                        r"study's plan names; allowed: the index of the current plan: python -m "
                                        r"mcgrpo check-store --repair"):
        study_runs.folders(layout.study_dir(study), ["outcome", "mc_k2"], [1, 7])


def test_the_reader_picks_exactly_the_plans_runs_on_a_clean_store(study):
    """The runs read are the plan's, each the stored run its identity names: what the glob picked on a clean
    store, so a clean study's numbers are unchanged."""
    folder = layout.study_dir(study)
    found = study_runs.folders(folder, list(study["arms"]), study["seeds"], study["arms"])
    assert {run: path.resolve() for run, path in found.items()} == {
        run: layout.runs_dir(study) / key for run, key in layout.run_keys(study).items()}


def write_budget(cfg, value: int) -> None:
    """B of the study's calibration, as the calibrate rule writes it (with the calibration's hash)."""
    write_parquet(pd.DataFrame({"model": ["tiny"], "iteration": [0], "tokens_generated": [10], "B": [value]}),
                  layout.budget_path(cfg), study_config.config_hash(study_config.calibration_config(cfg)))


def test_a_budget_changed_after_the_runs_trained_is_named_never_read_at(study, tmp_path, capsys):
    """calibration/budget.parquet edited (or recalibrated, or linked to another calibration) after the runs trained:
    every contrast would be read at the new B, silently (here at 50 tokens instead of 100); each run.json records
    the B it trained to, and the reader holds every run to the study's B."""
    for arm, seed in study_config.runs(study):
        folder = layout.run_dir(study, arm, seed)
        write_json({"config": study_config.run_config(study, arm, seed), "B": B}, folder / "run.json")
        seal_run(folder)
    status, row, _ = contrast(study, tmp_path, capsys)
    assert status == 0 and row["tokens_a"] == B
    write_budget(study, 50)
    status, row, err = contrast(study, tmp_path, capsys)
    budget = layout.study_dir(study) / "calibration" / "budget.parquet"
    assert status != 0 and row is None
    assert f"{budget}: B = 50 tokens, but " in err and f"was trained to B = {B} tokens" in err
    assert "Traceback" not in err
    status, out, _ = check_store(study, capsys)
    assert status != 0 and "B = 50 tokens, but" in out
    write_budget(study, B)
    assert contrast(study, tmp_path, capsys)[0] == 0


@pytest.mark.parametrize("edit", [lambda lock: lock["material"].update(margin=0.5),
                                  lambda lock: lock["material"]["plan"]["primary"][0].update(direction="greater")])
def test_an_edited_lock_is_named_never_read(study, tmp_path, capsys, edit):
    """prereg.lock.json gives `mcgrpo contrast` its margin, labels and directions, and the contrasts step the plan it
    holds the study to: an edit (a wider margin, a flipped prediction) would change the verdict without a word. The
    lock's sha256 is its material's, so an edited one is refused, naming the file."""
    from mcgrpo.analysis import prereg, steps
    from test_prereg import PLAN
    study = studies.validate({**copy.deepcopy(study), "plan": copy.deepcopy(PLAN)})
    results = layout.study_dir(study)
    lock = prereg.make_lock(study)
    write_json(lock, results / "prereg.lock.json")
    assert contrast(study, tmp_path, capsys)[0] == 0
    edited = copy.deepcopy(lock)
    edit(edited)
    write_json(edited, results / "prereg.lock.json")
    status, row, err = contrast(study, tmp_path, capsys)
    assert status != 0 and row is None and "Traceback" not in err
    assert f"{results / 'prereg.lock.json'}: its material hashes to " in err and "the lock was edited" in err
    with pytest.raises(IntegrityError, match="the lock was edited after it was written"):
        steps.contrasts_step(study, results)
    write_json(lock, results / "prereg.lock.json")
    assert contrast(study, tmp_path, capsys)[0] == 0


def prepare_data(cfg, edit=None) -> None:
    """The study's data folder as prepare_data writes it; `edit(eval_sets)` changes the problems first."""
    pool, evals = data.build(cfg["task"])
    if edit:
        edit(evals)
    data.write(pool, evals, layout.data_dir(cfg), study_config.config_hash(cfg["task"]))


def record_data(cfg, runs, model="a" * 64) -> None:
    """Each of `runs` (arm, seed) records the problems of the data folder as it is now, and `model` as the
    fingerprint of the weights it started from, as the trainer does."""
    for arm, seed in runs:
        folder = layout.run_dir(cfg, arm, seed)
        write_json({"config": study_config.run_config(cfg, arm, seed), run_data.MODEL: model,
                    "data": run_data.fingerprint(layout.data_dir(cfg), cfg["evaluation"]["sets"])},
                   folder / "run.json")
        seal_run(folder)


def one_answer_changed(evals) -> None:
    evals["heldout"].loc[0, "answer"] = "-1"


def test_data_prepared_again_after_the_runs_trained_is_named_and_repaired(study, tmp_path, capsys):
    """The data folder prepared again from an edited data file (here: one answer of the held-out set changed) after
    the runs trained, but before seeds 3 and 4 did: half the seeds scored other problems than the rest, and the
    contrast read all four without a word. Each run records its problems; the reader holds them to the folder."""
    runs = study_config.runs(study)
    prepare_data(study)
    record_data(study, [(arm, seed) for arm, seed in runs if seed <= 2])
    prepare_data(study, one_answer_changed)
    record_data(study, [(arm, seed) for arm, seed in runs if seed > 2])
    status, row, err = contrast(study, tmp_path, capsys)
    heldout = layout.data_dir(study) / "eval_heldout.parquet"
    assert status == 2 and row is None and "Traceback" not in err
    assert f"{heldout}: its problems hash to " in err and "runs/mc_k2/seed1/run.json trained and was evaluated on" in err
    assert "the prepared data changed after the run trained" in err and "check-store --repair" in err
    status, out, err = check_store(study, capsys)
    stale = {layout.run_key(study, arm, seed) for arm, seed in runs if seed <= 2}
    assert status == 2 and all(f"BAD {key}:" in out for key in stale) and "4 run(s) to retrain" in err
    status, out, _ = check_store(study, capsys, "--repair")
    assert status == 0 and not any(layout.runs_dir(study).joinpath(key).exists() for key in stale)
    make_study(tmp_path)  # what the workflow's next run does: it trains the runs set aside, on the data it holds
    record_data(study, [(arm, seed) for arm, seed in runs if seed <= 2])
    assert check_store(study, capsys)[0] == 0
    assert contrast(study, tmp_path, capsys)[0] == 0


def one_problem_twice(evals) -> None:
    heldout = evals["heldout"]
    evals["heldout"] = pd.concat([heldout, heldout.head(1).assign(problem_id="again/0")], ignore_index=True)


def test_runs_of_a_folder_holding_a_repeated_problem_are_named_once_it_is_prepared_again(study, tmp_path, capsys):
    """A study whose evaluation set held one problem twice (prepared before sets were kept distinct): a new run is
    refused on that folder (mcgrpo.data.checks.check_distinct, which says to prepare it again), and once it is
    prepared again the earlier runs, evaluated on the set with the repeat, are named by the data check and set
    aside by check-store --repair, never read beside runs of the new set."""
    runs = study_config.runs(study)
    prepare_data(study, one_problem_twice)
    record_data(study, runs)
    assert contrast(study, tmp_path, capsys)[0] == 0  # the runs agree with the folder they were evaluated on
    prepare_data(study)
    status, _, err = contrast(study, tmp_path, capsys)
    heldout = layout.data_dir(study) / "eval_heldout.parquet"
    assert status == 2 and "Traceback" not in err
    assert f"{heldout}: its problems hash to " in err and "the prepared data changed after the run trained" in err
    assert "check-store --repair" in err
    status, out, err = check_store(study, capsys)
    assert status == 2 and f"{len(runs)} run(s) to retrain" in err


def test_runs_that_trained_on_different_data_are_named_where_the_data_folder_is_gone(study, tmp_path, capsys):
    """The data folder deleted (or the runs moved without it): nothing to hold each run to, but the study's runs
    are still held to each other."""
    runs = study_config.runs(study)
    prepare_data(study)
    record_data(study, [(arm, seed) for arm, seed in runs if seed != 3])
    prepare_data(study, one_answer_changed)
    record_data(study, [(arm, seed) for arm, seed in runs if seed == 3])
    shutil.rmtree(layout.data_dir(study))
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2 and ("runs/mc_k2/seed3/run.json: trained with the problems of eval_heldout.parquet hashing "
                            "to ") in err
    assert "runs/mc_k2/seed1/run.json with " in err and "(as 6 of its 8 runs)" in err
    assert "trained or were evaluated on different inputs" in err
    prepare_data(study)  # prepare_data again: the folder as most runs trained on it
    status, out, _ = check_store(study, capsys)
    assert status == 2 and f"BAD {layout.run_key(study, 'mc_k2', 3)}:" in out
    assert f"BAD {layout.run_key(study, 'mc_k2', 1)}:" not in out


def test_a_run_recording_its_data_reads_as_before_on_the_same_problems_written_again(study, tmp_path, capsys):
    """The fingerprint is of the problems, not of the file's bytes: the folder prepared again to the same problems
    (here with other Parquet metadata) is the same data."""
    import pyarrow.parquet as pq
    prepare_data(study)
    record_data(study, study_config.runs(study))
    path = layout.data_dir(study) / "pool.parquet"
    before = path.read_bytes()
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, b"written_by": b"another pyarrow"}), path,
                   compression="gzip")
    assert path.read_bytes() != before
    assert check_store(study, capsys)[0] == 0
    assert contrast(study, tmp_path, capsys)[0] == 0


def test_a_data_folder_of_another_task_copied_in_is_refused(study, tmp_path, capsys):
    """results/_shared/data/<key>/ replaced by another task's prepared data (here: another task seed) before any run
    trained: every run would train and be evaluated on the same other problems, so the runs agree with each other
    and with the folder. Its files carry the hash of the task they were prepared for, the folder's name."""
    other = {**study, "task": {**study["task"], "seed": study["task"]["seed"] + 1}}
    prepare_data(other)
    shutil.copytree(layout.data_dir(other), layout.data_dir(study))
    with pytest.raises(IntegrityError, match=rf"{layout.data_dir(study)}/pool.parquet: written for prepared data "
                                             rf"{layout.data_dir(other).name}, but filed as prepared data "
                                             rf"{layout.data_dir(study).name}: copied from another prepared data "
                                             rf"folder"):
        run_data.fingerprint(layout.data_dir(study), study["evaluation"]["sets"])


def test_runs_that_started_from_another_model_are_named(study, tmp_path, capsys):
    """A model folder saved over (or a hub model without a revision updated in the cache) between seeds: seed 2's
    runs started from other weights than the rest, and were compared with them without a word."""
    prepare_data(study)
    runs = study_config.runs(study)
    record_data(study, [(arm, seed) for arm, seed in runs if seed != 2])
    record_data(study, [(arm, seed) for arm, seed in runs if seed == 2], model="b" * 64)
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2 and ("runs/mc_k2/seed2/run.json: trained with the model's weights and tokenizer hashing to "
                            "bbbbbbbbbbbb, but ") in err
    assert "runs/mc_k2/seed1/run.json with aaaaaaaaaaaa (as 6 of its 8 runs)" in err
    assert "mv their stored run folders into results/_shared/quarantine/" in err and "model.source.revision" in err
    status, out, _ = check_store(study, capsys)
    assert status == 2 and "BAD mini/mc_k2/seed2:" in out and "BAD mini/outcome/seed2:" in out
    assert "BAD mini/mc_k2/seed1" not in out


def timed_contrast(cfg, tmp_path, capsys, basis="time") -> tuple[int, pd.Series | None, str]:
    """`mcgrpo contrast` mc_k2 against outcome on `basis`: (exit status, its row, stderr)."""
    out = tmp_path / "contrast.parquet"
    out.unlink(missing_ok=True)
    status = main(["contrast", "--results", str(layout.study_dir(cfg)), "--a", "mc_k2", "--b", "outcome",
                   "--basis", basis, "--resamples", "50", "--out", str(out)])
    err = capsys.readouterr().err
    return status, read_parquet(out).iloc[0] if status == 0 else None, err


def rewrite_evals(cfg, arm, seed, column, values) -> None:
    """A run's evals.parquet with `column` set to `values` by its writer (sealed): what an ingested run's
    trainer_state.json gives, where it logged a negative step_time or completion length."""
    folder = layout.run_dir(cfg, arm, seed)
    evals = read_parquet(folder / "evals.parquet").sort_values("eval_index")
    evals[column] = values
    write_parquet(evals, folder / "evals.parquet", "")
    seal_run(folder)


@pytest.mark.parametrize("column, values, basis", [
    ("train_seconds", [0.0, 2.0, -1.0, 6.0], "time"),  # step_time -3 at an ingested run's third step
    ("tokens_total", [0, 50, 20, 150], "tokens"),  # a negative completions/mean_length
    ("updates", [0, 2, 1, 3], "updates"),
])
def test_a_run_whose_coordinates_fall_is_refused_not_interpolated(study, tmp_path, capsys, column, values, basis):
    """An evaluation's clock, token count or updates below the one before it: the reading at equal time (tokens,
    updates) interpolated between evaluations out of order, and the contrast gave a number."""
    rewrite_evals(study, "mc_k2", 2, column, values)
    status, row, err = timed_contrast(study, tmp_path, capsys, basis)
    evals = layout.study_dir(study) / "runs" / "mc_k2" / "seed2" / "evals.parquet"
    assert status == 2 and row is None and "Traceback" not in err
    assert f"{evals}: {column} falls from {values[1]} to {values[2]} at evaluation 2 of heldout" in err
    assert "allowed: coordinates that never fall" in err


def test_a_run_without_a_clock_at_b_is_refused_on_the_time_basis(study, tmp_path, capsys):
    """The base's clock unknown at its B evaluation (an ingested run whose last steps logged no step_time): A was
    read at its own time at B, as if the base's were known."""
    rewrite_evals(study, "outcome", 2, "train_seconds", [0.0, 2.0, np.nan, np.nan])
    status, _, err = timed_contrast(study, tmp_path, capsys)
    assert status == 2 and "runs/outcome/seed2/evals.parquet: train_seconds unknown (NaN) at evaluation 2 of " \
                           "heldout" in err
    assert timed_contrast(study, tmp_path, capsys, "tokens")[0] == 0  # its other bases still read


def test_a_budget_copied_from_another_calibration_is_refused(study, tmp_path, capsys):
    """calibrations/<key>/budget.parquet replaced by another calibration's (here: B 50 where the study's
    calibration gave 100) before the runs trained: every run trained to it and recorded it, so the reader's check
    against run.json found nothing, and the study read every arm at another B than its config calibrates. The
    file carries the hash of the calibration it was written for, the folder's name."""
    other = {**study, "budget": {**study["budget"], "multiplier": study["budget"]["multiplier"] * 2}}
    write_parquet(pd.DataFrame({"model": ["tiny"], "iteration": [0], "tokens_generated": [10], "B": [50]}),
                  layout.budget_path(study), study_config.config_hash(study_config.calibration_config(other)))
    with pytest.raises(IntegrityError, match=rf"{layout.budget_path(study)}: written for calibration "
                                             rf"{layout.calibration_key(other)}, but filed as calibration "
                                             rf"{layout.calibration_key(study)}: copied from another calibration"):
        study_runs.read_budget(layout.budget_path(study))
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2 and f"written for calibration {layout.calibration_key(other)}" in err


def test_seeds_that_scored_different_problems_are_refused(study, tmp_path, capsys):
    """Seed 2 of both arms evaluated on other problems than the other seeds (an evaluation set prepared again
    between seeds, in runs that record no data: trained before runs recorded it, or ingested): each seed's two arms
    scored the same problems, so the pair check passed, and the crossed bootstrap resampled problem j of every seed
    as one problem."""
    for arm in ("mc_k2", "outcome"):
        folder = layout.run_dir(study, arm, 2)
        samples = read_parquet(folder / "samples.parquet")
        samples["problem_id"] = samples["problem_id"].str.replace("heldout-", "other-")
        write_parquet(samples, folder / "samples.parquet")
        seal_run(folder)
    status, row, err = contrast(study, tmp_path, capsys)
    assert status == 2 and row is None
    assert "runs mc_k2/seed2 and mc_k2/seed1 scored different problems on heldout" in err
