"""Arithmetic claims in a completion: every `a op b = c` it writes, where, and whether it holds.

Both the process reward (does a claim's result match a reference step?) and the path penalty (is the
claim true?) read them. A sign belongs to a number only where it cannot be a binary minus, so `5-2=3`
is 5 - 2 and `,-3*4=-12` is (-3) * 4.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

_NUMBER = r"\d+(?:\.\d+)?"
_CLAIM = re.compile(rf"(?<![\w.)])(-?{_NUMBER})\s*([-+*/×])\s*(-?{_NUMBER})\s*=\s*(-?{_NUMBER})")
_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "×": operator.mul, "/": operator.truediv}
TOLERANCE = 1e-4  # relative, as the verifiers compare numbers


@dataclass(frozen=True)
class Claim:
    start: int     # its characters in the text: [start, end)
    end: int
    value: float   # a op b, computed (nan if undefined)
    result: float  # c, as written

    @property
    def holds(self) -> bool:
        return abs(self.value - self.result) <= TOLERANCE * max(1.0, abs(self.result))


def claims(text: str) -> list[Claim]:
    """Every arithmetic claim of `text`, in order."""
    out = []
    for m in _CLAIM.finditer(text):
        a, op, b, c = m.groups()
        value = _APPLY[op](float(a), float(b)) if not (op == "/" and float(b) == 0) else float("nan")
        out.append(Claim(m.start(), m.end(), value, float(c)))
    return out
