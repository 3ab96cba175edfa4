"""Hostile inputs outside the run store (issue 48): YAML alias bombs, a results folder reaching the workflow's own
folders however written, a study colliding with a file, a huge completion for `verify`, and a true claim of mixed
numbers: each named in one line (or judged true), quickly, never a traceback or gigabytes of memory."""

from __future__ import annotations

import copy
import json
import os
import time
from fractions import Fraction

import pytest
import yaml

from conftest import ROOT, SMALL_STUDY, snakemake
from mcgrpo.cli import main
from mcgrpo.core import claim_notation
from mcgrpo.core.claims import claims, verdict
from mcgrpo.core.config import MAX_VALUES
from mcgrpo.core.verify import MAX_TEXT_CHARS
from mcgrpo.train.credit.path_penalty import fulfilled, given_numbers

# Eight levels of ten aliases: 10^8 values from a few hundred bytes.
BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10) if p else ', '.join(['1'] * 10)}]\n"
               for p, c in zip([None, *"abcdefg"], "abcdefgh"))


def bomb_study(tmp_path, where: str) -> str:
    """A study file whose arm description (`where` description) or seeds (`seeds`) is an alias bomb."""
    body = yaml.safe_dump({**copy.deepcopy(SMALL_STUDY), "results_dir": str(tmp_path / "results")},
                          sort_keys=False)
    body = body.replace("study: mini", "study: mini\nx-bomb:\n" + "".join(f"  {line}\n" for line in
                                                                          BOMB.splitlines()), 1)
    before = body
    if where == "seeds":
        body = body.replace("seeds:\n- 1\n- 2\n", "seeds: *h\n", 1)
    else:
        body = body.replace("  outcome: {}\n", "  outcome:\n    description: *h\n", 1)
    path = tmp_path / "study.yaml"
    path.write_text(body)
    assert len(body) < 4000 and body != before
    return str(path)


@pytest.mark.parametrize("where", ["description", "seeds"])
def test_a_yaml_alias_bomb_is_refused_naming_the_file_in_seconds(tmp_path, capsys, where):
    """Before: MemoryError after 36 s and 3 GB in `check` (and a 72 MB message at 10^7 values)."""
    path = bomb_study(tmp_path, where)
    start = time.perf_counter()
    assert main(["check", "--config", path]) == 2
    err = capsys.readouterr().err
    assert time.perf_counter() - start < 20 and len(err) < 500
    assert f"{path}: more than {MAX_VALUES:,} values once its YAML aliases (*name) are expanded" in err


def test_snakemake_refuses_a_yaml_alias_bomb_before_building_the_dag(tmp_path):
    path = bomb_study(tmp_path, "description")
    done = snakemake(tmp_path, "-n", configfile=path, timeout=300)
    assert done.returncode != 0 and f"{path}: more than {MAX_VALUES:,} values" in done.stderr
    assert "MemoryError" not in done.stderr and "Traceback" not in done.stderr


def study_file(tmp_path, **keys) -> str:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**copy.deepcopy(SMALL_STUDY), **keys}))
    return str(path)


def test_a_results_dir_reaching_the_workflows_code_by_an_absolute_path_is_refused(tmp_path, capsys):
    """Before: `results_dir: <repo>/workflow` passed `check` and wrote workflow/mcgrpo/{runs,logs,calibration}."""
    for results_dir, study in ((str(ROOT / "workflow"), "mcgrpo"), (str(ROOT), "workflow"),
                               (str(ROOT / "rules" / "x"), "mini")):
        assert main(["check", "--config", study_file(tmp_path, results_dir=results_dir, study=study)]) == 2
        err = capsys.readouterr().err
        assert "is the workflow's own folder" in err and "allowed: a folder outside the workflow's own folders" in err
    link = tmp_path / "elsewhere"
    os.symlink(ROOT / "config", link)  # through a link
    assert main(["check", "--config", study_file(tmp_path, results_dir=str(link), study="mini")]) == 2
    assert f"is the workflow's own folder {ROOT / 'config'}" in capsys.readouterr().err


def test_a_study_whose_folder_is_a_file_is_refused_by_check_as_snakemake_would_trip_on_it(tmp_path, capsys):
    """Before: `study: README.md` where results/README.md is a file passed `check`; `snakemake -n` then failed with
    NotADirectoryError."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "README.md").write_text("outputs\n")
    path = study_file(tmp_path, results_dir=str(tmp_path / "results"), study="README.md")
    assert main(["check", "--config", path]) == 2
    assert (f"config key study: 'README.md': {tmp_path}/results/README.md is a file, where the study's folder "
            f"belongs; allowed: a study name whose folder under results_dir is a folder or not there yet"
            ) in capsys.readouterr().err
    done = snakemake(tmp_path, "-n", configfile=path, timeout=300)
    assert done.returncode != 0 and "is a file, where the study's folder belongs" in done.stderr
    assert "NotADirectoryError" not in done.stderr


def test_verify_refuses_a_huge_completion_in_one_line(tmp_path, capsys):
    """Before: MemoryError after 3.4 GB on a 50 MB completion with --claims."""
    path = tmp_path / "huge.jsonl"
    path.write_text(json.dumps({"text": "2 + 3 = 5. " * 2_000_000, "reference": "5"}) + "\n")
    start = time.perf_counter()
    assert main(["verify", "--file", str(path), "--claims"]) == 2
    assert time.perf_counter() - start < 20
    assert (f"{path} line 1: a completion of 22,000,000 characters; allowed: at most {MAX_TEXT_CHARS:,}"
            in capsys.readouterr().err)
    path.write_text(json.dumps({"text": "2 + 3 = 5. " * 100, "reference": "5"}) + "\n")  # a long one still reads
    assert main(["verify", "--file", str(path), "--claims"]) == 0


@pytest.mark.parametrize("text", ["So 2 1/2 + 1 = 3 1/2.", "2 1/2 + 1 = 3 1/2. Then 3 1/2 * 2 = 7.",
                                  "(a) 2 1/2 + 1 = 3 1/2.\n"])
def test_a_true_claim_of_mixed_numbers_before_a_full_stop_is_judged_true(text):
    """Before: the right side of `2 1/2 + 1 = 3 1/2.` was read as 3 and the claim judged false."""
    judged = [verdict(c) for c in claims(text)]
    assert judged[0] == {"text": "2 1/2 + 1 = 3 1/2", "value": 3.5, "true": True}
    assert all(v["true"] is not False for v in judged)


def test_a_mixed_number_before_decimals_is_left_unjudged_never_judged_false():
    assert [verdict(c)["true"] for c in claims("So 2 1/2 + 1 = 3 1/2.5")] == [None]


def test_path_penalty_reads_numbers_through_claim_notation():
    """One reading of written numbers for claims and for the path penalty's obligations (`1{,}200` one number)."""
    assert claim_notation.numbers("Tom has 1{,}200 apples and -3.5 pears") == [Fraction(1200), Fraction(-7, 2)]
    assert given_numbers("Tom has 1{,}200 apples, 3 bags") == frozenset({Fraction(1200), Fraction(3)})
    text = "1200 / 3 = 400. So the answer is 400."
    assert fulfilled(text, claims(text), [], given_numbers("1{,}200 apples in 3 bags")) == [True]
