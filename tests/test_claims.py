"""Arithmetic claims: a real expression parser (precedence, associativity, parentheses, unary minus,
thousands separators, LaTeX and Unicode operators) with exact rational arithmetic, checked by hand and
against exact evaluation of random expressions rendered in several notations."""

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from mcgrpo.core.claims import claims, verdict


@pytest.mark.parametrize("text", [
    "2 + 3 * 4 = 14", "48 / 2 * 3 = 72", "12 - 4 - 3 = 5", "1,200 + 300 = 1,500", "(2 + 3) * 4 = 20.",
    r"3 \times 4 = 12", r"3 \cdot 4 = 12", "3 x 4 = 12", "3 × 4 = 12", r"12 \div 4 = 3", r"\frac{3}{4} + \frac14 = 1",
    "$12 + $3 = $15", r"\$1,200 - \$200 = \$1,000", "−3 + 5 = 2", "5 - -3 = 8", "2^3 = 8", "-(2 + 3) = -5",
    "10 / 3 = 3.33", "1/8 = 0.125", "7/2 = 3.5",
])
def test_correct_work_is_true(text):
    [claim] = claims(text)
    assert claim.holds is True and claim.text == text.rstrip(".")


@pytest.mark.parametrize("text, value", [
    ("2 + 3 * 4 = 20", 14), ("48 / 2 * 3 = 8", 72), ("12 - 4 - 3 = 11", 5), ("1,200 + 300 = 1,600", 1500),
    ("10 / 3 = 3.3333333333333335", Fraction(10, 3)), ("10 / 3 = 3.0", Fraction(10, 3)), ("0.1 + 0.2 = 0.3000001", Fraction(3, 10)),
])
def test_wrong_work_is_false(text, value):
    [claim] = claims(text)
    assert claim.holds is False and claim.value == value


def test_an_unparsable_claim_is_neither_true_nor_false():
    [claim] = claims("so 2(3 + 4) = 14")
    assert claim.holds is None and claim.value is None
    assert verdict(claim) == {"text": "2(3 + 4) = 14", "value": None, "true": None}
    assert verdict(claims("7/0 = 1")[0]) == {"text": "7/0 = 1", "value": None, "true": False}  # undefined: false
    assert claims("x = 5") == claims("3x + 7 = 10") == claims("a1+2=3") == claims(r"\boxed{15}") == []


def test_chains_lines_and_sentences():
    assert [(c.text, c.holds) for c in claims("x = 2 + 3 = 5, then 5 * 2 = 11.")] == [("2 + 3 = 5", True),
                                                                                      ("5 * 2 = 11", False)]
    assert [c.start for c in claims("0+72=72 0+72=72")] == [0, 8]  # two claims side by side
    assert [c.text for c in claims("I have 3 apples. (So 2 + 3 = 5)")] == ["2 + 3 = 5"]


def test_hostile_text_is_fast_and_safe():
    for text in ["(" * 100_000 + "1=1", "1+" * 100_000 + "1=2", "=" * 100_000, "2^2^2^2^2^2=4", "9^99=1"]:
        assert all(c.holds is not True for c in claims(text))


# --- property: random expressions, several notations, the verdict against exact evaluation ---------

PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
NOTATIONS = {  # times, divide (None: \frac), minus, thousands separator, currency
    "ascii": ("*", "/", "-", False, ""),
    "spaced": (" * ", " / ", " - ", True, ""),
    "latex": (r" \times ", None, "-", True, ""),
    "cdot": (r"\cdot", r" \div ", "-", False, ""),
    "unicode": (" × ", " ÷ ", "−", True, ""),
    "x": (" x ", " / ", " - ", False, ""),
    "money": (" * ", " / ", " - ", True, "$"),
}

leaves = st.integers(0, 5000)
trees = st.recursive(leaves, lambda sub: st.one_of(
    st.tuples(st.sampled_from("+-*/"), sub, sub), st.tuples(st.just("neg"), sub)), max_leaves=6)


def value(tree) -> Fraction:
    if isinstance(tree, int):
        return Fraction(tree)
    if tree[0] == "neg":
        return -value(tree[1])
    op, a, b = tree
    a, b = value(a), value(b)
    return a + b if op == "+" else a - b if op == "-" else a * b if op == "*" else a / b  # b = 0 raises


def precedence(tree) -> int:
    return 3 if isinstance(tree, int) or tree[0] == "neg" else PRECEDENCE[tree[0]]


def number(n: int, notation) -> str:
    *_, thousands, currency = NOTATIONS[notation]
    return currency + (f"{n:,}" if thousands else str(n))


def render(tree, notation: str) -> str:
    times, divide, minus, *_ = NOTATIONS[notation]
    if isinstance(tree, int):
        return number(tree, notation)
    if tree[0] == "neg":
        inner = tree[1]
        body = render(inner, notation) if precedence(inner) == 3 else f"({render(inner, notation)})"
        return f"({minus}{body})" if notation == "x" else f"{minus.strip()}{body}"
    op, a, b = tree
    if op == "/" and divide is None:
        return rf"\frac{{{render(a, notation)}}}{{{render(b, notation)}}}"
    left = render(a, notation) if precedence(a) >= PRECEDENCE[op] else f"({render(a, notation)})"
    right_needs = precedence(b) < PRECEDENCE[op] or (precedence(b) == PRECEDENCE[op] and op in "-/")
    right = f"({render(b, notation)})" if right_needs else render(b, notation)
    sign = {"+": " + ", "-": minus, "*": times, "/": divide}[op]
    return f"{left}{sign}{right}"


def result(v: Fraction, notation: str) -> str:
    sign = "-" if v < 0 else ""
    v = abs(v)
    if v.denominator == 1:
        return sign + number(int(v), notation)
    return f"{sign}{v.numerator}/{v.denominator}"


@settings(max_examples=3 * settings.default.max_examples, deadline=None, database=None, derandomize=True)
@given(trees.filter(lambda t: isinstance(t, tuple) and t[0] != "neg"), st.sampled_from(sorted(NOTATIONS)),
       st.booleans())
def test_verdicts_match_exact_evaluation(tree, notation, honest):
    try:
        exact = value(tree)
    except ZeroDivisionError:
        exact = None
    claimed = (exact if honest else exact + 1) if exact is not None else Fraction(1)
    text = f"{render(tree, notation)} = {result(claimed, notation)}"
    found = claims(text)
    assert len(found) == 1, text
    [claim] = found
    assert (claim.start, claim.end) == (0, len(text)), text
    assert claim.value == exact, text
    assert claim.holds is (honest and exact is not None), text
