"""GSM8K (Cobbe et al., 2021): grade-school word problems whose worked answer marks each calculation
`<<48/2=24>>` and ends with `#### 72`. The marked results become the problem's reference `steps`,
which process rewards compare a completion's equations against."""

from __future__ import annotations

import pandas as pd

from mcgrpo.data import records
from mcgrpo.data.records import NO_LEVEL
from mcgrpo.core.errors import DataError

NEEDS = "a GSM8K record needs fields question, answer (a worked solution ending in '#### <number>')"
_OPEN, _CLOSE, _FINAL = "<<", ">>", "####"


def final_answer(solution: str, where: str) -> str:
    """The text after the last `####`."""
    marker = solution.rfind(_FINAL)
    if marker < 0:
        raise DataError(f"{where}: field 'answer' has no final '#### <number>' line; {NEEDS}")
    return solution[marker + len(_FINAL):].strip()


def steps(solution: str) -> list[str]:
    """The result of every `<<expression=result>>` annotation, in order (one pass, no regex)."""
    out, i = [], 0
    while (start := solution.find(_OPEN, i)) >= 0 and (end := solution.find(_CLOSE, start)) >= 0:
        expression, equals, result = solution[start + len(_OPEN):end].rpartition("=")
        if equals and result.strip():
            out.append(result.strip())
        i = end + len(_CLOSE)
    return out


def row(record: records.Record, source: str) -> dict:
    solution = record.require("answer", NEEDS)
    return {"problem_id": f"gsm8k/{record.key}", "question": record.require("question", NEEDS),
            "answer": final_answer(solution, record.where), "level": NO_LEVEL, "subject": "gsm8k",
            "source": source, "steps": steps(solution), "solution": solution}


def load(source: dict) -> pd.DataFrame:
    return records.frame([row(r, "gsm8k") for r in records.read(source)], source)
