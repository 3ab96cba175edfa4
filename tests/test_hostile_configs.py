"""Hostile configs: nothing a study file can say deletes data, runs a hybrid, or fails after training.

Every case is a study file a careless or hostile user could write. All of them are dry-run together
(`mcgrpo.dryrun`) in a working directory that already holds a finished-looking study folder: each must stop
before any job with a message naming the key (or the file and line), and the folder must survive them all.
The command-line cases (data files, options) must end in a message and exit status 2, never a traceback.
Before issue 15, 49 of these 73 study files were accepted silently (model.name '..' then deletes the study
folder), 5 ended in a traceback and 19 were refused.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, SMALL_STUDY, SNAKEMAKE_ENV, checkout_copy, edited_study
from mcgrpo import cli, studies
from mcgrpo.core import config as study_config, layout, templating
from mcgrpo.core.errors import ConfigError, UserExit
from mcgrpo.dryrun import dry_run


@dataclass(frozen=True)
class Case:
    """A study file (a config to dump, or raw YAML text or bytes) and what its message must name.

    `snakemake_loads`: Snakemake's own loader refuses the file before the Snakefile runs (it is missing, not
    UTF-8, not YAML or not a mapping), so no job runs but the message is Snakemake's; the project's reader
    (`mcgrpo.studies.load`, behind every `--config` option) must then name the file and line."""
    names: tuple[str, ...]
    config: dict | None = None
    text: str | bytes | None = None
    snakemake_loads: bool = False


def edit(names: str | tuple[str, ...], **changes) -> Case:
    """SMALL_STUDY with `key__sub=value` changes (the value None deletes nothing; use a lambda for that)."""
    return Case((names,) if isinstance(names, str) else names, config=edited_study(**changes))


def raw(names: str | tuple[str, ...], text: str | bytes | None, snakemake_loads: bool = False) -> Case:
    return Case((names,) if isinstance(names, str) else names, text=text, snakemake_loads=snakemake_loads)


SMALL_YAML = yaml.safe_dump(SMALL_STUDY, sort_keys=False)
ARMS = SMALL_STUDY["arms"]
INF, NAN = float("inf"), float("nan")

CASES: dict[str, dict[str, Case]] = {
    "name": {
        "study '..'": edit(("config key study", "'..'"), study=".."),
        "study '.'": edit("config key study", study="."),
        "study hidden": edit("config key study", study=".hidden"),
        "study slash": edit("config key study", study="a/b"),
        "study absolute": edit("config key study", study="/tmp"),
        "study space": edit("config key study", study="my study"),
        "study semicolon": edit("config key study", study="x;touch pwned"),
        "study newline": edit(("config key study", "'ok\\n'"), study="ok\n"),
        "study empty": edit("config key study", study=""),
        "study too long": edit("config key study", study="s" * 65),
        "model '..'": edit("config key model.name", model__name=".."),
        "model up": edit("config key model.name", model__name="../../x"),
        "model newline": edit("config key model.name", model__name="tiny\n"),
        "model subst": edit("config key model.name", model__name="$(touch pwned)"),
        "arm newline": edit("config key arms", arms={"outcome\n": {}, **ARMS}),
        "arm regex": edit("config key arms", arms={"a|b": {}, **ARMS}),
        "arm dot": edit("config key arms", arms={"a.b": {}, **ARMS}),
        "arm number": edit(("config key arms", "5 is not of type 'string'"), arms={5: {}, **ARMS}),
        "study number": edit(("config key study", "not of type 'string'"), study=5),
        "eval set up": edit("config key task.eval_sets", task__eval_sets={"../x": {"size": 6}}),
        "eval set space": edit("config key task.eval_sets", task__eval_sets={"held out": {"size": 6}}),
        "plan id newline": edit("config key plan.primary[0].id",
                                plan={"primary": [{"id": "T1\n", "a": "mc_k2", "b": "outcome"}]}),
    },
    "results_dir": {
        "empty": edit("config key results_dir", results_dir=""),
        "root": edit("config key results_dir", results_dir="/"),
        "dot": edit("config key results_dir", results_dir="."),
        "parent": edit("config key results_dir", results_dir=".."),
        "outside": edit("config key results_dir", results_dir="../elsewhere"),
        "climbs back": edit("config key results_dir", results_dir="results/../.."),
        "hidden": edit("config key results_dir", results_dir=".cache"),
        "home": edit("config key results_dir", results_dir="~/results"),
        "space": edit("config key results_dir", results_dir="my results"),
        "command": edit("config key results_dir", results_dir="results;touch pwned"),
        "newline": edit("config key results_dir", results_dir="results\n"),
        "code folder": edit(("config key results_dir", "workflow"), results_dir="workflow"),
        "trailing slash": edit("config key results_dir", results_dir="results/"),
    },
    "tracking": {  # the key becomes a word of the train rule's command
        "command": edit(("config key tracking", "is not one of"), tracking="wandb; touch pwned"),
        "folder": edit("config key tracking", tracking="../logs"),
        "yes": edit(("config key tracking", "not of type 'string'"), tracking=True),
        "clock gpu": edit(("config key analysis.clock", "'gpu' is not one of ['wall', 'cpu']"), analysis__clock="gpu"),
    },
    "yaml": {
        "seeds twice": raw(("study.yaml:3", "'seeds'", "line 1"),
                           "seeds: [1, 2]\nstudy: dup\nseeds: [3]\narms: {outcome: {}}\n"),
        "outcome block twice": raw(("study.yaml:6", "'outcome'", "line 4"),
                                   "study: dup\nseeds: [1]\narms:\n  outcome: {}\n  mc: {credit: {monte_carlo: {k: 2}}}\n"
                                   "  outcome: {credit: {monte_carlo: {k: 4}}}\n"),
        "credit twice in an arm": raw(("study.yaml:6", "'credit'", "line 5"),
                                      "study: dup\nseeds: [1]\narms:\n  mc:\n    credit: {outcome: {}}\n"
                                      "    credit: {monte_carlo: {k: 2}}\n"),
        "nested key twice": raw(("study.yaml:6", "'lr'", "line 5"),
                                "study: dup\nseeds: [1]\narms: {outcome: {}}\nrecipe:\n  lr: 1.0e-4\n  lr: 1.0\n"),
        "flow mapping twice": raw(("study.yaml:4", "'k'"),
                                  "study: dup\nseeds: [1]\narms:\n  mc: {credit: {monte_carlo: {k: 2, k: 8}}}\n"),
        "eval set twice": raw(("study.yaml:7", "'heldout'", "line 6"),
                              "study: dup\nseeds: [1]\narms: {outcome: {}}\ntask:\n  eval_sets:\n"
                              "    heldout: {size: 6}\n    heldout: {size: 60}\n"),
        "not UTF-8": raw(("study.yaml:2", "0xe9", "column 6", "UTF-8"),
                         b"study: dup\n# caf\xe9\nseeds: [1]\narms: {outcome: {}}\n", True),
        "not YAML": raw(("study.yaml", "not valid YAML", "line 2"), "study: dup\n  seeds: [1\n", True),
        "not a mapping": raw(("must be a mapping",), "- study\n- seeds\n", True),
        "file missing": raw(("nowhere.yaml", "config file not found"), None, True),
    },
    "number": {
        "lr inf": edit(("config key recipe.lr", "finite"), recipe__lr=INF),
        "temperature nan": edit(("config key recipe.temperature", "finite"), recipe__temperature=NAN),
        "grad_clip nan": edit(("config key recipe.grad_clip", "finite"), recipe__grad_clip=NAN),
        "margin nan": edit(("config key analysis.margin", "finite"), analysis__margin=NAN),
        "drift_gap nan": edit(("config key analysis.drift_gap", "finite"), analysis__drift_gap=NAN),
        "warm-start lr -inf": edit("config key model.warm_start.lr", model__warm_start__lr=-INF),
        "adam beta nan": edit("config key recipe.adam_betas[0]", recipe__adam_betas=[NAN, 0.999]),
        "efficiency inf": edit("config key analysis.efficiency.mc_k2", analysis__efficiency={"mc_k2": INF}),
        "prompt_value nan": edit("config key arms.mc_k2.credit.monte_carlo.prompt_value",
                                 arms__mc_k2__credit={"monte_carlo": {"k": 2, "prompt_value": NAN}}),
        "tokens_per_second inf": edit("config key resources.train.tokens_per_second",
                                      resources={"train": {"tokens_per_second": INF}}),
        "group_size 8.0": edit(("config key recipe.group_size", "an integer"), recipe__group_size=8.0),
        "seed 1.0": edit("config key seeds[0]", seeds=[1.0, 2]),
        "group_size true": edit("config key recipe.group_size", recipe__group_size=True),
        "tokens float": edit("config key budget.tokens", budget__tokens=1.0e18),
        "tokens 1e18": edit(("config key budget.tokens", "maximum"), budget__tokens=10 ** 18),
        "tokens of 400 digits": edit(("config key budget.tokens", "maximum"), budget__tokens=10 ** 400),
        "runtime a year": edit(("config key resources.train.runtime", "maximum"),
                               resources={"train": {"runtime": 525600}}),
        "runtime shorter than the signal's lead": edit(
            ("config key resources.train.runtime: 2 minutes is too short", "signalled 120 s before",
             "allowed: at least 3 minutes"), resources={"train": {"runtime": 2}}),
        "max_runtime shorter than the signal's lead": edit(
            ("config key resources.train.max_runtime: 3 minutes", "allowed: at least 4 minutes"),
            resources={"train": {"max_runtime": 3, "checkpoint_seconds": 61}}),
        "horizon 1e6": edit("config key budget.horizon", budget__horizon=1.0e6),
        "calibration seed negative": edit("config key budget.calibration_seed", budget__calibration_seed=-1),
        # Issue 30: every number with a sane range has an upper bound (the schema documents it).
        "temperature 1000": edit(("config key recipe.temperature", "maximum of 10"), recipe__temperature=1000.0),
        "lr 5": edit(("config key recipe.lr", "maximum of 1"), recipe__lr=5.0),
        "group_size 100000": edit(("config key recipe.group_size", "maximum"), recipe__group_size=100000),
        "mem_mb a petabyte": edit(("config key resources.train.mem_mb", "maximum"),
                                  resources={"train": {"mem_mb": 10 ** 9}}),
        "resamples 1e8": edit(("config key analysis.resamples", "maximum"), analysis__resamples=10 ** 8),
        "round_to 1e20": edit(("config key budget.round_to", "maximum"), budget__round_to=10 ** 20),
        "round_to 1e20 float": edit(("config key budget.round_to", "an integer"), budget__round_to=1e20),
        "margin 1": edit(("config key analysis.margin", "maximum"), analysis__margin=1.0),
        "seed 2^40": edit(("config key seeds[1]", "maximum"), seeds=[1, 2 ** 40]),
        "k 100000": edit(("config key arms.mc_k2.credit.monte_carlo.k", "maximum"),
                         arms__mc_k2__credit={"monte_carlo": {"k": 100000}}),
    },
    "before training": {
        "plan metric verifier": edit(("config key plan.primary[0].metric", "acc_lenient"),
                                     plan={"primary": [{"id": "T1", "a": "mc_k2", "b": "outcome",
                                                        "metric": "acc_lenient"}]}),
        "analysis metric verifier": edit("config key analysis.metrics[0]", analysis__metrics=["pass@2_lenient"]),
        "plan pass@k over samples": edit(("config key plan.secondary[0].metric", "pass@4_default", "samples"),
                                         plan={"secondary": [{"id": "S1", "a": "mc_k2", "b": "outcome",
                                                              "metric": "pass@4_default"}]}),
        "analysis pass@k over samples": edit("config key analysis.metrics[1]",
                                             analysis__metrics=["acc_default", "pass@8_strict"]),
        "amendment month 13": edit(("config key plan.amendments[0].date", "2025-13-45"),
                                   plan={"amendments": [{"date": "2025-13-45", "note": "x"}]}),
        "amendment 30 February": edit("config key plan.amendments[0].date",
                                      plan={"amendments": [{"date": "2025-02-30", "note": "x"}]}),
        "amendment date a number": edit("config key plan.amendments[0].date",
                                        plan={"amendments": [{"date": 20250101, "note": "x"}]}),
        "pool below one iteration": edit(("config key task.pool.size", "recipe.prompts_per_iteration"),
                                         task__pool__size=8, recipe__prompts_per_iteration=16),
        "filter candidates above the pool": edit(("config key arms.f.selection.critic_filter.candidates", "pool"),
                                                 task__pool__size=8,
                                                 arms={**ARMS, "f": {"selection": {"critic_filter": {
                                                     "candidates": 24, "keep": 1}}}}),
        # Issue 30: found before any job, by name, with what is allowed.
        "pool beyond its levels": edit(("config key task.pool.size", "level 1 has 149", "more levels"),
                                       task__pool={"size": 5000, "levels": [1]}),
        "eval set beyond its levels": edit(("config key task.eval_sets.heldout.size", "level 1 has 13"),
                                           task__eval_sets={"heldout": {"size": 5000, "levels": [1]}}),
        "eval sets beyond their levels together": edit(("config key task.eval_sets.b.size", "need 20"),
                                                       task__eval_sets={"a": {"size": 10, "levels": [1]},
                                                                        "b": {"size": 10, "levels": [1]}}),
        "pass_k beyond samples": edit(("config key analysis.pass_k[1]", "needs 64 samples", "k <= 2"),
                                      analysis__pass_k=[2, 64]),
        "pair twice": edit(("config key analysis.pairs", "non-unique"),
                           analysis__pairs=[["mc_k2", "outcome"], ["mc_k2", "outcome"]]),
        "pair reversed": edit(("config key analysis.pairs[1]", "reversed"),
                              analysis__pairs=[["mc_k2", "outcome"], ["outcome", "mc_k2"]]),
        "amendment id twice": edit("config key plan.amendments[0].ids",
                                   plan={"primary": [{"id": "T1", "a": "mc_k2", "b": "outcome"}],
                                         "amendments": [{"date": "2025-01-01", "note": "x", "ids": ["T1", "T1"]}]}),
        "shuffled nothing": edit(("config key arms.sh.credit.shuffled", "changes nothing", "under another name"),
                                 arms={**ARMS, "sh": {"credit": {"shuffled": {}}}}),
        "shuffled length": edit(("config key arms.sh.credit.shuffled", "length credit is constant"),
                                arms={**ARMS, "sh": {"credit": {"shuffled": {"length": {}}}}}),
        "length lambda 0": edit(("config key arms.l0.credit.length", "outcome-only"),
                                arms={**ARMS, "l0": {"credit": {"length": {"lambda": 0}}}}),
        "penalty of nothing": edit(("config key arms.p0.credit.path_penalty", "every advantage is 0"),
                                   arms={**ARMS, "p0": {"credit": {"path_penalty": {"lambda": 0, "beta": 0,
                                                                                   "outcome": False}}}}),
        "outcome twice": edit(("trains exactly what", "arms.again", "arms.outcome"),
                              arms={**ARMS, "again": {"description": "the base again", "credit": {}}}),
        "positions below the completion": edit(("config key model.tiny.max_positions", "at least 36"),
                                               model__tiny__max_positions=32),
    },
    "results_dir in use": {
        "a file": edit(("config key results_dir", "is a file"), results_dir="results/README.md"),
        "the store": edit(("config key results_dir", "run store"), results_dir="results/_shared"),
        "inside the store": edit(("config key results_dir", "run store"), results_dir="results/_shared/runs"),
        "another study": edit(("config key results_dir", "study folder 'results/mini'", "prereg.lock.json"),
                              results_dir="results/mini"),
        "inside another study": edit(("config key results_dir", "study folder 'results/mini'"),
                                     results_dir="results/mini/runs"),
    },
    "trl": {  # an arm TRL trains: what TRL cannot do the protocol's way, refused by key (mcgrpo.core.trl_config)
        "mcgrpo's credit": edit(("config key arms.t.credit", "monte_carlo", "TRL does not run"),
                                arms={**ARMS, "t": {"trainer": {"trl": {}}, "credit": {"monte_carlo": {"k": 2}}}}),
        "a selector": edit(("config key arms.t.selection", "leave it out"),
                           arms={**ARMS, "t": {"trainer": {"trl": {}}, "selection": {"critic_filter": {
                               "candidates": 4, "keep": 2}}}}),
        "clipped reuse": edit("config key arms.t.update", arms={**ARMS, "t": {"trainer": {"trl": {}}, "update": {}}}),
        "decaying lr": edit(("config key arms.t.lr.schedule", "linear_decay"),
                            arms={**ARMS, "t": {"trainer": {"trl": {}}, "lr": {"schedule": "linear_decay"}}}),
        "entropy and KL": edit(("config key evaluation.entropy_kl", "'t'"), evaluation__entropy_kl=True,
                               arms={**ARMS, "t": {"trainer": {"trl": {}}}}),
        "no such script": edit(("config key arms.t.trainer.trl.script", "nowhere.py", "file not found"),
                               arms={**ARMS, "t": {"trainer": {"trl": {"script": "nowhere.py"}}}}),
        "another trainer": edit(("config key arms.t.trainer", "verl"),
                                arms={**ARMS, "t": {"trainer": {"verl": {}}}}),
    },
}
FLAT = {f"{kind}: {name}": case for kind, cases in CASES.items() for name, case in cases.items()}


def _write(case: Case, path: Path) -> Path:
    if case.config is not None:
        path.write_text(yaml.safe_dump(case.config))
    elif isinstance(case.text, bytes):
        path.write_bytes(case.text)
    elif case.text is not None:
        path.write_text(case.text)
    else:
        return path.with_name("nowhere.yaml")
    return path


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` but Snakemake's own folder, with its sha256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".snakemake" not in p.parts}


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory):
    """(every case's dry-run, the valid study's, the working directory's files before and after)."""
    files = tmp_path_factory.mktemp("configs")
    work = tmp_path_factory.mktemp("work")
    small = studies.validate(copy.deepcopy(SMALL_STUDY))
    stored = layout.run_dir(small, "outcome", 1) / "evals.parquet"
    for name in (stored, layout.model_path(small) / "config.json", "results/mini/prereg.lock.json",
                 "results/README.md"):
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(f"weeks of GPU time: {name}\n")
    before = _tree(work)
    paths = {key: _write(case, files / f"{i:03d}" / "study.yaml")
             for i, (key, case) in enumerate(FLAT.items()) if (files / f"{i:03d}").mkdir() is None}
    valid = files / "valid.yaml"
    valid.write_text(SMALL_YAML)
    results = dry_run([valid, *paths.values()], workdir=work)
    return {key: (results[path], path) for key, path in paths.items()}, results[valid], before, _tree(work)


def test_there_are_at_least_sixty_distinct_cases():
    assert len(FLAT) >= 60 and len({json.dumps(c.config, default=str) if c.config else c.text
                                    for c in FLAT.values()}) == len(FLAT)


def test_the_valid_study_plans_its_jobs(dry_runs):
    """The harness can see jobs: the unedited study dry-runs to every train job (so 'no job' below means it)."""
    valid = dry_runs[1]
    assert valid.error is None and valid.runs == sorted((a, s) for a in ARMS for s in SMALL_STUDY["seeds"])


@pytest.mark.parametrize("key", FLAT)
def test_a_hostile_config_stops_before_any_job_naming_the_key(dry_runs, key, capsys):
    result, path = dry_runs[0][key]
    assert result.runs == [] and result.error is not None, f"{key}: accepted"
    message = result.error
    if FLAT[key].snakemake_loads:  # the project's reader: `python -m mcgrpo check --config <file>`
        status, message = _cli(["check", "--config", str(path)], capsys)
        assert status == 2 and "Traceback" not in message
    else:
        assert result.error.startswith("ConfigError: ")
    for name in FLAT[key].names:
        assert name in message, f"{key}: {message}"


def test_the_study_folder_survives_every_case(dry_runs):
    *_, before, after = dry_runs
    assert after == before  # nothing deleted, changed or added (a '..' name once deleted the study folder)


# Command-line cases: each was a traceback; each must be one message naming the file, line or option.
MATH_UNCLOSED = ('{"problem": "1+1?", "solution": "so \\\\boxed{2", "level": "Level 1", "type": "Algebra"}\n'
                 '{"problem": "2+2?", "solution": "\\\\boxed{4}", "level": "Level 1", "type": "Algebra"}\n'
                 '{"problem": "3+3?", "solution": "\\\\boxed{6}", "level": "Level 1", "type": "Algebra"}\n')


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    """(exit status, what the verb printed on stdout and stderr)."""
    status = cli.main(argv)
    printed = capsys.readouterr()
    return status, printed.out + printed.err


def test_a_math_solution_without_a_closed_box_is_dropped_not_a_traceback(tmp_path, capsys):
    (tmp_path / "math.jsonl").write_text(MATH_UNCLOSED)
    task = {"name": "math", "seed": 1, "prompt": "{question}", "pool": {"path": str(tmp_path / "math.jsonl")},
            "eval_sets": {"heldout": {"size": 1}}}
    status, err = _cli(["prepare-data", "--task-json", json.dumps(task), "--out", str(tmp_path / "data")], capsys)
    assert status == 0 and (tmp_path / "data" / "pool.parquet").exists(), err
    status, printed = _cli(["data", str(tmp_path / "math.jsonl")], capsys)
    assert status == 0 and "dropped: no_answer 1" in printed, printed


@pytest.mark.parametrize("name, content, names", [
    ("empty.jsonl", b"", ("empty.jsonl", "no records")),
    ("latin1.jsonl", b'{"question": "2+2", "answer": "#### 4"}\n{"question": "caf\xe9", "answer": "#### 3"}\n',
     ("latin1.jsonl:2", "0xe9", "column 18", "UTF-8")),
    ("bad.jsonl", b'{"question": "2+2", "answer": "#### 4"}\n{"question": \n', ("bad.jsonl:2", "not valid JSON")),
])
def test_a_bad_data_file_is_a_message_naming_file_and_line(tmp_path, capsys, name, content, names):
    (tmp_path / name).write_bytes(content)
    status, err = _cli(["data", str(tmp_path / name)], capsys)
    assert status == 2 and "Traceback" not in err
    for word in names:
        assert word in err, err


@pytest.mark.parametrize("argv, names", [
    (["train", "--run-json", "{}", "--out", "OUT"], ("--run-json", "missing key(s) task")),
    (["train", "--run-json", "{not json", "--out", "OUT"], ("--run-json", "not valid JSON")),
    (["calibrate", "--run-json", "[1]", "--out", "OUT"], ("--run-json", "expected a JSON object")),
    (["prepare-data", "--task-json", '{"name": "arith"}', "--out", "OUT"], ("--task-json", "missing key(s) seed")),
    (["drift", "--config", "nowhere.yaml", "--results", "OUT"], ("nowhere.yaml", "config file not found")),
])
def test_a_bad_option_value_is_a_message_and_exit_2(tmp_path, capsys, argv, names):
    argv = [str(tmp_path / a) if a in ("OUT", "nowhere.yaml") else a for a in argv]
    status, err = _cli(argv, capsys)
    assert status == 2 and "Traceback" not in err
    for word in names:
        assert word in err, err
    assert not (tmp_path / "OUT").exists()


def test_an_unwritable_output_folder_is_a_message_not_a_retried_traceback(tmp_path):
    """A folder that cannot be written (read-only, or a file in its place; root ignores read-only bits, so the
    file stands in for it) is a user error naming the folder: exit 2, which the train rule never retries."""
    from mcgrpo.core import store
    from mcgrpo.core.errors import DataError
    (tmp_path / "checkpoints").write_text("a file where the folder should be")
    with pytest.raises(DataError, match=r"checkpoints: cannot write ckpt-00000001.pt here"):
        store.write_text("x", tmp_path / "checkpoints" / "ckpt-00000001.pt")
    if os.geteuid() != 0:
        (tmp_path / "ro").mkdir(mode=0o555)
        with pytest.raises(DataError, match=r"ro: cannot write"):
            store.write_text("x", tmp_path / "ro" / "file.json")


# Issue 30. No code from a config: Snakemake renders a file with `__use_yte__: true` (YTE) while it reads the
# config, before the Snakefile, so the refusal must come first (profiles/default installs it; the Snakefile
# refuses again where that profile was skipped).
def _template(marker: Path) -> str:
    return (f"__use_yte__: true\nstudy: '?\"default\" if __import__(\"os\").system(\"touch {marker}\")==0 else \"x\"'\n"
            "seeds: [1]\narms: {outcome: {}}\n")


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """`snakemake -n` as a user runs it: from the repository root, its workflow profile found there."""
    cmd = [sys.executable, "-m", "snakemake", "-n", "-d", str(workdir), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_templated_config_runs_no_code_under_a_dry_run(tmp_path):
    marker = tmp_path / "PWNED"
    (tmp_path / "study.yaml").write_text(_template(marker))
    done = _snakemake(tmp_path / "work", "--configfile", str(tmp_path / "study.yaml"))
    assert not marker.exists()
    assert done.returncode == 2 and "Traceback" not in done.stderr and 'File "' not in done.stderr, done.stderr
    assert "study.yaml: config key __use_yte__" in done.stderr and "--config allow_templates=true" in done.stderr


@pytest.mark.slow
def test_a_template_renders_when_the_command_line_opts_in_and_config_values_are_yaml(tmp_path):
    """The opt-in is the command line's; `--config` values typed there mean what they say (seeds=[1,2] two
    integers, a block with an integer inside), while a name that looks like a number stays a name."""
    (tmp_path / "study.yaml").write_text("__use_yte__: true\nstudy: '?\"tmpl\" + str(1 + 1)'\nseeds: [1]\n"
                                         "arms: {outcome: {}, mc: {credit: {monte_carlo: {k: 2}}}}\n")
    done = _snakemake(tmp_path / "work", "--configfile", str(tmp_path / "study.yaml"), "--config",
                      "allow_templates=true", "seeds=[1,2]", 'model={"warm_start": {"steps": 200}}')
    assert done.returncode == 0, done.stderr[-3000:]
    assert "results/tmpl2/prereg.lock.json" in done.stdout
    assert re.search(r"^train\s+4$", done.stdout, re.M), done.stdout[-3000:]  # 2 arms x seeds 1 and 2
    named = _snakemake(tmp_path / "work", "--config", "study=1e3")
    assert named.returncode == 0 and "results/1e3/prereg.lock.json" in named.stdout, named.stderr[-3000:]


@pytest.mark.slow
def test_a_user_error_in_the_snakefile_is_its_message_alone_and_exit_2(tmp_path):
    (tmp_path / "study.yaml").write_text(SMALL_YAML.replace("group_size: 4", "group_size: 4.5"))
    done = _snakemake(tmp_path / "work", "--configfile", str(tmp_path / "study.yaml"), "--workflow-profile", "none")
    assert done.returncode == 2 and 'File "' not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert re.search(r"study.yaml:\d+: config key recipe.group_size: 4.5 is not allowed; allowed: an integer",
                     done.stderr), done.stderr


def test_the_snakefile_refuses_a_template_where_the_profile_was_skipped(tmp_path):
    """`--workflow-profile none` skips the guard: Snakemake has rendered the file by then, but no job runs."""
    (tmp_path / "study.yaml").write_text("__use_yte__: false\n" + SMALL_YAML)
    with pytest.raises(ConfigError, match=r"study.yaml: config key __use_yte__: .* --config allow_templates=true"):
        studies.from_snakemake(copy.deepcopy(SMALL_STUDY), [tmp_path / "study.yaml"], [])
    cfg = studies.from_snakemake(copy.deepcopy(SMALL_STUDY), [tmp_path / "study.yaml"], ["allow_templates=true"])
    assert cfg["allow_templates"] is True


def test_the_guard_refuses_before_yte_renders(tmp_path):
    """Snakemake's own loader, wrapped as the profile wraps it: the template's code never runs."""
    from snakemake.common import configfile
    marker = tmp_path / "PWNED"
    (tmp_path / "study.yaml").write_text(_template(marker))
    original = configfile._load_configfile
    try:
        templating.install(["-n", "--configfile", "study.yaml"])
        with pytest.raises(UserExit) as stopped:
            configfile.load_configfile(str(tmp_path / "study.yaml"))
        assert stopped.value.code == 2 and "config key __use_yte__" in str(stopped.value.error)
        assert not marker.exists()
        templating.install(["--config", "allow_templates=true"])  # opted in: rendered, as Snakemake would
        assert configfile.load_configfile(str(tmp_path / "study.yaml"))["study"] == "default" and marker.exists()
    finally:
        configfile._load_configfile = original


@pytest.mark.parametrize("argv, allowed", [
    (["--config", "allow_templates=true"], True),
    (["-C", "seeds=[1]", "allow_templates=True"], True),
    (["--config=allow_templates=1"], True),
    (["--config", "allow_templates=false"], False),
    (["--config", "seeds=[1]", "-n", "allow_templates=true"], False),  # a target named so, not a config value
    (["allow_templates=true"], False),
    ([], False),
])
def test_only_a_config_value_on_the_command_line_opts_in(argv, allowed):
    assert templating.opted_in(argv) is allowed


# Valid inputs accepted: YAML merge keys and anchors (sharing a block between arms).
MERGED = """study: merged
seeds: [1, 2]
task: {seed: 7, pool: {size: 64, levels: [1, 2]}, eval_sets: {heldout: {size: 6, levels: [1, 2]}}}
model:
  tiny: {hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64, max_positions: 96}
  warm_start: {steps: 30, batch_size: 8, problems: 200}
recipe: {prompts_per_iteration: 2, group_size: 4, completion_limit: 24, microbatch_size: 3}
budget: {tokens: 600}
evaluation: {samples: 2, per_budget: 4}
arms:
  outcome: {}
  mc_k2: &mc
    description: Monte-Carlo credit
    credit: {monte_carlo: {k: 2, prompt_value: 0.5}}
  mc_k2_strict:
    <<: *mc
    recipe: {reward_verifier: strict}
analysis: {base: outcome}
"""


def test_merge_keys_and_anchors_are_read_as_yaml_means_them(tmp_path):
    (tmp_path / "study.yaml").write_text(MERGED)
    cfg = studies.load(tmp_path / "study.yaml")
    assert cfg["arms"]["mc_k2_strict"]["credit"] == cfg["arms"]["mc_k2"]["credit"]
    assert cfg["arms"]["mc_k2_strict"]["credit"]["monte_carlo"]["prompt_value"] == 0.5
    assert cfg["arms"]["mc_k2_strict"]["recipe"] == {"reward_verifier": "strict"}
    (tmp_path / "twice.yaml").write_text(MERGED.replace("    <<: *mc\n", "    <<: *mc\n    recipe: {}\n"))
    with pytest.raises(ConfigError, match=r"twice.yaml:18: key 'recipe' is given twice \(first at line 17\)"):
        study_config.read(tmp_path / "twice.yaml")


@pytest.mark.parametrize("entries, expected", [
    (["seeds=[1,2]"], {"seeds": [1, 2]}),
    (['model={"warm_start": {"steps": 200}}'], {"model": {"warm_start": {"steps": 200}}}),
    (["study=1e3", "results_dir=2024"], {"study": "1e3", "results_dir": "2024"}),  # names stay names
    (["recipe={lr: 1e-3, reward_verifier: strict}"], {"recipe": {"lr": 0.001, "reward_verifier": "strict"}}),
    (["analysis={pairs: [[mc_k2, outcome]], margin: .05}"], {"analysis": {"pairs": [["mc_k2", "outcome"]],
                                                                         "margin": 0.05}}),
    (["containers={train: null}", "analysis_only=True", "allow_templates=true"],
     {"containers": {"train": None}, "analysis_only": True, "allow_templates": True}),
    (["arms={o: {}, m: {credit: {monte_carlo: {k: 2}}}}"], {"arms": {"o": {}, "m": {"credit": {"monte_carlo": {"k": 2}}}}}),
    (["study='1'"], {"study": "1"}),  # what the API passes (Snakemake's repr of a string)
])
def test_config_values_on_the_command_line_are_yaml_typed_by_the_schema(entries, expected):
    assert study_config.command_line(entries) == expected


def test_command_line_values_merge_into_the_study_as_snakemake_merges_them():
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["model"]["warm_start"]["steps"] = "200"  # what Snakemake made of the block: a string leaf
    cfg["seeds"] = ["3", "4"]
    studies.from_snakemake(cfg, [], ['model={"warm_start": {"steps": 200}}', "seeds=[3,4]"])
    assert cfg["model"]["warm_start"]["steps"] == 200 and cfg["model"]["warm_start"]["problems"] == 200
    assert cfg["seeds"] == [3, 4]


# Numbers the schema leaves unbounded above, on purpose: the chat template's keyword arguments are the tokenizer's.
UNBOUNDED = {".model.chat_template[additionalProperties]"}


def _numbers(node, path=""):
    """(path, schema) of every integer or number in the study schema."""
    if not isinstance(node, dict):
        return
    kinds = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    if {"integer", "number"} & set(kinds):
        yield path, node
    for key in ("properties", "$defs"):
        for name, sub in node.get(key, {}).items():
            yield from _numbers(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        yield from _numbers(node.get(key), f"{path}[{key}]")


def test_every_number_in_the_schema_has_an_upper_bound():
    numbers = dict(_numbers(study_config.schema()))
    assert len(numbers) > 100
    unbounded = {p for p, n in numbers.items() if "maximum" not in n and "exclusiveMaximum" not in n}
    assert unbounded == UNBOUNDED


def test_the_arith_supply_table_counts_level_1_exactly():
    """SUPPLY's level 1 (and the rule that no set may take more): every question enumerated again."""
    from itertools import product
    from mcgrpo.data import arith
    shape, sides = arith._SHAPES[1], [0, 0]
    for ops, spans, xs in product(shape.opsets, shape.spansets, product(range(1, shape.high + 1), repeat=shape.terms)):
        question = arith._render(list(xs), ops, spans)
        solution, steps = arith.solve(question)
        if len(solution) <= arith.MAX_SOLUTION_CHARS and abs(int(steps[-1])) <= arith.MAX_ANSWER:
            sides[arith.is_eval_eligible(question)] += 1
    assert tuple(sides) + (sum(sides),) == arith.SUPPLY[1] == (149, 13, 162)
    pool, evals = arith.build(7, arith.supply(1, False), [1], {"a": {"size": arith.supply(1, True), "levels": [1]}})
    assert len(pool) == 149 and len(evals["a"]) == 13  # the whole supply, drawn
    ok = studies.validate(edited_study(task__pool={"size": 149, "levels": [1]},
                                       task__eval_sets={"heldout": {"size": 13, "levels": [1]}}))
    assert ok["task"]["pool"]["size"] == 149


def test_pass_k_defaults_to_what_the_samples_allow():
    assert studies.validate(copy.deepcopy(SMALL_STUDY))["analysis"]["pass_k"] == [2]  # 2 samples
    assert studies.validate(edited_study(evaluation__samples=8))["analysis"]["pass_k"] == [2, 4, 8]
    assert studies.validate(edited_study(evaluation__samples=8, analysis__pass_k=[8]))["analysis"]["pass_k"] == [8]


def test_a_snakefile_error_names_the_file_and_line_of_its_key(tmp_path):
    (tmp_path / "base.yaml").write_text("study: loc\nseeds: [1, 2]\nrecipe:\n  lr: 0.5\narms: {outcome: {}}\n")
    (tmp_path / "over.yaml").write_text("recipe:\n  group_size: 4.5\n  lr: 5\n")
    paths = [tmp_path / "base.yaml", tmp_path / "over.yaml"]
    cfg = {**study_config.read(paths[0]), "recipe": {"group_size": 4.5, "lr": 5}}
    with pytest.raises(ConfigError) as refused:
        studies.from_snakemake(cfg, paths, [])
    assert str(refused.value).split("\n") == [
        f"{paths[1]}:2: config key recipe.group_size: 4.5 is not allowed; allowed: an integer (written without a "
        f"decimal point)",
        f"{paths[1]}:3: config key recipe.lr: 5 is greater than the maximum of 1"]  # the file that overrides


def test_a_python_that_imports_another_checkouts_mcgrpo_stops_the_workflow(tmp_path):
    """One venv, two checkouts: the profile imports the package the venv was installed from, and every job runs it
    (`$PYTHON -m mcgrpo`), so a run of the other checkout's Snakefile computed its study with this code, silently.
    A copy of the same code runs; an edited one stops before any job, naming both; its own PYTHONPATH runs."""
    checkout = checkout_copy(tmp_path / "checkout")

    def dry_run(pythonpath: Path) -> subprocess.CompletedProcess:  # from the checkout, as its user runs it
        return subprocess.run([sys.executable, "-m", "snakemake", "-n", "-d", str(tmp_path / "work")], cwd=checkout,
                              env={**SNAKEMAKE_ENV, "PYTHONPATH": str(pythonpath)}, capture_output=True, text=True,
                              timeout=600)

    assert dry_run(ROOT / "workflow").returncode == 0  # the same code installed elsewhere
    api = checkout / "workflow" / "mcgrpo" / "api.py"
    api.write_text(api.read_text() + "# edited in this checkout only\n")
    done = dry_run(ROOT / "workflow")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert (f"Error: {ROOT / 'workflow' / 'mcgrpo'}: the mcgrpo this Python ({sys.executable}) imports is not this "
            f"workflow's ({checkout / 'workflow' / 'mcgrpo'}): its code differs" in done.stderr), done.stderr[-3000:]
    assert f"PYTHONPATH={checkout / 'workflow'}" in done.stderr
    assert dry_run(checkout / "workflow").returncode == 0


def test_stopping_ends_a_user_error_with_its_message_and_lets_a_bug_through(capsys):
    from mcgrpo.core.errors import DataError, stopping
    with pytest.raises(UserExit) as stopped, stopping():
        raise DataError("results/x.parquet: file not found")
    assert stopped.value.code == 2 and isinstance(stopped.value.error, DataError)
    assert capsys.readouterr().err == "Error: results/x.parquet: file not found\n"
    with pytest.raises(KeyError), stopping():  # a bug: its own exception, traceback and all
        raise KeyError("task")
    assert capsys.readouterr().err == ""
