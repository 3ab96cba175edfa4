"""Near-duplicate detection between training and evaluation problems.

Two problems match when their normalized texts are equal, or when the Jaccard similarity of their
sets of word 8-grams is at least 0.6 (the check the paper used to clean its training pools). An
inverted index from 8-gram to problem makes one lookup cost the problems that share an 8-gram,
not the whole evaluation set.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass

import pandas as pd

from mcgrpo.core.errors import DataError

N = 8
THRESHOLD = 0.6
REMOVED_COLUMNS = ("problem_id", "set", "reason", "match_set", "match_id", "similarity", "question")
_TOKEN = re.compile(r"\w+|[^\w\s]")  # words, and every other character alone
_MARKUP = ("\\left", "\\right", "\\displaystyle", "$")


def tokens(text: str) -> list[str]:
    """Case- and markup-insensitive tokens: `\\dfrac` is `\\frac`, `$`, `\\left`, `\\right` go."""
    text = unicodedata.normalize("NFKC", text).casefold()
    for markup in _MARKUP:
        text = text.replace(markup, " ")
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    return _TOKEN.findall(text)


def normalize(text: str) -> str:
    return " ".join(tokens(text))


def shingles(text: str) -> set[tuple[str, ...]]:
    """The word 8-grams of `text`; a text shorter than 8 tokens is its own single gram."""
    t = tokens(text)
    return {tuple(t[i:i + N]) for i in range(max(len(t) - N + 1, 1))}


def jaccard(a: str, b: str) -> float:
    x, y = shingles(a), shingles(b)
    return len(x & y) / len(x | y) if x | y else 1.0


@dataclass(frozen=True)
class Match:
    reason: str        # "exact" (equal after normalization) or "near" (8-gram Jaccard >= THRESHOLD)
    set: str
    problem_id: str
    similarity: float


class Index:
    """Problems to protect (evaluation sets), queried with candidates (a training pool)."""

    def __init__(self) -> None:
        self._exact: dict[str, int] = {}
        self._postings: defaultdict[tuple[str, ...], list[int]] = defaultdict(list)
        self._sizes: list[int] = []
        self._owners: list[tuple[str, str]] = []

    def add(self, problems: pd.DataFrame, name: str) -> "Index":
        for problem_id, question in zip(problems["problem_id"], problems["question"]):
            self.add_one(problem_id, question, name)
        return self

    def add_one(self, problem_id: str, question: str, name: str) -> None:
        i = len(self._owners)
        self._owners.append((name, problem_id))
        self._exact.setdefault(normalize(question), i)
        grams = shingles(question)
        self._sizes.append(len(grams))
        for gram in grams:
            self._postings[gram].append(i)

    def match(self, question: str) -> Match | None:
        """The protected problem this one duplicates (exact first, else the most similar), or None."""
        exact = self._exact.get(normalize(question))
        if exact is not None:
            return Match("exact", *self._owners[exact], 1.0)
        grams = shingles(question)
        shared = Counter(i for gram in grams for i in self._postings.get(gram, ()))
        best, score = None, 0.0
        for i, common in shared.items():
            similarity = common / (len(grams) + self._sizes[i] - common)
            if similarity > score:
                best, score = i, similarity
        return Match("near", *self._owners[best], score) if best is not None and score >= THRESHOLD else None

    def split(self, problems: pd.DataFrame, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(problems that match nothing here, one row per removed problem saying why)."""
        return _kept(problems, name, [self.match(q) for q in problems["question"]])

    def take(self, problems: pd.DataFrame, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """`split`, each kept problem added in turn: a later problem repeating an earlier one is removed too."""
        matches = []
        for problem_id, question in zip(problems["problem_id"], problems["question"]):
            matches.append(self.match(question))
            if matches[-1] is None:
                self.add_one(problem_id, question, name)
        return _kept(problems, name, matches)


def distinct(problems: pd.DataFrame, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the first of each problem repeated within `problems`, one row per later repeat saying why): an evaluation
    set holding one problem twice, under two ids, would count it twice in its accuracy. A repeat is what the
    pool's deduplication removes (equal after normalization, or 8-gram Jaccard >= THRESHOLD with a kept problem)."""
    return Index().take(problems, name)


def _kept(problems: pd.DataFrame, name: str, matches: list[Match | None]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the problems whose match is None, one REMOVED_COLUMNS row per other problem naming its match)."""
    removed = pd.DataFrame(
        [(pid, name, m.reason, m.set, m.problem_id, round(m.similarity, 4), q)
         for pid, q, m in zip(problems["problem_id"], problems["question"], matches) if m is not None],
        columns=list(REMOVED_COLUMNS))
    return problems[[m is None for m in matches]].reset_index(drop=True), removed


def check_disjoint(sets: dict[str, pd.DataFrame]) -> None:
    """Raise if any two sets share a problem after normalization: leakage voids evaluation."""
    owner: dict[str, str] = {}
    for name, frame in sets.items():
        for text in {normalize(q) for q in frame["question"]}:
            if text in owner:
                raise DataError(f"sets '{owner[text]}' and '{name}' share a problem after normalization, "
                                 f"e.g. {text[:80]!r}")
            owner[text] = name
