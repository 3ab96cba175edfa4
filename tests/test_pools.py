"""Pools and evaluation sets from MATH / GSM8K files: levels, seeded draws, the further-problems set,
a transfer set, deduplication of the pool with its log, and the config rules of the task block."""

import copy
import json
import re

import pandas as pd
import pytest

from conftest import SMALL_STUDY
import data_fixtures
from data_fixtures import gsm8k_records, is_fraction, math_records, write_jsonl, write_tree
from mcgrpo import cli, data
from mcgrpo.core import config as study_config, store
from mcgrpo import studies
from mcgrpo.data import dedup


@pytest.fixture
def files(tmp_path):
    """MATH train (a JSON tree) and test (JSONL), GSM8K test; train holds an exact and a near copy of
    two level-3+ test problems."""
    train, test = math_records(60, seed=1), math_records(60, seed=2, split="test")
    exact, near = test[2], test[3]  # levels 3 and 4
    train[0] = {**train[0], "problem": "  " + exact["problem"].upper() + " ", "level": "Level 3"}
    train[1] = {**train[1], "problem": near["problem"].rsplit(" ", 1)[0] + " 12345678?", "level": "Level 4"}
    return {"train": str(write_tree(train, tmp_path / "MATH" / "train")),
            "test": str(write_jsonl(test, tmp_path / "math_test.jsonl")),
            "gsm8k": str(write_jsonl(gsm8k_records(15, seed=3), tmp_path / "gsm8k_test.jsonl"))}


def math_task(files, **eval_sets):
    return {"name": "math", "seed": 7, "pool": {"path": files["train"], "levels": [3, 4, 5], "size": None},
            "eval_sets": eval_sets or {"heldout": {"path": files["test"], "size": 10},
                                       "extra": {"path": files["test"], "size": None, "max_question_chars": 1000},
                                       "gsm8k": {"path": files["gsm8k"], "format": "gsm8k", "size": None}}}


def test_pools_and_evaluation_sets_as_in_the_paper(files):
    p = data.prepare(math_task(files))
    heldout, extra, transfer = p.evals["heldout"], p.evals["extra"], p.evals["gsm8k"]
    # levels 3-5 only, plain numeric answers only (every 7th fixture answer is a fraction)
    for frame in (p.pool, heldout, extra):
        assert set(frame["level"]) <= {3, 4, 5} and frame["answer"].str.fullmatch(r"-?\d+").all()
    assert len(heldout) == 10 and len(transfer) == 15 and set(transfer["level"]) == {0}
    # the further set: every other qualifying test problem, in no other set
    qualifying = [i for i in range(60) if i % 5 >= 2 and not is_fraction(i)]
    copies_of_pool = ((p.removed["set"] == "extra") & (p.removed["match_set"] == "pool")).sum()
    assert len(heldout) + len(extra) + copies_of_pool == len(qualifying)
    assert not set(heldout["problem_id"]) & set(extra["problem_id"])
    dedup.check_disjoint({"pool": p.pool, **p.evals})
    # the pool lost its copies of evaluation problems, and the log says which and why
    pool_removed = p.removed[p.removed["set"] == "pool"]
    assert not pool_removed.empty and set(pool_removed["reason"]) <= {"exact", "near"}
    assert "math/train/algebra/0" not in set(p.pool["problem_id"]) | set(extra["problem_id"])
    assert any(line.startswith("removed math/train/algebra/0 from ") for line in p.lines())
    assert p.report["pool"]["final"] == len(p.pool)


def test_copies_of_the_pool_leave_the_further_set_not_the_pool(files):
    p = data.prepare(math_task(files, extra={"path": files["test"], "size": None}))
    removed = p.removed.set_index("problem_id")
    assert removed.loc["math/test/algebra/2", ["set", "reason", "match_id"]].tolist() == \
        ["extra", "exact", "math/train/algebra/0"]
    assert removed.loc["math/test/algebra/3", "reason"] == "near"
    assert len(p.pool) == p.report["pool"]["in_levels"] and not (p.removed["set"] == "pool").any()


def test_draws_are_seeded_and_independent_of_other_sets(files):
    task = math_task(files)
    a, b = data.prepare(task), data.prepare(copy.deepcopy(task))
    assert a.evals["heldout"].equals(b.evals["heldout"]) and a.pool.equals(b.pool)
    other_seed = data.prepare({**copy.deepcopy(task), "seed": 8})
    assert not other_seed.evals["heldout"]["problem_id"].equals(a.evals["heldout"]["problem_id"])
    fewer_sets = copy.deepcopy(task)
    del fewer_sets["eval_sets"]["gsm8k"]
    assert data.prepare(fewer_sets).evals["heldout"].equals(a.evals["heldout"])


def test_the_further_set_leaves_out_long_questions(files):
    limit = int(pd.read_json(files["test"], lines=True)["problem"].str.len().median())
    extra = data.prepare(math_task(files, extra={"path": files["test"], "size": None,
                                                 "max_question_chars": limit})).evals["extra"]
    assert 0 < len(extra) < 26 and extra["question"].str.len().max() <= limit


@pytest.mark.parametrize("levels", [[4, 5], [5], [1, 2]])
def test_other_pool_levels(files, levels):
    task = math_task(files, heldout={"path": files["test"], "size": 3})
    task["pool"]["levels"] = levels
    p = data.prepare(task)
    assert set(p.pool["level"]) == set(levels)
    assert set(p.evals["heldout"]["level"]) <= set(levels)


def test_a_held_out_set_drawn_from_the_pool_source_leaves_the_pool(tmp_path):
    path = write_jsonl(gsm8k_records(40, seed=0), tmp_path / "train.jsonl")
    p = data.prepare({"name": "gsm8k", "seed": 1, "pool": {"path": str(path), "size": 20},
                      "eval_sets": {"heldout": {"size": 8}}})
    assert len(p.pool) == 20 and len(p.evals["heldout"]) == 8
    assert not set(p.pool["problem_id"]) & set(p.evals["heldout"]["problem_id"])
    assert (p.removed["reason"] == "exact").sum() == 8
    assert all(len(steps) == 2 for steps in p.pool["steps"])


def test_asking_for_more_than_qualifies_names_the_key(files):
    with pytest.raises(ValueError, match=r"config key task.eval_sets.heldout.size: 500 problems asked for set "
                                         r"'heldout', but only \d+ qualify"):
        data.prepare(math_task(files, heldout={"path": files["test"], "size": 500}))
    task = math_task(files, heldout={"path": files["test"], "size": 2})
    task["pool"]["size"] = 10_000
    with pytest.raises(ValueError, match=r"config key task.pool.size: 10000 problems asked"):
        data.prepare(task)
    with pytest.raises(ValueError, match=r"config key task.eval_sets.extra: no problem qualifies"):
        data.prepare(math_task(files, extra={"size": None}))  # the pool's own source: all duplicates


def _study(task):
    return {**copy.deepcopy(SMALL_STUDY), "task": task}


@pytest.mark.parametrize("task, message", [
    ({"name": "math", "eval_sets": {"heldout": {"size": 5}}},
     "config key task.pool: a 'math' task reads its problems from a source; give path"),
    ({"name": "gsm8k", "pool": {"path": "x.jsonl", "hf": {"name": "openai/gsm8k"}}, "eval_sets": {"heldout": {"size": 5}}},
     "config key task.pool: give path or hf, not both"),
    ({"name": "arith", "pool": {"path": "x.jsonl"}}, "config key task.pool.path: the arith task generates its problems"),
    ({"name": "arith", "eval_sets": {"heldout": {"size": None}}},
     "config key task.eval_sets.heldout.size: the arith task needs a number of problems"),
    ({"name": "math", "pool": {"path": "x", "format": "csv"}}, "config key task.pool.format: 'csv' is not one of"),
    ({"name": "math", "pool": {"hf": {"split": "test"}}}, "config key task.pool.hf: 'name' is a required property"),
])
def test_task_config_errors_name_the_key(task, message):
    with pytest.raises(study_config.ConfigError, match=re.escape(message)):
        studies.validate(_study(task))


def test_arith_keeps_its_pool_size_default():
    cfg = studies.validate(_study({"name": "arith", "eval_sets": {"heldout": {"size": 4}}}))
    assert cfg["task"]["pool"]["size"] == 3000


def test_prepare_data_writes_the_contract_and_the_dedup_log(files, tmp_path, capsys):
    task = math_task(files)
    assert cli.main(["prepare-data", "--task-json", json.dumps(task), "--out", str(tmp_path / "d")]) == 0
    pool = store.read_contract(tmp_path / "d" / "pool.parquet", "problems")
    removed = store.read_parquet(tmp_path / "d" / "removed.parquet", dedup.REMOVED_COLUMNS)
    assert len(pool) > 0 and set(removed["set"]) == {"pool", "extra"}
    for name in ("heldout", "extra", "gsm8k"):
        assert len(store.read_contract(tmp_path / "d" / f"eval_{name}.parquet", "problems")) > 0
    out = capsys.readouterr().out
    assert "heldout: 60 loaded, 52 numeric (dropped 8 fraction)" in out and "removed math/train/algebra/0" in out


def _repeats(records: list[dict], field: str) -> list[dict]:
    """`records` and three repeats under new ids: record 1 re-cased and re-spaced, record 4 itself, and record 7
    with its last word changed (a near-duplicate by dedup's 8-gram rule)."""
    def again(i, text, n):
        return {**records[i], field: text, "unique_id": f"test/algebra/repeat{n}.json"}
    near = records[7][field].rsplit(" ", 1)[0] + " 424242?"
    return [*records, again(1, "  " + records[1][field].upper().replace(" ", "  "), 1),
            again(4, records[4][field], 2), again(7, near, 3)]


@pytest.mark.parametrize("write", [write_jsonl, write_tree, data_fixtures.write_parquet])
def test_a_problem_repeated_within_an_evaluation_set_is_kept_once_and_logged(tmp_path, write):
    """An evaluation file (any format the loaders read) that holds one problem twice under two ids: before, both were
    kept and the problem counted twice in the set's accuracy. The first is kept; each later one is removed and
    logged as any deduplication, with its reason and the problem it repeats."""
    records = [{**r, "level": "Level 3"} for r in math_records(20, seed=2, split="test")]
    records = [r for i, r in enumerate(records) if not is_fraction(i)]
    test = write(_repeats(records, "problem"), tmp_path / "MATH" / "test" / "t.jsonl"
                 if write is write_jsonl else tmp_path / "MATH" / ("test" if write is write_tree else "t.parquet"))
    train = write_jsonl(math_records(30, seed=1), tmp_path / "train.jsonl")
    task = {"name": "math", "seed": 7, "pool": {"path": str(train), "levels": [3], "size": None},
            "eval_sets": {"further": {"path": str(test), "size": None}}}
    p = data.prepare(task)
    further = p.evals["further"]
    assert len(further) == len(records) and not further["problem_id"].str.contains("repeat").any()
    logged = p.removed[p.removed["set"] == "further"].set_index("problem_id")
    ids = {n: next(i for i in logged.index if i.endswith(f"repeat{n}")) for n in (1, 2, 3)}
    assert logged.loc[ids[1], ["reason", "match_set"]].tolist() == ["exact", "further"]
    assert logged.loc[ids[2], "reason"] == "exact" and logged.loc[ids[3], "reason"] == "near"
    assert logged.loc[ids[3], "match_id"] == "math/" + records[7]["unique_id"].removesuffix(".json")
    assert logged.loc[ids[3], "similarity"] >= dedup.THRESHOLD
    assert any(line.startswith(f"removed {ids[2]} from further: exact match of ") for line in p.lines())
    assert p.report["further"]["duplicates"] == 3


def test_a_drawn_evaluation_set_draws_distinct_problems_and_is_otherwise_the_set_it_always_drew(tmp_path):
    """A set with a size never holds one problem twice: a repeat drawn is logged and replaced by another draw, and
    a size above the distinct problems names the key. A draw that took no repeat is the draw as it always was (the
    set, and so its runs' data fingerprints, unchanged)."""
    import numpy as np
    from mcgrpo.core.seeds import stable_seed
    path = write_jsonl(_repeats(gsm8k_records(12, seed=5), "question"), tmp_path / "gsm8k_test.jsonl")
    pool = write_jsonl(gsm8k_records(30, seed=6), tmp_path / "gsm8k_train.jsonl")
    task = {"name": "gsm8k", "seed": 3, "pool": {"path": str(pool), "size": None},
            "eval_sets": {"heldout": {"path": str(path), "size": 12}}}
    p = data.prepare(task)
    heldout = p.evals["heldout"]
    assert len(heldout) == 12 and dedup.distinct(heldout, "heldout")[1].empty
    assert set(p.removed.loc[p.removed["set"] == "heldout", "match_set"]) == {"heldout"}
    task["eval_sets"]["heldout"]["size"] = 13
    with pytest.raises(ValueError, match=r"config key task.eval_sets.heldout.size: 13 problems asked for set "
                                         r"'heldout', but only 12 qualify"):
        data.prepare(task)
    task["eval_sets"]["heldout"]["size"] = 4
    candidates = pd.read_json(path, lines=True)
    before = np.sort(np.random.default_rng(stable_seed("draw", 3, "heldout")).choice(len(candidates), 4, replace=False))
    assert dedup.distinct(candidates.iloc[before].rename(columns={"unique_id": "problem_id"}), "h")[1].empty
    assert data.prepare(task).evals["heldout"]["question"].tolist() == candidates["question"].iloc[before].tolist()
