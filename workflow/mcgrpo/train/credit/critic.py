"""The learned critic (paper §3; docs/extending.md, "Dense rewards"): dense credit from predicted values
instead of continuations.

A ridge regression on the policy's last hidden state at a prefix end predicts the prefix's success (the
label is its completion's outcome). Prefixes end at the prompt and at the Monte-Carlo cuts the completion
reaches, so its segments are the Monte-Carlo reward's. The critic is refit every iteration on the rollouts
of the `window` earlier iterations, so each iteration is scored by a critic fit on other iterations, and
is used once it has `min_iterations` of them (before, credit is outcome-only). `td` credits a segment with
V(end) - V(start), V(end of the completion) = R; `baseline` with R - V(start); both added, weighted, to
the group advantage. It generates no tokens; its feature pass and fit are credit-stage time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from mcgrpo.train.credit import Credit, CreditContext, group_advantages, per_token
from mcgrpo.train.credit.monte_carlo import cut_positions, segment_bounds, segment_credit
from mcgrpo.train.rollout import Rollouts

FORMS = ("td", "baseline")


def baseline_credit(length: int, positions: list[int], v_cuts: list[float], v0: float,
                    outcome: float) -> np.ndarray:
    """w per token of a completion: a segment's tokens get R - V(its start), the first starting at the prompt."""
    bounds = segment_bounds(length, positions)
    starts = [v0] + list(v_cuts)
    w = np.zeros(length)
    for s in range(1, len(bounds)):
        w[bounds[s - 1]:bounds[s]] = outcome - starts[s - 1]
    return w


@dataclass
class Critic:
    form: str = "td"
    weight: float = 1.0
    cuts: int = 5
    positions: list[int] | None = None
    window: int = 8
    min_iterations: int = 4
    ridge: float = 1.0
    # (iteration, features [prefixes, hidden], labels [prefixes]) of the window's iterations
    rows: deque = field(default_factory=deque, init=False, repr=False)

    def __post_init__(self):
        if self.form not in FORMS:
            raise ValueError(f"credit.critic.form: unknown form {self.form!r}; allowed: {', '.join(FORMS)}")
        # imported when built, outside the stage clock: imported at the first fit, its seconds (about 1-2 s) were
        # training time once in a run, and once more in every attempt that resumed it (docs/analysis.md)
        import sklearn.linear_model  # noqa: F401

    def __call__(self, rollouts: Rollouts, ctx: CreditContext) -> Credit:
        positions = self.positions or cut_positions(ctx.limit, self.cuts)
        ends = [[0] + [c for c in positions if c < len(comp)] for comp in rollouts.completions]
        features = ctx.features([p + comp.tokens for p, comp in zip(rollouts.prompts, rollouts.completions)],
                                [[len(p) + e for e in ends_r] for p, ends_r in zip(rollouts.prompts, ends)])
        x = np.concatenate(features)
        y = np.repeat(rollouts.rewards, [len(e) for e in ends])
        offsets = np.cumsum([0] + [len(e) for e in ends])
        grouped = rollouts.grouped(rollouts.rewards)
        prompt_value = np.repeat(grouped.mean(axis=1), rollouts.group_size)  # a G-draw estimate of V(prompt)
        values, stats = self._predict(x, y, ctx.iteration, offsets[:-1], prompt_value)
        self._remember(ctx.iteration, x, y)
        adv = group_advantages(grouped, ctx.advantage_eps).ravel()
        if values is None:
            return Credit(per_token(adv, rollouts), stats=stats)
        credit = [adv[r] + self.weight * self._segments(len(comp), positions, values[offsets[r]:offsets[r + 1]],
                                                         rollouts.rewards[r])
                  for r, comp in enumerate(rollouts.completions)]
        return Credit(credit, stats=stats)

    def _segments(self, length: int, positions: list[int], v: np.ndarray, outcome: float) -> np.ndarray:
        """w of one completion from V at its prompt (v[0]) and at the cuts it reaches (v[1:])."""
        v_cuts = list(v[1:]) + [outcome] * (len(positions) - len(v) + 1)  # unreached cuts: empty segments
        if self.form == "td":
            return segment_credit(length, positions, v_cuts, v[0], outcome)
        return baseline_credit(length, positions, v_cuts, v[0], outcome)

    def _predict(self, x: np.ndarray, y: np.ndarray, iteration: int, prompt_rows: np.ndarray,
                 prompt_value: np.ndarray):
        """Values of this iteration's prefixes from a fit on earlier iterations (None until enough), and how
        good they are, all cross-fitted: the squared error at the prompt against its group's mean outcome,
        and the Brier score against outcomes at every prefix, beside a constant predictor's."""
        earlier = [row for row in self.rows if iteration - self.window <= row[0] < iteration]
        stats = {"critic_active": 0.0, "critic_rows": float(sum(len(r[2]) for r in earlier)),
                 "critic_error": np.nan, "critic_brier": np.nan, "critic_brier_constant": np.nan}
        if len({row[0] for row in earlier}) < self.min_iterations:
            return None, stats
        from sklearn.linear_model import Ridge  # imported when built (above): only a critic's jobs pay for it
        train_x, train_y = np.concatenate([r[1] for r in earlier]), np.concatenate([r[2] for r in earlier])
        values = np.clip(Ridge(alpha=self.ridge).fit(train_x, train_y).predict(x), 0.0, 1.0)
        stats.update(critic_active=1.0, critic_error=float(np.mean((values[prompt_rows] - prompt_value) ** 2)),
                     critic_brier=float(np.mean((values - y) ** 2)),
                     critic_brier_constant=float(np.mean((train_y.mean() - y) ** 2)))
        return values, stats

    def _remember(self, iteration: int, x: np.ndarray, y: np.ndarray) -> None:
        self.rows.append((iteration, x, y))
        while self.rows and self.rows[0][0] <= iteration - self.window:
            self.rows.popleft()

    def state_dict(self) -> dict:
        return {"rows": list(self.rows)}

    def load_state_dict(self, state: dict) -> None:
        self.rows = deque(state["rows"])
