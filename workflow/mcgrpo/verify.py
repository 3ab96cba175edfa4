"""Answer verifiers: does a completion's final answer match the reference?

Two verifiers bracket reward hacking: `default` also credits an unboxed trailing number,
`strict` credits only a boxed answer, so a widening gap between them (`drifted`) flags a
policy that scores without answering in the required format. Everything here runs on raw
model output, so it scans in linear time and never raises on any string.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass

TOLERANCE = 1e-4
VERIFIERS = ("default", "strict")

_BOX = "\\boxed"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
# A sign counts only where it cannot be a binary minus (so `5-2` holds 5 and 2, not -2);
# `\d{1,3}(,\d{3})+` reads `1,234` as one number. No nested quantifiers: linear time.
_NUMBER = re.compile(r"(?:(?<![\w)\]}])[-+])?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
                     r"|(?<![\w.])[-+]?\.\d+")
_PLAIN = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|-?\.\d+")
_FRAC = re.compile(r"(-?)\\frac\{([^{}]*)\}\{([^{}]*)\}")
_BRACES = re.compile(r"[{}]")
_SPACES = re.compile(r"\s*")
_BARE = re.compile(r"[^\s${}]+")


@dataclass(frozen=True)
class Verdict:
    default: bool  # correct under the default verifier
    strict: bool   # correct under the strict verifier
    boxed: bool    # the completion has a (closed) \boxed{} answer


def strip_think(text: str) -> str | None:
    """The text after a leading `<think>...</think>` block; None if that block never closes,
    since an unfinished thought has not answered yet."""
    body = text.lstrip()
    if not body.startswith(_THINK_OPEN):
        return text
    end = body.find(_THINK_CLOSE)
    return None if end < 0 else body[end + len(_THINK_CLOSE):]


def boxed_content(text: str) -> str | None:
    """Content of the final `\\boxed{...}` (braces balanced) or `\\boxed 5`; None if there is
    none or it never closes."""
    start = text.rfind(_BOX)
    if start < 0:
        return None
    after = start + len(_BOX)
    if after < len(text) and text[after].isalpha():  # another command, e.g. \boxedfoo
        return None
    i = _SPACES.match(text, after).end()
    if i < len(text) and text[i] == "{":
        return _braced(text, i)
    bare = _BARE.match(text, i)
    return bare.group() if bare else None


def _braced(text: str, start: int) -> str | None:
    """Text between the brace at `start` and its partner, jumping from brace to brace."""
    depth = 0
    for brace in _BRACES.finditer(text, start):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[start + 1:brace.start()]
    return None


def _unspace(text: str) -> str:
    """Undo LaTeX number spacing so `1{,}234`, `1\\,234` and `1\\!234` read as numbers."""
    return text.replace("\\!", "").replace("\\,", "").replace("{,}", ",")


def _normalize(text: str) -> str:
    """Canonical form for exact string comparison."""
    for token in ("\\left", "\\right", "$"):
        text = text.replace(token, "")
    text = _unspace(text).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return "".join(text.split()).rstrip(".")


def _plain(text: str) -> float | None:
    return float(text.replace(",", "")) if _PLAIN.fullmatch(text) else None


def _to_number(text: str) -> float | None:
    """The finite value of a whole string that is one number or simple fraction, else None."""
    s = _normalize(text).removeprefix("+")
    frac = _FRAC.fullmatch(s)
    if frac:
        s = f"{frac[1]}{frac[2]}/{frac[3]}"
    num, slash, den = s.partition("/")
    if slash:
        top, bottom = _plain(num), _plain(den)
        value = top / bottom if top is not None and bottom else None
    else:
        value = _plain(s)
    return value if value is not None and math.isfinite(value) else None


def _last_number(text: str) -> str | None:
    tail = deque(_NUMBER.finditer(_unspace(text)), maxlen=1)
    return tail[0].group() if tail else None


def _from_box(box: str) -> str:
    """The answer inside a box: all of it if it is one number or holds none (`\\frac{1}{2}`,
    `B`), else its last number (`x = 12`)."""
    if _to_number(box) is not None:
        return box
    return _last_number(box) or box


def _parse(text: str) -> tuple[str | None, str | None]:
    """(text after thinking, content of its final box): scanned once per completion."""
    body = strip_think(text)
    return body, None if body is None else boxed_content(body)


def _answer(body: str | None, box: str | None, strict: bool) -> str | None:
    if box is not None:
        return _from_box(box)
    return None if strict or body is None else _last_number(body)


def extract_answer(text: str, strict: bool = False) -> str | None:
    """The answer string the verifier compares; strict accepts only a boxed one."""
    return _answer(*_parse(text), strict)


def answers_match(candidate: str | None, reference: str) -> bool:
    """Numbers within TOLERANCE; anything else by exact normalized string."""
    if candidate is None:
        return False
    a, b = _to_number(candidate), _to_number(reference)
    if a is not None and b is not None:
        return abs(a - b) <= TOLERANCE
    return _normalize(candidate) == _normalize(reference)


def verify(text: str, reference: str) -> Verdict:
    """Both verdicts at once, plus whether the completion boxed its answer."""
    body, box = _parse(text)
    return Verdict(default=answers_match(_answer(body, box, False), reference),
                   strict=answers_match(_answer(body, box, True), reference),
                   boxed=box is not None)


def is_correct(text: str, reference: str, verifier: str = "default") -> bool:
    """The reward of one completion under the named verifier."""
    if verifier not in VERIFIERS:
        raise ValueError(f"unknown verifier {verifier!r}; allowed: {', '.join(VERIFIERS)}")
    return answers_match(extract_answer(text, strict=verifier == "strict"), reference)


def drifted(acc_default: float, acc_strict: float, gap: float = 0.1) -> bool:
    """Whether default accuracy exceeds strict by more than `gap`: the policy earns reward
    without boxing. The epsilon keeps float noise (0.8 - 0.7 > 0.1) from counting."""
    return acc_default - acc_strict > gap + 1e-9
