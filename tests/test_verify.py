"""Answer verifiers: extraction, comparison, and robustness to arbitrary model output."""

import random

import pytest

from mcgrpo.core.verify import (Verdict, answers_match, boxed_content, drifted, extract_answer, plain_number, rule_verdicts,
                           is_correct, strip_think, verify)


@pytest.mark.parametrize("text, content", [
    (r"so \boxed{12}.", "12"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{1} then \boxed{2}", "2"),
    (r"\boxed 5", "5"),
    (r"$\boxed 5$", "5"),
    (r"\boxed {7}", "7"),
    (r"\boxed{}", ""),
    ("no box here 12", None),
    (r"\boxed{12", None),
    (r"\boxed{1} and \boxed{2", None),
    (r"\boxed", None),
    (r"\boxedfoo{3}", None),
])
def test_boxed_content(text, content):
    assert boxed_content(text) == content


@pytest.mark.parametrize("text, body", [
    ("<think>hmm 7</think> \\boxed{3}", " \\boxed{3}"),
    ("  <think>a</think>b", "b"),
    ("no thinking 4", "no thinking 4"),
    ("<think>still going 4", None),
    ("<think></think>", ""),
])
def test_strip_think(text, body):
    assert strip_think(text) == body


def test_boxed_and_unboxed_answers():
    unboxed = "so the answer is 12"
    assert is_correct(unboxed, "12")
    assert not is_correct(unboxed, "12", "strict")
    assert verify(unboxed, "12") == Verdict(default=True, strict=False, boxed=False)
    assert verify(r"so \boxed{12}", "12") == Verdict(default=True, strict=True, boxed=True)
    assert verify(r"\boxed{11} is 12", "12") == Verdict(default=False, strict=False, boxed=True)


def test_the_last_box_and_last_number_win():
    assert extract_answer(r"\boxed{3} no wait \boxed{4}") == "4"
    assert extract_answer("3 apples and 5 pears, 8 fruit") == "8"
    assert extract_answer(r"\boxed{x = 12}") == "x = 12"  # a box is read whole
    assert extract_answer("5-2=3,4*3=12,3+12=15 \\boxed{15}", strict=True) == "15"


def test_think_block_hides_its_numbers():
    assert extract_answer("<think>it is 41</think> no idea") is None
    assert extract_answer("<think>it is 41</think> it is 42") == "42"
    assert not is_correct("<think>it is \\boxed{42}", "42")
    assert verify("<think>\\boxed{42}", "42") == Verdict(False, False, False)


def test_strict_needs_a_box():
    assert extract_answer("answer 12", strict=True) is None
    assert extract_answer(r"answer \boxed{12}", strict=True) == "12"


@pytest.mark.parametrize("text, reference", [
    (r"\boxed{-5}", "-5"),
    ("x = -5", "-5"),
    (r"\boxed{3.25}", "3.25"),
    ("it is .5", "0.5"),
    (r"\boxed{12.00001}", "12"),
    (r"\boxed{12.0}", "12"),
    (r"\boxed{+12}", "12"),
    (r"\boxed{1,234}", "1234"),
    (r"\boxed{1{,}234}", "1234"),
    (r"\boxed{1\!234}", "1234"),
    ("total 1,234,567.5 dollars", "1234567.5"),
    (r"\boxed{$42$}", "42"),
    (r"\boxed{42.}", "42"),
    (r"\boxed{\frac{1}{2}}", "0.5"),
    (r"\boxed{-\dfrac{3}{4}}", "-3/4"),
    (r"\boxed{B}", "B"),
    (r"\boxed{\left\{ a \right\}}", r"\{a\}"),
    (r"\boxed{\text{yes}}", r"\text{yes}"),
    (r"\boxed{\text{12}}", "12"),
    ("\\boxed{\u22125}", "-5"),            # Unicode minus
    (r"\boxed{1/3}", r"\frac{1}{3}"),
    (r"\boxed{12.0000001}", "12"),         # a decimal within the relative tolerance of 1e-6
    (r"\boxed{11.9999999}", "12"),
    ("The answer is \u22127.", "-7"),     # a Unicode minus in the last-number fallback
])
def test_correct(text, reference):
    assert is_correct(text, reference)
    assert is_correct(text, reference, "strict") == ("boxed" in text)


@pytest.mark.parametrize("text, reference", [
    (r"\boxed{12.001}", "12"),
    (r"\boxed{-12}", "12"),
    ("5-2", "-2"),  # a binary minus is not a sign
    (r"\boxed{1,2345}", "12345"),
    (r"\boxed{\frac{1}{2}}", "2"),
    (r"\boxed{10000001}", "10000000"),     # integers compare exactly, not within 1e-6
    (r"\boxed{1000001.0}", "1000000"),     # nor a decimal beside an integer: within 1e-6, but another integer
    (r"\boxed{10000000.5}", "10000000"),
    (r"\boxed{5 6}", "56"),                # two numbers, not fifty-six
    ("The answer is \u22127.", "7"),
    (r"\boxed{\frac{1000001}{1000000}}", "1"),
    (r"\boxed{0}", "0.0000672"),           # relative, not absolute, tolerance
    (r"\boxed{0.50001}", "0.5"),
    (r"\boxed{B}", "C"),
    (r"\boxed{12}", "twelve"),
    ("nothing numeric", "0"),
    ("", "0"),
])
def test_incorrect(text, reference):
    assert not is_correct(text, reference)


def test_answers_match():
    assert answers_match("1{,}234.0", "1234")
    assert answers_match(" 7 ", "7.")
    assert not answers_match(None, "7")
    assert not answers_match("1/0", "1/1")
    assert answers_match("1/0", "1/0")  # not a number: compared as strings


@pytest.mark.parametrize("text", [
    "\\boxed{" * 100_000,
    "{" * 10**6,
    "}" * 10**6,
    "\\boxed{" + "{" * 10**6,
    "1" * 10**6,
    "1," * 500_000,
    "-" * 10**6 + "5",
    "<think>" * 100_000,
    "\\boxed " + " " * 10**6,
])
def test_adversarial_inputs_are_handled(text):
    verdict = verify(text, "5")
    assert isinstance(verdict, Verdict)
    assert not verdict.strict


def test_random_unicode_never_raises():
    rng = random.Random(0)
    alphabet = "\\boxed{}<think></think>0123456789.,-+$ \n"
    alphabet += "".join(map(chr, range(0x80, 0x3000, 37)))
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(200)))
        for verifier in ("default", "strict"):
            assert isinstance(is_correct(text, "1", verifier), bool)
    assert isinstance(verify("\ud800\\boxed{\udfff}", "\udfff"), Verdict)


def test_unknown_verifier():
    with pytest.raises(ValueError, match=r"^unknown verifier 'x'; allowed: default, strict$"):
        is_correct(r"\boxed{1}", "1", "x")


@pytest.mark.parametrize("acc_default, acc_strict, expected", [
    (0.9, 0.7, True),
    (0.8, 0.7, False),  # exactly the gap, despite float noise
    (0.5, 0.5, False),
    (0.3, 0.6, False),
])
def test_drifted(acc_default, acc_strict, expected):
    assert drifted(acc_default, acc_strict) is expected


def test_drifted_custom_gap():
    assert drifted(0.5, 0.45, gap=0.01)
    assert not drifted(0.5, 0.45, gap=0.2)


# --- GSM8K's `####`, near misses, and the plain-number rule of the numeric filter ---------------

@pytest.mark.parametrize("text, answer", [
    ("48/2 = <<48/2=24>>24 clips\n#### 72", "72"),
    ("#### 1,000", "1,000"),
    ("#### $18.50", "18.50"),
    ("#### -3", "-3"),
    ("so 12 apples\n#### 72\n\nQuestion: a farmer has 9 cows", "9"),  # the last number after the marker
    ("#### 5 then #### 7 and 9", "9"),                                  # the last marker, its last number
    ("#### 72 dollars", "72"),
    ("####\nthe total is 8", "8"),                                      # a bare marker: last number
    ("#### 72 \\boxed{70}", "70"),                                      # a box beats the marker
])
def test_hashes_fallback(text, answer):
    assert extract_answer(text) == answer
    assert extract_answer(text, strict=True) == ("70" if "boxed" in text else None)


def test_gsm8k_gold_is_default_correct_and_strict_wrong():
    gold = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72 clips.\n#### 72"
    assert verify(gold, "72") == Verdict(default=True, strict=False, boxed=False)


@pytest.mark.parametrize("text, reference, why", [
    (r"so \boxed{71}", "72", "a different number in the box"),
    ("the answer is 72, no wait, 73", "72", "a different last number"),
    ("#### 73", "72", "a different number after ####"),
    (r"\boxed{70+2}", "72", "a box with an expression is no number, and never evaluated"),
    (r"\boxed{5, 6}", "6", "a list hedges: its last item does not count"),
    (r"\boxed{5 \text{ or } 6}", "6", "two answers hedge"),
    (r"\boxed{3x+7}", "7", "an expression's last number is no answer"),
    (r"\boxed{2\sqrt{3}}", "3", "a near miss inside a box"),
    (r"\boxed{x = 12}", "12", "the whole box must be one number"),
    (r"\boxed{12 \text{ apples}}", "12", "a number with a unit is not one number"),
    (r"\boxed{10/4}", "2", "a fraction is its value, not its denominator"),
    ("the answer is 1/2", "0.5", "unboxed, the last-number rule reads 1/2 as the numbers 1 and 2"),
    (r"\boxed{81, 256}", "81256", "a comma with a space separates list items, it is no thousands separator"),
    (r"\boxed{0.5002}", "0.5", "outside the relative tolerance of 1e-6"),
    ("<think>the answer is 72</think>", "72", "a number only in the thought does not count"),
])
def test_near_misses(text, reference, why):
    assert not is_correct(text, reference), why


@pytest.mark.parametrize("text, reference", [
    (r"\boxed{1/2}", "0.5"),                 # a boxed fraction is one value
    (r"\boxed{\frac14}", "0.25"),
    (r"\boxed{\frac{1}{2}}", "0.5"),
    (r"\boxed{0.5000001}", "0.5"),           # within a relative 1e-6
    (r"\boxed{1{,}000{,}000}", "1000000"),
    (r"\boxed{1,\!000}", "1000"),
    ("<think>7?</think>\n#### 8", "8"),
])
def test_equal_values_in_other_forms(text, reference):
    assert is_correct(text, reference)


@pytest.mark.parametrize("answer, number", [
    ("42", "42"), ("-7", "-7"), ("+7", "7"), ("3.50", "3.5"), ("007", "7"), ("-0", "0"), (".5", "0.5"),
    ("1,234", "1234"), ("1{,}234", "1234"), ("1,\\!234", "1234"), ("12\\,345.0", "12345"), ("$42$", "42"),
    ("12.", "12"),
    ("81, 256", None), ("2,16", None), ("1,2345", None), ("\\frac{1}{2}", None), ("1/2", None),
    ("2\\sqrt{3}", None), ("90^\\circ", None), ("\\$5", None), ("10\\%", None), ("x", None), ("", None),
    ("(1,2)", None), ("1e5", None), ("--5", None),
])
def test_plain_number(answer, number):
    assert plain_number(answer) == number


@pytest.mark.parametrize("text, reference, whole_box, paper", [
    (r"\boxed{45^\circ}", "45", False, True),        # C.1, H.1: the last number inside the final box
    (r"\boxed{15\%}", "15", False, True),
    (r"\boxed{12\text{ cm}}", "12", False, True),
    (r"\boxed{5, 6}", "6", False, True),              # the paper's rule pays the last of a hedge
    (r"\boxed{\frac{1}{2}}", "0.5", True, False),     # ... and reads a fraction's denominator
    (r"\boxed{0}", "0.0000672", False, True),         # absolute tolerance 1e-4, not relative 1e-6
    (r"\boxed{3.00005}", "3", False, True),
    (r"\boxed{3.0002}", "3", False, False),
    ("so #### 42", "42", True, True),
    (r"\boxed{x}", "x", True, True),                  # no number in the box: exact strings
])
def test_the_papers_rule_beside_the_whole_box(text, reference, whole_box, paper):
    assert verify(text, reference).default is whole_box
    boxed = "boxed" in text
    assert verify(text, reference, "paper") == Verdict(default=paper, strict=paper and boxed, boxed=boxed)
    assert rule_verdicts(text, reference) == {"whole_box": whole_box, "paper": paper, "math_verify": None}


def test_the_papers_strict_verifier_needs_a_box():
    assert verify("it is 7", "7", "paper") == Verdict(default=True, strict=False, boxed=False)


def test_an_unknown_rule_or_a_missing_backend_is_named():
    with pytest.raises(ValueError, match="verifier.rule: unknown rule 'exact'; allowed: whole_box, paper, math_verify"):
        verify("7", "7", "exact")
    with pytest.raises(ValueError, match="math_verify needs a MathVerify backend"):
        verify("7", "7", "math_verify")
