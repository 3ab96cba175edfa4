"""The path penalty (seed 003): a verifiable per-line channel beside the outcome.

Every arithmetic claim a completion writes (`expression = c`, one per solution step) is checked: the tokens
of a false claim get -lambda (a violation), and credited claims +beta. The channel is normalized
separately from the outcome, by its own token count: x (tokens / tokens that carry a path signal), within
each group (`normalize: group`, as the paper's code does) or over the batch (`batch`, the seed's recipe),
so a sparse channel is not diluted by the outcome's. It is then added to the group advantage;
`outcome: false` drops the advantage, the penalty-only ablation whose optimum is to claim nothing.

The seed's forms, as options (defaults keep the earlier behaviour and config hashes):
- `credit: every_true` pays +beta on every true claim, which pays padding (the pathology the seed warns
  of); `fulfilled` pays it only for a fulfilled obligation: a true claim, not a repeat or an identity,
  starting from the problem's numbers or an earlier credited result, whose result the solution goes on to
  use (a later number, the final answer included) or that matches a reference step (`fulfilled()`);
- `credit_gate: outcome` pays the credit only on completions whose outcome is correct (penalties stay);
- `anneal_below: v`: once a batch's violation rate (false / all claims) falls below v, the path channel's
  weight is multiplied by `anneal_rate` (default 0.5) every iteration from the next one on. The seed
  anneals "once compliance saturates" and gives no schedule; this geometric one is a choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np

from mcgrpo.core.claim_notation import numbers
from mcgrpo.core.claims import Claim, claims
from mcgrpo.train.credit import Credit, CreditContext, group_advantages
from mcgrpo.train.credit.process import reference_values
from mcgrpo.train.rollout import Rollouts

CREDITS = ("every_true", "fulfilled")
GATES = ("none", "outcome")
NORMALIZE = ("group", "batch")


def char_ends(decode: Callable[[Sequence[int]], str], tokens: Sequence[int]) -> np.ndarray:
    """Where each token's text ends in the decoded completion (exact even when tokens merge on decoding)."""
    ends = np.cumsum([len(decode([t])) for t in tokens])
    if len(tokens) and ends[-1] != len(decode(tokens)):
        ends = np.array([len(decode(tokens[:i + 1])) for i in range(len(tokens))])
    return ends


def given_numbers(question: str) -> frozenset[Fraction]:
    """The numbers a problem states: what a first step may start from."""
    return frozenset(numbers(question))


def fulfilled(text: str, found: list[Claim], reference: Sequence[float],
              given: frozenset[Fraction] | None = None) -> list[bool]:
    """Per claim: a fulfilled obligation (seed 003: credit for a verified step of progress), i.e. a claim that
    is true, not a repeat of an earlier claim, not an identity (`0+72=72`: its result is one of its own
    numbers), whose result is used later in the text or equals a reference step, and, when the problem's
    numbers `given` are known, that starts from one of them or from the result of an earlier credited step.
    The last rule is what stops a chain of invented trivial steps (`1+1=2. 2+1=3. 3+1=4`) from paying: each
    of its results is used by the next, but none starts from the problem. (Seed 003 defines obligations for
    agents, not arithmetic; what counts as progress here is our reading of it.)"""
    seen, out = set(), []
    available = set(given or ())
    for c in found:
        later = set(numbers(text, c.end))
        step = any(abs(float(c.result) - r) <= 1e-9 * max(1.0, abs(r)) for r in reference)
        grounded = given is None or any(x in available for x in c.operands)
        earns = (bool(c.holds) and (c.value, c.result) not in seen and c.result not in c.operands
                 and (c.result in later or step) and grounded)
        out.append(earns)
        seen.add((c.value, c.result))
        if earns:
            available.add(c.result)
    return out


def line_signal(text: str, ends: np.ndarray, lam: float, beta: float, credit: str = "every_true",
                reference: Sequence[float] = (), paid: bool = True,
                given: frozenset[Fraction] | None = None) -> tuple[np.ndarray, int, int]:
    """Per token: -lam on the tokens of a false claim, +beta on a credited one's (a token overlapping its
    characters; `paid` False withholds the credit); and the counts of false and true claims."""
    starts = np.concatenate([[0], ends[:-1]])
    signal = np.zeros(len(ends))
    found = [c for c in claims(text) if c.parsed]  # an unparsable claim is neither true nor false
    credited = (fulfilled(text, found, reference, given) if credit == "fulfilled"
                else [bool(c.holds) for c in found])
    for claim, earns in zip(found, credited):
        tokens = (starts < claim.end) & (ends > claim.start)
        if not claim.holds:
            signal[tokens] = -lam
        elif earns and paid:
            signal[tokens] = beta
    false = sum(not c.holds for c in found)
    return signal, false, len(found) - false


def normalize_within_groups(channel: list[np.ndarray], group_size: int) -> list[np.ndarray]:
    """Scale each group's channel by its tokens / its tokens with a signal (unchanged if it has none);
    a group as large as the batch normalizes over the batch."""
    out = []
    for g in range(0, len(channel), group_size):
        group = channel[g:g + group_size]
        marked = sum(int(np.count_nonzero(c)) for c in group)
        scale = sum(len(c) for c in group) / marked if marked else 1.0
        out += [c * scale for c in group]
    return out


@dataclass
class PathPenalty:
    lam: float = 0.5
    beta: float = 0.5
    outcome: bool = True
    credit: str = "every_true"
    credit_gate: str = "none"
    normalize: str = "group"
    anneal_below: float | None = None
    anneal_rate: float = 0.5
    weight: float = 1.0       # the path channel's weight (annealed; part of the run's state)
    annealing: bool = False

    def __post_init__(self):
        for key, value, allowed in (("credit", self.credit, CREDITS), ("credit_gate", self.credit_gate, GATES),
                                    ("normalize", self.normalize, NORMALIZE)):
            if value not in allowed:
                raise ValueError(f"credit.path_penalty.{key}: {value!r}; allowed: {', '.join(allowed)}")

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        references = [reference_values(p.get("steps")) for p in rollouts.problems]
        given = [given_numbers(p.get("question", "")) for p in rollouts.problems]
        lines = [line_signal(text, char_ends(ctx.prompter.decode, c.tokens), self.lam, self.beta, self.credit,
                             references[r // rollouts.group_size],
                             self.credit_gate == "none" or bool(rollouts.rewards[r]), given[r // rollouts.group_size])
                 for r, (text, c) in enumerate(zip(rollouts.texts, rollouts.completions))]
        size = rollouts.group_size if self.normalize == "group" else len(lines)
        path = normalize_within_groups([signal for signal, _, _ in lines], size)
        adv = group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps).ravel()
        credit = [(adv[r] if self.outcome else 0.0) + self.weight * p for r, p in enumerate(path)]
        false, true = (sum(line[i] for line in lines) for i in (1, 2))
        violations = false / (false + true) if false + true else np.nan
        stats = {"path_mean": float(np.mean([self.beta * t - self.lam * f for _, f, t in lines])),
                 "path_false_share": violations, "path_weight": self.weight}
        self._anneal(violations)
        return Credit(credit, stats=stats)

    def _anneal(self, violations: float) -> None:
        """Start annealing once the violation rate falls below `anneal_below`; decay from the next iteration."""
        if self.annealing:
            self.weight *= self.anneal_rate
        elif self.anneal_below is not None and violations < self.anneal_below:
            self.annealing = True

    def state_dict(self) -> dict:
        return {"weight": self.weight, "annealing": self.annealing}

    def load_state_dict(self, state: dict) -> None:
        self.weight, self.annealing = state["weight"], state["annealing"]
