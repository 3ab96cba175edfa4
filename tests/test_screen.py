"""`mcgrpo screen`: the one-arm gradient-test config, the predicted equal-tokens difference, the verb's errors."""

import numpy as np
import pandas as pd
import pytest

from conftest import edited_study
from mcgrpo import screen, studies
from mcgrpo.cli import main
from mcgrpo.core.errors import ConfigError, DataError


def test_an_arm_is_measured_with_its_shuffled_control_and_nothing_else():
    cfg = studies.validate(edited_study(gradient_tests={"batches": 4, "arms": ["mc_k2"],
                                                        "controls": {"other": {"outcome": {}}}, "k_sweep": [2]}))
    tests = screen.screen_config(cfg, "mc_k2", batches=3)["gradient_tests"]
    assert tests["arms"] == ["mc_k2"] and tests["k_sweep"] == [] and tests["batches"] == 3
    assert tests["controls"] == {"mc_k2_shuffled": {"shuffled": {"monte_carlo": {"k": 2, "cuts": 5}}}}
    assert screen.screen_config(cfg, "outcome")["gradient_tests"]["controls"] == {}
    assert screen.screen_config(cfg, "outcome")["gradient_tests"]["batches"] == 4  # the study's, by default


def test_an_arm_that_selects_prompts_or_is_missing_is_refused():
    cfg = studies.validate(edited_study(arms={"outcome": {}, "f": {"selection": {"critic_filter": {
        "candidates": 4, "keep": 1}}}}))
    with pytest.raises(ConfigError, match="arm 'f' selects prompts, which fixed batches cannot measure"):
        screen.screen_config(cfg, "f")
    with pytest.raises(ConfigError, match="--arm 'g': not an arm of study 'mini'; allowed: outcome, f"):
        screen.screen_config(cfg, "g")


def test_the_prediction_reads_the_base_curve_at_e_times_B(tmp_path):
    # accuracy 0.2 at 0 tokens rising linearly to 0.6 at B = 1000: acc(e B) - acc(B) = -0.4 (1 - e)
    pd.DataFrame({"tokens": [0.0, 1000.0], "accuracy": [0.2, 0.6]}).to_csv(tmp_path / "curve.csv", index=False)
    curve = screen.base_curve({}, str(tmp_path / "curve.csv"), None)
    assert curve[2] == 1000.0
    predicted = screen.predicted_difference(np.array([0.5, 0.25, 1.0, 2.0]), curve)
    assert predicted[:3] == pytest.approx([-0.2, -0.3, 0.0]) and np.isnan(predicted[3])  # e > 1: off the curve
    # B given: the difference is read at e x B against B on the same curve
    at_500 = screen.predicted_difference(np.array([0.5]), screen.base_curve({}, str(tmp_path / "curve.csv"), 500))
    assert at_500 == pytest.approx([-0.1])


def test_a_curve_without_its_columns_is_named(tmp_path):
    pd.DataFrame({"tokens": [1.0]}).to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(DataError, match="no column\\(s\\) accuracy"):
        screen.base_curve({}, str(tmp_path / "c.csv"), None)


def test_screening_before_the_model_is_built_says_how_to_build_it(tmp_path, capsys):
    import yaml
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(edited_study(results_dir=str(tmp_path / "results"))))
    assert main(["screen", "--config", str(study), "--arm", "mc_k2"]) == 2
    err = capsys.readouterr().err
    assert "the study's model and data are not built yet" in err and "screen_arm=mc_k2" in err


def test_a_rule_constant_within_a_completion_is_screened_without_a_shuffled_control():
    """Shuffling a built-in credit that is constant within each completion changes nothing (the study's checks
    refuse such a control), so the screen measures the arm alone."""
    cfg = studies.validate(edited_study(arms={"outcome": {}, "short": {"credit": {"length": {"lambda": 0.1}}}}))
    tests = screen.screen_config(cfg, "short")["gradient_tests"]
    assert tests["arms"] == ["short"] and tests["controls"] == {}


def test_an_update_inside_v_reads_as_such_not_as_nan():
    """A rule with nothing outside V (outcome-only, a format bonus) has no alignment there: said in words."""
    row = {"per_update": 1.0, "per_update_low": 1.0, "per_update_high": 1.0, "per_token": 1.0, "per_token_low": 1.0,
           "per_token_high": 1.0, "share_outside_v": 0.0, "tokens": 1847.0, "budget": np.nan}
    table = pd.DataFrame([{**row, "arm": "outcome", "alignment": np.nan},
                          {**row, "arm": "mc_k2", "alignment": 0.25, "share_outside_v": 0.4}])
    lines = screen.render(table, "mc_k2", "no curve")
    assert "alignment outside V n/a (inside V), share outside V 0.000" in lines[0] and "nan" not in lines[0]
    assert "alignment outside V +0.250, share outside V 0.400" in lines[1]
