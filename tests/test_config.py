"""Config validation: defaults filled, and every bad config named by its key before any job."""

import copy

import pytest

from conftest import ROOT, edited_study
from mcgrpo.core import config as study_config
from mcgrpo import studies
from mcgrpo.core.config import ConfigError


def test_default_study_is_valid_and_defaults_are_filled():
    cfg = studies.load(ROOT / "config" / "config.yaml")
    assert cfg["recipe"]["adam_betas"] == [0.9, 0.999] and cfg["engine"]["name"] == "hf"
    assert cfg["arms"]["outcome"]["credit"] == {"outcome": {}}
    assert cfg["arms"]["mc_k4"]["credit"] == {"monte_carlo": {"k": 4, "cuts": 5, "prompt_value": 0.5}}
    assert cfg["arms"]["filter"]["selection"]["critic_filter"]["candidates"] == 24
    assert cfg["arms"]["random"]["selection"]["random_choice"]["keep"] == 6
    assert study_config.pairs(cfg) == [("mc_k4", "outcome"), ("filter", "outcome"), ("random", "outcome"),
                                       ("filter", "random")]
    assert len(study_config.runs(cfg)) == len(cfg["arms"]) * len(cfg["seeds"]) == 16


@pytest.mark.parametrize("changes, message", [
    ({"recipe__group_sise": 4}, "config key recipe: unknown key(s) 'group_sise'; allowed: adam_betas"),
    ({"recipe__lr": "fast"}, "config key recipe.lr: 'fast' is not of type 'number'"),
    ({"recipe__group_size": 1}, "config key recipe.group_size: 1 is less than the minimum of 2"),
    ({"seeds": [1, 1]}, "config key seeds: [1, 1] has non-unique elements"),
    ({"arms__mc__credit": {"montecarlo": {}}}, "config key arms.mc.credit: 'montecarlo' is not installed; installed credit rules: outcome, rloo"),
    ({"evaluation__sets": ["test"]}, "config key evaluation.sets[0]: 'test' is not a task.eval_sets entry"),
    ({"analysis__base": "nope"}, "config key analysis.base: 'nope' is not an arm; allowed: outcome, mc_k2"),
    ({"analysis__pairs": [["mc_k2", "gone"]]}, "config key analysis.pairs[0][1]: 'gone' is not an arm"),
    ({"task__pool__levels": [6]}, "config key task.pool.levels[0]: 6 is greater than the maximum of 5"),
    ({"budget__tokens": 0}, "config key budget.tokens: 0 is less than the minimum of 1"),
    ({"evaluation__samples": 0}, "config key evaluation.samples: 0 is less than the minimum of 1"),
    ({"study": "my study"}, "config key study: 'my study' is not allowed; allowed: letters"),
    ({"arms": {}}, "config key arms: {} should be non-empty"),
    ({"recipe__reward_verifier": "lenient"}, "config key recipe.reward_verifier: 'lenient' is not installed; installed verifiers: default, strict"),
    ({"model__tiny__hidden_size": 33}, "config key model.tiny.hidden_size: 33 is not divisible by model.tiny.num_heads (2)"),
    ({"task__pool__size": 8, "recipe__prompts_per_iteration": 16},
     "config key task.pool.size: 8 is smaller than recipe.prompts_per_iteration (16)"),
    ({"budget__tokens": 10, "evaluation__per_budget": 16},
     "config key evaluation.per_budget: 16 evaluations cannot fit in budget.tokens = 10"),
    ({"budget__tokens": 32, "recipe__prompts_per_iteration": 8, "recipe__group_size": 8},  # 32 thousand meant
     "config key budget.tokens: 32 generated tokens, but every iteration generates at least 64 "
     "(recipe.prompts_per_iteration x group_size completions, one token each), so every run would stop after its "
     "first iteration; allowed: more than 64 (B counts generated tokens, not thousands), or null to calibrate it"),
    ({"arms__mc__credit": {"monte_carlo": {"k": 2, "cuts": 30}}},
     "config key arms.mc.credit.monte_carlo.cuts: 30 cuts need recipe.completion_limit above 30 (it is 24)"),
    ({"arms__mc__credit": {"monte_carlo": {"k": 0}}}, "config key arms.mc.credit.monte_carlo.k: 0 is less than the minimum of 1"),
    ({"task__eval_sets": {"heldout": {"levels": [1]}}}, "config key task.eval_sets.heldout.size: the arith task needs a number of problems"),
    ({"budget__horizon": 0.5}, "config key budget.horizon: 0.5 is less than the minimum of 1"),
])
def test_bad_configs_are_named_by_key(changes, message):
    with pytest.raises(ConfigError) as err:
        studies.validate(edited_study(**changes))
    assert message in str(err.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as err:
        studies.validate(edited_study(recipe__lr="fast", recipe__top_p=2))
    assert "recipe.lr" in str(err.value) and "recipe.top_p" in str(err.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        studies.load(tmp_path / "none.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        studies.load(tmp_path / "list.yaml")


def test_run_config_holds_only_what_changes_a_run(study):
    run = study_config.run_config(study, "mc_k2", 2)
    assert run["seed"] == 2 and run["arm_config"]["credit"]["monte_carlo"]["k"] == 2
    assert not {"analysis", "arms", "study", "arm"} & set(run)  # names are no part of a run (the run store)
    other = copy.deepcopy(study)
    other["study"] = "renamed"
    other["analysis"]["margin"] = 0.05
    other["arms"]["mc_k2"]["description"] = "edited"
    other["arms"]["renamed_arm"] = other["arms"].pop("mc_k2")
    other["seeds"] = other["seeds"][::-1]
    assert study_config.config_hash(study_config.run_config(other, "renamed_arm", 2)) == study_config.config_hash(run)
    assert study_config.calibration_config(other) == study_config.calibration_config(study)
    with pytest.raises(ConfigError, match="unknown arm 'x'"):
        study_config.run_config(study, "x", 1)


def test_a_run_measured_along_training_is_named_and_an_unmeasured_one_is_as_without_alignment(study):
    """alignment.parquet labels the measured arm's rows with its name; an unmeasured run writes nothing of it."""
    plain = study_config.run_config(study, "mc_k2", 1)
    study["evaluation"]["alignment"] = {"arms": ["mc_k2"], "seeds": [1], "every": 2, "batches": 2, "seed": 0,
                                        "controls": {}}
    measured = study_config.run_config(study, "mc_k2", 1)
    assert measured["arm"] == "mc_k2" and measured["evaluation"]["alignment"]["every"] == 2
    assert "arms" not in measured["evaluation"]["alignment"]
    assert study_config.run_config(study, "mc_k2", 2) == {**plain, "seed": 2}
    assert study_config.run_config(study, "outcome", 1) == study_config.run_config(
        {**study, "evaluation": {k: v for k, v in study["evaluation"].items() if k != "alignment"}}, "outcome", 1)


def test_calibration_seed_is_explicit_or_the_smallest_seed(study):
    """Not seeds[0]: reordering the seeds list must not recalibrate B (and so retrain every run)."""
    study["seeds"] = [5, 2, 9]
    assert study_config.calibration_config(study)["seed"] == 2
    study["budget"]["calibration_seed"] = 9
    assert study_config.calibration_config(study)["seed"] == 9


def test_a_run_identity_covers_its_budget(study):
    run = study_config.run_config(study, "mc_k2", 1)
    assert study_config.run_identity(run, 1000) != study_config.run_identity(run, 2000)
    assert study_config.run_identity(run, 1000) == study_config.run_identity(copy.deepcopy(run), 1000)


def test_runtimes_are_capped_at_the_longest_job_the_cluster_allows(study):
    study["resources"]["train"].update(tokens_per_second=0.001, max_runtime=2880)
    assert study_config.train_runtime(study, 10 ** 9) == 2880
    study["resources"]["train"]["runtime"] = 10000
    assert study_config.train_runtime(study, None) == 2880
