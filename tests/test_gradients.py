"""Gradient tests on a toy world whose expected accuracy has a closed form: one-character answers, a tiny
Llama nudged toward them, completions of at most two tokens, so that J is a finite sum over every completion."""

import numpy as np
import pytest
import torch

from mcgrpo.core.seeds import stable_seed
from mcgrpo.core.verify import verify
from mcgrpo.train import engines, gradients, updates
from mcgrpo.train.credit import CreditContext, build
from mcgrpo.train.loss import token_logprobs
from mcgrpo.train.models.tiny import build_model, build_tokenizer
from mcgrpo.train.rollout import Prompter, sample_groups

PROBLEMS = [{"question": "a", "answer": "7"}, {"question": "b", "answer": "3"}]
LONG_STEPS = 10
RECIPE = {"group_size": 8, "completion_limit": 8, "microbatch_size": 64, "reward_verifier": "default",
          "advantage_eps": 1e-6}


def trained(template: str, steps: int):
    """A tiny Llama trained `steps` steps toward template.format(answer) + "<|end|>" after "a" (answer 7) and
    "b" (answer 3): J well inside (0, 1)."""
    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                        max_positions=32, seed=0)
    prompter = Prompter(tokenizer)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    contexts = [prompter(p["question"]) for p in PROBLEMS]
    targets = [(*tokenizer(template.format(p["answer"]), add_special_tokens=False).input_ids, tokenizer.eos_token_id)
               for p in PROBLEMS]
    for _ in range(steps):
        optimizer.zero_grad()
        logp, mask = token_logprobs(model, contexts, targets, tokenizer.pad_token_id)
        (-logp[mask].sum()).backward()
        optimizer.step()
    return model, tokenizer, prompter


@pytest.fixture(scope="module")
def toy():
    """Completions of one or two tokens: J is a sum over every one of them."""
    return trained("{}", 16)


@pytest.fixture(scope="module")
def long_toy():
    """Completions long enough for cuts inside them: where dense credit differs from the outcome's."""
    return trained("so {}", LONG_STEPS)


def exact_gradient(model, tokenizer, prompter, params) -> tuple[float, torch.Tensor]:
    """J (mean over the problems of the probability of a correct completion of at most 2 tokens) and its
    gradient, summed over every completion the engine can produce."""
    eos, vocab = tokenizer.eos_token_id, len(tokenizer)
    contexts, completions, rewards = [], [], []
    for p in PROBLEMS:
        for a in range(vocab):
            for seq in [(a,)] if a == eos else [(a, b) for b in range(vocab)]:
                contexts.append(prompter(p["question"]))
                completions.append(seq)
                rewards.append(float(verify(prompter.decode(seq), p["answer"]).default))
    for p in params:
        p.grad = None
    logp, mask = token_logprobs(model, contexts, completions, tokenizer.pad_token_id)
    prob = torch.exp((logp.double() * mask).sum(1))
    assert prob.sum().item() == pytest.approx(len(PROBLEMS))  # every completion enumerated
    J = (prob * torch.tensor(rewards, dtype=torch.float64)).sum() / len(PROBLEMS)
    J.backward()
    return J.item(), torch.cat([p.grad.reshape(-1).double() for p in params])


def context(engine, prompter, limit, tag, b):
    return CreditContext(engine=engine, prompter=prompter, limit=limit, verifier="default", advantage_eps=1e-6,
                         seed=(0, tag, b))


def test_reference_gradient_converges_to_the_exact_gradient(toy):
    model, tokenizer, prompter = toy
    params = gradients.parameter_space(model, "full")
    J, exact = exact_gradient(model, tokenizer, prompter, params)
    assert 0.1 < J < 0.9
    engine, reference = engines.build("hf", model, tokenizer), gradients.reference_rule({"k": 4, "cuts": 1, "prior": 0.5})
    estimates, errors = [], {}
    for b in range(64):
        seeds = [stable_seed(0, "rollout", b, k) for k in range(16)]
        batch = sample_groups(engine, prompter, PROBLEMS, 8, 2, seeds, "default")
        credit = reference(batch, context(engine, prompter, 2, "reference", b))
        estimates.append(gradients.direction(model, params, updates.training_batch(batch, credit),
                                             tokenizer.pad_token_id, 64))
        if b + 1 in (2, 64):
            mean = torch.stack(estimates).mean(0)
            errors[b + 1] = float((mean - exact).norm() / exact.norm())
    assert gradients._cos(mean, exact) > 0.98  # an unbiased estimate: its error falls like 1 / sqrt(batches)
    assert errors[64] < 0.2 and errors[64] < errors[2] / 2


def test_a_whole_completion_credit_gives_the_gradient_of_its_sample_mean(toy):
    """The reference's estimator with the prior as p_0 and no cuts is REINFORCE with baseline 0.5; with every
    continuation exact it is unbiased: checked here through the telescoping of the segment credit."""
    model, tokenizer, prompter = toy
    engine = engines.build("hf", model, tokenizer)
    batch = sample_groups(engine, prompter, PROBLEMS, 4, 2, list(range(8)), "default")
    credit = gradients.reference_rule({"k": 2, "cuts": 1, "prior": 0.5})(batch, context(engine, prompter, 2, "r", 0))
    for tokens, reward in zip(credit.tokens, batch.rewards):
        # the segments' first tokens telescope from the prior to the outcome
        assert tokens[0] + (tokens[-1] if len(tokens) > 1 else 0) == pytest.approx(reward - 0.5)


@pytest.fixture(scope="module")
def probed(long_toy):
    model, tokenizer, prompter = long_toy
    engine = engines.build("hf", model, tokenizer)
    rules = {"outcome": build({}), "outcome_again": build({"outcome": {}}),
             "mc": build({"monte_carlo": {"k": 2, "cuts": 3}}),
             "shuffled": build({"shuffled": {"monte_carlo": {"k": 2, "cuts": 3}}})}
    reference = gradients.reference_rule({"k": 4, "cuts": 3, "prior": 0.5})
    batches = gradients.fixed_batches(len(PROBLEMS), 16, 2, seed=0)
    table = gradients.probe(model, tokenizer, PROBLEMS, RECIPE, rules, reference, batches, 0, engine, prompter,
                            gradients.parameter_space(model, "full"))
    return table.pivot_table(index=["arm", "batch"], columns="measure", values="value")


def test_outcome_update_lies_in_v_and_equals_itself(probed):
    outcome, again = probed.loc["outcome"], probed.loc["outcome_again"]
    assert outcome["share_outside_v"].max() < 1e-5  # Proposition 1: whole-completion weights stay in V
    assert outcome["projection_residual"].max() < 1e-10
    assert outcome["alignment"].isna().all()  # nothing outside V to align
    np.testing.assert_allclose(again["inner"], outcome["inner"])  # efficiency of outcome relative to itself: 1
    ratio = (again["inner"].mean() ** 2 / again["sq_norm"].mean()) / (outcome["inner"].mean() ** 2 / outcome["sq_norm"].mean())
    assert ratio == pytest.approx(1.0)


def test_dense_updates_leave_v_and_only_the_monte_carlo_one_aligns(probed):
    mc, shuffled = probed.loc["mc"], probed.loc["shuffled"]
    assert mc["share_outside_v"].mean() > 0.05 and shuffled["share_outside_v"].mean() > 0.05
    assert mc["projection_residual"].max() < 1e-10
    assert mc["alignment"].mean() > 0.15
    se = shuffled["alignment"].std() / np.sqrt(len(shuffled))
    assert abs(shuffled["alignment"].mean()) < max(3 * se, 0.1)
    np.testing.assert_allclose(mc["tokens_continuation"] > 0, True)
    np.testing.assert_allclose(mc["tokens"], shuffled["tokens"])  # the same draws, shuffled


def test_shuffle_is_a_permutation_within_each_completion(toy):
    model, tokenizer, prompter = toy
    engine = engines.build("hf", model, tokenizer)
    batch = sample_groups(engine, prompter, PROBLEMS, 4, 6, list(range(8)), "default")
    ctx = context(engine, prompter, 6, "s", 0)
    plain, shuffled = build({"monte_carlo": {"k": 2}})(batch, ctx), build({"shuffled": {"monte_carlo": {"k": 2}}})(batch, ctx)
    for a, b in zip(plain.tokens, shuffled.tokens):
        np.testing.assert_array_equal(np.sort(a), np.sort(b))
    assert any(not np.array_equal(a, b) for a, b in zip(plain.tokens, shuffled.tokens))


def test_implicit_reward_is_the_log_ratio_to_the_initial_policy(toy):
    from mcgrpo.train.credit import group_advantages
    from mcgrpo.train.policy import frozen, log_ratio
    model, tokenizer, prompter = toy
    reference = frozen(model)
    engine = engines.build("hf", model, tokenizer)
    batch = sample_groups(engine, prompter, PROBLEMS, 4, 6, list(range(8)), "default")
    rule = build({"implicit": {"alpha": 2.0}})
    ctx = CreditContext(engine=engine, prompter=prompter, limit=6, verifier="default", advantage_eps=1e-6,
                        seed=(0, 0), log_ratio=log_ratio(model, reference, tokenizer.pad_token_id))
    advantages = group_advantages(batch.grouped(batch.rewards), 1e-6).ravel()
    for a, c in zip(advantages, rule(batch, ctx).tokens):  # at the initial policy: outcome-only's credit
        np.testing.assert_allclose(c, a, atol=1e-12)
    moved = frozen(model)
    with torch.no_grad():
        moved.lm_head.weight.mul_(1.5)
    ctx.log_ratio = log_ratio(moved, reference, tokenizer.pad_token_id)
    tokens = [c.tokens for c in batch.completions]
    now, _ = token_logprobs(moved, batch.prompts, tokens, tokenizer.pad_token_id)
    ref, mask = token_logprobs(reference, batch.prompts, tokens, tokenizer.pad_token_id)
    for r, c in enumerate(rule(batch, ctx).tokens):
        np.testing.assert_allclose(c, advantages[r] + 2.0 * (now[r] - ref[r])[mask[r]].detach().numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="credit.implicit needs"):
        rule(batch, context(engine, prompter, 6, "s", 0))


def test_lora_space_holds_only_the_adapters_and_outcome_stays_in_v():
    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32,
                        max_positions=32, seed=1)
    params = gradients.parameter_space(model, "lora", {"rank": 2, "alpha": 4, "targets": ["q_proj", "v_proj"]})
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all("lora_" in n for n in names)
    assert sum(p.numel() for p in params) == 2 * 2 * (16 + 16)  # A and B of q and v, rank 2
    prompter, engine = Prompter(tokenizer), engines.build("hf", model, tokenizer)
    problems = [{"question": "a", "answer": "7"}, {"question": "b", "answer": "3"}]
    batch = sample_groups(engine, prompter, problems, 4, 3, list(range(8)), "default")
    batch.rewards[:] = [1, 0, 0, 1, 0, 1, 1, 0]  # a batch with signal (the untrained model answers nothing)
    u = gradients.direction(model, params, updates.training_batch(batch, build({})(batch, context(engine, prompter, 3, "l", 0))),
                            tokenizer.pad_token_id, 64)
    scores = gradients.score_vectors(model, params, batch, tokenizer.pad_token_id, 64)
    outside, residual = gradients.project_out(scores, u[None])
    assert u.norm() > 0 and float(outside.norm() / u.norm()) < 1e-5


def test_gradient_tests_block_defaults_and_errors(study):
    import copy
    from mcgrpo import studies
    from mcgrpo.core import config as study_config
    from mcgrpo.core.errors import ConfigError
    cfg = copy.deepcopy(study)
    cfg["gradient_tests"] = {"arms": ["mc_k2"], "controls": {"mc_shuffled": {"shuffled": {"monte_carlo": {"k": 2}}}}}
    cfg = studies.validate(cfg)
    assert cfg["gradient_tests"]["batches"] == 96 and cfg["gradient_tests"]["reference"] == {"k": 4, "cuts": 3, "prior": 0.5, "length": 200, "top_p": 0.95}
    run = study_config.gradient_tests_config(cfg)
    assert set(run["arms"]) == {"mc_k2"} and "analysis" not in run
    assert study_config.gradient_tests_config({**cfg, "gradient_tests": {**cfg["gradient_tests"], "enabled": False}}) is None
    bad = copy.deepcopy(study)
    bad["gradient_tests"] = {"arms": ["nope"], "controls": {"mc_k2": {"implicit": {}}}}
    with pytest.raises(ConfigError) as e:
        studies.validate(bad)
    assert "gradient_tests.arms[0]: 'nope' is not an arm; allowed: outcome, mc_k2" in str(e.value)
    assert "gradient_tests.controls.mc_k2: the name is taken by an arm" in str(e.value)


def test_arm_rules_put_outcome_first_and_sweep_the_first_monte_carlo_arm(study):
    import copy
    from mcgrpo import studies
    cfg = copy.deepcopy(study)
    cfg["arms"]["mc_k2"]["credit"] = {"monte_carlo": {"k": 2, "cuts": 3}}
    cfg["gradient_tests"] = {"arms": ["mc_k2"], "k_sweep": [1, 8],
                             "controls": {"mc_shuffled": {"shuffled": {"monte_carlo": {"k": 2}}}}}
    rules = gradients.arm_rules(studies.validate(cfg))
    assert list(rules) == ["outcome", "mc_k2", "mc_shuffled", "sweep_k1", "sweep_k8"]
    assert (rules["sweep_k8"].k, rules["sweep_k8"].cuts, rules["sweep_k1"].k) == (8, 3, 1)


def test_memo_engine_samples_each_request_once_with_the_same_tokens(toy):
    model, tokenizer, prompter = toy
    from credit_fixtures import CountingEngine
    counting = CountingEngine(engines.build("hf", model, tokenizer))
    memo = gradients.Memo(counting)
    prompts = [prompter("a"), prompter("b"), prompter("a")]
    first = memo.generate(prompts, [4, 4, 4], [1, 2, 1])
    spent = counting.generated
    again = memo.generate(prompts[:2], [4, 4], [1, 2])
    assert counting.generated == spent and again == first[:2] and first[2] == first[0]
    assert first == engines.build("hf", model, tokenizer).generate(prompts, [4, 4, 4], [1, 2, 1])


def test_the_shuffled_control_permutes_the_measured_arms_own_credit(long_toy):
    """Paper 3.1, H.3: the control keeps the measured arm's credit magnitudes. mc_k4 uses V(prompt) = 0.5, so the
    control shuffles that credit, not the one with V(prompt) = the group mean (the nearest wrong control)."""
    model, tokenizer, prompter = long_toy
    engine = gradients.Memo(engines.build("hf", model, tokenizer))
    batch = sample_groups(engine, prompter, PROBLEMS, 4, 8, list(range(8)), "default")
    assert not np.allclose(batch.grouped(batch.rewards).mean(axis=1), 0.5)  # else the two controls coincide
    ctx = context(engine, prompter, 8, "s", 0)
    arm = build({"monte_carlo": {"k": 2, "prompt_value": 0.5}})(batch, ctx)
    control = build({"shuffled": {"monte_carlo": {"k": 2, "prompt_value": 0.5}}})(batch, ctx)
    group_mean = build({"monte_carlo": {"k": 2}})(batch, ctx)
    for a, c in zip(arm.tokens, control.tokens):
        np.testing.assert_array_equal(np.sort(a), np.sort(c))
    assert any(not np.allclose(np.sort(g), np.sort(c)) for g, c in zip(group_mean.tokens, control.tokens))


def test_a_shuffled_control_of_another_prompt_value_is_refused(study):
    import copy
    from mcgrpo import studies
    from mcgrpo.core.errors import ConfigError
    cfg = copy.deepcopy(study)
    cfg["arms"]["mc_k2"]["credit"] = {"monte_carlo": {"k": 2, "prompt_value": 0.5}}
    cfg["gradient_tests"] = {"arms": ["mc_k2"], "controls": {"mc_shuffled": {"shuffled": {"monte_carlo": {"k": 2}}}}}
    with pytest.raises(ConfigError, match=r"gradient_tests\.controls\.mc_shuffled\.shuffled\.monte_carlo\.prompt_value: "
                                          r"None is not the measured arms' V\(prompt\).*allowed: 0\.5"):
        studies.validate(cfg)
    cfg["gradient_tests"]["controls"]["mc_shuffled"]["shuffled"]["monte_carlo"]["prompt_value"] = 0.5
    studies.validate(cfg)


def test_the_calibration_credit_is_the_paper_monte_carlo_reward_by_default(study):
    """B is calibrated on the k = 4 Monte-Carlo arm as the paper runs it: V(prompt) = 0.5 (Table 16), not the
    group mean; the default study's mc_k4 and its calibration run share the rule."""
    import yaml
    from conftest import ROOT
    from mcgrpo import studies
    rule = study["budget"]["calibration_credit"]["monte_carlo"]
    assert (rule["k"], rule["prompt_value"]) == (4, 0.5)
    default = studies.validate(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    assert default["budget"]["calibration_credit"] == default["arms"]["mc_k4"]["credit"]


def test_reference_continuations_run_h3s_length_at_h3s_top_p(long_toy):
    """H.3: the reference's continuations run up to 200 tokens at top-p 0.95, whatever the recipe's top-p and
    completion limit; here 2 tokens of a limit of 8, so the rest-of-limit rule (the nearest wrong one) shows."""
    from mcgrpo.train.engines.hf import HFEngine

    class Recording(HFEngine):
        def generate(self, prompts, max_new_tokens, seeds):
            out = super().generate(prompts, max_new_tokens, seeds)
            self.calls.append((self.top_p, max(max_new_tokens), max(len(c) for c in out)))
            return out

    model, tokenizer, prompter = long_toy
    engine = Recording(model, tokenizer, top_p=1.0)
    engine.calls = []
    params = gradients.parameter_space(model, "full")
    reference = gradients.reference_rule({"k": 2, "cuts": 3, "prior": 0.5, "length": 2, "top_p": 0.95})
    gradients.probe(model, tokenizer, PROBLEMS, RECIPE, {"outcome": build({})}, reference, [np.array([0, 1])], 0,
                    engine, prompter, params)
    (rollout_p, rollout_limit, _), (ref_p, ref_limit, ref_longest) = engine.calls
    assert (rollout_p, rollout_limit) == (1.0, 8) and engine.top_p == 1.0  # restored after the reference
    assert (ref_p, ref_limit) == (0.95, 2) and ref_longest <= 2
    rest = gradients.reference_rule({"k": 2, "cuts": 3, "prior": 0.5, "length": None, "top_p": None})
    assert (rest.rule.max_tokens, rest.top_p) == (None, None)
