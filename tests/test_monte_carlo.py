"""The Monte-Carlo dense reward and its variants: cut positions, credit by hand, honest token counting."""

from pathlib import Path

import numpy as np
import pytest
import yaml

import credit_fixtures as fx
from mcgrpo.train.credit import CreditContext, group_advantages
from mcgrpo.train.credit.monte_carlo import MonteCarlo, centered_maxnorm, cut_positions, segment_credit
from mcgrpo.train.engines import build as build_engine
from mcgrpo.train.rollout import Prompter, sample_groups


def test_cut_positions_are_rounded_sixths_of_the_limit():
    assert cut_positions(12, 5) == [2, 4, 6, 8, 10]
    assert cut_positions(64, 5) == [11, 21, 32, 43, 53]
    assert cut_positions(380, 5) == [63, 127, 190, 253, 317]


def test_segment_credit_by_hand():
    # limit 12 -> cuts 2, 4, 6, 8, 10; a completion of 7 tokens reaches cuts 2, 4, 6 only.
    w = segment_credit(7, [2, 4, 6, 8, 10], [0.5, 0.25, 1.0, np.nan, np.nan], p0=0.5, p_end=1.0)
    np.testing.assert_allclose(w, [0.0, 0.0, -0.25, -0.25, 0.75, 0.75, 0.0])


def test_segment_credit_telescopes_to_outcome_minus_group_mean():
    rng = np.random.default_rng(0)
    for length in (1, 5, 11, 12):
        p = list(rng.random(5))
        w = segment_credit(length, [2, 4, 6, 8, 10], p, p0=0.375, p_end=0.0)
        bounds = sorted({0, *[min(c, length) for c in (2, 4, 6, 8, 10)]})
        firsts = [w[b] for b in bounds if b < length]
        assert sum(firsts) == pytest.approx(0.0 - 0.375)


def test_monte_carlo_counts_every_continuation_token(tiny, world):
    model, tokenizer = tiny
    pool, _ = world
    prompter, engine = Prompter(tokenizer), build_engine("hf", model, tokenizer)
    problems = pool.head(2).to_dict("records")
    limit = 18
    rollouts = sample_groups(engine, prompter, problems, 4, limit, list(range(8)), "default")
    ctx = CreditContext(engine=engine, prompter=prompter, limit=limit,
                        verifier="default", advantage_eps=1e-6, seed=(1, 0))
    rule = MonteCarlo(k=2)
    credit = rule(rollouts, ctx)
    cuts = cut_positions(limit, 5)
    reached = [(r, c) for r, comp in enumerate(rollouts.completions) for c in cuts if c < len(comp)]
    assert credit.tokens_generated > 0
    assert credit.tokens_generated <= sum(2 * (limit - c) for _, c in reached)
    assert [len(c) for c in credit.tokens] == [len(c) for c in rollouts.completions]
    adv = group_advantages(rollouts.grouped(rollouts.rewards), 1e-6).ravel()
    for r, tokens in enumerate(credit.tokens):  # the first segment carries p_1 - p_0 on top of A_g
        assert np.all(np.isfinite(tokens))
        assert tokens.sum() != 0 or adv[r] == 0
    # the same draws again: continuations are seeded, so credit is reproducible
    again = rule(rollouts, ctx)
    assert again.tokens_generated == credit.tokens_generated
    for a, b in zip(again.tokens, credit.tokens):
        np.testing.assert_array_equal(a, b)


# A hand-worked group (limit 18: cuts at 3, 6, 9, 12, 15). A = "2+3=5 \\boxed{5}" (15 tokens, correct) reaches
# cuts 3, 6, 9, 12; B = "2+3=4,4" (7 tokens, wrong) ends before the third cut and reaches 3 and 6 only.
# With k = 4 that is 6 requests x 4 = 24 continuations of 9 tokens each; scripted outcomes give
# p = 3/4, 1/2, 1, 1 along A and 1/2, 1/4 along B.
PROBLEM = {"problem_id": "p", "question": "2+3", "answer": "5", "steps": ["5"]}
TEXTS = ["2+3=5 \\boxed{5}", "2+3=4,4"]
DRAWS = [[1, 1, 1, 0], [1, 0, 0, 1], [1, 1, 1, 1], [1, 1, 1, 1], [0, 1, 0, 1], [0, 0, 0, 1]]


def _hand_worked(tokenizer, **options):
    batch = fx.rollouts(tokenizer, [PROBLEM], TEXTS, 2)
    engine = fx.ScriptedEngine(tokenizer, ["\\boxed{5}" if hit else "\\boxed{7}" for d in DRAWS for hit in d])
    ctx = CreditContext(engine=engine, prompter=Prompter(tokenizer), limit=18,
                        verifier="default", advantage_eps=0.0, seed=(1, 0))
    return batch, engine, MonteCarlo(k=4, **options)(batch, ctx)


def test_monte_carlo_k4_requests_exactly_the_reached_cuts_and_counts_every_token(tiny):
    _, tokenizer = tiny
    batch, engine, credit = _hand_worked(tokenizer)
    prompt, (a, b) = batch.prompts[0], [c.tokens for c in batch.completions]
    expected = [(prompt + comp[:c], 18 - c) for comp, cuts in ((a, (3, 6, 9, 12)), (b, (3, 6))) for c in cuts
                for _ in range(4)]
    assert engine.requests == expected
    assert credit.tokens_generated == 24 * 9
    assert credit.stats == {"mc_prefixes": 6, "mc_reused_sequences": 0}


def test_monte_carlo_basic_credit_by_hand(tiny):
    _, tokenizer = tiny
    _, _, credit = _hand_worked(tokenizer)
    # A: A_g = +1; w = p_s - p_{s-1} from p_0 = 1/2: +1/4, -1/4, +1/2, 0, then 1 - 1 = 0 to the end.
    np.testing.assert_allclose(credit.tokens[0], [1.25] * 3 + [0.75] * 3 + [1.5] * 3 + [1.0] * 6)
    # B: A_g = -1; w: 1/2 - 1/2, 1/4 - 1/2, then the outcome 0 - 1/4 on its last token.
    np.testing.assert_allclose(credit.tokens[1], [-1.0] * 3 + [-1.25] * 4)


def test_monte_carlo_centered_maxnorm_by_hand(tiny):
    _, tokenizer = tiny
    _, _, credit = _hand_worked(tokenizer, form="centered_maxnorm", alpha=2.0)
    # A's w has mean 1.5 / 15 = 0.1 -> 0.15, -0.35, 0.4, -0.1; B's mean -1/7 -> 1/7, -3/28.
    # The batch's largest |w| is 0.4; alpha = 2.
    np.testing.assert_allclose(credit.tokens[0], 1 + 2 * np.array([0.375] * 3 + [-0.875] * 3 + [1.0] * 3 + [-0.25] * 6))
    np.testing.assert_allclose(credit.tokens[1], -1 + 2 * np.array([5 / 14] * 3 + [-15 / 56] * 4))
    assert centered_maxnorm([np.zeros(3)])[0].tolist() == [0.0, 0.0, 0.0]  # no signal: nothing to scale


def test_vineppo_credits_value_differences_from_the_leave_one_out_mean(tiny):
    _, tokenizer = tiny
    _, _, credit = _hand_worked(tokenizer, form="vineppo")
    # V(prompt) of A is B's outcome 0 and of B is A's outcome 1; no group advantage.
    np.testing.assert_allclose(credit.tokens[0], [0.75] * 3 + [-0.25] * 3 + [0.5] * 3 + [0.0] * 6)
    np.testing.assert_allclose(credit.tokens[1], [-0.5] * 3 + [-0.25] * 4)


def test_a_fixed_prompt_value_replaces_the_group_mean(tiny):
    _, tokenizer = tiny
    _, _, credit = _hand_worked(tokenizer, prompt_value=0.25)
    # only the first segments change: p_1 - 1/4 = 3/4 - 1/4 on A, 1/2 - 1/4 on B
    np.testing.assert_allclose(credit.tokens[0], [1.5] * 3 + [0.75] * 3 + [1.5] * 3 + [1.0] * 6)
    np.testing.assert_allclose(credit.tokens[1], [-0.75] * 3 + [-1.25] * 4)


def test_the_papers_fixed_prompt_value_differs_from_the_group_mean_by_hand(tiny):
    """A group of three (A correct, B and C wrong: mean 1/3, not 1/2), so that the paper's V(prompt) = 0.5
    (Table 16) and the group-mean convention give different credit. C = "2+3=6" (5 tokens) reaches cut 3
    only, where 2 of its 4 draws succeed."""
    _, tokenizer = tiny
    batch = fx.rollouts(tokenizer, [PROBLEM], [*TEXTS, "2+3=6"], 3)
    hits = [*DRAWS, [1, 1, 0, 0]]

    def credit(**options):
        engine = fx.ScriptedEngine(tokenizer, ["\\boxed{5}" if hit else "\\boxed{7}" for d in hits for hit in d])
        ctx = CreditContext(engine=engine, prompter=Prompter(tokenizer), limit=18,
                            verifier="default", advantage_eps=0.0, seed=(1, 0))
        return MonteCarlo(k=4, **options)(batch, ctx).tokens

    adv = group_advantages(np.array([[1.0, 0.0, 0.0]]), 0.0)[0]
    for p0, tokens in ((0.5, credit(prompt_value=0.5)), (1 / 3, credit())):
        # only the first segment depends on p_0: p_1 - p_0 with p_1 = 3/4, 1/2, 1/2
        np.testing.assert_allclose(tokens[0], adv[0] + np.array([0.75 - p0] * 3 + [-0.25] * 3 + [0.5] * 3 + [0.0] * 6))
        np.testing.assert_allclose(tokens[1], adv[1] + np.array([0.5 - p0] * 3 + [-0.25] * 4))
        np.testing.assert_allclose(tokens[2], adv[2] + np.array([0.5 - p0] * 3 + [-0.5] * 2))
    assert credit(prompt_value=0.5)[0][0] - credit()[0][0] == pytest.approx(1 / 3 - 0.5)


STUDIES = sorted((Path(__file__).resolve().parent.parent / "config").rglob("*.yaml"))


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_monte_carlo_arms_start_from_the_papers_prompt_value(path):
    """Basic, centered and reuse arms fix V(prompt) = 0.5 (Table 16); VinePPO keeps its leave-one-out mean."""
    for name, arm in (yaml.safe_load(path.read_text()).get("arms") or {}).items():
        mc = (arm.get("credit") or {}).get("monte_carlo")
        if mc is not None:
            assert mc.get("prompt_value") == (None if mc.get("form") == "vineppo" else 0.5), f"{path.name}: {name}"


def test_continuation_reuse_trains_each_draw_with_leave_one_out_credit(tiny):
    _, tokenizer = tiny
    batch, engine, credit = _hand_worked(tokenizer, reuse=True)
    assert len(credit.sequences) == 24 and credit.stats["mc_reused_sequences"] == 24
    assert [s.context for s in credit.sequences] == [prompt for prompt, _ in engine.requests]
    assert all(len(s.credit) == len(s.completion) == 9 for s in credit.sequences)
    loo = [[1 / 3] * 3 + [-1], [2 / 3, -2 / 3, -2 / 3, 2 / 3], [0] * 4, [0] * 4, [-2 / 3, 2 / 3, -2 / 3, 2 / 3],
           [-1 / 3] * 3 + [1]]
    np.testing.assert_allclose([s.credit[0] for s in credit.sequences], np.ravel(loo), atol=1e-12)
    assert credit.tokens_generated == 24 * 9  # trained on, and still counted once toward B
    np.testing.assert_allclose(credit.tokens[1], [-1.0] * 3 + [-1.25] * 4)  # rollouts keep the k-draw reward


def test_positions_override_the_default_cuts(tiny):
    _, tokenizer = tiny
    batch = fx.rollouts(tokenizer, [PROBLEM], TEXTS, 2)
    engine = fx.ScriptedEngine(tokenizer, ["\\boxed{5}"] * 6)
    credit = MonteCarlo(k=2, positions=[2, 10])(batch, CreditContext(engine=engine, prompter=Prompter(tokenizer), limit=18,
                                                                     verifier="default", advantage_eps=0.0, seed=(1, 0)))
    assert [limit for _, limit in engine.requests] == [16, 16, 8, 8, 16, 16]
    assert credit.tokens_generated == 6 * 9
