"""The command line: one description per verb, only the options each uses, --version, training one run by hand."""

import inspect
import json
import re
import subprocess

import pytest
import yaml

from conftest import ROOT, SMALL_STUDY
from mcgrpo import __version__, cli
from mcgrpo.cli import common
from mcgrpo.core import config as study_config, layout
from mcgrpo.core.errors import ConfigError


def test_version_and_a_description_per_verb(capsys):
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--version"])
    assert capsys.readouterr().out.strip() == f"mcgrpo {__version__}"
    sub = cli.parser()._subparsers._group_actions[0]
    helps = {a.dest: a.help for a in sub._choices_actions}
    assert set(helps) == set(cli.VERBS) and all(helps.values())
    assert helps["figures"] == "Draw the study's figures (PNG and PDF) from the analysis tables."


@pytest.mark.parametrize("verb", list(cli.VERBS))
def test_each_verbs_summary_is_one_whole_sentence(verb, capsys):
    """The summary `python -m mcgrpo --help` lists is the first line of the verb's docstring, and that line is a
    paragraph of its own: one sentence, never the start of a longer one cut at the line's end ("... and with")."""
    lines = inspect.cleandoc(cli.VERBS[verb].__doc__).splitlines()
    summary = cli.help_of(cli.VERBS[verb])[0]
    assert summary == lines[0] and (len(lines) == 1 or lines[1] == ""), f"{verb}: the summary runs on: {lines[:2]}"
    assert summary[0].isupper() and summary.endswith(".") and len(summary) <= 110, summary
    assert len(re.findall(r"[.!?](?=\s|$)", summary)) == 1, f"{verb}: more than one sentence: {summary}"
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--help"])
    assert summary in " ".join(capsys.readouterr().out.split()), f"{verb}: not shown whole in --help"


def test_the_summary_check_tells_a_cut_sentence_from_a_whole_one():
    def cut(args):
        """`mcgrpo verify`: what each verifier reads from a completion and its verdict, and with
        `--claims` every arithmetic claim."""

    def whole(args):
        """Show what each verifier reads from a completion, and its verdict.

        Example:
          python -m mcgrpo verify TEXT --reference 4
        """
    assert inspect.cleandoc(cut.__doc__).splitlines()[1] != ""
    assert cli.help_of(whole) == ("Show what each verifier reads from a completion, and its verdict.",
                                  "Show what each verifier reads from a completion, and its verdict.",
                                  "Example:\n  python -m mcgrpo verify TEXT --reference 4")


def _example(verb: str, capsys) -> list[str]:
    """The arguments of the example `VERB --help` shows, as bash reads them (quotes, line continuations, $(...))."""
    with pytest.raises(SystemExit):
        cli.parser().parse_args([verb, "--help"])
    page = capsys.readouterr().out
    assert f"\nExample:\n  python -m mcgrpo {verb} " in page, f"{verb} --help shows no example"
    command = page.partition("\nExample:\n")[2].replace("python -m mcgrpo", "printf '%s\\0'", 1)
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True).stdout.split("\0")[:-1]


@pytest.mark.parametrize("verb", list(cli.VERBS))
def test_each_verbs_help_explains_its_options_and_shows_an_example_that_parses(verb, capsys, tmp_path, monkeypatch):
    """Every option has a help line, and the example is a command line the verb accepts."""
    actions = cli.parser()._subparsers._group_actions[0].choices[verb]._actions
    assert all(a.help for a in actions), [a.dest for a in actions if not a.help]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "default").mkdir(parents=True)  # what the examples' --results name
    argv = _example(verb, capsys)
    assert argv[0] == verb
    assert cli.parser().parse_args(argv).verb == verb


@pytest.mark.parametrize("verb", ["check", "verify", "prepare-data"])
def test_the_examples_that_need_no_results_run(verb, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config").symlink_to(ROOT / "config")
    assert cli.main(_example(verb, capsys)) == 0, capsys.readouterr().err


def test_every_help_page_renders(capsys):
    """argparse %-formats help strings: a docstring with "80%" once broke `python -m mcgrpo --help`."""
    for argv in (["--help"], *([verb, "--help"] for verb in cli.VERBS)):
        with pytest.raises(SystemExit) as exit_:
            cli.parser().parse_args(argv)
        assert exit_.value.code == 0, argv
    assert "80% power" in capsys.readouterr().out


def options(verb: str) -> set[str]:
    return {o for a in cli.parser()._subparsers._group_actions[0].choices[verb]._actions
            for o in a.option_strings} - {"-h", "--help"}


def test_each_verb_takes_only_the_options_it_uses():
    assert options("figures") == {"--config", "--config-json", "--results"}
    assert options("prepare-data") == {"--task-json", "--out"}
    assert options("warm-start") == {"--model-json", "--data", "--out", "--threads", "--rebuild"}
    assert options("gradient-tests") == {"--run-json", "--model", "--data", "--out"}  # what rules/gradients.smk passes
    assert options("train") == {"--run-json", "--config", "--arm", "--seed", "--model", "--data", "--budget", "--out",
                                "--failed-log", "--tracking", "--label"}
    assert options("ingest") == {"--trl-output", "--config", "--arm", "--seed", "--model", "--data", "--budget",
                                 "--out", "--accept-differences"}
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["figures", "--config", "x.yaml", "--results", "r", "--budget", "b"])


def test_train_by_hand_is_the_run_the_workflow_would_train(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(SMALL_STUDY))
    args = cli.parser().parse_args(["train", "--config", "study.yaml", "--arm", "mc_k2", "--seed", "2"])
    run, files, names = common._training_run(args)
    assert run == study_config.run_config(common._study("study.yaml"), "mc_k2", 2) and names == ("mini", "mc_k2")
    cfg = common._study("study.yaml")
    assert files == {"model": str(layout.model_path(cfg)), "data": str(layout.data_dir(cfg)),
                     "budget": str(layout.budget_path(cfg)), "out": str(layout.run_dir(cfg, "mc_k2", 2))}
    assert files["out"].startswith("results/_shared/runs/") and files["budget"].startswith("results/_shared/calibrations/")
    elsewhere = cli.parser().parse_args(["train", "--config", "study.yaml", "--arm", "mc_k2", "--seed", "2",
                                         "--out", "elsewhere"])
    assert common._training_run(elsewhere)[1]["out"] == "elsewhere"
    assert common._names("default/mc_k4") == ("default", "mc_k4") and common._names(None) == ("run", "run")
    with pytest.raises(ConfigError, match="--label 'mc_k4': expected STUDY/ARM"):
        common._names("mc_k4")


def test_train_by_hand_names_what_is_missing_or_unknown(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(SMALL_STUDY))
    assert cli.main(["train", "--config", "study.yaml", "--arm", "mc_k2"]) == 2
    assert "train --config names the run with --arm A --seed N" in capsys.readouterr().err
    assert cli.main(["train", "--config", "study.yaml", "--arm", "mc_k9", "--seed", "1"]) == 2
    assert "unknown arm 'mc_k9'; allowed: mc_k2, outcome" in capsys.readouterr().err
    assert cli.main(["train", "--run-json", "{}"]) == 2
    assert "train --run-json also needs --model, --data, --budget, --out" in capsys.readouterr().err


def test_a_typo_in_a_study_name_says_which_studies_exist(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert cli.main(["figures", "--config", "config/studies/selectoin.yaml", "--results", "r"]) == 2
    err = capsys.readouterr().err
    assert "config/studies/selectoin.yaml: config file not found; did you mean config/studies/selection.yaml?" in err
    assert "Studies: config/config.yaml, config/studies/bases.yaml, config/studies/dense.yaml" in err


# Issue 30: every argument validated; every user error a message naming the option or file, and exit 2.
LATIN1 = b'{"text": "caf\xe9", "reference": "1"}\n'


@pytest.mark.parametrize("argv, names", [
    (["contrast", "--results", "FOLDER", "--a", "x", "--b", "y", "--bootstrap-seed", "-1"],
     ("--bootstrap-seed", "'-1' is not allowed", "0 to 4294967295")),
    (["contrast", "--results", "FOLDER", "--a", "x", "--b", "y", "--margin", "nan"], ("--margin", "strictly between 0")),
    (["contrast", "--results", "FOLDER", "--a", "x", "--b", "y", "--margin", "1"], ("--margin", "'1' is not allowed")),
    (["contrast", "--results", "FOLDER", "--a", "x", "--b", "y", "--resamples", "10000000"], ("--resamples", "1000000")),
    (["contrast", "--results", "FOLDER", "--a", "x", "--b", "y", "--metric", "acc"], ("--metric", "pass@<k>")),
    (["contrast", "--results", "FOLDER", "--a", "../x", "--b", "y"], ("--a", "letters, digits")),
    (["contrast", "--results", "FOLDER", "--a", "x", "--b", "y", "--eval-set", "a b"], ("--eval-set", "'a b'")),
    (["contrast", "--results", "FOLDER/nowhere", "--a", "x", "--b", "y"], ("--results", "an existing folder")),
    (["warm-start", "--model-json", "{}", "--data", "d", "--out", "o", "--threads", "0"], ("--threads", "1 to 1024")),
    (["power", "--results", "FOLDER", "--power", "1.5"], ("--power", "'1.5' is not allowed")),
    (["power", "--results", "FOLDER", "--alpha", "2"], ("--alpha", "strictly between 0 and 1")),
    (["power", "--results", "FOLDER", "--margin", "-0.1"], ("--margin", "'-0.1'")),
    (["power", "--results", "FOLDER", "--basis", "time_d"], ("--basis", "invalid choice")),
    (["power", "--results", "FOLDER/nowhere"], ("--results", "an existing folder")),
    (["train", "--config", "study.yaml", "--arm", "outcome", "--seed", "-1"], ("--seed", "'-1'")),
    (["train", "--config", "study.yaml", "--arm", "a;b", "--seed", "1"], ("--arm", "'a;b'")),
    (["contrast", "--a", "x", "--b", "y"], ("--results", "required")),
    (["contrast", "--results", "FOLDER", "--a", "x", "--b", "y", "--resamples", "0"],
     ("--resamples", "an integer from 1 to 1000000")),
])
def test_a_bad_option_value_is_refused_by_the_parser_naming_it(tmp_path, capsys, argv, names):
    argv = [a.replace("FOLDER", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and "Traceback" not in err
    for word in names:
        assert word in err, err


@pytest.mark.parametrize("name, content, names", [
    ("nowhere.jsonl", None, ("nowhere.jsonl: --file not found",)),
    ("latin1.jsonl", LATIN1, ("latin1.jsonl:1: byte 0xe9 at column 14 is not UTF-8",)),
    ("folder", "dir", ("folder: a folder, not a file",)),
    ("bad.jsonl", b'{"text": "x", "reference": "1"}\n{"text": \n', ("bad.jsonl line 2: not JSON",)),
])
def test_verify_file_errors_name_the_file(tmp_path, capsys, name, content, names):
    if content == "dir":
        (tmp_path / name).mkdir()
    elif content is not None:
        (tmp_path / name).write_bytes(content)
    assert cli.main(["verify", "--file", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(word in err for word in names), err


def test_verify_shows_every_line_of_a_file_with_its_claims(tmp_path, capsys):
    """Each line's verdicts and claims, the second line's as the first's (a verdict word once shadowed the claims'
    judge, so that line 2 raised TypeError)."""
    lines = [{"text": "2 + 3 = 5, so \\boxed{5}", "reference": "5"}, {"text": "1 + 1 = 3, so 3", "reference": "2"}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli.main(["verify", "--file", str(tmp_path / "c.jsonl"), "--claims"]) == 0
    out = capsys.readouterr().out
    assert "claim '2 + 3 = 5': value 5, true" in out and "claim '1 + 1 = 3': value 2, false" in out, out
    assert out.count("default (whole_box): answer '5' -> correct") == 1 and "answer '3' -> wrong" in out, out


@pytest.mark.parametrize("argv, names", [
    (["gradient-tests", "--run-json", "{}", "--model", "m", "--data", "d", "--out", "o"],
     ("--run-json: config key <top level>: 'gradient_tests' is a required property",)),
    (["resolve-model", "--model-json", '{"name": "x", "source": 5}', "--out", "o.json"],
     ("--model-json: config key model.source: 5 is not of type",)),
    (["prepare-data", "--task-json", '{"name": "arith", "seed": 1, "pool": {}, "eval_sets": {"h": {"size": -1}}}',
      "--out", "d"], ("--task-json: config key task.eval_sets.h.size",)),
    (["warm-start", "--model-json", '{"model": {}, "task": {"name": "x"}}', "--data", "d", "--out", "o"],
     ("--model-json: config key task.name: 'x' is not one of",)),
])
def test_a_json_option_is_checked_against_the_study_schema(tmp_path, monkeypatch, capsys, argv, names):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(word in err for word in names), err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_check_refuses_a_template_without_rendering_it(tmp_path, capsys):
    marker = tmp_path / "PWNED"
    (tmp_path / "study.yaml").write_text(f"__use_yte__: true\nstudy: '?__import__(\"os\").system(\"touch {marker}\")'\n"
                                         "seeds: [1]\narms: {outcome: {}}\n")
    assert cli.main(["check", "--config", str(tmp_path / "study.yaml")]) == 2
    assert "study.yaml: config key __use_yte__" in capsys.readouterr().err and not marker.exists()


def test_a_run_json_block_is_checked_against_the_schema(capsys):
    run = {"task": {}, "model": {}, "engine": {}, "budget": {"tokens": -1}, "evaluation": {}, "recipe": {},
           "seed": 1, "arm_config": {}}
    assert cli.main(["calibrate", "--run-json", json.dumps(run), "--model", "m", "--data", "d", "--out", "o"]) == 2
    assert "--run-json: config key budget.tokens: -1 is less than the minimum of 1" in capsys.readouterr().err
