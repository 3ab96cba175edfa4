"""Stored runs that are whole and sealed but disagree with themselves (a tool rewrote a file and sealed the run
again, or an older version wrote it): every such run is refused by the one reader of a run's files
(mcgrpo.analysis.runs), naming the file, the evaluation and what is allowed, never read as a number. Each case
here read a different number without a word before the reader checked it. On the synthetic store of
test_store_reader: no training."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from mcgrpo.analysis import contrasts, runs, steps
from mcgrpo.core import layout, study_runs
from mcgrpo.core.errors import DataError
from mcgrpo.core.store import read_parquet, write_parquet
from test_runs import seal_run, write_iterations
from test_store_reader import contrast, make_study


@pytest.fixture
def study(tmp_path):
    return make_study(tmp_path)


def rewrite(cfg, arm, seed, name, edit) -> None:
    """Run (arm, seed)'s file `name` rewritten by `edit` (a frame -> a frame) and the run sealed again."""
    folder = layout.run_dir(cfg, arm, seed)
    write_parquet(edit(read_parquet(folder / name)), folder / name, "")
    seal_run(folder)


def evals_only(cfg, basis="tokens", metric="acc_default") -> list[float]:
    """mc_k2's differences from outcome per seed, read from evals.parquet alone, as the curves, drift and the strict
    robustness check of a study whose metrics are acc_* read them (runs.load(samples=False))."""
    study = layout.study_dir(cfg)
    loaded = runs.load(study, ["mc_k2", "outcome"], cfg["seeds"], ["heldout"], samples=False)
    pairs, _ = contrasts.paired(loaded, "mc_k2", "outcome", basis, metric, "heldout", study_runs.budget(study))
    return pairs["diff"].tolist()


def file_of(cfg, name, arm="mc_k2", seed=2):
    return layout.study_dir(cfg) / "runs" / arm / f"seed{seed}" / name


def test_an_evaluation_recorded_twice_is_refused(study, tmp_path, capsys):
    """Evaluation 2 (mc_k2's B evaluation) recorded twice, the copy first with another accuracy: the readers of
    evals.parquet alone read the copy."""
    rewrite(study, "mc_k2", 2, "evals.parquet",
            lambda e: pd.concat([e[e["eval_index"] == 2].assign(acc_default=0.99), e]))
    with pytest.raises(DataError, match=rf"{file_of(study, 'evals.parquet')}: evaluation 2 of heldout is recorded in "
                                        rf"2 rows; allowed: one row per evaluation and eval set"):
        evals_only(study)
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2 and "evaluation 2 of heldout is recorded in 2 rows" in err


@pytest.mark.parametrize("value", [np.nan, 1.5, -1])
def test_an_evaluation_index_that_is_no_whole_number_is_refused(study, value):
    """Not one of the trainer's evaluations 0, 1, ... (a NaN ended in int(nan)'s traceback)."""
    rewrite(study, "mc_k2", 2, "evals.parquet",
            lambda e: e.assign(eval_index=e["eval_index"].astype(float).where(e["eval_index"] != 2, value)))
    with pytest.raises(DataError, match=r"evals.parquet: eval_index is .* in row \d+ \(of float64 values\); allowed: "
                                        r"a whole number >= 0"):
        evals_only(study)


@pytest.mark.parametrize("column, value", [("acc_default", 1.7), ("acc_default", -0.25), ("acc_strict", np.nan)])
def test_an_accuracy_outside_0_1_or_unknown_is_refused(study, column, value):
    """An accuracy no evaluation can give, read as it stands by the readers of evals.parquet alone (1.7 gave a
    difference of 1.2; a NaN acc_strict reads as no drift). An unknown acc_greedy is a reading not defined, which
    the contrast says (test_uninformative)."""
    rewrite(study, "mc_k2", 2, "evals.parquet", lambda e: e.assign(**{column: e[column].where(e["eval_index"] != 2,
                                                                                                value)}))
    with pytest.raises(DataError, match=rf"evals.parquet: {column} is {value!r} at evaluation 2 of heldout; allowed: "
                                        rf"a share of correct samples, in \[0, 1\], at every evaluation"):
        evals_only(study, metric=column)


def test_an_accuracy_its_samples_do_not_give_is_refused(study, tmp_path, capsys):
    """evals.parquet's acc_default at B no longer the samples' (0 where they score 5/12): the contrast reads the
    samples, the curves and robustness tables read evals.parquet, so the tables disagreed with the verdict."""
    before = evals_only(study)
    rewrite(study, "mc_k2", 2, "evals.parquet",
            lambda e: e.assign(acc_default=e["acc_default"].where(e["eval_index"] != 2, 0.0)))
    assert evals_only(study) != before  # what the reader of evals.parquet alone cannot tell
    status, row, err = contrast(study, tmp_path, capsys)
    assert status == 2 and row is None
    assert (f"{file_of(study, 'evals.parquet')}: acc_default is 0.0 at evaluation 2 of heldout, but "
            f"{file_of(study, 'samples.parquet')} scores it 0.4166666666666667; allowed: the accuracy its samples "
            f"give") in err


def _mixed(samples, correct: bool) -> pd.DataFrame:
    """The sample scored `correct` of a problem with one of its two samples correct at evaluation 2 (B's)."""
    at_b = samples[samples["eval_index"] == 2]
    mixed = at_b.groupby("problem_id")["correct_default"].transform("sum") == 1
    return at_b[mixed & (at_b["correct_default"] == correct)].iloc[:1]


def _twice(samples):  # its correct sample twice: 2/3 where it scored 1/2
    return pd.concat([samples, _mixed(samples, True)])


def _dropped(samples):  # its wrong sample dropped: 1/1 where it scored 1/2
    return samples.drop(_mixed(samples, False).index)


@pytest.mark.parametrize("edit, said", [
    (_twice, r"evaluation 2 of heldout holds 3 sample\(s\) of problem 'heldout-\d', where the run holds 2 of most "
             r"problems; allowed: the same number of samples of every problem at every evaluation"),
    (_dropped, r"evaluation 2 of heldout holds 1 sample\(s\) of problem 'heldout-\d', where the run holds 2"),
    (lambda s: pd.concat([s, s]), r"evaluation 0 of heldout numbers its samples of problem 'heldout-0' other than "
                                  r"0..3, each once \(one recorded twice\); allowed: each sample of a problem once"),
])
def test_samples_recorded_twice_or_dropped_are_refused(study, tmp_path, capsys, edit, said):
    """A sample recorded twice or dropped moved its problem's share of correct samples (the contrast at equal tokens
    changed); every row twice left accuracy alone but moved pass@k."""
    rewrite(study, "mc_k2", 2, "samples.parquet", edit)
    status, row, err = contrast(study, tmp_path, capsys)
    assert status == 2 and row is None and "Traceback" not in err
    assert re.search(rf"{file_of(study, 'samples.parquet')}: {said}", err), err


def test_the_verifiers_table_refuses_a_sample_recorded_twice(study):
    """tables/verifiers reads the samples' rows, where one recorded twice counted twice."""
    rewrite(study, "mc_k2", 2, "samples.parquet", lambda s: pd.concat([s, s.iloc[:1]]))
    with pytest.raises(DataError, match=rf"{re.escape(str(file_of(study, 'samples.parquet')))}: evaluation 2 of "
                                        rf"heldout holds 3 sample\(s\) of problem 'heldout-2', where the run holds 2"):
        steps.verifiers_step(study, layout.study_dir(study))


def test_check_store_names_a_run_whose_files_disagree_and_repair_sets_it_aside(study, capsys):
    """Sealed, so its manifest verifies: check-store reads it as the analysis does, and names it to retrain."""
    from mcgrpo.cli import main
    rewrite(study, "mc_k2", 2, "evals.parquet", lambda e: pd.concat([e[e["eval_index"] == 2], e]))
    results, run = study["results_dir"], layout.run_dir(study, "mc_k2", 2)
    assert main(["check-store", "--results", results]) == 2
    out, err = capsys.readouterr()
    assert f"BAD {run.name}:\n  {run / 'evals.parquet'}: evaluation 2 of heldout is recorded in 2 rows" in out
    assert f"1 run(s) to retrain: {run.name}" in err
    assert main(["check-store", "--results", results, "--repair"]) == 0 and not run.exists()
    capsys.readouterr()
    assert main(["check-store", "--results", results]) == 0  # the workflow retrains it on its next run
    assert f"its run {run.name} is not in the store (never trained, or set aside to retrain)" in capsys.readouterr().out


def test_a_count_unknown_at_b_is_refused(study, tmp_path, capsys):
    """tokens_total unknown at mc_k2's B evaluation: the first evaluation known to reach B (the next) was taken for
    B's, and the contrast came out not defined (NaN) with no reason given."""
    rewrite(study, "mc_k2", 2, "evals.parquet",
            lambda e: e.assign(tokens_total=e["tokens_total"].where(e["eval_index"] != 2, np.nan)))
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2 and f"{file_of(study, 'evals.parquet')}: tokens_total is unknown (NaN) at evaluation 2 of " \
                           f"heldout; allowed: coordinates that never fall" in err


@pytest.fixture
def with_iterations(study):
    """The study, each run with the iterations.parquet its evaluations sit on (write_iterations)."""
    for arm, seed in study_runs.index(layout.study_dir(study)):
        folder = layout.run_dir(study, arm, seed)
        write_iterations(folder, read_parquet(folder / "evals.parquet"))
    return study


def test_counts_rewritten_in_order_are_refused_where_the_iterations_record_them(with_iterations, tmp_path, capsys):
    """mc_k2's evaluations recorded at twice the tokens they were spent at (a tool that recounted them), still in
    order: the contrast at equal tokens read seed 1 of mc_k2 at evaluation 1 (accuracy 0.58) as its B evaluation
    rather than evaluation 2 (0.25), without a word."""
    study = with_iterations
    status, row, _ = contrast(study, tmp_path, capsys)
    assert status == 0
    rewrite(study, "mc_k2", 1, "evals.parquet", lambda e: e.assign(tokens_total=2 * e["tokens_total"]))
    status, _, err = contrast(study, tmp_path, capsys)
    assert status == 2
    assert (f"{file_of(study, 'evals.parquet', seed=1)}: evaluation 1 of heldout, after 1 iterations, records "
            f"tokens_total 100.0, but {file_of(study, 'iterations.parquet', seed=1)} records 50.0 after them; "
            f"allowed: each evaluation at the counts of the iterations before it (0 before any)") in err


@pytest.mark.parametrize("column, values, said", [
    ("tokens_total", [50, 150, 100], "tokens_total falls from 150.0 to 100.0 at row 2"),
    ("iteration", [0, 1, 1], "iteration repeats from 1.0 to 1.0 at row 2"),
])
def test_iterations_that_do_not_count_up_are_refused(with_iterations, column, values, said):
    """iterations.parquet's tokens falling, or an iteration recorded twice: the breakdown (the one step that reads
    the file) counted other iterations as spent before B than the run's."""
    rewrite(with_iterations, "mc_k2", 2, "iterations.parquet", lambda i: i.assign(**{column: values}))
    with pytest.raises(DataError, match=rf"{file_of(with_iterations, 'iterations.parquet')}: {said}; allowed: each "
                                        rf"iteration once, its tokens, updates and seconds counted up along the run"):
        steps.breakdown_step(with_iterations, layout.study_dir(with_iterations))
