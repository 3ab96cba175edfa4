"""Answer verifiers: does a completion's final answer match the reference?

Two verifiers bracket reward hacking: `default` also credits an unboxed trailing number,
`strict` credits only a boxed answer, so a widening gap between them (`drifted`) flags a
policy that scores without answering in the required format.

Everything here runs on raw model output, so it never raises on any string and stays fast on
hostile ones: no pattern can backtrack more than a constant per character (no nested or
adjacent unbounded quantifiers over the same characters); long texts are searched with C-speed
string methods (rfind, rstrip), and regular expressions only ever run on a window of at most
MAX_ANSWER_CHARS around the answer, since a box or number longer than that is no answer. The
one backend that can hang, math-verify, runs in a worker process, each check bounded by its CPU time.
"""

from __future__ import annotations

import re
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from mcgrpo.core import clock

# Integers and fractions compare exactly; a decimal within this relative tolerance of the other
# value matches (so `\\boxed{0}` never matches 0.0000672, as an absolute tolerance would let it).
RELATIVE_TOLERANCE = Fraction(1, 10**6)
VERIFIERS = ("default", "strict")
# How an answer is read and compared (`verifier.rule`): the whole final box (this project's), the paper's
# (C.1, H.1: the last number inside the final box, absolute tolerance 1e-4), or math-verify's equivalence.
RULES = ("whole_box", "paper", "math_verify")
PAPER_TOLERANCE = Fraction(1, 10**4)
MAX_ANSWER_CHARS = 1000  # a longer box, number or answer string is not an answer
# The longest completion `mcgrpo verify` reads (a completion of the paper's 768 tokens is a few thousand
# characters; its claims are read at about 7 us a character): a longer one is refused, never read into memory
# claim by claim (a 50 MB text once took 3.4 GB).
MAX_TEXT_CHARS = 100_000


def bounded(text: str, where: str) -> str:
    """`text`, a completion to explain, once it is at most MAX_TEXT_CHARS long; else one line naming `where`."""
    if len(text) > MAX_TEXT_CHARS:
        from mcgrpo.core.errors import DataError
        raise DataError(f"{where}: a completion of {len(text):,} characters; allowed: at most {MAX_TEXT_CHARS:,} "
                        f"(a completion is at most a few thousand tokens)")
    return text

_BOX = "\\boxed"
_HASHES = "####"  # GSM8K's final-answer marker
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
# A sign counts only where it cannot be a binary minus (so `5-2` holds 5 and 2, not -2);
# `\d{1,3}(,\d{3})+` reads `1,234` as one number. No nested quantifiers: linear time.
# ASCII digits only: the window search below finds numbers by their ASCII digits.
_NUMBER = re.compile(r"(?:(?<![\w)\]}])[-+])?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
                     r"|(?<![\w.])[-+]?\.\d+", re.ASCII)
_PLAIN = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|-?\.\d+", re.ASCII)
_DIGITS = "0123456789"
_RUN = _DIGITS + ",."  # what a number is made of, besides a leading sign
_FRAC = re.compile(r"(-?)\\frac(?:\{([^{}]*)\}|(\d))(?:\{([^{}]*)\}|(\d))")  # \frac{1}{2}, \frac12
_BRACES = re.compile(r"[{}]")
_SPACED_COMMA = re.compile(r"\s,|,\s")
_SPACES = re.compile(r"\s*")
_BARE = re.compile(r"[^\s${}]+")
_TEXT = re.compile(r"\\text\s*\{([^{}]*)\}")  # `\text{12}`: a wrapper, not a unit
_MINUS = "\u2212"  # Unicode minus sign
_DIGIT_SPACE = re.compile(r"(?<=\d)\s+(?=\d)")


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
    return None if start < 0 else _box_at(text, start)


def all_boxed(text: str) -> list[str]:
    """Content of every closed `\\boxed{}` in `text`, in order (a gold solution's answers)."""
    starts, i = [], text.find(_BOX)
    while i >= 0:
        starts.append(i)
        i = text.find(_BOX, i + 1)
    return [c for c in (_box_at(text, i) for i in starts) if c is not None]


def _box_at(text: str, start: int) -> str | None:
    """Content of the `\\boxed` that starts at `start`; None if it never closes."""
    after = start + len(_BOX)
    if after < len(text) and text[after].isalpha():  # another command, e.g. \boxedfoo
        return None
    i = _SPACES.match(text, after).end()
    if i < len(text) and text[i] == "{":
        return _braced(text, i)
    bare = _BARE.match(text, i, i + MAX_ANSWER_CHARS + 1)
    return bare.group() if bare and len(bare.group()) <= MAX_ANSWER_CHARS else None


def _braced(text: str, start: int) -> str | None:
    """Text between the brace at `start` and its partner (at most MAX_ANSWER_CHARS on), jumping
    from brace to brace."""
    depth = 0
    for brace in _BRACES.finditer(text, start, start + MAX_ANSWER_CHARS + 2):
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
    text = text.replace(_MINUS, "-")
    text = _unspace(text).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    text = _DIGIT_SPACE.sub("\0", text)  # `5 6` is two numbers, never 56
    return "".join(text.split()).replace("\0", " ").rstrip(".")


def _plain(text: str) -> Fraction | None:
    return Fraction(text.replace(",", "")) if _PLAIN.fullmatch(text) else None


def _numeric_form(text: str) -> str | None:
    """`text` normalized to be read as a number, a whole `\\text{...}` unwrapped; None when a comma
    has a space beside it, since `81, 256` is a list of two answers, not eighty-one thousand."""
    if len(text) > MAX_ANSWER_CHARS or _SPACED_COMMA.search(_unspace(text)):
        return None
    wrapped = _TEXT.fullmatch(text.strip())
    s = _normalize(wrapped[1] if wrapped else text).removeprefix("+")
    return None if " " in s else s


def plain_number(text: str) -> str | None:
    """`text` as a canonical plain number (`-1234.5`: sign, digits, decimals; no thousands
    separators, LaTeX spacing or `$`), or None if it is anything else: a list, a fraction, an
    expression, a number with a unit. The numeric-answer filter of the data pools."""
    s = _numeric_form(text)
    if s is None or not _PLAIN.fullmatch(s):
        return None
    whole, _, decimals = s.removeprefix("-").replace(",", "").partition(".")
    whole, decimals = whole.lstrip("0") or "0", decimals.rstrip("0")
    number = f"{whole}.{decimals}" if decimals else whole
    return f"-{number}" if s.startswith("-") and number != "0" else number


def _reading(text: str) -> tuple[Fraction, bool] | None:
    """(exact value, written as a decimal) of a whole string that is one number or simple
    fraction (`12`, `-3.5`, `1,234`, `42.`, `\\frac{1}{2}`, `3/4`, `\\text{7}`), else None."""
    s = _numeric_form(text)
    if s is None:
        return None
    frac = _FRAC.fullmatch(s)
    if frac:
        s = f"{frac[1]}{frac[2] or frac[3]}/{frac[4] or frac[5]}"
    num, slash, den = s.partition("/")
    if slash:
        top, bottom = _plain(num), _plain(den)
        value = top / bottom if top is not None and bottom else None
    else:
        value = _plain(s)
    return None if value is None else (value, "." in s.rstrip("."))


def number_value(text: str) -> Fraction | None:
    """The exact value of a whole string that is one number or simple fraction, else None."""
    reading = _reading(text)
    return None if reading is None else reading[0]


def _equal(a: tuple[Fraction, bool], b: tuple[Fraction, bool]) -> bool:
    """Exactly equal when both are integers or fractions; else within RELATIVE_TOLERANCE, and, beside an
    integer written as one, nearer to it than to any other integer (`1000001.0` is not 1000000, though
    within 1e-6 of it; `12.0000001` is 12)."""
    (x, x_decimal), (y, y_decimal) = a, b
    if not (x_decimal or y_decimal):
        return x == y
    integer = (not x_decimal and x.denominator == 1) or (not y_decimal and y.denominator == 1)
    if integer and abs(x - y) >= Fraction(1, 2):
        return False
    return abs(x - y) <= RELATIVE_TOLERANCE * max(abs(x), abs(y))


def _last_number(text: str) -> str | None:
    """The last number, read left to right as everywhere else, but only within the run of
    digits, commas and dots that holds the last digit, and the sign before it (look-behinds
    still see the text before the window). None if there is no digit, or if that run is longer
    than MAX_ANSWER_CHARS: the last number is then no answer."""
    text = _unspace(text).replace(_MINUS, "-")  # one character for one: positions stay
    end = max(text.rfind(d) for d in _DIGITS)
    if end < 0:
        return None
    window = max(end - MAX_ANSWER_CHARS, 0)
    start = window + len(text[window:end + 1].rstrip(_RUN))
    if start == window and window > 0:
        return None
    tail = deque(_NUMBER.finditer(text, max(start - 1, 0), end + 1), maxlen=1)
    return tail[0].group() if tail else None


def _parse(text: str) -> tuple[str | None, str | None]:
    """(text after thinking, content of its final box): scanned once per completion."""
    body = strip_think(text)
    return body, None if body is None else boxed_content(body)


def _after_hashes(body: str) -> str | None:
    """The last number after the last `####` (GSM8K's `#### 42`), or None: the paper's default
    verifier reads the last number of an unboxed completion, and the marker only narrows where."""
    marker = body.rfind(_HASHES)
    if marker < 0:
        return None
    return _last_number(body[marker + len(_HASHES):])


def _answer(body: str | None, box: str | None, strict: bool) -> str | None:
    """Strict: the final box or nothing. Default: the final box, else the number after `####`,
    else the last number. A box is its whole content, never a number picked out of it: the
    last number of `5, 6`, `3x+7` or `2\\sqrt{3}` would pay a hedge or a near miss. (The paper's
    appendix reads "the last number in the final boxed expression"; issue 14 chose the whole box.)"""
    if box is not None:
        return box
    if strict or body is None:
        return None
    return _after_hashes(body) or _last_number(body)


def extract_answer(text: str, strict: bool = False) -> str | None:
    """The answer string the verifier compares; strict accepts only a boxed one."""
    return _answer(*_parse(text), strict)


def answers_match(candidate: str | None, reference: str) -> bool:
    """Two numbers by value (`_equal`); anything else by exact normalized string."""
    if candidate is None or len(candidate) > MAX_ANSWER_CHARS:
        return False
    a, b = _reading(candidate), _reading(reference)
    if a is not None and b is not None:
        return _equal(a, b)
    return _normalize(candidate) == _normalize(reference)


def _paper_answer(body: str | None, box: str | None, strict: bool) -> str | None:
    """The paper's reading (H.1): "the last number inside the final \\boxed{}, then ... the last number
    after #### or the last number in the completion"; a box without a number is its whole content, since
    the paper compares by "exact string matching otherwise". So `\\boxed{45^\\circ}` reads 45, and
    `\\boxed{\\frac{1}{2}}` reads 2, as the paper's rule does."""
    if box is not None:
        return _last_number(box) or box
    if strict or body is None:
        return None
    return _after_hashes(body) or _last_number(body)


def paper_match(candidate: str | None, reference: str) -> bool:
    """The paper's comparison (H.1): numbers within an absolute tolerance of 1e-4, else exact strings."""
    if candidate is None or len(candidate) > MAX_ANSWER_CHARS:
        return False
    a, b = number_value(candidate), number_value(reference)
    if a is not None and b is not None:
        return abs(a - b) <= PAPER_TOLERANCE
    return _normalize(candidate) == _normalize(reference)


def verify(text: str, reference: str, rule: str = "whole_box", math_verify: "MathVerify | None" = None) -> Verdict:
    """Both verdicts of `rule` at once, plus whether the completion boxed its answer (math_verify: the
    backend that rule needs; strict is its verdict on a completion that boxed its answer)."""
    body, box = _parse(text)
    if rule == "whole_box":
        default, strict = (answers_match(_answer(body, box, s), reference) for s in (False, True))
    elif rule == "paper":
        default, strict = (paper_match(_paper_answer(body, box, s), reference) for s in (False, True))
    elif rule == "math_verify":
        if math_verify is None:
            raise ValueError("verifier.rule math_verify needs a MathVerify backend")
        default = math_verify(text, reference)
        strict = default and box is not None
    else:
        raise ValueError(f"verifier.rule: unknown rule {rule!r}; allowed: {', '.join(RULES)}")
    return Verdict(default=default, strict=strict, boxed=box is not None)


def rule_verdicts(text: str, reference: str, math_verify: "MathVerify | None" = None) -> dict[str, bool | None]:
    """The default-mode verdict of every rule (math_verify None without its backend): what an evaluation
    records beside the study's own verdicts, so that the rules can be compared on the same text."""
    body, box = _parse(text)
    return {"whole_box": answers_match(_answer(body, box, False), reference),
            "paper": paper_match(_paper_answer(body, box, False), reference),
            "math_verify": None if math_verify is None else math_verify(text, reference)}


def explain(text: str, reference: str, math_verify: "MathVerify | None" = None) -> dict:
    """What each verifier reads from `text` and whether it matches `reference` (`mcgrpo verify`): the
    whole-box rule's default and strict verifiers, the paper's rule and math-verify (None without it)."""
    body, box = _parse(text)
    default, strict, paper = _answer(body, box, False), _answer(body, box, True), _paper_answer(body, box, False)
    return {"default_answer": default, "default_correct": answers_match(default, reference),
            "strict_answer": strict, "strict_correct": answers_match(strict, reference),
            "paper_answer": paper, "paper_correct": paper_match(paper, reference),
            "math_verify_correct": None if math_verify is None else math_verify(text, reference)}


def math_verify_backend() -> "MathVerify | None":
    """This process's MathVerify backend (one worker, closed at exit) where the math-verify package is
    installed, else None."""
    global _SHARED
    if _SHARED is None:
        try:
            _SHARED = MathVerify()
        except ImportError:
            return None
        import atexit
        atexit.register(_SHARED.close)
    return _SHARED


_SHARED: "MathVerify | None" = None


def is_correct(text: str, reference: str, verifier: str = "default") -> bool:
    """The reward of one completion under the named verifier."""
    if verifier not in VERIFIERS:
        raise ValueError(f"unknown verifier {verifier!r}; allowed: {', '.join(VERIFIERS)}")
    return answers_match(extract_answer(text, strict=verifier == "strict"), reference)


def default_verifier(text: str, reference: str) -> bool:
    """The default verifier as a plugin-shaped function (mcgrpo.api.Verifier)."""
    return is_correct(text, reference, "default")


def strict_verifier(text: str, reference: str) -> bool:
    """The strict verifier (a boxed or `####` answer only) as a plugin-shaped function."""
    return is_correct(text, reference, "strict")


def drifted(acc_default: float, acc_strict: float, gap: float = 0.1) -> bool:
    """Whether default accuracy exceeds strict by more than `gap`: the policy earns reward
    without boxing. The epsilon keeps float noise (0.8 - 0.7 > 0.1) from counting."""
    return acc_default - acc_strict > gap + 1e-9



class MathVerify:
    """The optional `math_verify` backend: symbolic equivalence by the math-verify package
    (`pip install 'mcgrpo[math]'`), for answers that are not plain numbers.

    Each check is bounded by the worker's own CPU time (`timeout` seconds), never by wall time: on a shared machine
    a check of 1.6 s CPU took 3.3 s of wall time beside one busy process, and a wall limit would make the same
    completion right in one run and wrong in another. math-verify bounds its own time with signal.alarm
    (`timeout_seconds`, `parsing_timeout`): a wall-clock alarm of whole seconds, so its timeouts are off here and the
    worker (`python -m mcgrpo.core.verify`) arms a CPU-time timer per check instead (ITIMER_PROF: user and system
    time, so that building a huge integer, mostly allocation, counts too). A check that overruns counts as wrong
    (the paper says nothing of checks that do not finish) and is never silent: `overruns` counts them. A wall-clock
    limit of BACKSTOP times the CPU budget stays only for a hung C call no signal interrupts: then the worker is
    killed and replaced, and that check also counts as an overrun. Only the last `max_chars` characters after
    thinking are sent.
    Use as a context manager, or call close().
    """

    STARTUP_S = 120
    # The wall-clock backstop, as a multiple of the CPU budget: generous, so that only a hung call reaches it, never
    # a check slowed by load (a process sharing its core with nine others still gets its CPU budget within it).
    BACKSTOP = 10
    OVERRAN = "overran"  # the worker's reply for a check that used up its CPU budget

    def __init__(self, timeout: float = 2.0, max_chars: int = 4000):
        import importlib.util
        if importlib.util.find_spec("math_verify") is None:
            raise ImportError("the math_verify backend needs the math-verify package: "
                              "pip install 'mcgrpo[math]'")
        self.timeout, self.max_chars = timeout, max_chars
        self.overruns = 0  # verdicts read from a check that overran its CPU budget (or hung), each counted wrong
        self._worker = None
        self._remembered: dict[tuple[str, str], str] | None = None

    def __call__(self, text: str, reference: str) -> bool:
        body = strip_think(text)
        if body is None:
            return False
        key = (body[-self.max_chars:], reference)
        line = self._remembered.get(key) if self._remembered is not None else None
        if line is None:
            line = self._ask(*key)
            if self._remembered is not None:
                self._remembered[key] = line
        if line in ("", self.OVERRAN):
            self.overruns += 1
        return line == "1"

    @contextmanager
    def remembering(self):
        """Within it, each (text, reference) is checked once and its answer read again: an evaluation of a study
        whose verifier is math_verify scores each sample twice (its verdicts, then every rule's side by side), and
        both must be the one check whose overrun is recorded, never a second that finished in time."""
        self._remembered = {}
        try:
            yield self
        finally:
            self._remembered = None

    def ready(self) -> None:
        """Start the worker now, if it is not running: a trainer does so before its first iteration, so that
        importing sympy in the worker is never training time (a fresh run's evaluation 0 starts it; a resumed run's
        first check would, inside the generate stage)."""
        if self._worker is None:
            self._start()

    def _ask(self, body: str, reference: str) -> str:
        """The worker's reply to one check, stripped; "" where it hung past the backstop or died (it is replaced)."""
        import json
        if self._worker is None:
            self._start()
        try:
            self._worker.stdin.write(json.dumps([body, reference, self.timeout]) + "\n")
            self._worker.stdin.flush()
            line = self._read_line(self.timeout * self.BACKSTOP)
        except OSError:
            line = ""
        if not line:
            self.close()
        return line.strip()

    def _read_line(self, timeout: float) -> str:
        import select
        ready, _, _ = select.select([self._worker.stdout], [], [], timeout)
        return self._worker.stdout.readline() if ready else ""

    def _start(self) -> None:
        import os
        import subprocess
        import sys
        package_root = str(Path(__file__).resolve().parents[2])  # the folder that holds mcgrpo/
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        self._worker = subprocess.Popen([sys.executable, "-m", "mcgrpo.core.verify"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        bufsize=1, env=env)
        clock.helper(self._worker.pid)  # its checks are the work of the stage that asks for them (the CPU clock)
        if self._read_line(self.STARTUP_S) != "ready\n":  # importing sympy is not check time
            self.close()
            raise RuntimeError(f"the math-verify worker did not start within {self.STARTUP_S} s")

    def close(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker.wait()
            clock.helper(self._worker.pid, running=False)  # waited for: os.times counts it now
            self._worker.stdin.close()
            self._worker.stdout.close()
        self._worker = None

    def __enter__(self) -> "MathVerify":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _OverranCPU(BaseException):
    """Raised by the CPU-time timer: a BaseException, so that no `except Exception` in math-verify or sympy
    swallows it."""


def _overran(signum, frame) -> None:
    raise _OverranCPU


def _judge(text: str, reference: str, seconds: float) -> str:
    """One check within `seconds` of this process's CPU time: "1", "0" or MathVerify.OVERRAN."""
    import signal
    from math_verify import parse, verify as equivalent
    gold = reference if "$" in reference else f"${reference}$"  # a bare reference is LaTeX
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        ok = equivalent(parse(gold, parsing_timeout=None), parse(text, parsing_timeout=None), timeout_seconds=None)
    except _OverranCPU:
        return MathVerify.OVERRAN
    except Exception:  # noqa: BLE001 - a malformed answer is a wrong answer, never a crash
        ok = False
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    return "1" if ok else "0"


def _serve_math_verify() -> None:
    """The worker: one JSON [text, reference, CPU seconds] per input line, `1`, `0` or `overran` per output line."""
    import json
    import signal
    import sys
    import math_verify  # noqa: F401 - imported before "ready": importing sympy is not check time
    signal.signal(signal.SIGPROF, _overran)
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            text, reference, seconds = json.loads(line)
        except ValueError:
            print(0, flush=True)
            continue
        try:
            reply = _judge(text, reference, seconds)
        except _OverranCPU:  # the timer fired just as the check ended, before it was disarmed
            reply = MathVerify.OVERRAN
        print(reply, flush=True)


if __name__ == "__main__":
    _serve_math_verify()
