"""Arithmetic claims in a completion: every `expression = result` it writes, where, and whether it holds.

Both the process reward (does a claim's result match a reference step?) and the path penalty (is the
claim true?) read them. The text is first read character for character (`claim_notation.read`: labels,
emphasis, units and delimiters blanked, each separator between numbers decided). A claim is then parsed
by Python's own expression parser (`ast`), so precedence, associativity, parentheses and unary minus are
Python's (`2 + 3 * 4 = 14`, `48 / 2 * 3 = 72`, `12 - 4 - 3 = 5`), after the notations of written work are
translated: `\\times`, `\\cdot`, `×`, `·`, `x` between numbers, `\\div`, `÷`, `\\frac{a}{b}`, `^`, `$` amounts,
digit groups (`1,200`, `1{,}200`, `1 200`, `1\\,200`), `[ ]` as `( )`, percent (`50\\%` is 1/2, `p% of x`
is p/100 x, and `0.4 \\times 100 = 40\\%` is the figure 40), repeating decimals (`0.\\overline{3}` is 1/3),
mixed numbers (`2 1/2`, `2\\frac{1}{2}`), roots (`\\sqrt{16}`, `\\sqrt[3]{27}`, `√16`) and implicit
multiplication (`2(3 + 4)`). Values are exact rationals.

Every link of a chain `a = b = c` whose sides are not all bare numbers is a claim (`2 + 3 = 5 = 11 / 2`
holds two, the second false), and a bare number on the left of a computation is its result
(`15 = 2 + 3 \\times 4`: result first). A claim that cannot be read or parsed (`x = 5`, `2 + * 3 = 5`), or
that has two readings (`2,5 + 1 = 3,5`, `\\sqrt 16`, `50 + 10%`), or no exact value (`\\sqrt{2}`), has no
value and no verdict: it is neither a violation nor a fulfilment, and is never judged on a fragment.
"""

from __future__ import annotations

import ast
import math
import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction

from mcgrpo.core.claim_notation import RUN, VULGAR, read, ungroup

_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}|\\[dt]?frac(\d)(\d)")
_ROOT = re.compile(r"\\sqrt(?:\((\d+)\))?\{([^{}]*)\}|\\sqrt[ \t]*(\d)(?![\d.])")  # \sqrt 9; not \sqrt 16
_VULGAR = re.compile(rf"(\d*)[ \t]?([{VULGAR}])")  # 2½: two and a half
_RADICAL = re.compile(r"√[ \t]*(\d+(?:\.\d+)?)")  # √16
_REPEATING = re.compile(r"(\d*)\.(\d*)\\overline\{(\d+)\}")  # 0.1\overline{6}
_MIXED_FRAC = re.compile(r"(?<![\d.])(\d+)[ \t]?\\[dt]?frac(?:\{(\d+)\}\{(\d+)\}|(\d)(\d))")  # 2\frac{1}{2}, 2\frac12
_MIXED = re.compile(r"(?<![\d./])(\d+)[ \t]([1-9]\d*)/(\d+)(?![\d.])")  # 2 1/2
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)[ \t]*\\?%")
_BARE_PERCENT = re.compile(r"[$]?\d+(?:\.\d+)?[ \t]*\\?%")
# a LaTeX symbol that is an operand or a function, never a separator: a side beside it is a fragment
_SYMBOL = (r"\\(?:pi|infty|alpha|beta|gamma|delta|epsilon|theta|lambda|mu|sigma|tau|phi|omega"
           r"|(?:sin|cos|tan|cot|sec|csc)h?|arc(?:sin|cos|tan)|log|lg|ln|exp)(?![A-Za-z])")
_SYMBOL_BEFORE = re.compile(rf"{_SYMBOL}[ \t]*$")
_SYMBOL_AFTER = re.compile(rf"[ \t]*{_SYMBOL}")
_DIVIDED_BY_FRACTION = re.compile(r"[ \t]/[ \t]*\d+/\d")  # `2 / 1/6`: (2/1)/6, or 2 ÷ 1/6 as written
_IMPLICIT = re.compile(r"(?<=[\d)])[ \t]*(?=\(|sqrt|root)|(?<=\))[ \t]*(?=\d)")  # 2(3 + 4), (1 + 2)(3 + 4), (3 + 4)2
_LITERAL = re.compile(r"\d+(?:\.\d+)?")
_TRANSLATE = [("\\times", "*"), ("\\cdot", "*"), ("×", "*"), ("·", "*"), ("\\div", "/"), ("÷", "/"),
              ("−", "-"), ("^", "**"), ("\\left", ""), ("\\right", ""), ("\\$", ""), ("$", ""), ("\\,", ""),
              ("\\!", ""), ("√", "sqrt"), ("⁄", "/"), ("\\{", "("), ("\\}", ")"), ("{", "("), ("}", ")"),
              ("\u2009", " "), ("\u202f", " "), ("\u00a0", " ")]
MAX_SIDE_CHARS = 200  # a longer side is no written step (and would let a hostile text cost time)
MAX_EXPONENT = 64


@dataclass(frozen=True)
class Claim:
    start: int                # its characters in the text: [start, end)
    end: int
    text: str
    value: Fraction | None    # the left side, computed exactly (None: unparsable or undefined)
    result: Fraction | None   # the right side, as written (None: unparsable)
    places: int = 0           # decimal places of a result written as a decimal number
    parsed: bool = True       # both sides parse
    operands: tuple[Fraction, ...] = ()  # the numbers written in the computed side (the path penalty's provenance)

    @property
    def holds(self) -> bool | None:
        """True or False for a parsed claim, None for one that could not be parsed. An undefined
        left side (`7/0`) is false; a result written with d decimals holds if it is the value rounded
        to d places (`10/3 = 3.33`), since written work rounds (the paper is silent on rounding)."""
        if not self.parsed:
            return None
        return self.value is not None and _within(self.value, self.result, self.places)


def _within(value: Fraction, result: Fraction, places: int) -> bool:
    """Whether a result written with `places` decimals is the value rounded to them (exact if none)."""
    return abs(value - result) <= (Fraction(1, 2 * 10**places) if places else 0)


def claims(text: str) -> list[Claim]:
    """Every arithmetic claim of `text`, in order: each adjacent pair of sides of a chain
    `a = b = c` whose left side computes something (holds an operator)."""
    reading = read(text)  # same length: a claim's characters are its characters in `text`
    return [claim for run in RUN.finditer(reading) if "=" in run[0]
            for claim in _chain(text, reading, run.start(), run.end())]


def _chain(text: str, reading: str, start: int, end: int) -> list[Claim]:
    """The claims of one run `reading[start:end]`, by their characters in the original `text`: every link
    of the chain of which one side computes; the computed side is the value, the other the result."""
    sides = []
    for piece in reading[start:end].split("="):
        sides.append(_trim(piece, start))
        start += len(piece) + 1
    if sides[0] is not None and _fragment(reading, sides[0][0], sides[0][2]):
        sides[0] = None
    if sides[-1] is not None and _SYMBOL_AFTER.match(reading, sides[-1][1]):
        sides[-1] = None  # `= 12\pi`: the result goes on
    out = []
    for left, right in zip(sides, sides[1:]):
        if left is None or right is None or not (_computes(left[2]) or _computes(right[2])):
            continue
        computed, written = (left, right) if _computes(left[2]) else (right, left)  # `15 = 2 + 3 * 4`
        value, result = _value(computed[2]), _value(written[2])
        parsed = value is not _UNPARSABLE and result is not _UNPARSABLE and result is not None
        result, places = _reading(value, result, written[2]) if parsed else (None, 0)
        out.append(Claim(left[0], right[1], text[left[0]:right[1]], value if parsed else None, result,
                         places, parsed, _operands(computed[2])))
    return out


def _fragment(reading: str, start: int, side: str) -> bool:
    """Whether a first side is the tail of something the run does not hold: it starts inside a word
    (`a1+2`, `3x+7`), after a LaTeX function or constant (`\\cos 60`, `\\pi (6^2)`), in a time
    (`6:00+18`: minutes with a leading zero; `Day 2:50(2)` is a label), or with a binary operator after
    prose (`a day - 4 hours - 2 hours = 18`: the left operand is words)."""
    before = reading[max(0, start - 2):start]
    if before[-1:].isalnum() or (before[-1:] == ":" and before[:1].isdigit() and side[:1] == "0"):
        return True
    if _SYMBOL_BEFORE.search(reading, max(0, start - 24), start):  # `\cos 60`, `\pi (6^2)`
        return True
    return side[:1] in "+*/×·÷" or side[:2] in ("- ", "− ")


def _reading(value, result, written: str) -> tuple[Fraction, int]:
    """The result and its decimal places. A percent result is hundredths (`40/80 = 50%`) or, where that
    makes the claim hold, the figure itself (`0.4 \\times 100 = 40\\%`, `100 - 40 = 60%`: GSM8K writes
    `40/80*100=<<40/80*100=50>>50%`, its reference step being 50). The two readings differ a hundredfold,
    so at most one holds, and a claim false under both is false."""
    if value is not None and _BARE_PERCENT.fullmatch(written.strip()):
        figure = (100 * result, _places(written, figure=True))
        if _within(value, *figure):
            return figure
    return result, _places(written)


def _operands(side: str) -> tuple[Fraction, ...]:
    """The numbers written in a side (`1,200`, `1{,}200` and `1 200` one number)."""
    return tuple(Fraction(n) for n in _LITERAL.findall(ungroup(side)))


def _trim(piece: str, start: int) -> tuple[int, int, str] | None:
    """(start, end, text) of one side without spaces, a sentence's full stop or comma, and parentheses
    that open or close outside it (`(so 2+3=5)`); None if no digit is left or it is too long."""
    text = piece.rstrip(" \t.,")
    if len(text) > len(piece) - len(piece.lstrip()) + MAX_SIDE_CHARS:
        return None
    begin = 0
    while begin < len(text) and (text[begin] in " \t" or _stray(text, begin)):
        begin += 1
    while text.endswith(")") and text.count(")", begin) > text.count("(", begin):
        text = text[:-1].rstrip(" \t.,")
    if not any(c.isnumeric() for c in text[begin:]):  # digits and vulgar fractions (½)
        return None
    return start + begin, start + len(text), text[begin:]


def _stray(text: str, i: int) -> bool:
    """A full stop, comma or opening parenthesis at `i` that starts no number or group of the side."""
    if text[i] in ".,":
        return not text[i + 1:i + 2].isdigit()
    return text[i] == "(" and text.count("(", i) > text.count(")", i)


def _computes(side: str) -> bool:
    """Whether a side is a computation rather than a bare number (a sign aside)."""
    operators = any(op in side.lstrip("+-−$ ") for op in "+-*/×·÷−^%\\√⁄")
    return operators or "sqrt" in side or _IMPLICIT.search(side) is not None


_UNPARSABLE = object()


def _value(side: str):
    """The exact value of a side; None if it is undefined (division by zero), _UNPARSABLE if it is
    no arithmetic expression or has no exact value (`\\sqrt{2}`)."""
    if len(side) > MAX_SIDE_CHARS or _DIVIDED_BY_FRACTION.search(side):
        return _UNPARSABLE
    try:
        source = _python(side)
        return _evaluate(ast.parse(source, mode="eval").body, source)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return _UNPARSABLE
    except ZeroDivisionError:
        return None


def _python(side: str) -> str:
    """A side in Python's notation: written work's notations translated (the module doc lists them);
    a percent is `pct(p)`, a root `sqrt(x)` or `root(n, x)`."""
    source = _REPEATING.sub(_repeating, ungroup(side))
    source = _MIXED_FRAC.sub(lambda m: f"(({m[1]})+({m[2] or m[4]})/({m[3] or m[5]}))", source)
    before = None
    while source != before:  # innermost first: `\frac{\frac{1}{2}}{3}`, `\sqrt{\frac{1}{4}}`
        before = source
        source = _FRAC.sub(lambda m: f"(({m[1] or m[3]})/({m[2] or m[4]}))", source)
        source = _ROOT.sub(_root_call, source)
    source = _MIXED.sub(lambda m: f"({m[1]}+{m[2]}/{m[3]})" if int(m[2]) < int(m[3]) else m[0], source)
    source = _VULGAR.sub(_vulgar, source)
    source = _PERCENT.sub(r"pct(\1)", source)
    source = _RADICAL.sub(r"sqrt(\1)", source)
    for written, python in _TRANSLATE:
        source = source.replace(written, python)
    return _IMPLICIT.sub("*", source).strip()


def _vulgar(m: re.Match) -> str:
    """`2½` as `(2+1/2)`, `½` as `(0+1/2)`."""
    fraction = Fraction(unicodedata.numeric(m[2])).limit_denominator(10)
    return f"({m[1] or 0}+{fraction.numerator}/{fraction.denominator})"


def _root_call(m: re.Match) -> str:
    """`\\sqrt{x}`, `\\sqrt[n]{x}` (its index read as `(n)`, brackets being grouping) and `\\sqrt 9` as calls.
    `\\sqrt 16` is not one: TeX takes one token, so it renders as √1 followed by 6 (two readings)."""
    if m[3]:
        return f"sqrt({m[3]})"
    return f"root({m[1]}, ({m[2]}))" if m[1] else f"sqrt(({m[2]}))"


def _repeating(m: re.Match) -> str:
    """`a.b\\overline{r}` as an exact fraction `(n/d)`."""
    whole, fixed, period = m[1] or "0", m[2], m[3]
    value = Fraction(f"{whole}.{fixed}" if fixed else whole)
    value += Fraction(int(period), 10 ** len(fixed) * (10 ** len(period) - 1))
    return f"({value.numerator}/{value.denominator})"


def _root(x: Fraction, n: Fraction) -> Fraction:
    """The exact n-th root of x; a ValueError where it is irrational (`\\sqrt{2}`: no exact value to judge)."""
    if n.denominator != 1 or not 2 <= n <= MAX_EXPONENT or (x < 0 and n % 2 == 0):
        raise ValueError("root")
    sign, x, n = (-1 if x < 0 else 1), abs(x), int(n)
    return sign * Fraction(_whole_root(x.numerator, n), _whole_root(x.denominator, n))


def _whole_root(k: int, n: int) -> int:
    guess = math.isqrt(k) if n == 2 else round(k ** (1 / n))
    for r in (guess - 1, guess, guess + 1):
        if r >= 0 and r ** n == k:
            return r
    raise ValueError("irrational root")


def _percent(p: Fraction) -> Fraction:
    return p / 100


_BINARY = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__, ast.Mult: Fraction.__mul__,
           ast.Div: Fraction.__truediv__}
_FUNCTIONS = {"pct": _percent, "sqrt": lambda x: _root(x, Fraction(2)), "root": lambda n, x: _root(x, n)}


def _evaluate(node: ast.AST, source: str) -> Fraction:
    """Numbers, + - * / **, unary signs, parentheses, percents and roots; anything else is not arithmetic."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(ast.get_source_segment(source, node))  # the literal as written: exact
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        operand = _evaluate(node.operand, source)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        return _FUNCTIONS[node.func.id](*(_evaluate(a, source) for a in node.args))
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left, source), _evaluate(node.right, source)
        if isinstance(node.op, (ast.Add, ast.Sub)) and _is_percent(node.right) and not _is_percent(node.left):
            _one_reading(left, right, node.op)
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > MAX_EXPONENT:
                raise ValueError("exponent")
            return left ** int(right)
        if type(node.op) in _BINARY:
            return _BINARY[type(node.op)](left, right)
    raise ValueError("not arithmetic")


def _is_percent(node: ast.AST) -> bool:
    """A percent, or a sum or difference of percents (`100% - 50% - 25%`)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _is_percent(node.left) and _is_percent(node.right)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "pct"


def _one_reading(number: Fraction, share: Fraction, op: ast.operator) -> None:
    """A percent added to or taken from a number (`50 + 10%`) is the sum (50.1) or, as a calculator adds,
    the number changed by that share (55); where the two differ (`1 - 20%` is 0.8 both ways) the side has
    two readings: a ValueError leaves it unjudged."""
    sign = 1 if isinstance(op, ast.Add) else -1
    if number + sign * share != number * (1 + sign * share):
        raise ValueError("a percent added to a number: two readings")


def _places(side: str, figure: bool = False) -> int:
    """Decimal places of a side written as one decimal number (`3.33`: 2; `33.3\\%`: 3, a percent being
    hundredths, unless it is a percent figure), else 0."""
    number = ungroup(side).lstrip("$-−+ ")
    percent = number.rstrip().endswith("%") and not figure
    number = number.rstrip().removesuffix("%").removesuffix("\\").rstrip()
    whole, dot, decimals = number.partition(".")
    places = len(decimals) if dot and (whole.isdigit() or not whole) and decimals.isdigit() else 0
    return places + 2 if percent and places else places


def verdict(claim: Claim) -> dict:
    """A claim as `mcgrpo verify --claims` prints it: its text, value and whether it holds."""
    value = claim.value
    number = None if value is None else int(value) if value.denominator == 1 else float(value)
    return {"text": claim.text, "value": number, "true": claim.holds}
