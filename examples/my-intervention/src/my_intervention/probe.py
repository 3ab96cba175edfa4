"""A rule that samples: `k` continuations from the middle of each completion, through `ctx.engine`.

The midpoint's value p_mid is the share of its continuations the study's reward calls correct (`rewards`: its
verifier, read by its rule). Each token gets its completion's group advantage, plus `weight` x (p_mid - p_0) on the
first half (p_0: the group's mean outcome) and `weight` x (R - p_mid) on the second (R: the completion's own
outcome): the Monte-Carlo reward with one cut. Every continuation token is reported in `Credit.tokens_generated`, so
it counts toward the budget B; the trainer checks that against what `ctx.engine` counted and stops a run that
reports less. A rule that samples with an engine of its own (not `ctx.engine`) must count those tokens itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mcgrpo.api import Credit, CreditContext, Rollouts, group_advantages, per_token, rewards, stable_seed


@dataclass
class HalfwayProbe:
    weight: float = 0.5  # of the value differences, in units of the outcome reward
    k: int = 2           # continuations from each completion's midpoint

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        cuts = [len(c) // 2 for c in rollouts.completions]
        requests = [(r, j) for r, cut in enumerate(cuts) if cut > 0 for j in range(self.k)]
        continuations = ctx.engine.generate(
            [rollouts.prompts[r] + rollouts.completions[r].tokens[:cuts[r]] for r, _ in requests],
            [ctx.limit - cuts[r] for r, _ in requests],
            [stable_seed(*ctx.seed, "halfway", r, j) for r, j in requests])
        texts = [ctx.prompter.decode(rollouts.completions[r].tokens[:cuts[r]] + c.tokens)
                 for (r, _), c in zip(requests, continuations)]
        correct = rewards(texts, [str(rollouts.problems[r // rollouts.group_size]["answer"]) for r, _ in requests],
                          ctx)
        p_0 = np.repeat(rollouts.grouped(rollouts.rewards).mean(axis=1), rollouts.group_size)
        p_mid = p_0.copy()  # a completion too short to cut keeps the prior: no difference to credit
        for r in {r for r, _ in requests}:
            p_mid[r] = np.mean([v for (q, _), v in zip(requests, correct) if q == r])
        base = per_token(group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps), rollouts)
        for r, tokens in enumerate(base):
            tokens[:cuts[r]] += self.weight * (p_mid[r] - p_0[r])
            tokens[cuts[r]:] += self.weight * (rollouts.rewards[r] - p_mid[r])
        generated = sum(len(c) for c in continuations)
        return Credit(base, tokens_generated=generated, stats={"probe_tokens": float(generated)})
