"""The optional math_verify backend: symbolic equivalence, bounded by a worker that is replaced
when it hangs. Skipped where the math-verify package is absent (pip install 'mcgrpo[math]')."""

import time

import pytest

pytest.importorskip("math_verify")

from mcgrpo.core.verify import MathVerify  # noqa: E402


@pytest.fixture(scope="module")
def check():
    with MathVerify(timeout=1.0) as backend:
        yield backend


@pytest.mark.parametrize("text, reference, expected", [
    (r"so \boxed{\frac{1}{2}}", "0.5", True),
    (r"\boxed{2\sqrt{2}}", r"\sqrt{8}", True),
    (r"\boxed{3}", "0.5", False),
    ("<think>it is 5</think> so \\boxed{5}", "5", True),
    ("<think>it is 5", "5", False),            # an unfinished thought has not answered
    ("", "5", False),
    ("\\boxed{" * 2000, "5", False),
])
def test_equivalence(check, text, reference, expected):
    assert check(text, reference) is expected


def test_a_hung_check_is_killed_counted_wrong_and_the_worker_replaced(check):
    start = time.perf_counter()
    assert check(r"\boxed{9^{9^{9^{9^{9}}}}}", "1") is False
    assert time.perf_counter() - start < 10  # the timeout is 1 s; startup of a fresh worker aside
    assert check(r"\boxed{7}", "7") is True


def test_the_math_verify_rule_scores_rewards_and_every_rule_is_recorded(check):
    from mcgrpo.core.verify import rule_verdicts, verify
    from mcgrpo.train.rollout import score
    assert verify(r"\boxed{\frac{1}{2}}", "0.5", "math_verify", check).default is True
    assert verify("it is 0.5", "0.5", "math_verify", check).strict is False  # strict needs a box
    assert score([r"\boxed{45^\circ}", r"\boxed{44}"], ["45", "45"], "math_verify").default.tolist() == [True, False]
    assert rule_verdicts(r"\boxed{2\sqrt{2}}", r"\sqrt{8}", check) == {"whole_box": False, "paper": False,
                                                                     "math_verify": True}
