"""Small MATH and GSM8K files in every format the loaders read, written into a test's tmp_path."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd

WORDS = ("apple river stone cloud paper light number circle garden window mirror ladder candle "
         "forest bridge engine violet marble rocket tunnel silver basket planet copper meadow").split()


def question(rng: random.Random, words: int = 30) -> str:
    """A random, unique-enough problem text (random words cannot be near-duplicates by chance)."""
    return " ".join(rng.choice(WORDS) for _ in range(words)) + f" What is {rng.randrange(10**6)}?"


def math_records(n: int, seed: int, split: str = "train") -> list[dict]:
    """MATH-style records: levels 1..5 in turn, every 7th answer a fraction (dropped by the filter)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        answer = f"\\frac{{{i}}}{{7}}" if is_fraction(i) else str(rng.randrange(-500, 5000))
        out.append({"problem": question(rng), "level": f"Level {i % 5 + 1}", "type": "Algebra",
                    "solution": f"Work it out: $x = 2$, so the answer is $\\boxed{{{answer}}}$.",
                    "unique_id": f"{split}/algebra/{i}.json"})
    return out


def is_fraction(i: int) -> bool:
    return i % 7 == 6


def gsm8k_records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randrange(1, 99), rng.randrange(1, 99)
        out.append({"question": question(rng),
                    "answer": f"She has {a}+{b} = <<{a}+{b}={a + b}>>{a + b} now.\n"
                              f"Twice that is 2*{a + b} = <<2*{a + b}={2 * (a + b)}>>{2 * (a + b)}.\n#### {2 * (a + b)}"})
    return out


def write_jsonl(records: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_parquet(records: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(records).to_parquet(path)
    return path


def write_tree(records: list[dict], root: Path) -> Path:
    """MATH's original layout: <split>/<subject>/<n>.json, one problem per file, no unique_id."""
    for r in records:
        file = root.parent / r["unique_id"]
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(json.dumps({k: v for k, v in r.items() if k != "unique_id"}))
    return root
