"""`mcgrpo data FILE`: a data file's summary, as text for a person and as one JSON object."""

import json

from data_fixtures import gsm8k_records, math_records, write_jsonl, write_parquet, write_tree
from mcgrpo import cli

KEYS = {"total", "by_level", "numeric_kept", "numeric_by_level", "gold_correct_default", "gold_correct_strict"}


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(["data", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_summary_of_a_math_tree(tmp_path, capsys):
    root = write_tree(math_records(14, seed=0), tmp_path / "MATH" / "train")
    code, out, _ = run(capsys, root, "--json")
    s = json.loads(out)
    assert code == 0 and KEYS <= s.keys() and s["format"] == "math"
    assert s["total"] == 14 and s["by_level"] == {"1": 3, "2": 3, "3": 3, "4": 3, "5": 2}
    assert s["numeric_kept"] == 12 and s["numeric_dropped"]["fraction"] == 2
    assert s["gold_correct_default"] == s["gold_correct_strict"] == 12


def test_gold_solutions_with_several_different_boxes_are_reported_and_dropped(tmp_path, capsys):
    records = math_records(5, seed=0)  # levels 1..5, one plain numeric answer each
    records[1]["solution"] = "If $x = 2$ then $\\boxed{2}$; but $x$ must be even, so $\\boxed{4}$."
    records[3]["solution"] = "So $16/5 = \\boxed{16/5}$, that is $\\boxed{\\frac{16}{5}}$."  # one answer, twice
    records[4]["solution"] = "The answer is $\\boxed{7}$. (I have not boxed the correct answer.)"
    code, out, _ = run(capsys, write_jsonl(records, tmp_path / "m.jsonl"), "--json")
    s = json.loads(out)
    assert code == 0 and s["numeric_dropped"]["several_answers"] == 2
    assert s["several_answers_by_level"] == {"2": 1, "5": 1}
    assert s["numeric_kept"] == 2 and s["numeric_dropped"]["fraction"] == 1
    cli.main(["data", str(tmp_path / "m.jsonl")])
    assert "gold solutions boxing several different answers (dropped): level 2 1, level 5 1" in capsys.readouterr().out


def test_text_summary_with_dedup_against_an_evaluation_file(tmp_path, capsys):
    train = gsm8k_records(10, seed=0)
    evaluation = write_jsonl(train[:3], tmp_path / "test.jsonl")
    code, out, _ = run(capsys, write_parquet(train, tmp_path / "train.parquet"), "--against", evaluation)
    assert code == 0
    assert "(gsm8k): 10 problems" in out and "numeric answers kept: 10 of 10; dropped: none" in out
    assert "gold solutions marked correct (of 10): default 10, strict 0" in out
    assert f"dedup against {evaluation}: 3 exact, 0 near" in out


def test_a_problem_the_file_repeats_under_another_id_is_counted(tmp_path, capsys):
    """An evaluation set keeps the first of each repeat (pools._Builder): the summary says how many there are."""
    records = gsm8k_records(6, seed=0)
    records += [dict(records[1]), {**records[2], "question": records[2]["question"].upper()},
                {**records[3], "question": records[3]["question"] + " Explain."}]
    path = write_jsonl(records, tmp_path / "test.jsonl")
    s = json.loads(run(capsys, path, "--json")[1])
    assert s["total"] == 9 and s["repeats"] == {"exact": 2, "near": 1}
    assert "repeats within the file: 2 exact, 1 near (8-gram Jaccard >= 0.6) of the numeric problems" in \
        run(capsys, path)[1]
    assert json.loads(run(capsys, write_jsonl(records[:6], tmp_path / "u.jsonl"), "--json")[1])["repeats"] == \
        {"exact": 0, "near": 0}


def test_a_stored_pool_file_is_recognized(tmp_path, capsys):
    path = tmp_path / "d"
    assert cli.main(["prepare-data", "--task-json", json.dumps(
        {"name": "arith", "seed": 1, "pool": {"size": 20, "levels": [1, 2]}, "eval_sets": {"h": {"size": 4}}}),
        "--out", str(path)]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, path / "pool.parquet", "--json")
    s = json.loads(out)
    assert s["format"] == "problems" and s["total"] == s["numeric_kept"] == s["gold_correct_default"] == 20


def test_errors_name_the_file(tmp_path, capsys):
    bad = write_jsonl([{"text": "?"}], tmp_path / "odd.jsonl")
    code, _, err = run(capsys, bad)
    assert code == 2 and "odd.jsonl:1: unknown record fields text; expected MATH" in err
    code, _, err = run(capsys, tmp_path / "none.jsonl")
    assert code == 2 and "none.jsonl: data file not found" in err
