"""The optional math_verify backend: symbolic equivalence, each check bounded by the worker's CPU time, the worker
replaced when it hangs. Skipped where the math-verify package is absent (pip install 'mcgrpo[math]')."""

import os
import signal
import subprocess
import sys
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


HUNG = r"\boxed{9^{9^{9^{9^{9}}}}}"
# Right, after about 0.6 s of CPU time (both powers are computed): slow, but within a CPU budget of 1 s.
SLOW_RIGHT = (r"\boxed{49^{750000}}", "7^{1500000}")


def test_a_check_over_its_cpu_budget_answers_overrun_is_counted_wrong_and_keeps_its_worker():
    with MathVerify(timeout=0.3) as check:
        assert check(r"\boxed{7}", "7") is True
        pid = check._worker.pid
        assert check(HUNG, "1") is False and check.overruns == 1
        assert check._worker.pid == pid  # the CPU timer stopped it: no kill, no restart
        assert check(r"\boxed{7}", "7") is True and check.overruns == 1


def test_a_slow_check_is_judged_the_same_with_a_busy_process_on_its_core():
    """Right within its CPU budget of 1 s though its wall time, beside a busy process, is over 1 s: a wall-clock
    limit counted it wrong. (Checked once: sympy caches what it computed.)"""
    with MathVerify(timeout=1.0) as check:
        assert check(r"\boxed{7}", "7") is True  # the worker is up
        core = {min(os.sched_getaffinity(0))}
        busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            os.sched_setaffinity(busy.pid, core)
            os.sched_setaffinity(check._worker.pid, core)
            start = time.perf_counter()
            assert check(*SLOW_RIGHT) is True and check.overruns == 0
            assert time.perf_counter() - start > check.timeout  # the load was real
        finally:
            busy.kill()
            busy.wait()


def test_a_check_remembered_is_read_again_overrun_and_all():
    """Within `remembering` (one evaluation) the first check of a text is its verdict, here an overrun that a second
    check, given a larger budget, would not be; outside it every call checks afresh."""
    right = (r"\boxed{\frac{1}{2}}", "0.5")
    with MathVerify(timeout=1e-5) as check:
        with check.remembering():
            assert check(*right) is False and check.overruns == 1
            check.timeout = 30.0
            assert check(*right) is False and check.overruns == 2  # the same check's answer, counted where read
            assert check(r"\boxed{7}", "7") is True
        assert check(*right) is True and check.overruns == 2


def test_a_hung_worker_is_killed_by_the_wall_backstop_counted_wrong_and_replaced():
    """A stopped worker spends no CPU time, as one hung in a C call no signal interrupts: the backstop ends it."""
    with MathVerify(timeout=0.1) as check:
        assert check(r"\boxed{7}", "7") is True
        pid = check._worker.pid
        os.kill(pid, signal.SIGSTOP)
        start = time.perf_counter()
        assert check(r"\boxed{7}", "7") is False and check.overruns == 1
        assert 0.1 * MathVerify.BACKSTOP <= time.perf_counter() - start < 0.1 * MathVerify.BACKSTOP + 1
        assert check(r"\boxed{7}", "7") is True and check._worker.pid != pid


def test_evaluation_records_which_checks_overran(monkeypatch):
    from mcgrpo.core.verify import math_verify_backend
    from mcgrpo.train.evaluation import rule_columns
    monkeypatch.setattr(math_verify_backend(), "timeout", 0.3)
    columns = rule_columns([HUNG, r"\boxed{7}"], ["1", "7"])
    assert columns["math_verify_overran"].tolist() == [True, False]
    assert columns["correct_math_verify"].tolist() == [False, True]


def test_the_math_verify_rule_scores_rewards_and_every_rule_is_recorded(check):
    from mcgrpo.core.verify import rule_verdicts, verify
    from mcgrpo.train.rollout import score
    assert verify(r"\boxed{\frac{1}{2}}", "0.5", "math_verify", check).default is True
    assert verify("it is 0.5", "0.5", "math_verify", check).strict is False  # strict needs a box
    assert score([r"\boxed{45^\circ}", r"\boxed{44}"], ["45", "45"], "math_verify").default.tolist() == [True, False]
    assert rule_verdicts(r"\boxed{2\sqrt{2}}", r"\sqrt{8}", check) == {"whole_box": False, "paper": False,
                                                                     "math_verify": True}
