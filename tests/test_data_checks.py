"""Data that cannot serve a run is refused before training, naming the file and the need."""

import pandas as pd
import pytest

from mcgrpo.core import config as study_config
from mcgrpo import data
from mcgrpo.data.checks import check_run_data


def test_data_that_serves_the_run_passes(study, world):
    pool, evals = world
    check_run_data(pool, evals, study_config.run_config(study, "outcome", 1), "d")


def test_a_pool_smaller_than_one_iteration_is_refused(study, world):
    pool, evals = world
    with pytest.raises(ValueError, match=r"d/pool.parquet holds 1 problems; recipe.prompts_per_iteration needs at least 2"):
        check_run_data(pool.head(1), evals, study_config.run_config(study, "outcome", 1), "d")


def test_an_eval_set_smaller_than_configured_is_refused(study, world):
    pool, evals = world
    with pytest.raises(ValueError, match=r"d/eval_heldout.parquet holds 2 problems; task.eval_sets.heldout.size asks for 6"):
        check_run_data(pool, {"heldout": evals["heldout"].head(2)}, study_config.run_config(study, "outcome", 1), "d")


def test_overlapping_training_and_evaluation_sets_are_refused(study, world):
    pool, evals = world
    leaky = pd.concat([pool, evals["heldout"].head(1)], ignore_index=True)
    with pytest.raises(ValueError, match="sets 'pool' and 'heldout' share questions"):
        check_run_data(leaky, evals, study_config.run_config(study, "outcome", 1), "d")


def test_missing_and_empty_files_are_named(tmp_path, world):
    pool, evals = world
    with pytest.raises(FileNotFoundError, match="pool.parquet: file not found"):
        data.read(tmp_path, ["heldout"])
    data.write(pool.head(0), evals, tmp_path, "")
    with pytest.raises(ValueError, match="pool.parquet: the training pool is empty"):
        data.read(tmp_path, ["heldout"])


def test_an_evaluation_set_holding_a_problem_twice_is_refused_naming_the_file(study, world):
    """A data folder whose evaluation set holds one problem under two ids (prepared before evaluation sets were kept
    distinct, or written by hand): every new run would count it twice in the set's accuracy."""
    pool, evals = world
    heldout = evals["heldout"]
    repeated = pd.concat([heldout, heldout.head(1).assign(problem_id="again/0")], ignore_index=True)
    with pytest.raises(ValueError, match=rf"d/eval_heldout.parquet: problem again/0 repeats "
                                         rf"{heldout['problem_id'].iloc[0]} \(exact match, similarity 1.00\); .*allowed: an evaluation "
                                         rf"set of distinct problems: move d away and rerun the workflow"):
        check_run_data(pool, {"heldout": repeated}, study_config.run_config(study, "outcome", 1), "d")
