"""The Monte-Carlo dense reward (DESIGN §5, basic form).

Each completion is cut at fixed token offsets round(s L / (cuts + 1)); from every cut it reaches, k
continuations are sampled (they may use the rest of the limit) and p_s is their success rate. With
p_0 = the group's mean outcome and p_end = the completion's own outcome, segment s's tokens get
w_s = p_s - p_{s-1} on top of the group advantage. Continuations count toward B; they are scored,
never trained on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mcgrpo.credit import Credit, CreditContext, group_advantages
from mcgrpo.engines import stable_seed
from mcgrpo.rollout import Rollouts, score


def cut_positions(limit: int, cuts: int) -> list[int]:
    """Token offsets floor(s L / (cuts + 1) + 1/2), s = 1..cuts (round half up)."""
    return [math.floor(s * limit / (cuts + 1) + 0.5) for s in range(1, cuts + 1)]


def segment_credit(length: int, positions: list[int], p_cuts: list[float], p0: float,
                   p_end: float) -> np.ndarray:
    """w per token of a completion: tokens in [cut_{s-1}, cut_s) get p_s - p_{s-1}.

    `p_cuts[s]` is the success rate from cut s; cuts at or past the end take p_end, so their
    (empty) segments add nothing and the last reached segment closes at the completion's outcome.
    """
    bounds = [0] + [min(c, length) for c in positions] + [length]
    p = [p0] + [pc if c < length else p_end for c, pc in zip(positions, p_cuts)] + [p_end]
    w = np.zeros(length)
    for s in range(1, len(bounds)):
        w[bounds[s - 1]:bounds[s]] = p[s] - p[s - 1]
    return w


@dataclass
class MonteCarlo:
    k: int = 4
    cuts: int = 5

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        positions = cut_positions(ctx.limit, self.cuts)
        requests = [(r, s, c) for r, comp in enumerate(rollouts.completions)
                    for s, c in enumerate(positions) if c < len(comp)]
        p_cuts, n_tokens = self._success_rates(rollouts, ctx, requests)
        adv = group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps).ravel()
        p0 = np.repeat(rollouts.grouped(rollouts.rewards).mean(axis=1), rollouts.group_size)
        credit = [adv[r] + segment_credit(len(comp), positions, p_cuts[r], p0[r], rollouts.rewards[r])
                  for r, comp in enumerate(rollouts.completions)]
        return Credit(credit, n_tokens)

    def _success_rates(self, rollouts: Rollouts, ctx: CreditContext, requests):
        """k continuations per (completion, cut) request, batched in one engine call."""
        prompts, limits, seeds, texts_prefix, answers = [], [], [], [], []
        for r, s, c in requests:
            prefix = rollouts.completions[r].tokens[:c]
            problem = rollouts.problems[r // rollouts.group_size]
            for j in range(self.k):
                prompts.append(rollouts.prompts[r] + prefix)
                limits.append(ctx.limit - c)
                seeds.append(stable_seed(*ctx.seed, "continuation", r, s, j))
                texts_prefix.append(prefix)
                answers.append(problem["answer"])
        conts = ctx.engine.generate(prompts, limits, seeds) if prompts else []
        texts = [ctx.prompter.decode(pre + cont.tokens) for pre, cont in zip(texts_prefix, conts)]
        correct = score(texts, answers).reward(ctx.verifier).reshape(-1, self.k).mean(axis=1) \
            if conts else np.zeros(0)
        p_cuts = [[math.nan] * self.cuts for _ in rollouts.completions]
        for (r, s, _), p in zip(requests, correct):
            p_cuts[r][s] = float(p)
        return p_cuts, sum(len(c) for c in conts)
