"""How far the policy has moved: its token entropy and its KL from the initial policy, per iteration.

Paper H.5 reports both along the equal-iteration study (high-weight entropy rises from 0.21 to 0.58, the KL
from the initial policy is about 30 times the low-weight runs'), but does not say how it measured them. Here,
over the iteration's own completions (every token of every completion, sampled from the policy being measured):

- `entropy`: the mean over tokens of H(pi_theta(. | prefix)) in nats, exact over the vocabulary at each
  position (the distribution at temperature 1, whatever the sampling temperature);
- `kl_initial`: the mean over tokens of the k3 estimator of KL(pi_theta || pi_0), r - 1 - log r with
  r = pi_0(a) / pi_theta(a) at the sampled token a. k3 is the paper's own estimator of the same KL where it uses
  one (its KL-to-initial-policy penalty, H.1); it is unbiased for samples of pi_theta, never negative, and exactly
  0 where the policies agree (iteration 0).

The update's own pass cannot give these: it keeps only the sampled tokens' log-probs, skips completions whose
every token has zero credit (groups of equal rewards), and under a reuse arm runs on minibatches. So one no-grad
pass of the policy (before the iteration's update: the policy that sampled the batch) and one of a frozen copy of
the initial policy run over the completions. It is measurement, not training: the trainer runs it outside the
stage clock.
"""

from __future__ import annotations

from typing import Sequence

import torch

from mcgrpo.train.loss import CPU_MICROBATCH_TOKENS, completion_logprobs, microbatches, token_logprobs


@torch.no_grad()
def entropy_kl(model, reference, contexts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
               pad_id: int, microbatch_size: int) -> dict[str, float]:
    """{"entropy", "kl_initial"}: token means over `completions` (see the module docstring)."""
    max_tokens = CPU_MICROBATCH_TOKENS if model.device.type == "cpu" else float("inf")
    entropy = kl = 0.0
    count = 0
    for rows in microbatches([len(c) for c in completions], microbatch_size, max_tokens):
        ctx, done = [contexts[r] for r in rows], [completions[r] for r in rows]
        logp, targets, mask = completion_logprobs(model, ctx, done, pad_id)
        sampled = logp.gather(-1, targets[..., None]).squeeze(-1)[mask].double()
        entropy += float(-(logp.exp() * logp).sum(-1)[mask].double().sum())
        log_r = token_logprobs(reference, ctx, done, pad_id)[0][mask].double() - sampled
        kl += float((torch.expm1(log_r) - log_r).sum())
        count += int(mask.sum())
    return {"entropy": entropy / count if count else float("nan"), "kl_initial": kl / count if count else float("nan")}
