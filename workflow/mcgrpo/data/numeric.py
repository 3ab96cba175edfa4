"""The numeric-answer filter: a pool keeps a problem only if its answer is one plain number.

The verifiers' last-number rule is well defined only for such answers, so lists, fractions,
expressions and numbers with units are dropped, each counted under the reason why, and so is a
problem whose gold solution boxes several different answers (`several_answers`, set by the MATH
loader).
"""

from __future__ import annotations

import pandas as pd

from mcgrpo.core.verify import number_value, plain_number

KEPT = "numeric"
REASONS = ("no_answer", "several_answers", "fraction", "list", "unit", "expression")
_UNITS = ("\\text", "\\mbox", "\\circ", "%", "\\$", "dollar", "cent")


def classify(answer: str | None) -> tuple[str | None, str]:
    """(canonical number, "numeric") for a plain number, else (None, the reason it is dropped)."""
    if not isinstance(answer, str) or not answer.strip():  # no closed \boxed: None, or NaN from a frame
        return None, "no_answer"
    number = plain_number(answer)
    if number is not None:
        return number, KEPT
    if number_value(answer) is not None:
        return None, "fraction"
    if "," in answer.replace("{,}", ""):
        return None, "list"
    if any(c.isdigit() for c in answer) and any(u in answer for u in _UNITS):
        return None, "unit"
    return None, "expression"


def apply(problems: pd.DataFrame) -> pd.DataFrame:
    """All problems with `numeric_reason` set; a kept problem's `answer` becomes its canonical
    number, the original stays in `raw_answer`."""
    several = problems["several_answers"] if "several_answers" in problems else [False] * len(problems)
    pairs = [(None, "several_answers") if s else classify(a) for a, s in zip(problems["answer"], several)]
    out = problems.assign(raw_answer=problems["answer"], numeric_reason=[r for _, r in pairs])
    out["answer"] = [n if n is not None else a for (n, _), a in zip(pairs, problems["answer"])]
    return out


def keep(problems: pd.DataFrame) -> pd.DataFrame:
    """Only the problems with a plain numeric answer, canonicalized."""
    out = apply(problems)
    return out[out["numeric_reason"] == KEPT].reset_index(drop=True)


def report(problems: pd.DataFrame) -> dict:
    """Counts kept per level and dropped per reason, from a frame that went through `apply`."""
    kept = problems["numeric_reason"] == KEPT
    reasons = problems.loc[~kept, "numeric_reason"].value_counts()
    return {"numeric_kept": int(kept.sum()),
            "numeric_by_level": by_level(problems[kept]),
            "numeric_dropped": {r: int(reasons.get(r, 0)) for r in REASONS},
            "several_answers_by_level": by_level(problems[problems["numeric_reason"] == "several_answers"])}


def by_level(problems: pd.DataFrame) -> dict[str, int]:
    counts = problems["level"].value_counts().sort_index()
    return {str(level): int(n) for level, n in counts.items()}
