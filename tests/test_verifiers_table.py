"""The verifier rules side by side: disagreement rates per group, and the gold solutions' verdicts."""

import pandas as pd
import pytest

from mcgrpo.analysis.verifiers import disagreements, gold


def test_disagreement_rates_per_group_over_the_samples_both_rules_judged():
    samples = pd.DataFrame({
        "arm": ["a", "a", "a", "a", "b"], "eval_index": [1, 1, 1, 1, 1],
        "correct_whole_box": [True, False, False, True, True],
        "correct_paper": [True, True, False, True, True],
        "correct_math_verify": pd.array([True, True, pd.NA, pd.NA, True], dtype="boolean"),
    })
    table = disagreements(samples, ["arm", "eval_index"]).set_index("arm")
    assert table.loc["a", "n"] == 4 and table.loc["a", "acc_whole_box"] == 0.5 and table.loc["a", "acc_paper"] == 0.75
    assert table.loc["a", "whole_box_vs_paper"] == 0.25 and table.loc["a", "whole_box_vs_paper_count"] == 1
    assert table.loc["a", "whole_box_vs_math_verify"] == 0.5  # 1 of the 2 samples math-verify judged
    assert table.loc["a", "paper_vs_math_verify"] == 0.0 and table.loc["b", "whole_box_vs_paper"] == 0.0


def test_files_without_the_rule_columns_leave_those_numbers_empty():
    table = disagreements(pd.DataFrame({"arm": ["a"], "correct_default": [True]}), ["arm"])
    assert table["n"].tolist() == [1] and table[["acc_paper", "whole_box_vs_paper"]].isna().all(axis=None)


def test_gold_solutions_under_each_rule():
    problems = pd.DataFrame({"solution": [r"so \boxed{45^\circ}", r"\boxed{7}", "it is 3"], "answer": ["45", "7", "3"]})
    result = gold(problems)
    assert (result["acc_whole_box"], result["acc_paper"]) == (pytest.approx(2 / 3), 1.0)
    assert result["whole_box_vs_paper_count"] == 1 and pd.isna(result["acc_math_verify"])


def test_the_note_names_each_run_whose_math_verify_checks_overran_and_how_many():
    from mcgrpo.analysis.verifiers import overran_note
    samples = pd.DataFrame({"arm": ["a", "a", "b", "b"], "seed": [1, 1, 2, 3],
                            "math_verify_overran": pd.array([True, True, False, True], dtype="boolean")})
    assert overran_note(samples) == ("Warning: math-verify overran its CPU budget on 3 sample(s), each counted wrong "
                                     "(samples.parquet math_verify_overran; a seed 1: 2, b seed 3: 1).")


@pytest.mark.parametrize("column", [None, pd.array([pd.NA, pd.NA], dtype="boolean"), pd.array([False, False])])
def test_no_note_where_nothing_overran_or_math_verify_was_not_installed(column):
    from mcgrpo.analysis.verifiers import overran_note
    samples = pd.DataFrame({"arm": ["a", "a"], "seed": [1, 1]})
    assert overran_note(samples if column is None else samples.assign(math_verify_overran=column)) == ""
