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
    assert code == 2 and f"{path} line 2: 'text' is a number; allowed: a string (the completion)" in err


@pytest.mark.parametrize("reference, held", [
    ("true", "true (a JSON boolean)"), ("false", "false (a JSON boolean)"), ("null", "null"),
    ("[5]", "a list"), ('{"a": 5}', "an object"), ("NaN", "NaN"), ("-Infinity", "-Infinity"),
    ("1" * 5000, "a number of 5000 digits"), ("1e999999999", "a number of 1000000000 digits"),
])
def test_a_reference_neither_string_nor_number_is_refused_not_stringified(tmp_path, capsys, reference, held):
    """A JSON `true` was checked as the reference 'True', NaN as 'nan'; a 5000-digit number ended in a traceback."""
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "1", "reference": "1"}\n' + f'{{"text": "True", "reference": {reference}}}\n')
    code, out, err = run(capsys, "--file", str(path), "--json")
    assert code == 2 and out == "" and "Traceback" not in err
    assert f"{path} line 2: 'reference' is {held}; allowed: a string, or a finite JSON number" in err


@pytest.mark.parametrize("reference, read", [
    ("1e16", "10000000000000000"), ("0.0000672", "0.0000672"), ("6.72E-5", "0.0000672"), ("7", "7"),
    ("2.50", "2.50"), ("-3", "-3"), ('"1e16"', "1e16"),
])
def test_a_number_reference_is_read_as_written_in_plain_digits(tmp_path, capsys, reference, read):
    """A JSON number was str() of a Python float: 1e16 became '1e+16', which no verifier reads as a number, so
    \\boxed{10000000000000000} was judged wrong against it."""
    path = tmp_path / "c.jsonl"
    path.write_text(f'{{"text": "\\\\boxed{{{read}}}", "reference": {reference}}}\n')
    code, out, _ = run(capsys, "--file", str(path))
    assert code == 0 and f"{path} line 1: reference {read!r}\n  default (whole_box): answer {read!r} -> correct" in out


@pytest.mark.parametrize("line, message", [
    ('{"text": 5, "reference": "5"}', "'text' is a number; allowed: a string (the completion)"),
    ('{"reference": "5"}', "no 'text'; allowed: an object with 'text' (a string, the completion) and 'reference'"),
    ('["x", "5"]', "a list; allowed: an object with 'text' (a string, the completion) and 'reference'"),
    ('{"text": "5", "reference": "5", "reference": "6"}', "'reference' is given twice; allowed: each key once"),
])
def test_a_line_that_is_not_text_and_reference_is_named(tmp_path, capsys, line, message):
    path = tmp_path / "c.jsonl"
    path.write_text(line + "\n")
    code, _, err = run(capsys, "--file", str(path))
    assert code == 2 and f"{path} line 1: {message}" in err
