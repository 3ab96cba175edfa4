"""The template's rules on hand-made completions: credit computed by hand, options rejected by name."""

import numpy as np
import pytest

from mcgrpo.api import CharacterPrompter, Completion, CreditContext, PromptStream, check_options, rollouts_of
from my_intervention.credit import BoxedBonus
from my_intervention.probe import HalfwayProbe
from my_intervention.selection import SkipSolved

PROBLEM = {"question": "2+3", "answer": "5"}


def context() -> CreditContext:
    return CreditContext(engine=None, prompter=None, limit=64, verifier="default", advantage_eps=0.0, seed=(1, 0))


def test_a_boxed_answer_earns_the_bonus_in_the_group_advantage():
    # rewards R = [1, 1, 0, 0] (a 5 boxed, a 5 unboxed, a 4 boxed, a 4 unboxed); boxed = [1, 0, 1, 0]
    texts = ["so \\boxed{5}", "so 5", "so \\boxed{4}", "so 4"]
    credit = BoxedBonus(weight=0.5)(rollouts_of([PROBLEM], texts, 4), context())
    # R' = [1.5, 1, 0.5, 0]: mean 0.75, population std sqrt(0.3125)
    expected = (np.array([1.5, 1.0, 0.5, 0.0]) - 0.75) / np.sqrt(0.3125)
    assert [c[0] for c in credit.tokens] == pytest.approx(expected.tolist())
    assert [len(c) for c in credit.tokens] == [len(t) for t in texts]  # one value per generated token
    assert all(np.all(c == c[0]) for c in credit.tokens)               # outcome-level: the same on every token
    assert credit.stats == {"boxed_share": 0.5}


def test_without_the_bonus_it_is_outcome_only():
    texts = ["\\boxed{5}", "5", "\\boxed{4}", "4"]
    credit = BoxedBonus(weight=0.0)(rollouts_of([PROBLEM], texts, 4), context())
    assert [c[0] for c in credit.tokens] == pytest.approx([1.0, 1.0, -1.0, -1.0])


def test_skip_solved_trains_on_unsolved_prompts_first_and_survives_a_resume():
    picker = SkipSolved(stream=PromptStream(50, seed=1), per_iteration=2, seed=1, candidates=4)
    first = picker.select(0, None)
    picker.observe(0, first, np.array([1.0, 0.25]), None)  # the first chosen prompt was solved by its whole group
    resumed = SkipSolved(stream=PromptStream(50, seed=1), per_iteration=2, seed=1, candidates=4)
    resumed.load_state_dict(picker.state_dict())
    assert resumed.solved == {int(first.chosen[0])}
    drawn = resumed.select(0, None)  # the same candidates again: the solved one goes last
    assert int(first.chosen[0]) not in drawn.chosen.tolist()


@pytest.mark.parametrize("options, message", [
    ({"wieght": 0.5}, "unknown option 'wieght' of credit rule 'my_intervention.credit:BoxedBonus'; allowed: weight"),
    ({"weight": "half"}, "plugin.my_intervention.credit:BoxedBonus.weight: 'half' is not allowed"),
])
def test_bad_options_are_rejected_by_name(options, message):
    (problem,) = check_options("credit", "my_intervention.credit:BoxedBonus", options)
    assert message in problem


def test_good_options_pass():
    assert check_options("credit", "my_intervention.credit:BoxedBonus", {"weight": 1}) == []
    assert check_options("selection", "my_intervention.selection:SkipSolved", {"candidates": 8}) == []
    assert "candidates" in check_options("selection", "my_intervention.selection:SkipSolved", {"candidates": 8.5})[0]


class Finisher:
    """An engine whose every continuation is `text` (one token per character, cut at the request's limit), counting
    what it generates: a model's place in a test of a rule that samples."""

    def __init__(self, text: str):
        self.text, self.generated = text, 0

    def generate(self, prompts, max_new_tokens, seeds):
        out = [Completion(tuple(map(ord, self.text[:n])), True) for n in max_new_tokens]
        self.generated += sum(len(c) for c in out)
        return out

    def sync(self, model):
        pass


def test_a_rule_that_samples_credits_each_half_by_its_value_and_reports_its_tokens():
    # R = [1, 0]; from each midpoint the continuation boxes 5, so p_mid = 1 for both; p_0 = 0.5; advantages +-1
    texts = ["so 5 \\boxed{5}", "so 4 \\boxed{4}"]
    engine = Finisher("\\boxed{5}")
    ctx = CreditContext(engine=engine, prompter=CharacterPrompter(), limit=64, verifier="default",
                        advantage_eps=0.0, seed=(1, 0))
    credit = HalfwayProbe(weight=0.5, k=2)(rollouts_of([PROBLEM], texts, 2), ctx)
    half = len(texts[0]) // 2
    assert credit.tokens[0].tolist() == pytest.approx([1.25] * half + [1.0] * (len(texts[0]) - half))
    assert credit.tokens[1].tolist() == pytest.approx([-0.75] * half + [-1.5] * (len(texts[1]) - half))
    assert credit.tokens_generated == engine.generated == 2 * 2 * len("\\boxed{5}")
