import pandas as pd

from mcgrpo.analysis.drift import drift_table
from mcgrpo.core.store import COLUMNS

# Gaps are exact binary fractions so the threshold comparisons are exact.
EVALS = pd.DataFrame({
    "arm": ["b", "a", "a", "a"], "seed": [0, 1, 0, 0], "eval_index": [0, 0, 1, 0],
    "eval_set": ["test"] * 4, "tokens_total": [0, 0, 50, 0],
    "acc_default": [0.5, 0.625, 0.75, 0.4], "acc_strict": [0.5, 0.5, 0.5, 0.4]})


def test_drift_gap_and_flag():
    out = drift_table(EVALS)
    assert list(out.columns) == [*COLUMNS["drift"], "eval_set"]
    assert list(zip(out["arm"], out["seed"], out["eval_index"])) == [
        ("a", 0, 0), ("a", 0, 1), ("a", 1, 0), ("b", 0, 0)]
    assert out["gap"].tolist() == [0.0, 0.25, 0.125, 0.0]
    assert out["drifted"].tolist() == [False, True, True, False]


def test_drift_threshold_is_strict_and_configurable():
    assert drift_table(EVALS, gap=0.125)["drifted"].tolist() == [False, True, False, False]
    assert not drift_table(EVALS, gap=0.25)["drifted"].any()


def test_drift_counts_per_arm():
    from mcgrpo.analysis.drift import drift_counts
    out = drift_counts(drift_table(EVALS)).set_index("arm")
    assert out.loc["a", ["runs", "evaluations", "drifted", "runs_drifted"]].tolist() == [2, 3, 2, 2]
    assert out.loc["b", ["runs", "evaluations", "drifted", "runs_drifted"]].tolist() == [1, 1, 0, 0]
    assert out.loc["a", "max_gap"] == 0.25
