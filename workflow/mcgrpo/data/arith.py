"""The built-in leveled arithmetic task: short integer expressions with worked solutions.

Questions and solutions stay short enough for a tiny character-level model. The training
pool and the evaluation sets are disjoint by construction: a stable hash of each question
decides once and for all whether it may ever be used for evaluation or for training.
"""

from __future__ import annotations

import hashlib
import math
import operator
import re
from collections import Counter
from dataclasses import dataclass
from itertools import combinations, product
from typing import Sequence

import numpy as np
import pandas as pd

from mcgrpo.core.errors import ConfigError, DataError

LEVELS = (1, 2, 3, 4, 5)
MAX_SOLUTION_CHARS = 60
MAX_ANSWER = 9999
EVAL_BUCKETS = 10      # a question is eval-eligible iff its hash falls in bucket 0 of these
COLUMNS = ("problem_id", "question", "answer", "level", "subject", "source", "steps",
           "solution")
_MAX_MISSES = 10_000   # consecutive unusable draws before a level counts as exhausted
_APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_TOKEN = re.compile(r"\d+|[-+*()]")

Span = tuple[int, int]  # first and last operand inside one pair of parentheses


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str
    solution: str
    level: int
    steps: tuple[str, ...]


@dataclass(frozen=True)
class _Shape:
    """What a level's expressions look like; every combination is one distinct question."""
    terms: int
    high: int  # operands are drawn from 1..high
    opsets: tuple[tuple[str, ...], ...]
    spansets: tuple[tuple[Span, ...], ...]

    @property
    def capacity(self) -> int:
        return self.high ** self.terms * len(self.opsets) * len(self.spansets)


# Distinct usable questions of each level (a short solution, a small answer) on each side of the evaluation
# partition: (training side, evaluation side, all usable). Levels 1-3 counted by enumerating every question
# (tests/test_hostile_configs.py counts level 1 again); levels 4 and 5, with 21.6 million and 59 billion
# combinations, estimated from 40,000 random draws (98.6% and 88.7% usable, 9.9% and 10.2% on the evaluation
# side) and rounded down.
SUPPLY = {1: (149, 13, 162), 2: (28841, 3159, 32000), 3: (7730, 910, 8640),
          4: (19_000_000, 2_000_000, 21_300_000), 5: (46_000_000_000, 5_000_000_000, 52_000_000_000)}


def supply(level: int, for_eval: bool) -> int:
    """The most questions of `level` one side of the partition reliably gives all its sets together: the
    draws give up after _MAX_MISSES misses in a row, so the last question drawn must leave at least 14 in
    _MAX_MISSES of the usable ones unused (a failure then has probability below e^-14, about 1e-6)."""
    train_side, eval_side, usable = SUPPLY[level]
    return (eval_side if for_eval else train_side) + 1 - math.ceil(14 * usable / _MAX_MISSES)


def wanted(size: int, levels: Sequence[int]) -> Counter:
    """Questions of each level a set of `size` draws (levels round-robin, as `_draw`)."""
    return Counter(levels[i % len(levels)] for i in range(size))


def longest_question(levels: Sequence[int]) -> int:
    """Characters of the longest question the levels can ask (every operand at its most digits)."""
    return max(len(_render([shape.high] * shape.terms, ops, spans)) for shape in map(_shape_of, levels)
               for ops in shape.opsets for spans in shape.spansets)


def _nests_or_disjoint(a: Span, b: Span) -> bool:
    """Pairs of parentheses may nest or stand apart, never cross."""
    x, y = set(range(a[0], a[1] + 1)), set(range(b[0], b[1] + 1))
    return not x & y or x <= y or y <= x


def _shape(terms: int, high: int, ops: str, pairs: Sequence[int] = (0,),
           need_mul: bool = False) -> _Shape:
    """Enumerate a level's operator choices and parenthesizations (never around everything)."""
    opsets = tuple(o for o in product(ops, repeat=terms - 1) if "*" in o or not need_mul)
    spans = [(i, j) for i in range(terms) for j in range(i + 1, terms) if j - i < terms - 1]
    spansets = tuple(c for n in pairs for c in combinations(spans, n)
                     if all(_nests_or_disjoint(a, b) for a, b in combinations(c, 2)))
    return _Shape(terms, high, opsets, spansets)


_SHAPES = {
    1: _shape(2, 9, "+-"),
    2: _shape(3, 20, "+-"),
    3: _shape(3, 12, "+-*", need_mul=True),
    4: _shape(4, 20, "+-*", pairs=(1,)),
    5: _shape(5, 30, "+-*", pairs=(1, 2)),
}


def _shape_of(level: int) -> _Shape:
    if level not in _SHAPES:
        raise ValueError(f"unknown level {level!r}; allowed: {', '.join(map(str, LEVELS))}")
    return _SHAPES[level]


def _tokenize(question: str) -> list[int | str]:
    """Tokens of a well-formed expression of positive integers, + - * and parentheses."""
    tokens = _TOKEN.findall(question)
    if "".join(tokens) != question:
        raise ValueError(f"unexpected character in {question!r}")
    depth, want_operand = 0, True
    for token in tokens:
        if token == "(":
            ok, depth = want_operand, depth + 1
        elif token == ")":
            ok, depth = not want_operand and depth > 0, depth - 1
        else:
            ok, want_operand = want_operand == token.isdigit(), not token.isdigit()
        if not ok:
            raise ValueError(f"malformed expression {question!r}")
    if want_operand or depth:
        raise ValueError(f"malformed expression {question!r}")
    return [int(t) if t.isdigit() else t for t in tokens]


def _reduce(flat: list[int | str], work: list[str]) -> int:
    """Evaluate a parenthesis-free token list, * then +/- left to right, logging each step."""
    items = list(flat)
    for level_ops in ("*", "+-"):
        i = 1
        while i < len(items):
            if items[i] in level_ops:
                a, op, b = items[i - 1:i + 2]
                items[i - 1:i + 2] = [_APPLY[op](a, b)]
                work.append(f"{a}{op}{b}={items[i - 1]}")
            else:
                i += 2
    return items[0]


def solve(question: str) -> tuple[str, tuple[str, ...]]:
    """Worked solution and intermediate results, innermost (then leftmost) parentheses first."""
    tokens, work = _tokenize(question), []
    while ")" in tokens:
        close = tokens.index(")")
        open_ = max(i for i in range(close) if tokens[i] == "(")
        tokens[open_:close + 1] = [_reduce(tokens[open_ + 1:close], work)]
    answer = _reduce(tokens, work)
    steps = tuple(step.rsplit("=", 1)[1] for step in work)
    return " ".join(filter(None, [",".join(work), f"\\boxed{{{answer}}}"])), steps


def _render(operands: Sequence[int], ops: Sequence[str], spans: Sequence[Span]) -> str:
    opens, closes = Counter(s for s, _ in spans), Counter(e for _, e in spans)
    return "".join("(" * opens[i] + str(x) + ")" * closes[i] + (ops[i] if i < len(ops) else "")
                   for i, x in enumerate(operands))


def make_problem(rng: np.random.Generator, level: int) -> Problem:
    """A random problem of `level`, resampled until its solution is short and answer small."""
    shape = _shape_of(level)
    while True:
        question = _render([int(x) for x in rng.integers(1, shape.high + 1, size=shape.terms)],
                           shape.opsets[rng.integers(len(shape.opsets))],
                           shape.spansets[rng.integers(len(shape.spansets))])
        solution, steps = solve(question)
        if len(solution) <= MAX_SOLUTION_CHARS and abs(int(steps[-1])) <= MAX_ANSWER:
            return Problem(question, steps[-1], solution, level, steps)


def _hash(text: str) -> int:
    """Stable across processes and Python versions, unlike hash()."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _normalize(question: str) -> str:
    return "".join(question.split())


def is_eval_eligible(question: str) -> bool:
    """The fixed partition that keeps training questions out of every evaluation set."""
    return _hash(_normalize(question)) % EVAL_BUCKETS == 0


def _shortage(level: int, wanted: int, name: str, for_eval: bool) -> ValueError:
    share = "1/10" if for_eval else "9/10"
    return ValueError(f"level {level} has at most {_shape_of(level).capacity} distinct questions "
                      f"(about {share} of them usable for '{name}'); cannot draw {wanted} "
                      f"distinct ones")


def _fresh(rng: np.random.Generator, level: int, wanted: int, name: str, for_eval: bool,
           used: set[str]) -> list[Problem]:
    """`wanted` problems of `level` on the set's side of the partition, none in `used`."""
    if wanted > _shape_of(level).capacity:
        raise _shortage(level, wanted, name, for_eval)
    drawn: list[Problem] = []
    misses = 0
    while len(drawn) < wanted:
        problem = make_problem(rng, level)
        if problem.question in used or is_eval_eligible(problem.question) != for_eval:
            misses += 1
            if misses > _MAX_MISSES:
                raise _shortage(level, wanted, name, for_eval)
            continue
        used.add(problem.question)
        drawn.append(problem)
        misses = 0
    return drawn


def _draw(seed: int, name: str, size: int, levels: Sequence[int], for_eval: bool,
          used: set[str]) -> pd.DataFrame:
    """One set, levels spread round-robin; its own random stream keeps it independent of the
    other sets' sizes."""
    if size and not levels:
        raise ConfigError(f"set '{name}' has {size} problems but no levels")
    plan = [levels[i % len(levels)] for i in range(size)]
    rng = np.random.default_rng([seed, _hash(name)])
    by_level = {level: iter(_fresh(rng, level, count, name, for_eval, used))
                for level, count in Counter(plan).items()}
    return _frame(name, [next(by_level[level]) for level in plan])


def _frame(name: str, problems: Sequence[Problem]) -> pd.DataFrame:
    rows = [(f"arith-{name}-{i:06d}", p.question, p.answer, p.level, "arith", "arith",
             list(p.steps), p.solution) for i, p in enumerate(problems)]
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"level": "int64"})


def build(seed: int, pool_size: int, pool_levels: list[int],
          eval_sets: dict[str, dict]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The training pool and the evaluation sets (drawn in order, each excluding the earlier
    ones), every question distinct across all of them."""
    if "pool" in eval_sets:
        raise ConfigError("evaluation set name 'pool' is reserved for the training pool")
    used: set[str] = set()
    evals = {name: _draw(seed, name, spec["size"], spec["levels"], True, used)
             for name, spec in eval_sets.items()}
    return _draw(seed, "pool", pool_size, pool_levels, False, used), evals


def check_disjoint(pool: pd.DataFrame, eval_sets: dict[str, pd.DataFrame]) -> None:
    """Raise if any question (whitespace ignored) is in two sets: leakage voids evaluation."""
    owner: dict[str, str] = {}
    for name, frame in {"pool": pool, **eval_sets}.items():
        for question in set(map(_normalize, frame["question"])):
            if question in owner:
                raise DataError(f"sets '{owner[question]}' and '{name}' share questions, "
                                 f"e.g. {question!r}")
            owner[question] = name


def corpus(seed: int, size: int, levels: list[int]) -> pd.DataFrame:
    """Training-side problems for supervised warm start, levels round-robin; repeats allowed (level 1
    has only 162 questions), eval-eligible questions never."""
    rng = np.random.default_rng([seed, _hash("warm_start")])
    problems: list[Problem] = []
    while len(problems) < size:
        problem = make_problem(rng, levels[len(problems) % len(levels)])
        if not is_eval_eligible(problem.question):
            problems.append(problem)
    return _frame("warm_start", problems)
