"""The numeric-answer filter and near-duplicate detection."""

import pandas as pd
import pytest

from mcgrpo.data import dedup, numeric


@pytest.mark.parametrize("answer, number, reason", [
    ("42", "42", "numeric"), ("-3.50", "-3.5", "numeric"), ("1,\\!000", "1000", "numeric"),
    ("10{,}000", "10000", "numeric"), (".5", "0.5", "numeric"), ("$7$", "7", "numeric"),
    (None, None, "no_answer"), ("  ", None, "no_answer"),
    ("\\frac{1}{2}", None, "fraction"), ("-\\dfrac{3}{4}", None, "fraction"), ("3/4", None, "fraction"),
    ("81, 256", None, "list"), ("(1,2)", None, "list"), ("2,16", None, "list"), ("(-\\infty, 3]", None, "list"),
    ("90^\\circ", None, "unit"), ("\\$1.05", None, "unit"), ("5\\text{ cm}", None, "unit"), ("10\\%", None, "unit"),
    ("2\\sqrt{3}", None, "expression"), ("\\pi", None, "expression"), ("x^2+1", None, "expression"),
    ("\\text{Saturday}", None, "expression"), ("1e5", None, "expression"),
])
def test_classify(answer, number, reason):
    assert numeric.classify(answer) == (number, reason)


def test_keep_and_report_count_per_level_and_reason():
    problems = pd.DataFrame({"answer": ["1,000", "\\frac12", "7", "(1,2)", "x"], "level": [3, 3, 4, 4, 5]})
    kept = numeric.keep(problems)
    assert kept["answer"].tolist() == ["1000", "7"] and kept["raw_answer"].tolist() == ["1,000", "7"]
    assert numeric.report(numeric.apply(problems)) == {
        "numeric_kept": 2, "numeric_by_level": {"3": 1, "4": 1},
        "numeric_dropped": {"no_answer": 0, "several_answers": 0, "fraction": 1, "list": 1, "unit": 0,
                            "expression": 1},
        "several_answers_by_level": {}}


def test_a_gold_solution_with_several_answers_is_dropped_whatever_its_last_box():
    problems = pd.DataFrame({"answer": ["4", "4"], "level": [2, 3], "several_answers": [True, False]})
    out = numeric.apply(problems)
    assert out["numeric_reason"].tolist() == ["several_answers", "numeric"]
    assert numeric.report(out)["several_answers_by_level"] == {"2": 1}


LONG = ("A bag holds red, blue and green marbles; one third of them are red and one quarter are blue, "
        "and there are 14 green marbles in the bag. How many marbles are in the bag?")


def test_normalization_ignores_case_spacing_and_markup():
    assert dedup.normalize("What is $\\dfrac{1}{2}$ of  10?") == dedup.normalize("what is \\frac{1}{2} of 10 ?")
    assert dedup.normalize("\\left( x \\right)") == dedup.normalize("(x)")


def test_jaccard_of_word_8_grams():
    assert dedup.jaccard(LONG, LONG) == 1.0
    changed = LONG.replace("14 green", "15 green")
    assert 0.6 <= dedup.jaccard(LONG, changed) < 1.0
    assert dedup.jaccard(LONG, "An entirely different question about trains leaving two stations at noon.") == 0.0
    assert dedup.jaccard("What is 2+3?", "What is 2+4?") == 0.0  # short texts: one gram each, exact or nothing


def test_index_names_the_match_and_why():
    evals = pd.DataFrame({"problem_id": ["e1", "e2"], "question": [LONG, "Compute 17 times 3."]})
    index = dedup.Index().add(evals, "heldout")
    pool = pd.DataFrame({"problem_id": ["p1", "p2", "p3", "p4"],
                         "question": ["COMPUTE 17 times 3 .", LONG.replace("14 green", "15 green"),
                                      "Compute 17 times 4.", LONG[:60]]})
    kept, removed = index.split(pool, "pool")
    assert kept["problem_id"].tolist() == ["p3", "p4"]
    assert removed[["problem_id", "reason", "match_set", "match_id"]].values.tolist() == [
        ["p1", "exact", "heldout", "e2"], ["p2", "near", "heldout", "e1"]]
    assert removed["similarity"].iloc[0] == 1.0 and 0.6 <= removed["similarity"].iloc[1] < 1
    assert list(removed.columns) == list(dedup.REMOVED_COLUMNS)


def test_check_disjoint_names_the_sets():
    a = pd.DataFrame({"question": ["What is 1+1?"]})
    b = pd.DataFrame({"question": ["what is 1 + 1 ?"]})
    dedup.check_disjoint({"pool": a, "other": pd.DataFrame({"question": ["x"]})})
    with pytest.raises(ValueError, match=r"sets 'pool' and 'heldout' share a problem"):
        dedup.check_disjoint({"pool": a, "heldout": b})
