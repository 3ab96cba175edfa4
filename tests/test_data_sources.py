"""MATH and GSM8K loaders: every file format, every answer form, and errors that name the file,
the line, the field and what is allowed."""

import json
import sys
import types

import pytest

from data_fixtures import gsm8k_records, math_records, write_jsonl, write_parquet, write_tree
from mcgrpo.data import gsm8k, math, records


def test_math_reads_alike_from_a_json_tree_jsonl_and_parquet(tmp_path):
    recs = math_records(12, seed=1)
    frames = [math.load({"path": write_tree(recs, tmp_path / "MATH" / "train")}),
              math.load({"path": write_jsonl(recs, tmp_path / "math.jsonl")}),
              math.load({"path": write_parquet(recs, tmp_path / "math.parquet")})]
    key = lambda f: f.sort_values("problem_id").reset_index(drop=True)  # noqa: E731
    for frame in frames[1:]:
        assert key(frame).drop(columns="steps").equals(key(frames[0]).drop(columns="steps"))
    first = key(frames[0]).iloc[0]
    assert first["problem_id"] == "math/train/algebra/0" and first["subject"] == "Algebra"
    assert sorted(frames[0]["level"].unique()) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("solution, answer", [
    (r"so $\boxed{42}$.", "42"),
    (r"first \boxed{1}, then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"nested \boxed{\{1, \{2\}\}}", r"\{1, \{2\}\}"),
    (r"bare form: \boxed 5.", "5."),
    (r"spaced \boxed{1,\!000}", r"1,\!000"),
    ("no box at all", None),
])
def test_math_answer_is_the_last_box_of_the_solution(tmp_path, solution, answer):
    path = write_jsonl([{"problem": "p", "solution": solution, "level": 3, "answer": "ignored"}], tmp_path / "m.jsonl")
    assert math.load({"path": path})["answer"].iloc[0] == answer


@pytest.mark.parametrize("level, expected", [("Level 3", 3), (3, 3), ("3", 3), ("Level ?", 0), (None, 0)])
def test_math_levels(level, expected):
    assert math.level_of(level, "f:1") == expected


def test_a_bad_level_names_file_line_and_what_is_allowed(tmp_path):
    path = write_jsonl([{"problem": "p", "solution": r"\boxed{1}", "level": "Level 7"}], tmp_path / "m.jsonl")
    with pytest.raises(ValueError, match=r"m.jsonl:1: field 'level' is 'Level 7'; allowed: 1-5"):
        math.load({"path": path})


def test_a_missing_field_names_file_line_and_field(tmp_path):
    path = write_jsonl([{"problem": "p", "solution": r"\boxed{1}"}, {"problem": "q"}], tmp_path / "m.jsonl")
    with pytest.raises(ValueError, match=r"m.jsonl:2: missing field 'solution'; a MATH record needs fields problem, "
                                         r"solution"):
        math.load({"path": path})


def test_malformed_files_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "p", "solution": "s"}\n{not json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        math.load({"path": bad})
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    with pytest.raises(ValueError, match=r"list.jsonl:1: expected a JSON object"):
        math.load({"path": tmp_path / "list.jsonl"})
    with pytest.raises(FileNotFoundError, match=r"nothing.jsonl: data file not found"):
        math.load({"path": tmp_path / "nothing.jsonl"})
    (tmp_path / "m.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match=r"m.csv: unknown data format '.csv'; allowed: a folder"):
        math.load({"path": tmp_path / "m.csv"})
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"empty: no .json problem files"):
        math.load({"path": tmp_path / "empty"})
    (tmp_path / "blank.jsonl").write_text("\n")
    with pytest.raises(ValueError, match=r"blank.jsonl: no problems in this source"):
        math.load({"path": tmp_path / "blank.jsonl"})


def test_repeated_problem_ids_are_refused(tmp_path):
    recs = math_records(2, seed=0)
    recs[1]["unique_id"] = recs[0]["unique_id"]
    with pytest.raises(ValueError, match=r"problem id 'math/train/algebra/0' occurs more than once"):
        math.load({"path": write_jsonl(recs, tmp_path / "m.jsonl")})


def test_gsm8k_answer_and_reference_steps(tmp_path):
    path = write_jsonl(gsm8k_records(3, seed=0) + [{"question": "q", "answer": "a <<1,000+2=1,002>>\n#### 1,002"}],
                       tmp_path / "train.jsonl")
    frame = gsm8k.load({"path": path})
    row = frame.iloc[0]
    a_plus_b = int(row["steps"][0])
    assert row["answer"] == str(2 * a_plus_b) and list(row["steps"]) == [str(a_plus_b), str(2 * a_plus_b)]
    assert row["problem_id"] == "gsm8k/train/1" and row["level"] == 0 and row["subject"] == "gsm8k"
    assert frame.iloc[3]["answer"] == "1,002" and list(frame.iloc[3]["steps"]) == ["1,002"]
    assert gsm8k.load({"path": write_parquet(gsm8k_records(3, seed=0), tmp_path / "t.parquet")})["answer"].tolist() \
        == frame["answer"].tolist()[:3]


def test_gsm8k_steps_skip_malformed_annotations():
    assert gsm8k.steps("<<2*3=6>> and <<oops>> and <<4=>> and <<1+1=2") == ["6"]


def test_gsm8k_without_a_final_answer_names_the_line(tmp_path):
    path = write_jsonl([{"question": "q", "answer": "it is 4"}], tmp_path / "g.jsonl")
    with pytest.raises(ValueError, match=r"g.jsonl:1: field 'answer' has no final '#### <number>' line"):
        gsm8k.load({"path": path})


def test_a_cached_hugging_face_data_set(monkeypatch):
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        if name == "missing/set":
            raise ConnectionError("offline")
        return gsm8k_records(2, seed=0)

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    frame = gsm8k.load({"hf": {"name": "openai/gsm8k", "config": "main", "split": "test"}})
    assert calls == [("openai/gsm8k", "main", "test")]
    assert frame["problem_id"].tolist() == ["gsm8k/test/0", "gsm8k/test/1"]
    with pytest.raises(ValueError, match=r"hf:missing/set\[train\]: cannot load this data set from the local cache"):
        gsm8k.load({"hf": {"name": "missing/set"}})


def test_hugging_face_without_the_datasets_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ValueError, match=r"needs the datasets package"):
        records.read({"hf": {"name": "openai/gsm8k"}})


def test_a_single_json_file_is_one_problem(tmp_path):
    (tmp_path / "7.json").write_text(json.dumps({"problem": "p", "solution": r"\boxed{3}", "level": "Level 2"}))
    frame = math.load({"path": tmp_path / "7.json"})
    assert frame["answer"].tolist() == ["3"] and frame["problem_id"].tolist() == ["math/7"]
