"""`mcgrpo data FILE`: what a data file holds, checked before any GPU time is spent on it.

Counts by level, what the numeric-answer filter keeps and why it drops the rest, the problems the file repeats
(an evaluation set keeps the first of each, a pool samples it more often), what deduplication would remove
against given evaluation files, and how many gold solutions each verifier marks correct against their own answers
(a verifier that fails gold solutions would train on a wrong reward).
"""

from __future__ import annotations

import pandas as pd

from mcgrpo.core import store
from mcgrpo.data import dedup, gsm8k, math, numeric, records
from mcgrpo.core.verify import verify
from mcgrpo.core.errors import DataError

ROWS = {"math": math.row, "gsm8k": gsm8k.row}
FORMATS = (*ROWS, "problems")


def detect(record: records.Record) -> str:
    """The format whose fields the record has: a stored problems file, MATH or GSM8K."""
    fields = record.fields
    if {"problem_id", "question", "answer"} <= fields.keys():
        return "problems"
    if {"problem", "solution"} <= fields.keys():
        return "math"
    if {"question", "answer"} <= fields.keys():
        return "gsm8k"
    raise DataError(f"{record.where}: unknown record fields {', '.join(sorted(fields))}; expected MATH "
                     f"(problem, solution, level, type), GSM8K (question, answer) or a stored problems file "
                     f"(problem_id, question, answer, ...)")


def load(path: str, fmt: str | None = None) -> tuple[pd.DataFrame, str]:
    """(problems with the numeric filter applied, format) of any file the pipeline reads."""
    source = {"path": path}
    recs = records.read(source)
    if not recs:
        raise DataError(f"{path}: no records in this file; allowed: one problem per line (.jsonl), a list "
                        f"of problems (.json), rows (.parquet) or a folder of per-problem .json files")
    fmt = fmt or detect(recs[0])
    if fmt == "problems":
        frame = pd.DataFrame([r.fields for r in recs])
        missing = [c for c in store.COLUMNS["problems"] if c not in frame.columns]
        if missing:
            raise DataError(f"{path}: missing field(s) {', '.join(missing)} of a stored problems file")
        if "solution" not in frame:
            frame["solution"] = ""
    else:
        frame = records.frame([ROWS[fmt](r, fmt) for r in recs], source)
    return numeric.apply(frame), fmt


def gold_correct(problems: pd.DataFrame) -> dict[str, int]:
    """How many gold solutions each verifier marks correct against their own answer."""
    verdicts = [verify(s, a) for s, a in zip(problems["solution"].fillna(""), problems["answer"])]
    return {"gold_correct_default": sum(v.default for v in verdicts),
            "gold_correct_strict": sum(v.strict for v in verdicts)}


def gold_correct_math_verify(problems: pd.DataFrame) -> int:
    from mcgrpo.core.verify import MathVerify
    with MathVerify() as check:
        return sum(check(s, a) for s, a in zip(problems["solution"].fillna(""), problems["answer"]))


def by_reason(removed: pd.DataFrame) -> dict[str, int]:
    """How many of deduplication's `removed` rows matched exactly, and how many near."""
    return {reason: int((removed["reason"] == reason).sum()) for reason in ("exact", "near")}


def dedup_against(problems: pd.DataFrame, against: list[str]) -> dict[str, dict[str, int]]:
    """Per evaluation file: the numeric problems here that match one of its problems, by reason."""
    out = {}
    for path in against:
        index = dedup.Index().add(load(path)[0], path)
        out[path] = by_reason(index.split(problems, "checked")[1])
    return out


def summarize(path: str, fmt: str | None = None, against: list[str] = (), math_verify: bool = False) -> dict:
    problems, fmt = load(path, fmt)
    kept = problems[problems["numeric_reason"] == numeric.KEPT]
    out = {"path": str(path), "format": fmt, "total": len(problems), "by_level": numeric.by_level(problems),
           **numeric.report(problems), **gold_correct(kept), "gold_checked": len(kept),
           "repeats": by_reason(dedup.distinct(kept, "checked")[1])}
    if math_verify:
        out["gold_correct_math_verify"] = gold_correct_math_verify(kept)
    if against:
        out["dedup_removed"] = dedup_against(kept, list(against))
    return out


def render(s: dict) -> str:
    """The summary as a short report for a person."""
    levels = sorted(set(s["by_level"]) | set(s["numeric_by_level"]), key=int)
    lines = [f"{s['path']} ({s['format']}): {s['total']:,} problems", f"{'level':>5} {'total':>8} {'numeric':>8}"]
    lines += [f"{'none' if lv == '0' else lv:>5} {s['by_level'].get(lv, 0):>8,} {s['numeric_by_level'].get(lv, 0):>8,}"
              for lv in levels]
    dropped = ", ".join(f"{reason} {n:,}" for reason, n in s["numeric_dropped"].items() if n) or "none"
    lines.append(f"numeric answers kept: {s['numeric_kept']:,} of {s['total']:,}; dropped: {dropped}")
    if s["several_answers_by_level"]:
        levels = ", ".join(f"level {'none' if lv == '0' else lv} {n:,}" for lv, n in s["several_answers_by_level"].items())
        lines.append(f"gold solutions boxing several different answers (dropped): {levels}")
    gold = f"default {s['gold_correct_default']:,}, strict {s['gold_correct_strict']:,}"
    if "gold_correct_math_verify" in s:
        gold += f", math_verify {s['gold_correct_math_verify']:,}"
    lines.append(f"gold solutions marked correct (of {s['gold_checked']:,}): {gold}")
    lines.append(f"repeats within the file: {s['repeats']['exact']:,} exact, {s['repeats']['near']:,} near "
                 f"(8-gram Jaccard >= {dedup.THRESHOLD}) of the numeric problems")
    for other, counts in s.get("dedup_removed", {}).items():
        lines.append(f"dedup against {other}: {counts['exact']:,} exact, {counts['near']:,} near "
                     f"(8-gram Jaccard >= {dedup.THRESHOLD})")
    return "\n".join(lines)
