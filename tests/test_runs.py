import shutil

import numpy as np
import pandas as pd
import pytest

from mcgrpo.analysis.runs import evals_frame, load, parse_metric, read_iterations, read_runs
from mcgrpo.core import layout, study_runs
from mcgrpo.core.manifest import seal
from mcgrpo.core.store import COLUMNS, write_parquet


def write_run(folder, correct, eval_sets=("test",), shuffle=True, identity="", **columns):
    """evals.parquet and samples.parquet of a run, sealed under `identity`: correct[e][i][j] is sample j of
    problem i at evaluation e."""
    correct = np.asarray(correct, dtype=bool)
    E, P, S = correct.shape
    strict = np.broadcast_to(columns.pop("correct_strict", correct.ravel() & (np.arange(correct.size) % 2 == 0)),
                             correct.size)
    samples = pd.concat([pd.DataFrame({
        "eval_index": np.repeat(np.arange(E), P * S), "eval_set": name,
        "problem_id": np.tile(np.repeat([f"{name}-{i}" for i in range(P)], S), E),
        "sample": np.tile(np.arange(S), E * P), "correct_default": correct.ravel(), "correct_strict": strict,
        "boxed": True, "truncated": False, "length": 10, "text": "x", **columns}) for name in eval_sets])
    if shuffle:  # the reader must not rely on the trainer's row order
        samples = samples.sample(frac=1.0, random_state=0)
    evals = pd.concat([pd.DataFrame({
        "eval_index": np.arange(E), "tokens_total": np.arange(E) * 50, "iteration": np.arange(E),
        "updates": np.arange(E), "train_seconds": np.arange(E) * 2.0, "eval_set": name,
        "acc_default": correct.mean(axis=(1, 2)), "acc_strict": strict.reshape(E, P * S).mean(axis=1),
        "boxed_share": 1.0, "truncated_share": 0.0,
        "mean_length": 10.0, "eval_seconds": 1.0}) for name in eval_sets])
    write_parquet(samples, folder / "samples.parquet", identity)
    write_parquet(evals.iloc[::-1], folder / "evals.parquet", identity)  # out of order on purpose
    seal_run(folder, identity)
    return samples, evals


def write_iterations(folder, evals, identity=""):
    """iterations.parquet of a run whose evals.parquet is `evals` (write_run's, of one eval set): an iteration
    between evaluations, each recording the counts the evaluation after it records, as the trainer does; every
    other column 1."""
    after = evals.sort_values("eval_index").iloc[1:]
    frame = pd.DataFrame({c: np.ones(len(after)) for c in COLUMNS["iterations"]})
    frame["iteration"] = after["iteration"].to_numpy() - 1
    for column in ("tokens_total", "updates", "train_seconds"):
        frame[column] = after[column].to_numpy()
    write_parquet(frame, folder / "iterations.parquet", identity)
    seal_run(folder, identity)


def linked_run(root, arm, seed, folder=None):
    """The folder a test writes run (arm, seed) of study folder `root` into: its own (or `folder`, a run another
    arm shares), in a store beside the study, linked from runs/<arm>/seed<N> and listed in runs/store.parquet, as
    link_study leaves a study."""
    folder = folder or root.parent / f"{root.name}-store" / f"{arm}-seed{seed}"
    layout.link(layout.study_run(root, arm, seed), folder)
    index = study_runs.index_path(root)
    rows = {run: (key, "c") for run, key in study_runs.index(root).items()} if index.exists() else {}
    layout.write_index(index, {**rows, (arm, seed): (folder.name, "c")})
    return folder


def copy_study(root, to):
    """A copy of study folder `root` (its links kept) at `to`, with the store its links point at beside it."""
    shutil.copytree(root.parent / f"{root.name}-store", to.parent / f"{root.name}-store", dirs_exist_ok=True)
    shutil.copytree(root, to, symlinks=True)


def seal_run(folder, identity=""):
    """The run's manifest over every file in it, as the trainer writes it last (identity '': what write_parquet
    puts in files written without a config_hash)."""
    seal(folder, [p.name for p in folder.iterdir() if p.is_file() and p.name != "manifest.json"], identity)


CORRECT = np.array([[[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]],
                    [[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]]])


def test_read_runs_reduces_samples_to_per_problem_counts(tmp_path):
    write_run(tmp_path, CORRECT, eval_sets=("test", "ood"))
    test, ood = read_runs(tmp_path, "a", 3, ["test", "ood"])
    assert test.name == "a/seed3" and test.evals["eval_index"].tolist() == [0, 1]
    assert test.problems.tolist() == ["test-0", "test-1", "test-2"] and ood.problems[0] == "ood-0"
    np.testing.assert_array_equal(test.samples, np.full((2, 3), 4))
    np.testing.assert_array_equal(test.correct["default"], CORRECT.sum(axis=2))
    acc, per_problem = test.scores("acc_default")
    assert per_problem and np.allclose(acc.mean(axis=1), test.evals["acc_default"])
    np.testing.assert_allclose(test.scores("pass@4_default")[0], [[1, 1, 0], [1, 1, 1]])
    assert test.coords("tokens_total").tolist() == [0, 50]


def test_a_rule_left_null_is_unknown_not_wrong(tmp_path):
    """correct_math_verify is null where math-verify was not installed at evaluation: no metric, no error."""
    write_run(tmp_path, CORRECT, correct_math_verify=pd.array([pd.NA] * CORRECT.size, dtype="boolean"))
    (run,) = read_runs(tmp_path, "a", 0, ["test"])
    assert sorted(run.correct) == ["default", "strict"]
    np.testing.assert_array_equal(run.correct["default"], CORRECT.sum(axis=2))


def test_metrics_name_what_is_allowed(tmp_path):
    write_run(tmp_path, CORRECT)
    (run,) = read_runs(tmp_path, "a", 0, ["test"])
    with pytest.raises(ValueError, match=r"'acc_greedy' is not recorded for a/seed0 \(test\); allowed: acc_default, "
                                         r"acc_strict, pass@<k>_default \(k <= 4\), pass@<k>_strict \(k <= 4\)"):
        run.scores("acc_greedy")
    with pytest.raises(ValueError, match=r"'pass@5_default': a/seed0 has only 4 samples per problem"):
        run.scores("pass@5_default")
    with pytest.raises(ValueError, match=r"metric 'accuracy': expected acc_<verifier> or pass@<k>_<verifier>"):
        parse_metric("accuracy")
    assert parse_metric("pass@16_strict") == ("strict", 16) and parse_metric("acc_default") == ("default", 1)


def test_without_samples_metrics_come_from_evals_without_problems(tmp_path):
    write_run(tmp_path, CORRECT)
    (run,) = read_runs(tmp_path, "a", 0, ["test"], samples=False)
    table, per_problem = run.scores("acc_default")
    assert not per_problem and table.shape == (2, 1)
    with pytest.raises(ValueError, match="allowed: acc_default, acc_strict"):
        run.scores("pass@2_default")


def test_missing_files_evaluations_and_problems_fail_naming_them(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"runs/store.parquet: not found, so the study's runs are unknown"):
        load(tmp_path, ["a"], [0], ["test"])
    folder = linked_run(tmp_path, "a", 0)
    samples, _ = write_run(folder, CORRECT)
    with pytest.raises(ValueError, match=r"no evaluation on set 'ood'; it holds test"):
        load(tmp_path, ["a"], [0], ["ood"])
    write_parquet(samples[~((samples["eval_index"] == 1) & (samples["problem_id"] == "test-2"))],
                  folder / "samples.parquet")
    seal_run(folder)
    with pytest.raises(ValueError, match=r"evaluation 1 of test has no sample of problem 'test-2'"):
        load(tmp_path, ["a"], [0], ["test"])
    write_parquet(samples[samples["eval_index"] == 0], folder / "samples.parquet")
    seal_run(folder)
    with pytest.raises(ValueError, match=r"evaluation\(s\) \[1\] of test in evals.parquet have no samples"):
        load(tmp_path, ["a"], [0], ["test"])


def test_load_evals_frame_and_iterations(tmp_path):
    for arm in ("a", "b"):
        for seed in (1, 2):
            folder = linked_run(tmp_path, arm, seed)
            _, evals = write_run(folder, CORRECT)
            write_iterations(folder, evals)
    runs = load(tmp_path, ["a", "b"], [1, 2], ["test"])
    assert sorted(runs) == [("a", 1, "test"), ("a", 2, "test"), ("b", 1, "test"), ("b", 2, "test")]
    frame = evals_frame(runs)
    assert len(frame) == 8 and frame.groupby(["arm", "seed"]).size().eq(2).all()
    its = read_iterations(tmp_path / "runs" / "a" / "seed1", ["tokens_total", "t_update"])
    assert sorted(its) == ["t_update", "tokens_total"] and its["tokens_total"].tolist() == [50]
