"""Rewards without continuations, by hand: RLOO, the length term, the process reward, the path penalty."""

import re

import numpy as np
import pandas as pd
import pytest

import credit_fixtures as fx
from mcgrpo.core import config as study_config
from mcgrpo import studies
from mcgrpo.train import credit as credit_rules
from mcgrpo.train.credit import CreditContext, group_advantages, summary
from mcgrpo.core.claims import claims
from mcgrpo.train.credit.path_penalty import char_ends, line_signal, normalize_within_groups
from mcgrpo.train.credit.process import process_reward
from mcgrpo.train.rollout import Prompter

ARITH = {"problem_id": "a1", "question": "(5-2)+4*3", "answer": "15", "steps": ["3", "12", "15"]}


def _credit(tokenizer, spec, problems, texts, group_size, limit=20):
    batch = fx.rollouts(tokenizer, problems, texts, group_size)
    ctx = CreditContext(engine=None, prompter=Prompter(tokenizer), limit=limit,
                        verifier="default", advantage_eps=0.0, seed=(1, 0))
    return batch, credit_rules.build(spec)(batch, ctx)


def test_rloo_is_the_reward_minus_the_others_mean(tiny):
    _, tokenizer = tiny
    texts = ["\\boxed{15}", "\\boxed{1}", "\\boxed{2}", "3+12=15"]
    _, credit = _credit(tokenizer, {"rloo": {}}, [ARITH], texts, 4)
    assert [c[0] for c in credit.tokens] == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert summary(credit) == {"credit_varied_share": 0.0}


def test_length_term_by_hand(tiny):
    _, tokenizer = tiny
    # correct completions of 10 and 14 tokens (m_g = 12), wrong ones of 6 and 8; limit 20, lambda 0.5
    texts = [" \\boxed{5}", "2+3=5\\boxed{5}", "2+3=6,", "2+3=4 no"]
    batch, credit = _credit(tokenizer, {"length": {"lambda": 0.5}}, [{**ARITH, "answer": "5"}], texts, 4)
    assert [len(c) for c in batch.completions] == [10, 14, 6, 8]
    assert [c[0] for c in credit.tokens] == pytest.approx([1 + 0.5 * 2 / 20, 1 - 0.5 * 2 / 20, -1, -1])
    assert credit.stats["length_term_mean_abs"] == pytest.approx(0.025)


def test_claims_read_signs_and_check_arithmetic():
    found = claims("2-5=-3,-3*4=-12,10/4=2.5,7/0=1, 6 + 1 = 8")
    assert [(c.result, c.holds) for c in found] == [(-3, True), (-12, True), (2.5, True), (1, False), (8, False)]
    assert [c.start for c in found[:2]] == [0, 7]
    assert claims("\\boxed{15}") == []


def test_process_reward_by_hand(tiny):
    _, tokenizer = tiny
    texts = ["5-2=3,4*3=12,3+12=15 \\boxed{15}",                  # 3 of 3 equations match: 1
             "5-2=3,4*3=11,3+11=14 \\boxed{14}",                  # 1 of 3: 1/3
             "\\boxed{15}",                                       # no equation: 0
             "5-2=3,4*3=12,3+12=15,15+0=15,15*1=15 \\boxed{15}"]  # 3 of 5 (15 matches once), 5 > 4.5: x 4.5/5
    reference = [3.0, 12.0, 15.0]
    assert [process_reward(t, reference) for t in texts] == pytest.approx([1, 1 / 3, 0, 0.54])
    batch, credit = _credit(tokenizer, {"process": {"lambda": 0.5}}, [ARITH], texts, 4)
    assert batch.rewards.tolist() == [1, 0, 1, 1]
    reward = 0.5 * np.array([1, 1 / 3, 0, 0.54]) + 0.5 * batch.rewards  # 1, 1/6, 1/2, 0.77
    assert [c[0] for c in credit.tokens] == pytest.approx(group_advantages(reward[None], 0.0)[0])
    assert credit.stats["process_mean"] == pytest.approx((1 + 1 / 3 + 0.54) / 4)
    assert process_reward("3+0=3.000001", [3.0]) == 1 and process_reward("3+0=3.0001", [3.0]) == 0


def test_repeating_a_correct_step_does_not_raise_the_process_reward():
    once, thrice = "48/2=24, 24+48=72", "48/2=24, 0+72=72, 0+72=72, 0+72=72"
    assert process_reward(once, [24.0, 72.0]) == 1
    assert process_reward(thrice, [24.0, 72.0]) == pytest.approx(2 / 4 * 3 / 4)  # 2 of 4 match; 4 > 1.5 x 2
    assert process_reward("0+72=72 0+72=72 0+72=72", [24.0, 72.0]) == pytest.approx(1 / 3)
    assert process_reward("2+*4=14, 10-4=6", [6.0]) == 1  # an unparsable claim is not counted


def test_process_reward_refuses_a_pool_without_reference_steps():
    pool = pd.DataFrame({"problem_id": ["m1", "m2"], "question": ["q", "q"], "answer": ["1", "2"]})
    with pytest.raises(ValueError, match=r"arms\.proc\.credit\.process: .* no 'steps' column"):
        credit_rules.build({"process": {}}, pool, "proc")
    with pytest.raises(ValueError, match=r"arms\.proc\.credit\.process: .*none of the 2 pool problems has any "
                                         r"in column 'steps'"):
        credit_rules.build({"process": {}}, pool.assign(steps=[[], []]), "proc")
    credit_rules.build({"process": {}}, pool.assign(steps=[["1"], []]), "proc")  # some without: outcome-only groups


def test_path_penalty_by_hand(tiny):
    _, tokenizer = tiny
    # T1 (23 tokens, wrong): "2+3=5" true on tokens 0-4, "5*2=11" false on tokens 6-11; T2 (15, correct):
    # "2+3=5" true on 0-4. The group's 38 tokens hold 16 marked ones: the channel is scaled by 38/16.
    texts = ["2+3=5,5*2=11 \\boxed{11}", "2+3=5 \\boxed{5}"]
    problem = {**ARITH, "answer": "5"}
    up, down = 0.25 * 38 / 16, -0.5 * 38 / 16
    path = [np.array([up] * 5 + [0] + [down] * 6 + [0] * 11), np.array([up] * 5 + [0] * 10)]
    _, credit = _credit(tokenizer, {"path_penalty": {"lambda": 0.5, "beta": 0.25}}, [problem], texts, 2)
    np.testing.assert_allclose(credit.tokens[0], -1 + path[0])
    np.testing.assert_allclose(credit.tokens[1], 1 + path[1])
    assert credit.stats == {"path_mean": pytest.approx(0.0), "path_false_share": pytest.approx(1 / 3),
                            "path_weight": 1.0}
    _, alone = _credit(tokenizer, {"path_penalty": {"lambda": 0.5, "beta": 0.25, "outcome": False}}, [problem],
                       texts, 2)
    for got, want in zip(alone.tokens, path):
        np.testing.assert_allclose(got, want)


def _signal(text, **options):
    """The path channel per character (one token per character)."""
    return line_signal(text, np.arange(1, len(text) + 1), 0.5, 0.25, **options)[0]


def test_fulfilled_credit_pays_a_step_once_and_only_when_it_is_used():
    padded = "48/2=24 48/2=24 48/2=24 24+48=72 \\boxed{72}"
    every, once = _signal(padded), _signal(padded, credit="fulfilled")
    assert np.count_nonzero(every) == 3 * 7 + 8 and np.count_nonzero(once) == 7 + 8  # repeats earn nothing
    assert once[:7].tolist() == [0.25] * 7 and once[24:32].tolist() == [0.25] * 8
    identity = "0+72=72 \\boxed{72}"  # its result is one of its own numbers: no step
    assert np.count_nonzero(_signal(identity)) == 7 and not np.any(_signal(identity, credit="fulfilled"))
    unused = "2+2=4, 3*5=15 \\boxed{15}"  # 4 is never used again; 15 is the answer
    assert np.flatnonzero(_signal(unused, credit="fulfilled")).tolist() == list(range(7, 13))
    assert np.count_nonzero(_signal(unused, credit="fulfilled", reference=[4.0])) == 5 + 6  # a reference step
    wrong = "2+2=5, 5*3=15 \\boxed{15}"
    assert _signal(wrong, credit="fulfilled")[:5].tolist() == [-0.5] * 5  # a violation is penalized either way


def test_a_chain_of_invented_trivial_steps_earns_nothing():
    """Seed 003 pays a verified step of progress. `1+1=2. 2+1=3. 3+1=4` is true, unrepeated, and each result
    is used by the next step, so "true and used" (the nearest wrong rule) pays all three; none of it starts
    from the problem's numbers (12, 30), so `fulfilled` pays only the real step."""
    from mcgrpo.train.credit.path_penalty import given_numbers
    text = "1+1=2. 2+1=3. 3+1=4. 12+30=42 \\boxed{42}"
    given = given_numbers("Ann has 12 apples and buys 30 more. How many apples does she have?")
    assert given == {12, 30}
    paid = _signal(text, credit="fulfilled", given=given)
    assert np.flatnonzero(paid).tolist() == list(range(21, 29))  # `12+30=42` alone
    # without the problem's numbers: 1+1=2 and 2+1=3 are paid (used by the next step; 3+1=4 is not used)
    assert np.count_nonzero(_signal(text, credit="fulfilled")) == 2 * 5 + 8
    chained = "12+30=42, 42*2=84 \\boxed{84}"  # a step from an earlier credited result is grounded too
    assert np.count_nonzero(_signal(chained, credit="fulfilled", given=given)) == 8 + 7


def test_gated_credit_withholds_the_reward_but_not_the_penalty():
    text = "2+3=5,5*2=11 \\boxed{11}"
    gated = _signal(text, paid=False)
    assert gated[:5].tolist() == [0] * 5 and gated[6:12].tolist() == [-0.5] * 6


def test_batch_normalization_scales_each_channel_over_the_batch():
    channel = [np.array([1.0, 0, 0, 0]), np.array([1.0, 1.0])]
    by_group = normalize_within_groups(channel, 1)
    assert by_group[0].tolist() == [4, 0, 0, 0] and by_group[1].tolist() == [1, 1]
    by_batch = normalize_within_groups(channel, len(channel))  # 6 tokens, 3 marked
    assert by_batch[0].tolist() == [2, 0, 0, 0] and by_batch[1].tolist() == [2, 2]


def test_the_path_channel_anneals_once_violations_fall_below_the_threshold(tiny):
    _, tokenizer = tiny
    rule = credit_rules.build({"path_penalty": {"anneal_below": 0.5, "anneal_rate": 0.5, "normalize": "batch",
                                                "credit": "fulfilled", "credit_gate": "outcome"}})
    texts = ["2+3=5 \\boxed{5}", "2+3=5,5*2=11 \\boxed{11}"]  # 1 false claim of 3: violation rate 1/3
    batch = fx.rollouts(tokenizer, [{**ARITH, "answer": "5"}], texts, 2)
    ctx = CreditContext(engine=None, prompter=Prompter(tokenizer), limit=20, verifier="default",
                        advantage_eps=0.0, seed=(1, 0))
    weights = [rule(batch, ctx).stats["path_weight"] for _ in range(4)]
    assert weights == [1.0, 1.0, 0.5, 0.25]  # below 1/2 at the first iteration: decays from the second on
    restored = credit_rules.build({"path_penalty": {"anneal_below": 0.5}})
    restored.load_state_dict(rule.state_dict())
    assert restored.weight == rule.weight and restored.annealing


def test_char_ends_are_exact_when_tokens_merge_on_decoding():
    pieces = {1: "ab", 2: "c", 3: " d"}

    def decode(tokens):  # as SentencePiece: a leading space is dropped, so token 3 alone reads "d"
        return "".join(pieces[t] for t in tokens).lstrip()

    assert char_ends(decode, [1, 2]).tolist() == [2, 3]
    assert char_ends(decode, [1, 2, 3]).tolist() == [2, 3, 5]


@pytest.mark.parametrize("credit, message", [
    ({"monte_carlo": {"positions": [5, 3]}},
     "config key arms.x.credit.monte_carlo.positions: [5, 3] must increase strictly and stay below "
     "recipe.completion_limit (24)"),
    ({"critic": {"positions": [4, 24]}}, "config key arms.x.credit.critic.positions: [4, 24] must increase"),
    ({"monte_carlo": {"k": 1, "reuse": True}},
     "config key arms.x.credit.monte_carlo.reuse: leave-one-out credit among the draws at a cut needs k >= 2"),
    ({"critic": {"window": 2, "min_iterations": 3}},
     "config key arms.x.credit.critic.min_iterations: 3 iterations never fit in window = 2; allowed: at most 2"),
    ({"monte_carlo": {"form": "tree"}}, "config key arms.x.credit.monte_carlo.form: 'tree' is not one of"),
    ({"path_penalty": {"gamma": 1}}, "config key arms.x.credit.path_penalty: unknown key(s) 'gamma'"),
])
def test_bad_credit_blocks_are_refused_naming_the_key(study, credit, message):
    with pytest.raises(study_config.ConfigError, match=re.escape(message)):
        studies.validate({**study, "arms": {**study["arms"], "x": {"credit": credit}}})


def test_the_process_reward_on_the_math_task_is_refused_before_any_job(study):
    problems = credit_rules.problems("arms.p.credit", {"process": {}}, study["recipe"], {"name": "math"})
    assert problems == ["config key arms.p.credit.process: needs reference steps (pool column 'steps'), which "
                        "task.name 'math' does not provide; allowed tasks: arith, gsm8k"]


def test_the_dense_studys_path_arm_is_seed_003s_form():
    """Seed 003: fulfilment credit (not every true claim), the path channel normalized apart from the outcome,
    annealed once compliance saturates; the earlier form stays as its own arm."""
    import yaml
    from conftest import ROOT
    arms = studies.validate(yaml.safe_load((ROOT / "config" / "studies" / "dense.yaml").read_text()))["arms"]
    seed = arms["path"]["credit"]["path_penalty"]
    assert (seed["credit"], seed["normalize"], seed.get("outcome", True)) == ("fulfilled", "batch", True)
    assert seed["anneal_below"] > 0
    assert arms["path_every_true"]["credit"]["path_penalty"].get("credit", "every_true") == "every_true"
