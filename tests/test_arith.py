"""The built-in arithmetic task: correct worked solutions, level shapes, disjoint splits."""

import re
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from mcgrpo.data.arith import (COLUMNS, LEVELS, Problem, build, check_disjoint,
                               is_eval_eligible, make_problem, solve)
from mcgrpo.core.verify import is_correct

EVAL_SETS = {"test": {"size": 60, "levels": [2, 3, 4, 5]}, "hard": {"size": 30, "levels": [5]}}
STEP = re.compile(r"(-?\d+)([-+*])(-?\d+)=(-?\d+)")


@pytest.fixture(scope="module")
def built():
    return build(7, 300, [1, 2, 3, 4, 5], EVAL_SETS)


@pytest.fixture(scope="module")
def problems():
    rng = np.random.default_rng(0)
    return [make_problem(rng, level) for level in LEVELS for _ in range(200)]


def all_frames(built):
    pool, evals = built
    return {"pool": pool, **evals}


def test_solve_example():
    assert solve("3+4*(5-2)") == ("5-2=3,4*3=12,3+12=15 \\boxed{15}", ("3", "12", "15"))


@pytest.mark.parametrize("question, solution", [
    ("3-9", "3-9=-6 \\boxed{-6}"),
    ("2-5*3", "5*3=15,2-15=-13 \\boxed{-13}"),
    ("(1-4)*4", "1-4=-3,-3*4=-12 \\boxed{-12}"),
    ("(1+2)*(3-4)", "1+2=3,3-4=-1,3*-1=-3 \\boxed{-3}"),
    ("((1+2)*3-4)+5", "1+2=3,3*3=9,9-4=5,5+5=10 \\boxed{10}"),
    ("2*(3+(4-1))", "4-1=3,3+3=6,2*6=12 \\boxed{12}"),
    ("7", "\\boxed{7}"),
])
def test_solve_order_and_format(question, solution):
    assert solve(question)[0] == solution
    assert solution.endswith(f"\\boxed{{{eval(question)}}}")


@pytest.mark.parametrize("question", ["", "3+", "+3", "(3", "3)", "()", "3(4)", "3 + 4", "3/4",
                                      "a+1", ")3("])
def test_solve_rejects_malformed(question):
    with pytest.raises(ValueError, match="expression|character"):
        solve(question)


def test_solutions_are_correct_and_short(problems):
    for p in problems:
        assert isinstance(p, Problem)
        assert int(p.answer) == eval(p.question)
        assert p.steps[-1] == p.answer
        assert p.solution.endswith(f" \\boxed{{{p.answer}}}")
        assert len(p.solution) <= 60 and abs(int(p.answer)) <= 9999
        assert is_correct(p.solution, p.answer, "strict")


def test_every_step_is_one_true_operation(problems):
    for p in problems:
        work = p.solution.rsplit(" ", 1)[0].split(",")
        assert len(work) == len(p.steps) == len(re.findall(r"\d+", p.question)) - 1
        for step, value in zip(work, p.steps):
            a, op, b, c = STEP.fullmatch(step).groups()
            assert eval(f"{a}{op}({b})") == int(c) and c == value


@pytest.mark.parametrize("level, terms, high, ops, parens", [
    (1, 2, 9, "+-", {0}),
    (2, 3, 20, "+-", {0}),
    (3, 3, 12, "+-*", {0}),
    (4, 4, 20, "+-*", {1}),
    (5, 5, 30, "+-*", {1, 2}),
])
def test_level_shapes(problems, level, terms, high, ops, parens):
    questions = [p.question for p in problems if p.level == level]
    assert questions
    for q in questions:
        operands = [int(x) for x in re.findall(r"\d+", q)]
        assert len(operands) == terms and all(1 <= x <= high for x in operands)
        assert set(re.sub(r"[\d()]", "", q)) <= set(ops)
        assert q.count("(") in parens and q.count("(") == q.count(")")
    if level == 3:
        assert all("*" in q for q in questions)
    if level == 5:
        assert {q.count("(") for q in questions} == {1, 2}


@pytest.mark.parametrize("level", [0, 6, "1"])
def test_unknown_level(level):
    with pytest.raises(ValueError, match=r"unknown level .*; allowed: 1, 2, 3, 4, 5"):
        make_problem(np.random.default_rng(0), level)


def test_build_is_deterministic(built):
    pool, evals = build(7, 300, [1, 2, 3, 4, 5], EVAL_SETS)
    pd.testing.assert_frame_equal(pool, built[0])
    for name, frame in evals.items():
        pd.testing.assert_frame_equal(frame, built[1][name])
    other, _ = build(8, 300, [1, 2, 3, 4, 5], EVAL_SETS)
    assert list(other["question"]) != list(pool["question"])


def test_eval_sets_do_not_depend_on_pool_size(built):
    _, evals = build(7, 20, [2], EVAL_SETS)
    for name, frame in evals.items():
        pd.testing.assert_frame_equal(frame, built[1][name])


def test_columns_and_dtypes(built):
    for name, frame in all_frames(built).items():
        assert list(frame.columns) == list(COLUMNS)
        assert frame["level"].dtype == np.int64
        for column in ("problem_id", "question", "answer", "solution", "subject", "source"):
            assert all(isinstance(x, str) for x in frame[column])
        assert all(isinstance(s, list) and all(isinstance(x, str) for x in s)
                   for s in frame["steps"])
        assert set(frame["subject"]) == set(frame["source"]) == {"arith"}
        assert list(frame["problem_id"]) == [f"arith-{name}-{i:06d}" for i in range(len(frame))]


def test_sizes_and_round_robin_levels(built):
    pool, evals = built
    assert len(pool) == 300
    assert list(pool["level"]) == [1, 2, 3, 4, 5] * 60
    assert list(evals["test"]["level"]) == [2, 3, 4, 5] * 15
    assert len(evals["hard"]) == 30 and set(evals["hard"]["level"]) == {5}


def test_rows_are_valid(built):
    for frame in all_frames(built).values():
        for row in frame.itertuples():
            assert int(row.answer) == eval(row.question)
            assert (row.solution, tuple(row.steps)) == solve(row.question)


def test_splits_are_disjoint_by_construction(built):
    pool, evals = built
    check_disjoint(pool, evals)
    assert not any(map(is_eval_eligible, pool["question"]))
    assert all(all(map(is_eval_eligible, frame["question"])) for frame in evals.values())
    for frame in all_frames(built).values():
        assert frame["question"].is_unique
    for a, b in combinations(all_frames(built).values(), 2):
        assert not set(a["question"]) & set(b["question"])


def test_check_disjoint_names_the_overlap(built):
    pool, evals = built
    leaked = pd.concat([evals["test"], pool.iloc[[5]]])
    example = re.escape(repr(pool["question"][5]))
    with pytest.raises(ValueError, match=rf"'pool' and 'test'.*{example}"):
        check_disjoint(pool, {**evals, "test": leaked})
    spaced = evals["test"].assign(question=lambda f: f["question"].str.replace("+", " + "))
    with pytest.raises(ValueError, match="'test' and 'hard'|'hard' and 'test'"):
        check_disjoint(pool, {"test": evals["test"], "hard": spaced})


def test_level_that_cannot_supply_enough_problems():
    with pytest.raises(ValueError, match=r"level 1 has at most 162 distinct questions.*'pool'"):
        build(0, 200, [1], {})
    with pytest.raises(ValueError, match=r"level 1 has at most 162 distinct questions.*'small'"):
        build(0, 0, [], {"small": {"size": 40, "levels": [1]}})


def test_level_one_can_be_nearly_exhausted():
    pool, _ = build(0, 100, [1], {})
    assert pool["question"].is_unique and len(pool) == 100


def test_build_rejects_bad_sets():
    with pytest.raises(ValueError, match="reserved"):
        build(0, 10, [2], {"pool": {"size": 1, "levels": [2]}})
    with pytest.raises(ValueError, match="no levels"):
        build(0, 10, [], {})
    with pytest.raises(ValueError, match="unknown level 9"):
        build(0, 10, [9], {})


def test_warm_start_corpus_is_training_side_and_deterministic():
    from mcgrpo.data import arith

    a = arith.corpus(3, 500, [1, 2, 3, 4])
    assert a.equals(arith.corpus(3, 500, [1, 2, 3, 4]))
    assert a["level"].value_counts().to_dict() == {1: 125, 2: 125, 3: 125, 4: 125}
    assert not any(arith.is_eval_eligible(q) for q in a["question"])
    _, evals = arith.build(3, 10, [1, 2], {"heldout": {"size": 20, "levels": [1, 2, 3, 4]}})
    arith.check_disjoint(a.drop_duplicates("question"), evals)
