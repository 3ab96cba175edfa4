"""The Monte-Carlo dense reward (paper §2.2; docs/extending.md, "Dense rewards") and its variants.

Each completion is cut at fixed token offsets (round(s L / (cuts + 1)) by default, or `positions`); from
every cut it reaches, k continuations are sampled (they may use the rest of the limit) and p_s is their
success rate. With p_0 = the group's mean outcome and p_end = the completion's own outcome, segment s's
tokens get w_s = p_s - p_{s-1} on top of the group advantage (`basic`). Continuations count toward B.

Forms: `centered_maxnorm` centers w within each completion and divides it by its largest |w| in the batch
(the equal-iteration study's rule); `vineppo` credits the value differences alone, with
V(prompt) = the leave-one-out group mean (no group advantage). `alpha` weighs w in every form;
`prompt_value` fixes p_0 instead: the paper's Monte-Carlo rewards use V(prompt) = 0.5 (Table 16), which
every shipped basic, centered and reuse arm sets.
`reuse: true` also trains on the continuations, each with leave-one-out credit among the draws at its cut.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mcgrpo.train.credit import (Credit, CreditContext, TrainingSequence, group_advantages,
                           leave_one_out_mean)
from mcgrpo.train.engines import Completion
from mcgrpo.core.seeds import stable_seed
from mcgrpo.train.rollout import Rollouts, reward, score

FORMS = ("basic", "centered_maxnorm", "vineppo")


def cut_positions(limit: int, cuts: int) -> list[int]:
    """Token offsets floor(s L / (cuts + 1) + 1/2), s = 1..cuts (round half up)."""
    return [math.floor(s * limit / (cuts + 1) + 0.5) for s in range(1, cuts + 1)]


def segment_bounds(length: int, positions: list[int]) -> list[int]:
    """Token offsets where a completion's segments start and end; cuts past its end give empty segments."""
    return [0] + [min(c, length) for c in positions] + [length]


def segment_credit(length: int, positions: list[int], p_cuts: list[float], p0: float,
                   p_end: float) -> np.ndarray:
    """w per token of a completion: tokens in [cut_{s-1}, cut_s) get p_s - p_{s-1}.

    `p_cuts[s]` is the success rate from cut s; cuts at or past the end take p_end, so their
    (empty) segments add nothing and the last reached segment closes at the completion's outcome.
    """
    bounds = segment_bounds(length, positions)
    p = [p0] + [pc if c < length else p_end for c, pc in zip(positions, p_cuts)] + [p_end]
    w = np.zeros(length)
    for s in range(1, len(bounds)):
        w[bounds[s - 1]:bounds[s]] = p[s] - p[s - 1]
    return w


def centered_maxnorm(ws: list[np.ndarray]) -> list[np.ndarray]:
    """Center each completion's w on its token mean, then divide by the batch's largest |w|."""
    centered = [w - w.mean() if len(w) else w for w in ws]
    peak = max((float(np.abs(w).max()) for w in centered if len(w)), default=0.0)
    return [w / peak for w in centered] if peak > 0 else centered


@dataclass
class Draws:
    """The k continuations sampled at each (completion, cut) request, and which ones are correct."""
    requests: list[tuple[int, int, int]]   # (completion, cut index, cut offset)
    continuations: list[Completion]        # k per request, in request order
    correct: np.ndarray                    # [requests, k]

    @property
    def tokens(self) -> int:
        return sum(len(c) for c in self.continuations)


@dataclass
class MonteCarlo:
    k: int = 4
    cuts: int = 5
    positions: list[int] | None = None
    form: str = "basic"
    alpha: float = 1.0
    reuse: bool = False
    prompt_value: float | None = None  # a fixed V(prompt) = p_0 (the paper's Table 16: 0.5), in every form
    max_tokens: int | None = None      # a continuation's length at most (H.3's probes: 200); None: the rest of L

    def __post_init__(self):
        if self.form not in FORMS:
            raise ValueError(f"credit.monte_carlo.form: unknown form {self.form!r}; allowed: {', '.join(FORMS)}")

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        positions = self.positions or cut_positions(ctx.limit, self.cuts)
        requests = [(r, s, c) for r, comp in enumerate(rollouts.completions)
                    for s, c in enumerate(positions) if c < len(comp)]
        draws = sample_continuations(rollouts, ctx, requests, self.k, self.max_tokens)
        p_cuts = [[math.nan] * len(positions) for _ in rollouts.completions]
        for (r, s, _), p in zip(requests, draws.correct.mean(axis=1)):
            p_cuts[r][s] = float(p)
        grouped = rollouts.grouped(rollouts.rewards)
        if self.form == "vineppo":
            base, p0 = np.zeros(grouped.size), leave_one_out_mean(grouped).ravel()
        else:
            base = group_advantages(grouped, ctx.advantage_eps).ravel()
            p0 = np.repeat(grouped.mean(axis=1), rollouts.group_size)
        if self.prompt_value is not None:
            p0 = np.full(grouped.size, self.prompt_value)
        ws = [segment_credit(len(comp), positions, p_cuts[r], p0[r], rollouts.rewards[r])
              for r, comp in enumerate(rollouts.completions)]
        if self.form == "centered_maxnorm":
            ws = centered_maxnorm(ws)
        credit = [base[r] + self.alpha * w for r, w in enumerate(ws)]
        sequences = continuation_sequences(rollouts, draws) if self.reuse else []
        stats = {"mc_prefixes": len(requests), "mc_reused_sequences": len(sequences)}
        return Credit(credit, draws.tokens, sequences, stats)


def sample_continuations(rollouts: Rollouts, ctx: CreditContext, requests, k: int,
                         max_tokens: int | None = None) -> Draws:
    """k continuations per (completion, cut) request, batched in one engine call, each scored; each runs to
    the completion limit, or `max_tokens` tokens if that comes first."""
    prompts, limits, seeds, texts_prefix, answers = [], [], [], [], []
    for r, s, c in requests:
        prefix = rollouts.completions[r].tokens[:c]
        problem = rollouts.problems[r // rollouts.group_size]
        for j in range(k):
            prompts.append(rollouts.prompts[r] + prefix)
            limits.append(ctx.limit - c if max_tokens is None else min(ctx.limit - c, max_tokens))
            seeds.append(stable_seed(*ctx.seed, "continuation", r, s, j))
            texts_prefix.append(prefix)
            answers.append(problem["answer"])
    conts = ctx.engine.generate(prompts, limits, seeds) if prompts else []
    texts = [ctx.prompter.decode(pre + cont.tokens) for pre, cont in zip(texts_prefix, conts)]
    correct = (reward(score(texts, answers, ctx.rule), texts, answers, ctx.verifier, ctx.verifier_key).reshape(-1, k)
               if conts else np.zeros((0, k)))
    return Draws(requests, conts, correct)


def continuation_sequences(rollouts: Rollouts, draws: Draws) -> list[TrainingSequence]:
    """Every continuation as a training sequence after its prompt and rollout prefix, credited with its
    outcome minus the mean outcome of the other draws at its cut."""
    k = draws.correct.shape[1]
    credit = (draws.correct - leave_one_out_mean(draws.correct)).ravel() if k > 1 else np.zeros(draws.correct.size)
    contexts = [rollouts.prompts[r] + rollouts.completions[r].tokens[:c] for r, _, c in draws.requests
                for _ in range(k)]
    return [TrainingSequence(context, cont, np.full(len(cont), a))
            for context, cont, a in zip(contexts, draws.continuations, credit)]
