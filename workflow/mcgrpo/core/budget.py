"""The budget B every arm of a study spends, in its unit, and its calibration.

Matched-compute studies count generated tokens: B = multiplier x mean tokens per iteration of the
calibration arm, rounded up to a multiple of `round_to`. Counting the Monte-Carlo arm's continuations
makes B long enough for the most expensive arm to take enough updates. An equal-iteration study (paper
3.1, G: `budget.iterations`) counts iterations instead: B = that number, no calibration run.
"""

from __future__ import annotations

import math

import pandas as pd

from mcgrpo.core.errors import ConfigError

# The unit of B -> the column of iterations.parquet and evals.parquet that counts it.
UNITS = {"tokens": "tokens_total", "iterations": "iteration"}


class Budget(int):
    """B in its unit: an int (what every reader of B computes with) that knows what it counts."""

    unit: str

    def __new__(cls, value: int, unit: str = "tokens"):
        if unit not in UNITS:
            raise ValueError(f"budget unit {unit!r}; allowed: {', '.join(UNITS)}")
        self = super().__new__(cls, value)
        self.unit = unit
        return self

    @property
    def column(self) -> str:
        """The evals/iterations column that reaches B."""
        return UNITS[self.unit]

    def __reduce__(self):  # a checkpoint or a pickled frame keeps the unit
        return Budget, (int(self), self.unit)


def unit(budget_block: dict) -> str:
    """What a study's budget counts: iterations where budget.iterations is given, else generated tokens."""
    return "iterations" if budget_block.get("iterations") is not None else "tokens"


def eval_points(tokens_before: int, tokens_after: int, budget: int, per_budget: int) -> range:
    """The evaluation points an iteration crossed: every k with k B / per_budget in (before, after].

    Evaluation k is read at the first iteration boundary at or after k B / per_budget. One iteration
    can cross several points (a Monte-Carlo iteration spends many tokens); each gets its own record,
    so that evaluation index k means the same position in every arm.
    """
    return range(tokens_before * per_budget // budget + 1, tokens_after * per_budget // budget + 1)


def due_points(before: int, after: int, budget: int | None, per_budget: int, horizon: float) -> list[int]:
    """The evaluation points of an iteration that took what B counts from `before` to `after`: none past the
    horizon (every arm then has the same indices), none without a budget (calibration)."""
    if budget is None:
        return []
    return [k for k in eval_points(before, after, budget, per_budget) if k <= horizon * per_budget]


def budget_from_tokens(tokens_per_iteration: list[int], multiplier: float, round_to: int) -> int:
    """B of a calibration; refused where it is below the calibration's mean iteration (budget.multiplier under 1,
    round_to too small to lift it): every run would stop after about one iteration."""
    if not tokens_per_iteration:
        raise ValueError("calibration needs at least one iteration's token count")
    mean = sum(tokens_per_iteration) / len(tokens_per_iteration)
    B = max(round_to, math.ceil(multiplier * mean / round_to) * round_to)
    if B < mean:
        raise ConfigError(f"config key budget.multiplier: {multiplier:g} gives B = {B} generated tokens (round_to "
                          f"{round_to}), below one iteration of the calibration ({mean:g} tokens on average over "
                          f"{len(tokens_per_iteration)}), so every run would stop after about its first iteration; "
                          f"allowed: a multiplier of at least 1 (B = multiplier x the mean iteration's tokens)")
    return B


def budget_table(model: str, tokens_per_iteration: list[int], B: int, source: str,
                 unit: str = "tokens") -> pd.DataFrame:
    """budget.parquet's rows: one per calibration iteration (one row with no iteration if B was given).
    A budget in iterations says so in a `unit` column (absent: tokens, as every file before it)."""
    rows = [{"model": model, "iteration": i, "tokens_generated": t, "B": B, "source": source}
            for i, t in enumerate(tokens_per_iteration)]
    if not rows:
        rows = [{"model": model, "iteration": None, "tokens_generated": None, "B": B, "source": source}]
    table = pd.DataFrame(rows).astype({"iteration": "Int64", "tokens_generated": "Int64", "B": "int64"})
    return table if unit == "tokens" else table.assign(unit=unit)


def from_table(table: pd.DataFrame) -> Budget:
    """B of a budget.parquet table, with its unit."""
    return Budget(int(table["B"].iloc[0]), str(table["unit"].iloc[0]) if "unit" in table else "tokens")
