"""Programmes (mcgrpo.programme, docs/programmes.md): several studies in one DAG, each stored run trained once; and
two Snakemake processes on one run store (mcgrpo.core.run_claims)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT, SMALL_STUDY, SNAKEMAKE_ENV, assert_contrasts_as_alone, snakemake, snakemake_command
from mcgrpo import programme
from mcgrpo.core import layout
from mcgrpo.core.errors import ConfigError

TINY_PAIR = ROOT / "config" / "programmes" / "tiny-pair.yaml"


def write(path: Path, doc) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def small(name: str, **changes) -> dict:
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg.update(study=name, **changes)
    return cfg


def pair(tmp_path, studies=("a", "b"), **block) -> Path:
    """A programme file in tmp_path over small studies named `studies` (files <name>.yaml beside it)."""
    paths = [write(tmp_path / f"{name}.yaml", small(name)).name for name in studies]
    return write(tmp_path / "programme.yaml", {"programme": {"name": "pair", "studies": paths, **block}})


def test_a_programme_reads_each_study_as_a_configfile_does_with_its_overrides(tmp_path):
    loaded = programme.load(pair(tmp_path, overrides={"results_dir": "elsewhere"}))
    assert list(loaded.studies) == ["a", "b"] and loaded.folder == Path("elsewhere/_programmes/pair")
    assert all(cfg["results_dir"] == "elsewhere" and cfg["seeds"] == [1, 2] for cfg in loaded.studies.values())
    keys = [set(layout.run_keys(cfg).values()) for cfg in loaded.studies.values()]
    assert keys[0] == keys[1], "two studies of the same arms train the same stored runs"


@pytest.mark.parametrize("case, message", [
    ("missing", r"programme\.studies\[1\]: nowhere\.yaml: study file not found"),
    ("duplicate", r"programme\.studies\[1\]: b\.yaml names study 'a', as .*a\.yaml does: both would write results "
                  r"folder results/a"),
    ("same_folder", r"programme\.studies\[1\]: b\.yaml names study 'a', as .*a\.yaml does: both would write results "
                    r"folder /.*/results/a"),
    ("two_spellings", r"config key results_dir: .*b\.yaml has '/.*/results', .*a\.yaml has 'results' \(one folder, "
                      r"spelled two ways\)"),
    ("two_stores", r"config key results_dir: .*b\.yaml has 'other'.*allowed: one results_dir \(one run store\)"),
    ("unknown_key", r"config key programme\.study: unknown; allowed: name, studies, overrides"),
    ("bad_study", r"b\.yaml:\nconfig key seeds"),
    ("not_a_list", r"config key programme\.studies: 'a\.yaml'; allowed: a list of study files"),
])
def test_a_bad_programme_is_one_message_naming_the_file_and_key(tmp_path, case, message):
    path = pair(tmp_path)
    doc = yaml.safe_load(path.read_text())
    block = doc["programme"]
    if case == "missing":
        block["studies"][1] = "nowhere.yaml"
    elif case == "duplicate":
        write(tmp_path / "b.yaml", small("a"))
    elif case in ("same_folder", "two_spellings"):  # results, and the same folder by its absolute path
        write(tmp_path / "b.yaml", small("a" if case == "same_folder" else "b", results_dir=os.path.abspath("results")))
    elif case == "two_stores":
        write(tmp_path / "b.yaml", small("b", results_dir="other"))
    elif case == "unknown_key":
        block["study"] = "x"
    elif case == "bad_study":
        write(tmp_path / "b.yaml", small("b", seeds="many"))
    elif case == "not_a_list":
        block["studies"] = "a.yaml"
    write(path, doc)
    with pytest.raises(ConfigError, match=message):
        programme.load(path)


def test_snakemake_refuses_a_bad_programme_before_any_job(tmp_path):
    path = pair(tmp_path, studies=("a", "a"))
    out = snakemake(tmp_path, "-n", configfile=path.name)
    assert out.returncode == 2, out.stderr
    assert re.search(r"programme\.yaml: config key programme\.studies\[1\]: a\.yaml names study 'a'", out.stderr)
    assert "rule " not in out.stdout + out.stderr and "Job stats" not in out.stdout


def test_a_programme_never_replaces_another_programmes_summary_of_the_same_name(tmp_path):
    """Two programme files of one name write one summary folder: the second's run replaced the first's verdicts
    without a word. The summary's job records which programme wrote it; another of the same name is refused before
    any job, naming both, and the programme that wrote it (its file edited, a study added) runs again."""
    store = {"results_dir": str(tmp_path / "results")}
    first = programme.load(pair(tmp_path / "one", overrides=store))
    other = pair(tmp_path / "two", studies=("c", "d"), overrides=store)
    programme.check_owner(first)  # no summary yet: nothing to hold to
    first.folder.mkdir(parents=True)
    (first.folder / programme.OWNER).write_text(json.dumps({"name": "pair", "owner": programme.owner(first)}))
    programme.check_owner(programme.load(pair(tmp_path / "one", studies=("a", "b", "e"), overrides=store)))
    with pytest.raises(ConfigError, match=r"two/programme.yaml: config key programme.name: 'pair': .*/_programmes/"
                                          r"pair holds the summary of another programme of that name \('.*one/"
                                          r"programme.yaml'.*allowed: another programme.name"):
        programme.check_owner(programme.load(other))
    out = snakemake(tmp_path / "two", "-n", configfile=str(other))
    assert out.returncode == 2 and "holds the summary of another programme of that name" in out.stderr
    assert "rule " not in out.stdout + out.stderr


def job_counts(output: str) -> dict[str, int]:
    table = output.split("Job stats:")[1].split("\n\n")[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_the_tiny_pair_trains_its_shared_runs_once_and_targets_both_studies(tmp_path):
    shutil.copytree(ROOT / "config" / "programmes", tmp_path / "programmes")
    for given in (["--configfile", str(tmp_path / "programmes" / "tiny-pair.yaml")],
                  ["--config", f"programme={tmp_path / 'programmes' / 'tiny-pair.yaml'}"]):
        out = subprocess.run(snakemake_command(tmp_path, "-n", *given, configfile=None), cwd=ROOT,
                             env=SNAKEMAKE_ENV, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        counts = job_counts(out.stdout)
        assert counts["train"] == 6, "8 runs study by study, 2 of them shared"
        assert counts["warm_start"] == counts["prepare_data"] == counts["calibrate"] == 1
        assert counts["summary"] == counts["prereg_lock"] == counts["link_study"] == 2
        assert counts["programme_summary"] == 1


def test_a_rule_keyed_by_a_wildcard_is_still_a_target_by_its_name(tmp_path):
    """`snakemake prereg_lock` locks every study of the programme (the rule is keyed by {study})."""
    shutil.copytree(ROOT / "config" / "programmes", tmp_path / "programmes")
    out = snakemake(tmp_path, "-n", "prereg_lock", configfile="programmes/tiny-pair.yaml")
    assert out.returncode == 0, out.stderr
    assert job_counts(out.stdout) == {"prereg_lock": 2, "total": 2}


@pytest.mark.slow
def test_a_programme_trains_each_shared_run_once_with_the_contrasts_of_its_studies_run_alone(tmp_path):
    programmes = tmp_path / "programme" / "programmes"
    shutil.copytree(ROOT / "config" / "programmes", programmes)
    out = snakemake(tmp_path / "programme", "--cores", "2", configfile="programmes/tiny-pair.yaml", timeout=1800)
    assert out.returncode == 0, out.stderr[-5000:]
    assert len(re.findall(r"^(?:local)?rule train:", out.stderr, re.M)) == 6
    for name in ("tiny-mc", "tiny-lr"):
        assert (tmp_path / "programme" / "results" / name / "summary.md").is_file()
        assert (tmp_path / "programme" / "results" / name / "prereg.lock.json").is_file()
    assert len(list((tmp_path / "programme" / "results" / "_shared" / "runs").iterdir())) == 6
    verdicts = pd.read_parquet(tmp_path / "programme" / "results" / "_programmes" / "tiny-pair" / "verdicts.parquet")
    assert sorted(verdicts["study"]) == ["tiny-lr", "tiny-mc"] and set(verdicts["id"]) == {"T1"}
    assert "| tiny-mc | T1 |" in (tmp_path / "programme" / "results" / "_programmes" / "tiny-pair"
                                 / "verdicts.md").read_text()
    for name in ("mc", "lr"):  # each study alone, in a folder of its own: its own store
        alone = tmp_path / name
        alone.mkdir()
        shutil.copy(programmes / "tiny-pair" / f"{name}.yaml", alone / "study.yaml")
        out = snakemake(alone, "--cores", "2", timeout=1800)
        assert out.returncode == 0, out.stderr[-5000:]
        assert_contrasts_as_alone(tmp_path / "programme", alone, f"tiny-{name}")


def test_a_verdict_at_equal_time_names_its_studys_clock_in_the_programme_summary(tmp_path):
    """A study's summary says which clock its equal time was read on; the programme's verdicts put two studies' equal
    time side by side without it, one perhaps on wall time and the other on CPU time. Now each says its clock."""
    heads = {}
    for study in ("walled", "cpu"):
        heads[study] = tmp_path / f"{study}.csv"
        pd.DataFrame({"id": ["T1", "S1"], "basis": ["equal tokens", "equal time (T*)"], "verdict": "confirmed"}).to_csv(
            heads[study], index=False)
    table = programme.verdicts(heads, {"walled": "wall", "cpu": "cpu"})
    assert table["basis"].tolist() == ["equal tokens", "equal time (T*) on wall time", "equal tokens",
                                       "equal time (T*) on process CPU time"]


@pytest.mark.slow
def test_the_programme_summary_keeps_each_verdicts_warning(tmp_path):
    """A study's headline warns beside a verdict where its arms were read far apart in tokens, or its runs were
    stored with recipe differences accepted. Before, the programme's table took every column but that one, so the
    verdicts it prints at the end of a programme read as plain confirmations; now the warning is its last column."""
    warned = "arms read up to 30% of B apart in tokens (seed 2; more than 10% of B): not equal tokens there"
    headline = pd.DataFrame([{"id": "T1", "label": "primary", "contrast": "a minus b", "basis": "equal tokens",
                              "n": 2, "difference": "-4.0 [-8.0, -0.1]", "p": "0.04", "p_holm": "0.04",
                              "verdict": "confirmed", "robustness": "robust", "warning": warned}])
    headline.to_csv(tmp_path / "headline.csv", index=False)
    programme.write_summary("p", {"a": tmp_path / "headline.csv"}, tmp_path / "v.parquet", tmp_path / "v.md")
    assert pd.read_parquet(tmp_path / "v.parquet")["warning"].tolist() == [warned]
    assert warned in (tmp_path / "v.md").read_text()


def test_the_programme_markdown_shows_p_as_the_studys_tables_do(tmp_path):
    """verdicts.md printed each p as the CSV's raw float (0.04712345...); it now shows them as every study table."""
    headline = pd.DataFrame([{"id": "T1", "verdict": "confirmed", "p": 0.0471234567, "p_holm": 0.0002},
                             {"id": "S1", "verdict": "uninformative", "p": "", "p_holm": ""}])
    headline.to_csv(tmp_path / "headline.csv", index=False)
    programme.write_summary("p", {"a": tmp_path / "headline.csv"}, tmp_path / "v.parquet", tmp_path / "v.md")
    rows = (tmp_path / "v.md").read_text().splitlines()[-2:]
    cells = [[c.strip() for c in row.split("|")[1:-1]] for row in rows]
    p, holm = programme.COLUMNS.index("p"), programme.COLUMNS.index("p_holm")
    assert [(c[p], c[holm]) for c in cells] == [("0.047", "<0.001"), (programme.UNTESTED, "n/a")]
    assert pd.read_parquet(tmp_path / "v.parquet")["p"].tolist() == ["0.0471234567", programme.UNTESTED]  # raw kept


@pytest.mark.slow  # a small study trained end to end by two Snakemakes: about 100 s on 2 cores
def test_two_snakemake_processes_on_one_store_train_each_run_once(tmp_path):
    """Two working folders, one run store (an absolute results_dir): the second Snakemake starts while the first
    trains; each run is claimed once, the second waits for the runs the first holds instead of training them."""
    store = tmp_path / "shared"
    study = small("mini", results_dir=str(store / "results"))
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        write(folder / "study.yaml", study)
    one = subprocess.Popen(snakemake_command(first, "--cores", "1"), cwd=ROOT, env=SNAKEMAKE_ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs = store / "results" / "_shared" / "runs"
    deadline = time.monotonic() + 600
    while not any(p.stat().st_size for p in runs.glob("*/.claim")):  # the first trains its first run
        assert one.poll() is None and time.monotonic() < deadline, "the first Snakemake ended before training"
        time.sleep(0.5)
    two = subprocess.Popen(snakemake_command(second, "--cores", "1"), cwd=ROOT, env=SNAKEMAKE_ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outputs = [p.communicate(timeout=1800)[0] for p in (one, two)]
    assert one.returncode == 0 and two.returncode == 0, "\n".join(o[-4000:] for o in outputs)
    logs = {run.name: (run / "train.log").read_text() for run in runs.iterdir() if run.is_dir()}
    assert len(logs) == 4
    for name, log in logs.items():
        assert log.count(f"{name} claimed by") == 1, f"{name} trained more than once:\n{log}"
    assert any("not trained again" in log for log in logs.values()), "the second never met a claimed run"
    assert not any("taking over" in log for log in logs.values())
    for name in ("summary.md", "prereg.lock.json"):
        assert (store / "results" / "mini" / name).is_file()


@pytest.mark.slow
def test_the_paper_programme_schedules_each_distinct_stored_run_once(tmp_path):
    """The paper's studies in one dry-run with the slurm profile: a train job per distinct stored run, fewer than
    study by study (docs/performance.md records the count and the time)."""
    loaded = programme.load(ROOT / "config" / "programmes" / "paper.yaml")
    assert sorted(p.resolve() for p in loaded.files.values()) == sorted((ROOT / "config" / "studies" / "paper").glob("*.yaml"))
    distinct = {key for cfg in loaded.studies.values() for key in layout.run_keys(cfg).values()}
    by_study = sum(len(set(layout.run_keys(cfg).values())) for cfg in loaded.studies.values())
    out = subprocess.run(snakemake_command(tmp_path, "-n", "--profile", "slurm", "--configfile",
                                           str(ROOT / "config" / "programmes" / "paper.yaml"), configfile=None),
                         cwd=ROOT, env=SNAKEMAKE_ENV, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-5000:]
    counts = job_counts(out.stdout)
    assert counts["train"] == len(distinct) < by_study
    assert counts["summary"] == len(loaded.studies) and counts["programme_summary"] == 1
