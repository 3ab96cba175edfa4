"""Answer verifiers: extraction, comparison, and robustness to arbitrary model output."""

import random

import pytest

from mcgrpo.verify import (Verdict, answers_match, boxed_content, drifted, extract_answer,
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
    assert extract_answer(r"\boxed{x = 12}") == "12"
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
