"""The process reward (seed 001): step matching against the problem's reference intermediate results.

R_process = the share of the completion's equations (`expression = c`, as `claims` parses them) whose result
c matches a reference step (within `tolerance`), each reference step matched by at most one equation (the
seed is silent on repeats; without this, `0+72=72` written three times scored 1.0); a completion with more than `verbosity` x the reference step count has it scaled
by verbosity x reference / its count, so padding with steps does not pay. The reward
lambda R_process + (1 - lambda) R_outcome replaces the outcome in the group advantage (lambda = 1: process
only). It needs the pool's `steps` column (arith and GSM8K give it; MATH does not). A problem without
reference steps (1% of GSM8K's) scores R_process = 0 throughout its group, whose advantage is then
outcome-only's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mcgrpo.train.credit import Credit, CreditContext, group_advantages, per_token
from mcgrpo.core.claims import claims
from mcgrpo.train.rollout import Rollouts
from mcgrpo.core.errors import DataError


def reference_values(steps) -> list[float]:
    """The reference intermediate results as numbers (thousands separators dropped; others skipped)."""
    out = []
    for step in [] if steps is None else steps:
        try:
            out.append(float(str(step).replace(",", "")))
        except ValueError:
            pass
    return out


def process_reward(text: str, reference: list[float], tolerance: float = 1e-5, verbosity: float = 1.5) -> float:
    """The share of the text's equations whose result matches a reference step, scaled down past
    `verbosity` x the reference step count."""
    results = [float(c.result) for c in claims(text) if c.parsed]
    if not results:
        return 0.0
    unused, matched = list(reference), 0
    for r in results:  # each reference step is matched once, so repeating a step does not pay
        hit = next((i for i, ref in enumerate(unused) if abs(r - ref) < tolerance), None)
        if hit is not None:
            unused.pop(hit)
            matched += 1
    share = matched / len(results)
    allowed = verbosity * len(reference)
    return share * min(1.0, allowed / len(results))


@dataclass
class Process:
    lam: float = 0.5
    tolerance: float = 1e-5
    verbosity: float = 1.5

    def check_pool(self, pool, where: str) -> None:
        """Refuse, before training, a pool whose problems lack reference steps."""
        if "steps" not in pool.columns:
            raise DataError(f"{where}: the process reward needs reference steps, but the pool has no "
                             f"'steps' column (columns: {', '.join(map(str, pool.columns))})")
        if not any(len(reference_values(s)) for s in pool["steps"]):
            raise DataError(f"{where}: the process reward needs reference steps, but none of the "
                             f"{len(pool)} pool problems has any in column 'steps'")

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        references = [reference_values(p["steps"]) for p in rollouts.problems]
        r_process = np.array([process_reward(text, references[r // rollouts.group_size], self.tolerance,
                                             self.verbosity) for r, text in enumerate(rollouts.texts)])
        reward = self.lam * r_process + (1 - self.lam) * rollouts.rewards
        credit = per_token(group_advantages(rollouts.grouped(reward), ctx.advantage_eps), rollouts)
        return Credit(credit, stats={"process_mean": float(r_process.mean())})
