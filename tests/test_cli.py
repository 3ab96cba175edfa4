"""The command line: one description per verb, only the options each uses, --version, training one run by hand."""

import pytest
import yaml

from conftest import ROOT, SMALL_STUDY
from mcgrpo import __version__, cli
from mcgrpo.core import config as study_config, layout
from mcgrpo.core.errors import ConfigError


def test_version_and_a_description_per_verb(capsys):
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--version"])
    assert capsys.readouterr().out.strip() == f"mcgrpo {__version__}"
    sub = cli.parser()._subparsers._group_actions[0]
    helps = {a.dest: a.help for a in sub._choices_actions}
    assert set(helps) == set(cli.VERBS) and all(helps.values())
    assert helps["figures"].startswith("Analysis: the study's figures")


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
    assert options("warm-start") == {"--model-json", "--data", "--out", "--threads"}
    assert options("gradient-tests") == {"--run-json", "--model", "--data", "--out"}  # what rules/gradients.smk passes
    assert options("train") == {"--run-json", "--config", "--arm", "--seed", "--model", "--data", "--budget", "--out",
                                "--failed-log", "--tracking", "--label"}
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["figures", "--config", "x.yaml", "--results", "r", "--budget", "b"])


def test_train_by_hand_is_the_run_the_workflow_would_train(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(SMALL_STUDY))
    args = cli.parser().parse_args(["train", "--config", "study.yaml", "--arm", "mc_k2", "--seed", "2"])
    run, files, names = cli._training_run(args)
    assert run == study_config.run_config(cli._study("study.yaml"), "mc_k2", 2) and names == ("mini", "mc_k2")
    cfg = cli._study("study.yaml")
    assert files == {"model": str(layout.model_path(cfg)), "data": str(layout.data_dir(cfg)),
                     "budget": str(layout.budget_path(cfg)), "out": str(layout.run_dir(cfg, "mc_k2", 2))}
    assert files["out"].startswith("results/_shared/runs/") and files["budget"].startswith("results/_shared/calibrations/")
    elsewhere = cli.parser().parse_args(["train", "--config", "study.yaml", "--arm", "mc_k2", "--seed", "2",
                                         "--out", "elsewhere"])
    assert cli._training_run(elsewhere)[1]["out"] == "elsewhere"
    assert cli._names("default/mc_k4") == ("default", "mc_k4") and cli._names(None) == ("run", "run")
    with pytest.raises(ConfigError, match="--label 'mc_k4': expected STUDY/ARM"):
        cli._names("mc_k4")


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
