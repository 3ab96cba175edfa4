"""A contrast must compare two different things: arms that train the same, however written, and plan entries that
ask for the same contrast twice, are refused before any job by key (docs/validation.md, degenerate arms).

Two arms written apart but training the same (an option spelled at its default, `lr: {}`, an empty selection block,
an arm measured along training) were two sets of stored runs of one training: at equal tokens their difference was
0 in every seed (uninformative), at equal time it was the clocks' noise (a study run in audit: +1.4 [-9.1, +11.9]
at equal time, verdict not confirmed; with more seeds an equivalence or non-inferiority test would have confirmed
it), and on a GPU the nondeterminism's at every basis."""

import copy

import pytest

from conftest import edited_study
from mcgrpo import studies
from mcgrpo.core.errors import ConfigError

MC = {"monte_carlo": {"k": 2}}
SAME = "trains exactly what arms.{other} trains"


def _refused(cfg: dict) -> str:
    with pytest.raises(ConfigError) as e:
        studies.validate(copy.deepcopy(cfg))
    return str(e.value)


def _arms(**arms) -> dict:
    return edited_study(arms={"outcome": {}, "a": {"credit": MC}, **arms})


@pytest.mark.parametrize("b, other, written", [
    ({"lr": {}}, "outcome", "arms.b.lr"),
    ({"lr": {"scale": 1.0, "schedule": "constant"}}, "outcome", "arms.b.lr"),
    ({"selection": {}}, "outcome", "arms.b.selection"),
    ({"credit": {"monte_carlo": {"k": 2, "form": "basic", "alpha": 1.0, "reuse": False}}}, "a", "arms.b.credit"),
    ({"credit": {"monte_carlo": {"k": 2, "positions": [4, 8, 12, 16, 20]}}}, "a", "arms.b.credit"),  # cuts 5 of 24
    ({"credit": {"shuffled": {"monte_carlo": {"k": 2, "form": "basic"}}}}, "s", "arms.b.credit"),
    ({"credit": {"path_penalty": {"credit": "every_true", "normalize": "group"}}}, "p", "arms.b.credit"),
    ({"credit": {"critic": {"positions": [4, 8, 12, 16, 20]}}}, "c", "arms.b.credit"),
])
def test_an_arm_written_apart_from_another_but_training_the_same_is_refused(b, other, written):
    cfg = _arms(s={"credit": {"shuffled": MC}}, p={"credit": {"path_penalty": {}}}, c={"credit": {"critic": {}}}, b=b)
    message = _refused(cfg)
    assert f"config key arms.b: {SAME.format(other=other)}" in message
    assert f"written apart only in {written}, which as given change nothing they train" in message
    assert "allowed: arms that differ in what they train" in message


def test_an_arm_measured_along_training_trains_what_its_twin_trains():
    cfg = edited_study(arms={"outcome": {}, "again": {"description": "outcome, measured along training"}},
                       evaluation__alignment={"arms": ["again"]})
    message = _refused(cfg)
    assert f"config key arms.again: {SAME.format(other='outcome')}" in message
    assert "evaluation.alignment.arms (a measurement along training)" in message


@pytest.mark.parametrize("b", [
    {"lr": {"scale": 0.5}}, {"lr": {"schedule": "linear_decay"}}, {"update": {}},
    {"credit": {"monte_carlo": {"k": 2, "positions": [4, 8, 12]}}},
    {"credit": {"monte_carlo": {"k": 2, "form": "centered_maxnorm"}}},
    {"credit": {"monte_carlo": {"k": 2, "cuts": 4}}},
    {"recipe": {"reward_verifier": "strict"}},
])
def test_an_arm_that_trains_otherwise_is_kept(b):
    cfg = studies.validate(_arms(b=b))
    assert list(cfg["arms"]) == ["outcome", "a", "b"]


def test_a_measured_arm_beside_an_unmeasured_other_arm_is_kept():
    cfg = studies.validate(edited_study(evaluation__alignment={"arms": ["mc_k2"]}))
    assert cfg["evaluation"]["alignment"]["arms"] == ["mc_k2"]


def _planned(*entries) -> dict:
    return edited_study(plan={"primary": [{"id": "T1", "a": "mc_k2", "b": "outcome", "direction": "less",
                                           "family": "H1"}], "secondary": list(entries)})


def test_a_plan_entry_asking_for_a_planned_contrast_again_is_refused():
    """The analysis labels a contrast by one entry: before, the other's verdict was in no table (a study run in
    audit: S1 equivalent and S2 noninferior at equal time, one contrast; the headline showed S2 alone)."""
    message = _refused(_planned({"id": "S1", "a": "mc_k2", "b": "outcome", "eval_set": "heldout",
                                 "direction": "noninferior"}))
    assert message == ("config key plan.secondary[0]: 'S1' is the contrast of 'T1' again (mc_k2 minus outcome, basis "
                       "tokens, acc_default on heldout), and a contrast has one verdict, so one of the two would be "
                       "reported nowhere; allowed: one entry per contrast, its direction the one test planned for it")


@pytest.mark.parametrize("entry", [
    {"basis": "time"}, {"metric": "acc_strict"}, {"a": "outcome", "b": "mc_k2", "direction": "greater"}])
def test_the_same_arms_on_another_basis_metric_or_side_are_another_contrast(entry):
    cfg = studies.validate(_planned({"id": "S1", "a": "mc_k2", "b": "outcome", **entry}))
    assert [e["id"] for e in cfg["plan"]["secondary"]] == ["S1"]


@pytest.mark.parametrize("name, options, key, words", [
    ("critic_filter", {"candidates": 2, "keep": 1}, "candidates", "leaves nothing to choose"),
    ("random_choice", {"candidates": 2, "keep": 1}, "candidates", "the prompt stream's own next prompts"),
    ("history_filter", {"candidates": 8, "keep": 0}, "keep", "draws all 2 at random, as random_choice does"),
])
def test_a_filter_that_cannot_choose_is_refused(name, options, key, words):
    """As many candidates as prompts per iteration (2 in the small study): every candidate trained, the stream's own
    next prompts; keep 0: every prompt drawn at random, the filter's control under the filter's name."""
    message = _refused(edited_study(arms={"outcome": {}, "f": {"selection": {name: options}}}))
    assert message.startswith(f"config key arms.f.selection.{name}.{key}: ") and words in message
    assert "allowed: " in message


def test_the_random_control_written_with_another_keep_or_target_is_the_same_arm():
    cfg = edited_study(arms={"outcome": {}, "r": {"selection": {"random_choice": {"candidates": 8, "keep": 1}}},
                             "r2": {"selection": {"random_choice": {"candidates": 8, "keep": 2, "target": 0.3}}}})
    assert f"config key arms.r2: {SAME.format(other='r')}" in _refused(cfg)
    cfg["arms"]["r2"]["selection"]["random_choice"]["candidates"] = 6
    assert list(studies.validate(cfg)["arms"]) == ["outcome", "r", "r2"]


def _iteration_study(warmup_prompts: int, iterations: int = 5, name: str = "critic_filter") -> dict:
    """The small study (2 prompts per iteration) as an equal-iteration study with a filter arm."""
    return edited_study(budget={"iterations": iterations}, arms={
        "outcome": {}, "f": {"selection": {name: {"candidates": 4, "keep": 1, "warmup_prompts": warmup_prompts}}}})


@pytest.mark.parametrize("name", ["critic_filter", "random_choice"])
def test_an_equal_iteration_filter_whose_warm_up_outlasts_b_is_refused(name):
    """10 prompts at 2 per iteration: the first 5 iterations take the stream as it comes, and every run is read after
    5: the filter never trained on a prompt it chose, and its contrasts would read the stream as its effect."""
    message = _refused(_iteration_study(10, name=name))
    assert message == (
        f"config key arms.f.selection.{name}.warmup_prompts: 10 prompts of warm-up take the stream's first 5 "
        "iterations of 2 prompts (recipe.prompts_per_iteration) as they come, and every run is read after 5 iterations "
        "(budget.iterations): the filter would never train on a prompt it chose before the readings, and every "
        "contrast with arm f would read the prompt stream as its effect; allowed: at most 8 (so that at least the "
        "last of the 5 iterations trains on prompts it chose), or budget.iterations above 5")
    assert "warmup_prompts: 9 prompts" in _refused(_iteration_study(9))  # 9 prompts: 5 iterations (a whole 5th)


def test_an_equal_iteration_filter_that_chooses_in_its_last_iteration_is_kept():
    """8 prompts: 4 iterations of warm-up, the 5th chosen; a token study's iterations are unknown before training."""
    assert studies.validate(_iteration_study(8))["arms"]["f"]["selection"]["critic_filter"]["warmup_prompts"] == 8
    token_study = edited_study(arms=_iteration_study(10_000)["arms"])
    assert studies.validate(token_study)["budget"]["tokens"] == 600
