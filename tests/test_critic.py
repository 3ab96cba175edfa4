"""The learned critic: cross-fitted ridge values, TD and baseline credit by hand, its log and its state."""

import numpy as np
import pandas as pd
import pytest

import credit_fixtures as fx
from mcgrpo.train.credit import CreditContext
from mcgrpo.train.credit.critic import Critic
from mcgrpo.train.rollout import Prompter
from test_monte_carlo import PROBLEM, TEXTS

# Limit 18 (cuts 3, 6, 9, 12, 15): A (15 tokens, R = 1) has prefixes ending at 0, 3, 6, 9, 12 completion
# tokens, B (7 tokens, R = 0) at 0, 3, 6. A feature that is the prefix's completion length x makes the
# (nearly unpenalized) ridge an ordinary least-squares line: on those 8 rows V(x) = (45 + 5x) / 111.
V = {x: (45 + 5 * x) / 111 for x in (0, 3, 6, 9, 12)}


def _critic_runs(tokenizer, **options):
    batch = fx.rollouts(tokenizer, [PROBLEM], TEXTS, 2)
    prompt_len = len(batch.prompts[0])
    calls = []

    def features(sequences, ends):
        calls.append((sequences, ends))
        return [np.array([[e - prompt_len] for e in ends_r], dtype=float) for ends_r in ends]

    critic = Critic(window=1, min_iterations=1, ridge=1e-12, **options)
    credits = [critic(batch, CreditContext(engine=None, prompter=Prompter(tokenizer), limit=18,
                                           verifier="default", advantage_eps=0.0, seed=(1, i), features=features))
               for i in range(2)]
    return batch, calls, credits


def test_critic_is_outcome_only_until_it_has_data_and_asks_features_at_prompt_and_reached_cuts(tiny):
    _, tokenizer = tiny
    batch, calls, (first, _) = _critic_runs(tokenizer)
    n = len(batch.prompts[0])
    assert calls[0][1] == [[n, n + 3, n + 6, n + 9, n + 12], [n, n + 3, n + 6]]
    assert calls[0][0][0] == batch.prompts[0] + batch.completions[0].tokens
    np.testing.assert_array_equal(first.tokens[0], np.ones(15))
    np.testing.assert_array_equal(first.tokens[1], -np.ones(7))
    assert first.tokens_generated == 0 and first.stats["critic_active"] == 0
    assert np.isnan(first.stats["critic_brier"])


def test_critic_td_credit_by_hand(tiny):
    _, tokenizer = tiny
    _, _, (_, td) = _critic_runs(tokenizer, form="td", weight=0.5)
    step = 15 / 111  # V rises by 5 x 3 / 111 per segment
    np.testing.assert_allclose(td.tokens[0], 1 + 0.5 * np.array([step] * 12 + [1 - V[12]] * 3), rtol=1e-9)
    np.testing.assert_allclose(td.tokens[1], -1 + 0.5 * np.array([step] * 6 + [0 - V[6]]), rtol=1e-9)


def test_critic_baseline_credit_by_hand_and_its_cross_fitted_log(tiny):
    _, tokenizer = tiny
    _, _, (_, base) = _critic_runs(tokenizer, form="baseline")
    a = [1 - V[x] for x in (0, 3, 6, 9, 12) for _ in range(3)]
    b = [0 - V[0]] * 3 + [0 - V[3]] * 3 + [0 - V[6]]
    np.testing.assert_allclose(base.tokens[0], 1 + np.array(a), rtol=1e-9)
    np.testing.assert_allclose(base.tokens[1], -1 + np.array(b), rtol=1e-9)
    # Brier against outcomes: (66^2 + 51^2 + 36^2 + 21^2 + 6^2 + 45^2 + 60^2 + 75^2) / 111^2 / 8; a constant
    # predictor at the training mean 5/8 scores (5 x 3/8^2 + 3 x 5/8^2) / 8.
    assert base.stats["critic_brier"] == pytest.approx(19980 / 111**2 / 8, rel=1e-9)
    assert base.stats["critic_brier_constant"] == pytest.approx(0.234375)
    assert base.stats["critic_active"] == 1 and base.stats["critic_rows"] == 8
    # at the prompt, V = 45/111 against the group's mean outcome 1/2
    assert base.stats["critic_error"] == pytest.approx((45 / 111 - 0.5) ** 2, rel=1e-9)


def test_critic_keeps_only_its_window_and_resumes_from_its_state():
    critic = Critic(window=2)
    for i in range(4):
        critic._remember(i, np.zeros((1, 2)), np.zeros(1))
    assert [row[0] for row in critic.rows] == [2, 3]
    again = Critic(window=2)
    again.load_state_dict(critic.state_dict())
    assert [row[0] for row in again.rows] == [2, 3]
    with pytest.raises(ValueError, match="allowed: td, baseline"):
        Critic(form="gae")


def test_a_resumed_critic_run_continues_exactly(tiny, world, tmp_path):
    import copy
    from conftest import SMALL_STUDY
    from mcgrpo.core import config as study_config
    from mcgrpo import studies
    from mcgrpo.train.models.tiny import build_model
    from mcgrpo.train.trainer import Trainer
    _, tokenizer = tiny
    pool, _ = world
    cfg = studies.validate({**copy.deepcopy(SMALL_STUDY),
                                 "arms": {"outcome": {}, "critic": {"credit": {"critic": {"min_iterations": 1}}}}})

    def trainer(folder):
        model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_positions=96, seed=0)
        return Trainer(study_config.run_config(cfg, "critic", 1), model, tokenizer, pool, None, None,
                       checkpoint_dir=folder)

    whole = trainer(None).run(max_iterations=4).iterations
    first = trainer(tmp_path)
    first.run(max_iterations=2)
    first.save_checkpoint()
    resumed = trainer(tmp_path).run(max_iterations=4).iterations
    keep = ["loss", "grad_norm", "critic_brier", "critic_rows", "tokens_total"]
    pd.testing.assert_frame_equal(pd.DataFrame(resumed)[keep], pd.DataFrame(whole)[keep])  # the window came back
    assert whole[-1]["critic_active"] == 1
