"""`mcgrpo verify`: what each verifier reads from a completion, its verdict, and each arithmetic claim."""

import importlib.util
import json

import pytest

from mcgrpo import cli

KEYS = ["default_answer", "default_correct", "strict_answer", "strict_correct", "paper_answer", "paper_correct",
        "math_verify_correct"]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(["verify", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_one_text_as_json_with_exactly_the_named_keys(capsys):
    code, out, _ = run(capsys, "--reference", "6", "--json", r"5 + 1 = 6, so \boxed{5, 6}")
    result = json.loads(out)
    assert code == 0 and list(result) == KEYS
    assert {k: result[k] for k in KEYS[:6]} == {"default_answer": "5, 6", "default_correct": False,
                                                "strict_answer": "5, 6", "strict_correct": False,
                                                "paper_answer": "6", "paper_correct": True}  # the paper's rule pays a hedge


def test_claims_with_value_and_verdict(capsys):
    code, out, _ = run(capsys, "--reference", "14", "--json", "--claims",
                       "2 + 3 * 4 = 14, 48 / 2 * 3 = 70, 2(3 + 4) = 14 so 14")
    result = json.loads(out)
    assert code == 0 and list(result) == [*KEYS, "claims"]
    assert result["default_answer"] == "14" and result["default_correct"] and result["strict_answer"] is None
    assert result["claims"] == [{"text": "2 + 3 * 4 = 14", "value": 14, "true": True},
                                {"text": "48 / 2 * 3 = 70", "value": 72, "true": False},
                                {"text": "2(3 + 4) = 14", "value": 14, "true": True}]


def test_a_file_gives_one_object_per_line_and_readable_lines(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"text": r"\boxed{7}", "reference": "7"}) + "\n\n"
                    + json.dumps({"text": "it is 0", "reference": 0.0000672}) + "\n")
    code, out, _ = run(capsys, "--file", str(path), "--json")
    assert code == 0 and [json.loads(line)["default_correct"] for line in out.splitlines()] == [True, False]
    code, out, _ = run(capsys, "--file", str(path), "--claims")
    assert code == 0 and f"{path} line 1: reference '7'\n  default (whole_box): answer '7' -> correct\n" in out
    assert "  strict (whole_box, boxed only): answer None -> wrong" in out
    assert "  paper (paper, C.1/H.1): answer '7' -> correct" in out


def test_all_three_verifiers_are_printed_and_they_differ(capsys):
    code, out, _ = run(capsys, "--reference", "45", r"the angle is \boxed{45^\circ}")
    assert code == 0 and "default (whole_box): answer '45^\\\\circ' -> wrong" in out  # repr doubles the backslash
    assert "paper (paper, C.1/H.1): answer '45' -> correct" in out
    if importlib.util.find_spec("math_verify") is not None:
        assert "math_verify: correct" in out


@pytest.mark.parametrize("argv, message", [
    ([], "give either TEXT with --reference, or --file FILE"),
    (["so 5"], "TEXT needs --reference"),
])
def test_bad_invocations_say_what_is_needed(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err


def test_a_bad_line_is_named(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "1", "reference": "1"}\n{"text": 5}\nnot json\n')
    code, _, err = run(capsys, "--file", str(path))
    assert code == 2 and f"{path} line 2: needs an object with string 'text' and 'reference'" in err
