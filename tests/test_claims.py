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
    r"40 / 80 = 50\%", r"\frac{3}{4} = 75\%", r"1/3 = 0.\overline{3}", r"1/6 = 0.1\overline{6}", "2 1/2 + 1 = 3 1/2",
    r"2\frac{1}{2} \times 2 = 5", r"10{,}000 - 2{,}500 = 7{,}500", r"14 = 2 + 3 \times 4", "2(3 + 4) = 14",
    "(2 + 3)(1 + 1) = 10", "1/3 = 33.3%", "25% * 80 = 20",
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


@pytest.mark.parametrize("text, value", [
    (r"10{,}000 - 2{,}500 = 8{,}500", 7500), (r"15 = 2 + 3 \times 4", 14), ("2(3 + 4) = 15", 14),
    (r"1/3 = 0.\overline{6}", Fraction(1, 3)), ("2 1/2 + 1 = 3 1/4", Fraction(7, 2)), (r"40 / 80 = 5\%", Fraction(1, 2)),
])
def test_notations_once_unseen_are_read_and_judged(text, value):
    """Separators, result-first claims and implicit multiplication are claims, judged by their value (the
    parser once skipped them, so false work in these notations went unpenalised)."""
    [claim] = claims(text)
    assert claim.holds is False and claim.value == value and claim.text == text


def test_every_link_of_a_chain_is_checked():
    """`2 + 3 = 5 = 11 / 2`: the first link holds, the second does not (checking the first link alone
    called the chain true)."""
    assert [(c.text, c.holds) for c in claims("2 + 3 = 5 = 11 / 2")] == [("2 + 3 = 5", True), ("5 = 11 / 2", False)]
    assert [(c.text, c.holds) for c in claims("2 + 3 = 5 = 10 / 2")] == [("2 + 3 = 5", True), ("5 = 10 / 2", True)]
    assert claims("x = 5 = 5.0") == []  # no side computes: no claim


def test_an_unparsable_claim_is_neither_true_nor_false():
    [claim] = claims("so 2 + * 3 = 5")
    assert claim.holds is None and claim.value is None
    assert verdict(claim) == {"text": "2 + * 3 = 5", "value": None, "true": None}
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
NOTATIONS = {  # times (None: implicit, `2(3 + 4)`), divide (None: \frac), minus, thousands separator, currency
    "ascii": ("*", "/", "-", "", ""),
    "spaced": (" * ", " / ", " - ", ",", ""),
    "latex": (r" \times ", None, "-", "{,}", ""),
    "cdot": (r"\cdot", r" \div ", "-", "", ""),
    "unicode": (" × ", " ÷ ", "−", ",", ""),
    "x": (" x ", " / ", " - ", "", ""),
    "money": (" * ", " / ", " - ", ",", "$"),
    "implicit": (None, " / ", " - ", "{,}", ""),
}
FORMS = ("plain", "result_first", "chained", "percent")

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
    return currency + (f"{n:,}".replace(",", thousands) if thousands else str(n))


def render(tree, notation: str) -> str:
    times, divide, minus, *_ = NOTATIONS[notation]
    if isinstance(tree, int):
        return number(tree, notation)
    if tree[0] == "neg":
        inner = tree[1]
        body = render(inner, notation) if precedence(inner) == 3 else f"({render(inner, notation)})"
        return f"({minus}{body})" if notation in ("x", "implicit") else f"{minus.strip()}{body}"
    op, a, b = tree
    if op == "/" and divide is None:
        return rf"\frac{{{render(a, notation)}}}{{{render(b, notation)}}}"
    left = render(a, notation) if precedence(a) >= PRECEDENCE[op] else f"({render(a, notation)})"
    if op == "*" and times is None:  # implicit multiplication: the right factor always in parentheses
        return f"{left}({render(b, notation)})"
    right_needs = precedence(b) < PRECEDENCE[op] or (precedence(b) == PRECEDENCE[op] and op in "-/")
    right = f"({render(b, notation)})" if right_needs else render(b, notation)
    sign = {"+": " + ", "-": minus, "*": times, "/": divide}[op]
    return f"{left}{sign}{right}"


def result(v: Fraction, notation: str, form: str = "plain") -> str:
    sign = "-" if v < 0 else ""
    v = abs(v)
    if form == "percent" and (100 * v).denominator == 1 and not NOTATIONS[notation][4]:
        return sign + number(int(100 * v), notation) + ("\\%" if NOTATIONS[notation][3] == "{,}" else "%")
    if v.denominator == 1:
        return sign + number(int(v), notation)
    return f"{sign}{v.numerator}/{v.denominator}"


def claim_text(tree, notation: str, form: str, claimed: Fraction) -> tuple[str, int]:
    """The written claim and where its first claim ends."""
    expression, written = render(tree, notation), result(claimed, notation, form)
    if form == "result_first":
        return f"{written} = {expression}", len(f"{written} = {expression}")
    text = f"{expression} = {written}"
    if form == "chained":  # a second link: the same number as a fraction of twice it
        return f"{text} = {result(2 * claimed, notation)} / 2", len(text)
    return text, len(text)


def check_verdicts(tree, notation, form, honest):
    try:
        exact = value(tree)
    except ZeroDivisionError:
        exact = None
    claimed = (exact if honest else exact + 1) if exact is not None else Fraction(1)
    text, first_end = claim_text(tree, notation, form, claimed)
    found = claims(text)
    assert len(found) == (2 if form == "chained" else 1), text
    claim = found[0]
    assert (claim.start, claim.end) == (0, first_end), text
    if "/" not in result(claimed, notation, form):  # a fraction result computes too: either side is the value
        assert claim.value == exact, text
    assert claim.holds is (honest and exact is not None), text
    if form == "chained":
        assert found[1].holds is True, text  # claimed = 2 claimed / 2, whatever was claimed


FORMULAS = (trees.filter(lambda t: isinstance(t, tuple) and t[0] != "neg"), st.sampled_from(sorted(NOTATIONS)),
            st.sampled_from(FORMS), st.booleans())


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(*FORMULAS)
def test_verdicts_match_exact_evaluation(tree, notation, form, honest):
    """Random expressions in every notation and claim form (plain, result first, chained, percent), their
    verdict against exact evaluation (fractions.Fraction)."""
    check_verdicts(tree, notation, form, honest)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None, database=None)
@given(*FORMULAS)
def test_verdicts_match_exact_evaluation_at_length(tree, notation, form, honest):
    check_verdicts(tree, notation, form, honest)
