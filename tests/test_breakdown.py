import numpy as np
import pandas as pd
import pytest

from mcgrpo.analysis.breakdown import STAGES, group_shares, run_totals, stage_seconds


def iterations(seconds, groups, predicted=(np.nan,) * 4):
    """Four iterations of 100 tokens each with the given per-stage seconds, group counts and candidates'
    mean predicted success (the chosen prompts': 0.1 higher); 8 new prompts trained per iteration."""
    return {"tokens_total": np.array([100, 200, 300, 400]),
            **{f"t_{s}": np.full(4, seconds[i]) for i, s in enumerate(STAGES)},
            **{f"groups_{g}": np.full(4, groups[i]) for i, g in enumerate(("all_wrong", "all_correct", "mixed"))},
            "cand_pred_mean": np.array(predicted), "chosen_pred_mean": np.array(predicted) + 0.1,
            "prompts_distinct": np.array([8, 16, 24, 32])}


def test_run_totals_stop_at_the_evaluation_at_b():
    out = run_totals(iterations([0.5, 1, 2, 3, 0], [1, 2, 5]), tokens_at_budget=300)
    assert out["iterations"] == 3 and out["generate"] == 3.0 and out["update"] == 9.0
    assert (out["groups_all_wrong"], out["groups_all_correct"], out["groups_mixed"]) == (3, 6, 15)
    assert np.isnan(out["cand_pred_mean"]) and out["prompts_distinct"] == 24


def test_run_totals_average_predicted_success_over_the_iterations_that_have_one():
    # the filter's warm-up iterations predict nothing (NaN); the iteration after B is left out
    out = run_totals(iterations([0] * 5, [1, 2, 5], predicted=(np.nan, 0.2, 0.4, 0.9)), tokens_at_budget=300)
    assert out["cand_pred_mean"] == pytest.approx(0.3) and out["chosen_pred_mean"] == pytest.approx(0.4)


def test_stage_seconds_and_group_shares_average_over_seeds():
    totals = pd.DataFrame([
        {"arm": "a", "seed": 0, **run_totals(iterations([0, 1, 2, 1, 0], [2, 2, 4]), 400)},
        {"arm": "a", "seed": 1, **run_totals(iterations([0, 3, 2, 1, 0], [0, 2, 6]), 400)},
        {"arm": "b", "seed": 0, **run_totals(iterations([1, 1, 0, 2, 0], [4, 0, 4]), 200)}])
    stages = stage_seconds(totals).set_index("arm")
    # a: 4 iterations of 4 s (seed 0) and of 6 s (seed 1): totals 16 and 24, mean 20; generate 4 and 12
    assert stages.loc["a", "generate"] == 8.0 and stages.loc["a", "total"] == 20.0
    assert stages.loc["a", "share_credit"] == pytest.approx(8 / 20)
    assert stages.loc["b", "iterations"] == 2 and stages.loc["b", "seconds_per_iteration"] == 4.0
    assert stages.loc["a", "seeds"] == 2
    groups = group_shares(totals).set_index("arm")
    assert groups.loc["a", "share_mixed"] == pytest.approx(np.mean([0.5, 0.75]))
    assert groups.loc["b", "share_all_wrong"] == 0.5 and np.isnan(groups.loc["b", "mixed_low"])
    assert np.isnan(groups.loc["a", "cand_pred_mean"]) and groups.loc["a", "prompts_distinct"] == 32
    assert groups.loc["b", "prompts_distinct"] == 16
