"""The recipe's advantage, loss normalization and microbatching."""

import numpy as np
import pytest
import torch

from mcgrpo.train.credit import group_advantages
from mcgrpo.train.loss import backward_policy_loss, token_logprobs


def test_advantage_uses_population_std_per_group():
    rewards = np.array([[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv = group_advantages(rewards, eps=0.0 + 1e-12)
    np.testing.assert_allclose(adv[0], [1, -1, -1, 1], atol=1e-9)          # std 0.5 (ddof 0)
    std = np.sqrt(0.25 * 0.75)
    np.testing.assert_allclose(adv[1], [0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std], atol=1e-9)
    np.testing.assert_array_equal(adv[2], 0.0)                             # uniform groups give no signal


def test_advantage_eps_bounds_small_std():
    adv = group_advantages(np.array([[1.0, 0.0]]), eps=0.5)
    np.testing.assert_allclose(adv, [[0.5, -0.5]])


def _batch(tokenizer):
    prompts = [tuple(tokenizer("<bos><|user|>1+2<|end|><|assistant|>", add_special_tokens=False).input_ids)] * 5
    completions = [tuple(tokenizer(t, add_special_tokens=False).input_ids)
                   for t in ("1+2=3 \\boxed{3}", "3", "1+2=4", "x", "\\boxed{3}")]
    credit = [np.linspace(-1, 1, len(c)) for c in completions]
    return prompts, completions, credit


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_loss_is_credit_weighted_logprob_sum_over_completions(tiny):
    model, tokenizer = tiny
    prompts, completions, credit = _batch(tokenizer)
    loss = backward_policy_loss(model, prompts, completions, credit, tokenizer.pad_token_id, 64)
    with torch.no_grad():
        logp, mask = token_logprobs(model, prompts, completions, tokenizer.pad_token_id)
    by_hand = -sum(float((torch.tensor(c, dtype=torch.float32) * logp[r][mask[r]]).sum())
                   for r, c in enumerate(credit)) / len(completions)
    assert loss == pytest.approx(by_hand, rel=1e-5)
    assert mask.sum().item() == sum(map(len, completions))  # every completion token, no prompt token


def test_microbatching_changes_neither_loss_nor_gradient(tiny):
    model, tokenizer = tiny
    prompts, completions, credit = _batch(tokenizer)
    results = []
    for size in (1, 2, 5):
        model.zero_grad(set_to_none=True)
        loss = backward_policy_loss(model, prompts, completions, credit, tokenizer.pad_token_id, size)
        results.append((loss, _grads(model).clone()))
    for loss, grad in results[1:]:
        assert loss == pytest.approx(results[0][0], rel=1e-5)
        torch.testing.assert_close(grad, results[0][1], rtol=1e-4, atol=1e-6)


def _one_at_a_time(model, prompts, completions, credit, pad_id, behaviour=None, clip=None) -> float:
    """The loss's reference: each row scored alone, its own credit (and behaviour log-probs) on its own tokens."""
    total = 0.0
    for r, (prompt, completion, weights) in enumerate(zip(prompts, completions, credit)):
        logp = token_logprobs(model, [prompt], [completion], pad_id)[0][0]
        weights = torch.as_tensor(weights, dtype=torch.float32)
        if behaviour is None:
            objective = weights * logp
        else:
            ratio = torch.exp(logp - torch.as_tensor(behaviour[r], dtype=torch.float32))
            objective = torch.minimum(ratio * weights, ratio.clamp(1 - clip, 1 + clip) * weights)
        loss = -objective.sum() / len(completions)
        loss.backward()
        total += loss.item()
    return total


@pytest.mark.parametrize("clip", [None, 0.2])
def test_repeated_completions_are_scored_once_with_each_rows_credit(tiny, clip):
    model, tokenizer = tiny
    prompts, completions, credit = _batch(tokenizer)
    prompts, completions = prompts + prompts[:2] + [prompts[0]], completions + completions[:2] + [completions[0]]
    credit = credit + [-2 * credit[0], credit[1] + 1, np.zeros(len(completions[0]))]  # row 0 three times
    behaviour = None
    if clip:
        with torch.no_grad():
            logp, mask = token_logprobs(model, prompts, completions, tokenizer.pad_token_id)
        behaviour = [logp[r][mask[r]].numpy() - np.log(1.1 + 0.3 * r) for r in range(len(completions))]
    model.zero_grad(set_to_none=True)
    expected = _one_at_a_time(model, prompts, completions, credit, tokenizer.pad_token_id, behaviour, clip)
    grad = _grads(model).clone()
    for size in (1, 64):
        model.zero_grad(set_to_none=True)
        loss = backward_policy_loss(model, prompts, completions, credit, tokenizer.pad_token_id, size, behaviour, clip)
        assert loss == pytest.approx(expected, rel=1e-5)
        torch.testing.assert_close(_grads(model), grad, rtol=1e-4, atol=1e-6)


def test_zero_credit_gives_zero_gradient(tiny):
    model, tokenizer = tiny
    prompts, completions, credit = _batch(tokenizer)
    backward_policy_loss(model, prompts, completions, [np.zeros(len(c)) for c in completions],
                         tokenizer.pad_token_id, 2)
    assert torch.count_nonzero(_grads(model)) == 0
