"""Budget calibration: B from the generated tokens of the first iterations of the calibration arm.

B = multiplier x mean tokens per iteration, rounded up to a multiple of `round_to`. Counting the
Monte-Carlo arm's continuations makes B long enough for the most expensive arm to take enough updates.
"""

from __future__ import annotations

import math

import pandas as pd


def budget_from_tokens(tokens_per_iteration: list[int], multiplier: float, round_to: int) -> int:
    if not tokens_per_iteration:
        raise ValueError("calibration needs at least one iteration's token count")
    mean = sum(tokens_per_iteration) / len(tokens_per_iteration)
    return max(round_to, math.ceil(multiplier * mean / round_to) * round_to)


def budget_table(model: str, tokens_per_iteration: list[int], B: int, source: str) -> pd.DataFrame:
    """budget.parquet's rows: one per calibration iteration (one row with no iteration if B was given)."""
    rows = [{"model": model, "iteration": i, "tokens_generated": t, "B": B, "source": source}
            for i, t in enumerate(tokens_per_iteration)]
    if not rows:
        rows = [{"model": model, "iteration": None, "tokens_generated": None, "B": B, "source": source}]
    return pd.DataFrame(rows).astype({"iteration": "Int64", "tokens_generated": "Int64", "B": "int64"})
