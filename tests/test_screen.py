"""`mcgrpo screen`: the one-arm gradient-test config, the predicted equal-tokens difference, the verb's errors."""

import re

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


def test_an_arm_rewarded_by_its_own_verifier_is_refused_by_its_key():
    """The gradient tests reward every arm's rollouts by the study's verifier: an arm rewarded by its own would be
    measured under a reward it does not train on, so neither the screen nor the study's stage measures it. An arm
    whose own verifier is the study's is measured."""
    arms = {"outcome": {}, "strict": {"recipe": {"reward_verifier": "strict"}},
            "same": {"credit": {"monte_carlo": {"k": 2}}, "recipe": {"reward_verifier": "default"}}}
    cfg = studies.validate(edited_study(arms=arms))
    with pytest.raises(ConfigError, match=re.escape(
            "arm 'strict' is rewarded by its own verifier (arms.strict.recipe.reward_verifier: 'strict'), and the "
            "gradient tests measure every arm on the same rollouts, rewarded by the study's ('default')")):
        screen.screen_config(cfg, "strict")
    assert screen.screen_config(cfg, "same")["gradient_tests"]["arms"] == ["same"]
    with pytest.raises(ConfigError, match=re.escape("config key gradient_tests.arms[0]: arm 'strict' is rewarded")):
        studies.validate(edited_study(arms=arms, gradient_tests={"arms": ["strict"]}))


def test_the_prediction_reads_the_base_curve_at_e_times_B(tmp_path):
    # accuracy 0.2 at 0 tokens rising linearly to 0.6 at B = 1000: acc(e B) - acc(B) = -0.4 (1 - e)
    pd.DataFrame({"tokens": [0.0, 1000.0], "accuracy": [0.2, 0.6]}).to_csv(tmp_path / "curve.csv", index=False)
    curve = screen.base_curve({}, str(tmp_path / "curve.csv"), None)[0]
    assert curve.budget == 1000.0 and curve.seeds == 0
    predicted = screen.predicted_difference(np.array([0.5, 0.25, 1.0, 2.0]), curve)
    assert predicted[:3] == pytest.approx([-0.2, -0.3, 0.0]) and np.isnan(predicted[3])  # e > 1: off the curve
    # B given: the difference is read at e x B against B on the same curve
    at_500 = screen.predicted_difference(np.array([0.5]), screen.base_curve({}, str(tmp_path / "curve.csv"), 500)[0])
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


def _evals(rows: dict[int, list[tuple[float, float]]]) -> pd.DataFrame:
    """A base's evaluations: seed -> [(tokens_total, acc_default), ...]."""
    return pd.DataFrame([{"seed": seed, "tokens_total": t, "acc_default": a}
                         for seed, points in rows.items() for t, a in points])


def test_the_prediction_carries_the_base_curves_spread_over_seeds():
    # three seeds whose curves rise linearly to B = 1000: by 0.3, 0.4 and 0.5
    evals = _evals({s: [(0.0, 0.5 - rise), (1000.0, 0.5)] for s, rise in ((1, 0.3), (2, 0.4), (3, 0.5))})
    curve = screen.seed_curve(evals, "acc_default", 1000.0)
    assert curve.seeds == 3
    at_half = screen.predicted_difference(np.array([0.5]), curve)
    assert at_half == pytest.approx([-0.2])  # the mean rise 0.4, half of it
    from scipy import stats
    half_width = stats.t.ppf(0.975, 2) * stats.sem([0.15, 0.2, 0.25])
    low, high, note = screen.predicted_interval(0.5, 0.5, curve)  # no efficiency uncertainty: the band alone
    assert (low, high) == pytest.approx((-0.2 - half_width, -0.2 + half_width)) and note == ""
    # ends given high to low, and an efficiency interval as well: ordered, and wider than either alone
    low2, high2, _ = screen.predicted_interval(0.75, 0.25, curve)
    assert low2 < low < high < high2 and low2 == pytest.approx(-0.3 - stats.t.ppf(0.975, 2) * stats.sem([0.225, 0.3, 0.375]))


def test_the_prediction_is_printed_in_points_low_to_high_with_notes_only_where_they_apply(tmp_path):
    pd.DataFrame({"tokens": [0.0, 1000.0], "accuracy": [0.2, 0.6]}).to_csv(tmp_path / "curve.csv", index=False)
    curve = screen.base_curve({}, str(tmp_path / "curve.csv"), None)[0]
    row = {"per_update": 1.2, "per_update_low": 1.1, "per_update_high": 1.4, "alignment": 0.5, "share_outside_v": 0.1,
           "tokens": 9000.0}
    table = pd.DataFrame([{**row, "arm": "mc", "per_token": 0.5, "per_token_low": 0.4, "per_token_high": 0.6}])
    points = screen.predicted_difference(table["per_token"].to_numpy(), curve)
    low, high, note = screen.predicted_interval(0.4, 0.6, curve)
    table = table.assign(predicted_diff=points, predicted_diff_low=low, predicted_diff_high=high,
                         predicted_note=note, budget=curve.budget)
    line = screen.render(table, "mc", "curve c.csv")[-1]
    assert line == ("predicted equal-tokens difference of mc against outcome-only at B = 1000 (curve c.csv): "
                    "-20.0 [-24.0, -16.0] points (the base's curve carries no uncertainty of its own here (a curve "
                    "file): the interval is the efficiency's)")
    assert "NaN" not in line
    # past the curve's end: the part beyond it left out, and said
    low, high, note = screen.predicted_interval(0.8, 1.3, curve)
    assert (low, high) == pytest.approx((-0.08, 0.0)) and "read up to e = 1, where the base's curve ends" in note


def test_batches_below_two_name_the_flag():
    cfg = studies.validate(edited_study())
    with pytest.raises(ConfigError, match="--batches 1: the intervals are bootstrapped over batches, which needs at "
                                          "least 2; allowed: an integer >= 2"):
        screen.screen_config(cfg, "mc_k2", batches=1)


def _tests(base_inner):
    """Gradient-test rows of outcome and mc over two batches, outcome's inner products `base_inner`."""
    rows = []
    for batch, inner in enumerate(base_inner):
        for arm, values in (("outcome", {"inner": inner, "sq_norm": inner, "tokens": 400.0}),
                            ("mc", {"inner": 2.0, "sq_norm": 3.0, "tokens": 3000.0})):
            values = {**values, "alignment": 0.5, "share_outside_v": 0.5, "projection_residual": 0.0,
                      "cos_full": 0.9}
            rows += [{"arm": arm, "batch": batch, "measure": m, "value": v} for m, v in values.items()]
    return pd.DataFrame(rows)


def test_a_base_without_gradient_in_every_batch_is_why_no_prediction_is_defined(tmp_path):
    """SmolLM2 on arith: outcome-only's update was 0 in both batches, and the note blamed the base's curve."""
    pd.DataFrame({"tokens": [0.0, 1000.0], "accuracy": [0.2, 0.6]}).to_csv(tmp_path / "curve.csv", index=False)
    curve = screen.base_curve({}, str(tmp_path / "curve.csv"), None)[0]
    silent = screen.summarize(_tests([0.0, 0.0]), {}, curve).set_index("arm").loc["mc"]
    assert np.isnan(silent["predicted_diff"])
    assert silent["predicted_note"].startswith("not defined: outcome's update was exactly 0 in all 2 batches")
    assert "outside the base's curve" not in silent["predicted_note"]
    once = screen.summarize(_tests([0.0, 1.0]), {}, curve).set_index("arm").loc["mc"]
    assert "exactly 0" not in once["predicted_note"]


def test_an_undefined_efficiency_interval_is_called_undefined_not_outside_the_curve(tmp_path):
    pd.DataFrame({"tokens": [0.0, 1000.0], "accuracy": [0.2, 0.6]}).to_csv(tmp_path / "curve.csv", index=False)
    curve = screen.base_curve({}, str(tmp_path / "curve.csv"), None)[0]
    low, high, note = screen.predicted_interval(np.nan, np.nan, curve)
    assert np.isnan(low) and np.isnan(high) and note.startswith("the efficiency's interval is not defined")
    assert screen.predicted_interval(1.5, 2.0, curve)[2] == "the efficiency's interval lies outside the base's curve (e 0.05 to 1)"


def test_a_budget_past_the_curve_file_is_refused_not_read_as_no_difference(tmp_path):
    """--budget 4000 on a curve ending at 1000 tokens read acc(B) and acc(e B) off the curve's last point held
    flat: a predicted difference of 0.0 points that nothing measured (a B given in other units than the file's)."""
    pd.DataFrame({"tokens": [0.0, 1000.0], "accuracy": [0.2, 0.6]}).to_csv(tmp_path / "curve.csv", index=False)
    with pytest.raises(DataError, match=r"--budget 4000: beyond the last point of --curve .*curve.csv \(tokens "
                                        r"1000\).*allowed: a B the curve reaches \(at most 1000 generated tokens"):
        screen.base_curve({}, str(tmp_path / "curve.csv"), 4000)


@pytest.mark.parametrize("tokens, accuracy, named", [
    ([0.0, 1000.0], [20.0, 60.0], "column accuracy holds 20; allowed: a share of correct samples in [0, 1]"),
    ([0.0, 500.0, np.nan], [0.2, 0.4, 0.6], "column tokens holds nan; allowed: finite counts"),
    ([0.0, 1000.0], [0.2, np.nan], "column accuracy holds nan"),
])
def test_a_curve_file_the_prediction_would_misread_is_named(tmp_path, tokens, accuracy, named):
    """An accuracy in percent printed a difference a hundred times too large in points; an unknown token count,
    sorted last, was taken for B (every prediction not defined, called outside the curve)."""
    pd.DataFrame({"tokens": tokens, "accuracy": accuracy}).to_csv(tmp_path / "curve.csv", index=False)
    with pytest.raises(DataError, match=re.escape(named)):
        screen.base_curve({}, str(tmp_path / "curve.csv"), None)


def _trained_base(tmp_path):
    """A study folder, where the workflow puts it, whose outcome and mc_k2 runs are trained and linked under the
    keys of its config (rising from 0.2 to 0.6 at B = 100 tokens): (config, study folder)."""
    from mcgrpo.core import config as study_config
    from mcgrpo.core import layout
    from mcgrpo.core.budget import budget_table
    from mcgrpo.core.store import write_json, write_parquet
    from test_runs import linked_run, seal_run, write_iterations, write_run
    cfg = studies.validate(edited_study(results_dir=str(tmp_path / "results")))
    root, keys = layout.study_dir(cfg), layout.run_keys(cfg)
    write_parquet(budget_table("tiny", [10], 100, "config"), root / "calibration" / "budget.parquet")
    skill = np.linspace(0.2, 0.6, 3)[:, None, None]
    for arm, seed in study_config.runs(cfg):
        folder = linked_run(root, arm, seed, tmp_path / "store" / keys[arm, seed])
        _, evals = write_run(folder, np.random.default_rng(seed).random((3, 6, 2)) < skill, eval_sets=("heldout",))
        write_iterations(folder, evals)
        write_json({"started": "2025-01-02T00:00:00+00:00", "config": study_config.run_config(cfg, arm, seed)},
                   folder / "run.json")
        seal_run(folder)
    return cfg, root


def test_the_base_curve_is_read_only_from_runs_of_this_config(tmp_path):
    """The screen measures the arm under the config it is given, but read the prediction off whatever base runs
    the study's index linked: runs trained before recipe.lr was edited (or a --config override) were taken for this
    config's base without a word. Now no prediction is read from them, and the words say why."""
    cfg, _ = _trained_base(tmp_path)
    assert screen.base_curve(cfg, None, None)[0].seeds == 2
    edited = studies.validate(edited_study(results_dir=cfg["results_dir"], recipe__lr=2e-6))
    assert screen.base_curve(edited, None, None) == (None, screen.trained_elsewhere(edited))
    assert screen.trained_elsewhere(cfg) == ""
    why = screen.trained_elsewhere(edited)
    assert why.startswith("the study's trained outcome runs (seed 1, 2, ") and "another config than this one" in why
    # an arm added on the command line (docs/plugins.md's way to screen one) leaves the base's keys as they were
    added = studies.validate(edited_study(results_dir=cfg["results_dir"], arms={
        **edited_study()["arms"], "mine": {"credit": {"monte_carlo": {"k": 4}}}}))
    assert screen.trained_elsewhere(added) == ""


def test_an_update_against_the_reference_gradient_predicts_nothing(tmp_path):
    """Efficiency squares E<u, h>: an arm whose update lowered expected accuracy in every batch (inner -2) read as
    efficient as one raising it, and the screen printed a predicted difference as for an arm that learns, without
    saying the sign (the study's table has inner_se; the screen's lines did not). Now it is not defined, and why."""
    pd.DataFrame({"tokens": [0.0, 1000.0], "accuracy": [0.2, 0.6]}).to_csv(tmp_path / "curve.csv", index=False)
    curve = screen.base_curve({}, str(tmp_path / "curve.csv"), None)[0]
    tests = _tests([1.0, 1.5])
    climbing = screen.summarize(tests, {}, curve).set_index("arm").loc["mc"]
    assert np.isfinite(climbing["predicted_diff"]) and "E<u, h>" not in climbing["predicted_note"]
    falling = tests.assign(value=np.where((tests["arm"] == "mc") & (tests["measure"] == "inner"), -2.0, tests["value"]))
    row = screen.summarize(falling, {}, curve).set_index("arm").loc["mc"]
    assert row["per_update"] == climbing["per_update"]  # the squared efficiency cannot tell the two apart
    assert np.isnan(row["predicted_diff"]) and np.isnan(row["predicted_diff_low"])
    assert row["predicted_note"].startswith("not defined: E<u, h> of mc is -2, not positive")
    line = screen.render(screen.summarize(falling, {}, curve), "mc", "curve c.csv")[-1]
    assert "not defined [not defined] points (not defined: E<u, h> of mc is -2" in line


def test_a_budget_without_a_curve_file_is_refused_not_ignored(tmp_path):
    cfg, _ = _trained_base(tmp_path)
    with pytest.raises(ConfigError, match="--budget 5000: given without --curve, but the study's trained base is "
                                          "read at the B its runs trained to"):
        screen.base_curve(cfg, None, 5000.0)


NO_BASE = "no trained base in the study's results and no --curve given"


def test_a_base_that_cannot_be_read_is_named_not_called_absent(tmp_path):
    """A base run edited after sealing, or one that never finished, was "no trained base": false, there is one, it
    cannot be read. Now the screen says the reader's own words (which file, the remedy); "no trained base" is kept
    for a study with none linked."""
    cfg, root = _trained_base(tmp_path)
    curve, source = screen.base_curve(cfg, None, None)
    assert curve.seeds == 2 and source == "the study's trained outcome runs, 2 seeds"
    evals = root / "runs" / "outcome" / "seed1" / "evals.parquet"
    evals.write_bytes(evals.read_bytes() + b"\0")  # edited after the run sealed it
    curve, source = screen.base_curve(cfg, None, None)
    assert curve is None and NO_BASE not in source
    assert source.startswith("no curve is read from the study's trained outcome runs: the study's runs cannot be "
                             "read: ") and "seed1/evals.parquet: sha256 differs" in source
    assert "check-store --repair" in source
    (root / "runs" / "outcome" / "seed1" / "manifest.json").unlink()  # as a run that never finished
    for p in (root / "runs" / "outcome" / "seed1").resolve().iterdir():
        p.unlink()
    curve, source = screen.base_curve(cfg, None, None)
    assert curve is None and "outcome/seed1: its run" in source and "never finished" in source


def test_the_base_curve_is_read_while_another_arm_is_still_training(tmp_path):
    """The screen reads the base's runs alone: an mc_k2 run not finished yet (no manifest) blocked the base's curve,
    which is all the screen reads."""
    cfg, root = _trained_base(tmp_path)
    before, _ = screen.base_curve(cfg, None, None)
    (root / "runs" / "mc_k2" / "seed1" / "manifest.json").unlink()  # as a run still training
    curve, source = screen.base_curve(cfg, None, None)
    assert source == "the study's trained outcome runs, 2 seeds"
    np.testing.assert_array_equal(curve.diff, before.diff)


def test_no_trained_base_is_said_only_where_there_is_none(tmp_path):
    cfg = studies.validate(edited_study(results_dir=str(tmp_path / "results")))
    assert screen.base_curve(cfg, None, None) == (None, NO_BASE)
    pd.DataFrame({"tokens": [0.0, 1000.0], "accuracy": [0.2, 0.6]}).to_csv(tmp_path / "curve.csv", index=False)
    curve, source = screen.base_curve(cfg, str(tmp_path / "curve.csv"), None)
    assert curve.budget == 1000 and source == f"curve {tmp_path / 'curve.csv'}"


def test_a_metric_the_base_runs_do_not_record_is_named(tmp_path):
    """The screen reads the curve from evals.parquet; a study whose first metric is pass@k (read from samples) had
    "no trained base" said of a base that is there."""
    cfg, _ = _trained_base(tmp_path)
    cfg = {**cfg, "analysis": {**cfg["analysis"], "metrics": ["pass@2_default"]}}
    curve, source = screen.base_curve(cfg, None, None)
    assert curve is None and NO_BASE not in source
    assert "pass@2_default" in source and "acc_default" in source


class Loud:
    """A credit rule that prints as it works, as a researcher's rule may: outcome-only credit, a line on stdout."""

    def __call__(self, rollouts, ctx):
        from mcgrpo import api
        print(f"my rule: {len(rollouts.texts)} completions")
        return api.Credit(api.per_token(api.group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps),
                                        rollouts))


def test_what_a_plugin_prints_leaves_the_json_on_stdout_whole(tmp_path, capsys):
    """`screen --json` prints one object on stdout, for a pipe to read: a plugin's own prints go to stderr."""
    import json
    import yaml
    from conftest import build_model, build_tokenizer
    from mcgrpo.core import layout
    from mcgrpo.train import models
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(edited_study(
        results_dir=str(tmp_path / "results"), arms={"outcome": {}, "loud": {"credit": {f"{__name__}:Loud": {}}}})))
    study = studies.load(tmp_path / "s.yaml")
    assert main(["prepare-data", "--task-json", json.dumps(study["task"]), "--out", str(layout.data_dir(study))]) == 0
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, **study["model"]["tiny"], seed=0), tokenizer, layout.model_path(study))
    pd.DataFrame({"tokens": [0.0, 1000.0], "accuracy": [0.2, 0.6]}).to_csv(tmp_path / "curve.csv", index=False)
    capsys.readouterr()
    assert main(["screen", "--config", str(tmp_path / "s.yaml"), "--arm", "loud", "--batches", "2", "--json",
                 "--curve", str(tmp_path / "curve.csv"), "--out", str(tmp_path / "screened")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["arm"] == "loud" and "my rule: " in err
