"""The shared MATH and GSM8K train splits (../shared/data beside the repository; skipped where it is
absent): numeric-filter counts per level, and every kept gold solution marked correct by the
default and strict verifiers against its own answer, through `mcgrpo data --json`."""

import json

import pytest

from conftest import ROOT
from mcgrpo import cli

SHARED = ROOT.parent / "shared" / "data"


def summary(capsys, name: str) -> dict:
    path = SHARED / name / "train.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent (real data lives beside the repository, never in it)")
    assert cli.main(["data", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_math_train(capsys):
    s = summary(capsys, "math")
    assert s["format"] == "math" and s["total"] == 7500
    assert s["by_level"] == {"0": 2, "1": 564, "2": 1348, "3": 1592, "4": 1690, "5": 2304}
    # ../shared/data/README.md counts 4,883 plain-number last boxes; 10 of them are in solutions that
    # box several different answers (23 such solutions in all), which have no reliable reference
    assert s["numeric_kept"] == 4873
    assert s["numeric_by_level"] == {"0": 2, "1": 443, "2": 935, "3": 1015, "4": 1003, "5": 1475}
    assert s["several_answers_by_level"] == {"1": 1, "2": 4, "3": 5, "4": 5, "5": 8}
    assert sum(s["numeric_dropped"].values()) == 7500 - 4873 and s["numeric_dropped"]["list"] > 0
    assert s["gold_correct_default"] == s["gold_correct_strict"] == s["gold_checked"] == 4873


def test_gsm8k_train(capsys):
    s = summary(capsys, "gsm8k")
    assert s["format"] == "gsm8k" and s["total"] == s["numeric_kept"] == 7473
    assert s["by_level"] == s["numeric_by_level"] == {"0": 7473}
    # gold solutions end in `#### 72`, unboxed: the default verifier credits them, the strict one never
    assert s["gold_correct_default"] == 7473 and s["gold_correct_strict"] == 0
