"""The Monte-Carlo dense reward: cut positions, segment credit by hand, and honest token counting."""

import numpy as np
import pytest

from mcgrpo.credit import CreditContext, group_advantages
from mcgrpo.credit.monte_carlo import MonteCarlo, cut_positions, segment_credit
from mcgrpo.engines import build as build_engine
from mcgrpo.rollout import Prompter, sample_groups


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
    ctx = CreditContext(engine, prompter, limit, "default", 1e-6, (1, 0))
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
