"""The verifiers on random and hostile strings (500 in `make test`, 10,000 in `make test-all`: five times the
hypothesis profile's example count, tests/conftest.py): never an exception, never a slow check.

Each check is timed three times and its fastest time kept, so that the scheduler of a shared
machine does not count as verifier time (the slowest was about 2-3 ms on a quiet machine, against a
target of 10 ms). The bound asserted is generous, so that only a real regression (catastrophic
backtracking takes seconds) can fail it on a loaded CI machine.
"""

import time

from hypothesis import HealthCheck, given, settings, strategies as st

from mcgrpo.core.verify import Verdict, extract_answer, number_value, plain_number, verify

EXAMPLES = 5 * settings.default.max_examples
BOUND_S = 0.1
REPEATS = 3
PIECES = ["\\boxed{", "\\boxed", "\\boxed ", "{", "}", "<think>", "</think>", "####", "1", "9", "0", "-", "+",
          ",", ".", "/", "\\frac{1}{2}", "$", "\\!", "\\,", "{,}", " ", "\n", "\x00", "\x1b", "\x7f", "\ud800",
          "\\left", "\\right", "e", "x", "=", "\u200b", "\u0661"]
# What one piece repeated many times turns into: deep nesting, unbalanced boxes, huge numbers.
HUGE = ["{", "}", "\\boxed{", "1", "1,000", "-", "9.", "<think>", "####", " ", "\\!", ",1", "\x00"]


def _nested(depth: int) -> str:
    return "\\boxed{" + "{" * depth + "5" + "}" * depth


texts = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(max_codepoint=0x1f), max_size=200),          # control characters
    st.lists(st.sampled_from(PIECES), max_size=80).map("".join),                # verifier syntax, shuffled
    st.builds(lambda p, n: p * n, st.sampled_from(HUGE), st.integers(1, 100_000)),
    st.builds(lambda d, tail: _nested(d) + tail, st.integers(0, 50_000), st.sampled_from(["", "}", "{", " 7"])),
    st.builds(lambda n, p: "\\boxed{" + "7" * n + p, st.integers(1, 100_000), st.sampled_from(["", "}", ".5}"])),
)
references = st.one_of(st.sampled_from(["5", "-1.5", "1000", "0.5", "\\frac{1}{2}", "B"]), st.text(max_size=20))


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(texts, references)
def test_no_string_breaks_or_stalls_a_verifier(text, reference):
    fastest = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        verdict = verify(text, reference)
        extract_answer(text), extract_answer(text, strict=True), plain_number(text), number_value(text)
        fastest = min(fastest, time.perf_counter() - start)
    assert fastest < BOUND_S, f"{fastest * 1e3:.1f} ms"
    assert isinstance(verdict, Verdict)
    assert not (verdict.strict and not verdict.boxed)       # strict credit needs a box
    assert not (verdict.strict and not verdict.default)     # a correct box is correct by default too


NUMBERISH = st.text(alphabet="0123456789,.-+ x)]}{\\!#", max_size=120)


@settings(max_examples=settings.default.max_examples, deadline=None, database=None, derandomize=True)
@given(NUMBERISH)
def test_windowed_number_search_reads_like_a_full_scan(text):
    """The fast last-number search equals a plain left-to-right scan of the whole text."""
    from collections import deque

    from mcgrpo.core.verify import _NUMBER, _last_number, _unspace
    scan = list(_NUMBER.finditer(_unspace(text)))
    assert _last_number(text) == (deque(scan, maxlen=1)[0].group() if scan else None)
