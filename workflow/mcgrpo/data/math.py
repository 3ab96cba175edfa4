"""The MATH data set (Hendrycks et al., 2021): problems with worked solutions, levels 1-5, subjects.

A record has `problem`, `solution`, `level` ("Level 3" or 3) and `type` (or `subject`); the answer
is the content of the solution's last `\\boxed{}`, whatever the record's own `answer` field says,
so that every copy of MATH yields the same answers. A solution that boxes several different
answers (`\\boxed{2}` ... `\\boxed{4}`), or says it did not box the right one, has no reliable
reference: it is marked `several_answers` and the numeric filter drops it.
"""

from __future__ import annotations

import re

import pandas as pd

from mcgrpo.core.verify import all_boxed, answers_match, boxed_content
from mcgrpo.data import records
from mcgrpo.data.records import NO_LEVEL
from mcgrpo.core.errors import DataError

NEEDS = "a MATH record needs fields problem, solution (level, type or subject optional)"


def level_of(value, where: str) -> int:
    """1..5 from "Level 3", "3" or 3; NO_LEVEL for "Level ?" or none."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "Level ?", "?")):
        return NO_LEVEL
    text = str(value).strip().removeprefix("Level").strip()
    if text.isdigit() and 1 <= int(text) <= 5:
        return int(text)
    raise DataError(f"{where}: field 'level' is {value!r}; allowed: 1-5, 'Level 1'-'Level 5' or 'Level ?'")


_DISOWNED = re.compile(r"not\s+boxed", re.IGNORECASE)  # "I have not boxed the correct answer"


def several_answers(solution: str) -> bool:
    """Whether a gold solution names more than one answer. A box repeated in another form
    (`16/5`, then `\\frac{16}{5}`) is one answer; the record's own `answer` field cannot settle
    it, since copies of MATH derive that field from the last box."""
    boxes = all_boxed(solution)
    return bool(_DISOWNED.search(solution)) or any(not answers_match(b, boxes[-1]) for b in boxes[:-1])


def row(record: records.Record, source: str) -> dict:
    solution = record.require("solution", NEEDS)
    return {"problem_id": f"math/{record.key.removesuffix('.json')}",
            "question": record.require("problem", NEEDS),
            "answer": boxed_content(solution), "several_answers": several_answers(solution),
            "level": level_of(record.fields.get("level"), record.where),
            "subject": str(record.get("type") or record.get("subject") or record.get("subject_dir") or ""),
            "source": source, "steps": [], "solution": solution}


def load(source: dict) -> pd.DataFrame:
    """Every problem of a MATH source, answers as boxed (not yet filtered)."""
    return records.frame([row(r, "math") for r in records.read(source)], source)

