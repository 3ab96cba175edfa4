"""One miniature study end to end through Snakemake, checking every Parquet contract it writes."""

from __future__ import annotations

import os
import copy
import json
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone

import pandas as pd
import pytest
import yaml

from conftest import ROOT, SMALL_STUDY, SNAKEMAKE_ENV, snakemake as run_snakemake
from mcgrpo import studies
from mcgrpo.core import config as study_config, layout
from mcgrpo.analysis import prereg
from mcgrpo.core.store import parquet_metadata, read_contract, write_json

pytestmark = pytest.mark.slow


def snakemake(workdir, *args, repo=ROOT) -> subprocess.CompletedProcess:
    """`repo`: the checkout whose Snakefile runs, with its own package (another's stops the workflow)."""
    return run_snakemake(workdir, "--cores", "2", *args, snakefile=repo / "Snakefile",
                         env={**SNAKEMAKE_ENV, "PYTHONPATH": str(repo / "workflow")})


PLAN = {"primary": [{"id": "T1", "a": "mc_k2", "b": "outcome", "direction": "less"}],
        "secondary": [{"id": "S1", "a": "mc_k2", "b": "outcome", "basis": "time"}]}


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("study")
    study = {**SMALL_STUDY, "budget": {"tokens": None, "multiplier": 3, "round_to": 100}, "plan": PLAN}
    (workdir / "study.yaml").write_text(yaml.safe_dump(study))
    done = snakemake(workdir)
    assert done.returncode == 0, done.stderr[-4000:]
    return workdir / "results" / "mini"


@pytest.mark.slow
def test_an_update_that_rewords_a_rule_retrains_nothing_and_relocks_nothing(finished_study, tmp_path):
    """Snakemake's code trigger compares a rule's shell text and a script's file time: an update of mcgrpo that
    rewords the train rule's command deleted every finished run and trained it again, and a newer prereg_lock.py
    re-locked the study. The workflow's profile leaves the trigger out; nothing a job computes changed."""
    from conftest import checkout_copy
    updated = checkout_copy(tmp_path / "updated")
    train = updated / "rules" / "train.smk"
    train.write_text(train.read_text().replace("export MCGRPO_CONSOLE_FD=3; ", "export MCGRPO_CONSOLE_FD=3;  "))
    (updated / "workflow" / "scripts" / "prereg_lock.py").touch()
    workdir = finished_study.parents[1]
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-d", str(workdir), "--configfile",
                           str(workdir / "study.yaml")], cwd=updated, capture_output=True, text=True, timeout=600,
                          env={**SNAKEMAKE_ENV, "PYTHONPATH": str(updated / "workflow")})
    assert done.returncode == 0 and "Nothing to be done" in done.stdout + done.stderr, done.stderr[-3000:]


def test_every_stage_writes_its_contract(finished_study):
    r = finished_study
    data = r.parents[1] / layout.data_dir(studies.validate(copy.deepcopy(SMALL_STUDY)))
    for path in (data / "pool.parquet", data / "eval_heldout.parquet"):
        assert len(read_contract(path, "problems")) > 0
    budget = read_contract(r / "calibration/budget.parquet", "budget")
    assert budget["iteration"].tolist() == [0, 1, 2] and budget["B"].nunique() == 1
    B = int(budget["B"].iloc[0])
    assert B % 100 == 0 and B >= 3 * budget["tokens_generated"].mean()
    for arm in ("outcome", "mc_k2"):
        for seed in (1, 2):
            run = r / "runs" / arm / f"seed{seed}"
            frames = {k: read_contract(run / f"{k}.parquet", k) for k in ("iterations", "evals", "samples", "prompts")}
            assert frames["iterations"]["tokens_total"].iloc[-1] >= B > frames["iterations"]["tokens_total"].iloc[-2]
            assert frames["evals"]["tokens_total"].iloc[0] == 0 and frames["evals"]["tokens_total"].iloc[-1] >= B
            assert len(frames["samples"]) == len(frames["evals"]) * 6 * 2
            meta = parquet_metadata(run / "evals.parquet")
            assert meta["schema_version"] == "1" and len(meta["config_hash"]) == 64 and "mcgrpo_version" in meta
            info = json.loads((run / "run.json").read_text())
            assert info["finished"] and info["B"] == B
            assert info["config"] == study_config.run_config(studies.load(r.parents[1] / "study.yaml"), arm, seed)
    for kind in ("drift", "contrasts", "paired"):
        assert len(read_contract(r / "analysis" / f"{kind}.parquet", kind)) > 0
    contrasts = read_contract(r / "analysis/contrasts.parquet", "contrasts")
    assert set(contrasts["basis"]) == {"tokens", "updates", "time"}
    assert set(contrasts["contrast"]) == {"mc_k2-vs-outcome"} and (contrasts["n"] == 2).all()
    for name in ("figures/accuracy_vs_tokens.png", "figures/accuracy_vs_time.png",
                 "tables/contrasts.md", "tables/contrasts.csv", "tables/drift.md", "tables/verifiers.md"):
        assert (r / name).stat().st_size > 0
    samples = read_contract(r / "runs" / "outcome" / "seed1" / "samples.parquet", "samples")
    assert (samples["correct_whole_box"] == samples["correct_default"]).all()  # the default study's rule
    verifiers = pd.read_csv(r / "tables" / "verifiers.csv")
    assert set(verifiers["arm"]) == {"outcome", "mc_k2"} and (verifiers["n"] == 2 * 6 * 2).all()


def test_arms_of_a_seed_share_their_first_evaluation(finished_study):
    runs = finished_study / "runs"
    a = read_contract(runs / "outcome/seed1/samples.parquet", "samples")
    b = read_contract(runs / "mc_k2/seed1/samples.parquet", "samples")
    assert a[a.eval_index == 0].reset_index(drop=True).equals(b[b.eval_index == 0].reset_index(drop=True))


def test_a_finished_study_has_nothing_left_to_do(finished_study):
    workdir = finished_study.parent.parent
    dry = snakemake(workdir, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr


def test_a_reworded_description_reordered_seeds_or_tracking_retrains_nothing(finished_study, tmp_path):
    """None changes what a run trains (nor B: calibration runs on the smallest seed, not the first); switching
    tracking on changes nothing any job computes, so nothing at all reruns."""
    work = tmp_path / "work"
    shutil.copytree(finished_study.parent.parent, work, symlinks=True)
    study = yaml.safe_load((work / "study.yaml").read_text())
    study["seeds"] = study["seeds"][::-1]
    study["arms"]["mc_k2"]["description"] = "reworded after training"
    (work / "study.yaml").write_text(yaml.safe_dump(study))
    dry = snakemake(work, "-n")
    assert dry.returncode == 0, dry.stderr[-4000:]
    assert not jobs(dry) & {"prepare_data", "warm_start", "calibrate", "prereg_lock", "train"}, jobs(dry)
    (work / "study.yaml").write_text(yaml.safe_dump({**yaml.safe_load((finished_study.parent.parent / "study.yaml")
                                                                      .read_text()), "tracking": "tensorboard"}))
    dry = snakemake(work, "-n")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, jobs(dry)


def test_a_run_file_changed_after_its_manifest_reruns_the_analysis_which_names_it(finished_study, tmp_path):
    """Issue 30's corruption cases through Snakemake: a bit flipped in samples.parquet (size and mtime kept) reruns
    the analysis, which fails naming the file; restoring it with `cp -p` (an mtime older than the analysis) reruns
    it again, and it succeeds; seed 1's files copied into seed 2's folder fail as another run's."""
    work = tmp_path / "work"
    shutil.copytree(finished_study.parent.parent, work, symlinks=True)
    r = work / "results" / "mini"
    for arm in ("outcome", "mc_k2"):
        for seed in (1, 2):
            sealed = json.loads((r / "runs" / arm / f"seed{seed}" / "manifest.json").read_text())
            assert set(sealed["files"]) == {f"{k}.parquet" for k in ("iterations", "evals", "samples", "prompts",
                                                                     "alignment")} | {"run.json"}
    dry = snakemake(work, "-n")  # a copied store: its files hashed, found intact
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, jobs(dry)
    samples = (r / "runs/mc_k2/seed2/samples.parquet").resolve()
    shutil.copy2(samples, tmp_path / "original.parquet")
    stat, data = samples.stat(), bytearray(samples.read_bytes())
    data[len(data) // 2] ^= 0x04
    samples.write_bytes(bytes(data))
    os.utime(samples, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    dry = snakemake(work, "-n")
    # the analysis steps that read samples.parquet rerun (which of them Snakemake lists varies with its metadata)
    assert dry.returncode == 0 and {"contrasts", "curves", "verifiers"} & jobs(dry) and "train" not in jobs(dry), \
        jobs(dry)
    failed = snakemake(work)
    assert failed.returncode != 0
    logs = "".join(p.read_text() for p in (r / "logs").glob("*.log"))
    assert f"{samples.name}: sha256 differs from manifest.json" in logs and "changed after the run finished" in logs
    shutil.copy2(tmp_path / "original.parquet", samples)  # cp -p
    done = snakemake(work)
    # what reran with the changed file reruns with it restored; a step the failed run never reached keeps its outputs
    assert done.returncode == 0 and {"contrasts", "curves", "verifiers"} & jobs(done), done.stderr[-4000:]
    for name in ("evals.parquet", "samples.parquet"):
        shutil.copy2(r / "runs/mc_k2/seed1" / name, r / "runs/mc_k2/seed2" / name)
    failed = snakemake(work)
    assert failed.returncode != 0
    assert "config_hash differs: the file belongs to another run" in "".join(
        p.read_text() for p in (r / "logs").glob("*.log"))



def test_a_lock_put_back_under_the_old_ones_mtime_relabels_the_contrasts(finished_study, tmp_path):
    """A lock of another plan (here: another margin) put in place with the old lock's mtime (cp -p, touch -r) was
    missed by Snakemake's mtime trigger: the summary went on saying the plan matches its lock. The lock's sha256 is
    a param of the contrasts rule (sealed_lock), so they rerun against it and the summary says what changed."""
    work = tmp_path / "work"
    shutil.copytree(finished_study.parent.parent, work, symlinks=True)
    r = work / "results" / "mini"
    study = studies.validate(yaml.safe_load((work / "study.yaml").read_text()))
    lock, stat = r / "prereg.lock.json", (r / "prereg.lock.json").stat()
    other = {**study, "analysis": {**study["analysis"], "margin": 0.05}}
    write_json(prereg.make_lock(other, datetime(2020, 1, 1, tzinfo=timezone.utc)), lock)  # before any training
    os.utime(lock, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    dry = snakemake(work, "-n")
    assert dry.returncode == 0 and "contrasts" in jobs(dry) and "train" not in jobs(dry), jobs(dry)
    done = snakemake(work)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "without a dated amendment: T1, S1 reported as exploratory. Changes: margin changed" in \
        (r / "summary.md").read_text()


def test_an_older_table_put_back_under_its_old_mtime_reruns_the_summary_which_refuses_it(finished_study, tmp_path):
    """A headline of another verdict put back with the old one's mtime (cp -p) was missed by Snakemake: nothing
    reran, and the table said another verdict than the summary. The tables' sha256 is a param of the summary rule,
    which reruns and refuses the table, naming its cell."""
    work = tmp_path / "work"
    shutil.copytree(finished_study.parent.parent, work, symlinks=True)
    head = work / "results" / "mini" / "tables" / "headline.csv"
    stat, table = head.stat(), pd.read_csv(head, dtype=str, keep_default_na=False)
    table.at[0, "verdict"] = "edited"
    table.to_csv(head, index=False)
    os.utime(head, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    failed = snakemake(work, "analysis")
    said = failed.stdout + failed.stderr
    assert failed.returncode != 0 and "train" not in jobs(failed), said[-4000:]
    assert "tables/headline.csv: line 2 (T1), column verdict: 'edited', but the study's analysis gives" in said


def test_a_readable_copy_put_back_under_its_old_mtime_reruns_the_summary_which_refuses_it(finished_study, tmp_path):
    """The summary rule's checksum param covered the tables' CSVs alone: an edited tables/headline.html (what the
    report embeds) put back with the old one's mtime reran nothing, and the report showed a verdict the summary does
    not give. Every copy's sha256 is now a param of the summary rule, which reruns and refuses it, naming its line."""
    work = tmp_path / "work"
    shutil.copytree(finished_study.parent.parent, work, symlinks=True)
    page = work / "results" / "mini" / "tables" / "headline.html"
    stat, text = page.stat(), page.read_text()
    lines = text.split("\n")
    at = next(i for i, line in enumerate(lines) if "<td>T1</td>" in line)
    page.write_text("\n".join([*lines[:at], lines[at].replace("T1", "T9"), *lines[at + 1:]]))
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    failed = snakemake(work, "analysis")
    said = failed.stdout + failed.stderr
    assert failed.returncode != 0 and "train" not in jobs(failed), said[-4000:]
    assert f"tables/headline.html: line {at + 1}: '      <td>T9</td>', but the study's analysis gives" in said

@pytest.mark.parametrize("name, said", [
    ("tables/verifiers.html", r"tables/verifiers.html: line \d+: '.*', but the study's analysis gives '.*'.*--forcerun "
                              r"verifiers; "),
    ("figures/drift.png", r"figures/drift.png: its pixels are not the ones drawn \(edited after it was drawn\); allowed: "
                          r"the figure its analysis draws now \(snakemake --configfile STUDY --forcerun figures; ")])
def test_a_shown_file_of_another_step_put_back_under_its_old_mtime_reruns_the_summary_which_refuses_it(
        finished_study, tmp_path, name, said):
    """The summary rule held the tables step's files alone: a verifiers.html (which the report embeds) or a figure
    edited and put back with the old one's mtime reran nothing, and the report showed it. Every shown file is now an
    input of the summary rule and its sha256 a param (shown.files), so the summary reruns and refuses it."""
    from conftest import painted_over
    work = tmp_path / "work"
    shutil.copytree(finished_study.parent.parent, work, symlinks=True)
    path = work / "results" / "mini" / name
    stat = path.stat()
    if path.suffix == ".png":
        painted_over(path)
    else:
        path.write_text(path.read_text().replace("<td>", "<td>9", 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    failed = snakemake(work, "analysis")
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0 and "train" not in jobs(failed), out[-4000:]
    assert re.search(said, out), out[-4000:]


@pytest.mark.slow
def test_a_report_of_a_study_whose_shown_files_are_not_its_analysis_is_not_written(finished_study, tmp_path):
    """`snakemake --report` runs no job: a table edited after the last run was embedded as it stood. The report now
    holds every study's summary, and with it every shown file, before it writes anything."""
    work = tmp_path / "work"
    shutil.copytree(finished_study.parent.parent, work, symlinks=True)
    table = work / "results" / "mini" / "tables" / "headline.html"
    table.write_text(table.read_text().replace("<td>", "<td>9", 1))
    report = snakemake(work, "--report", str(tmp_path / "report.html"))
    assert report.returncode == 2 and not (tmp_path / "report.html").exists(), report.stderr[-3000:]
    assert re.search(r"Error: results/mini/tables/headline.html: line \d+: .*, but the study's analysis gives .*"
                     r"--forcerun tables", report.stderr), report.stderr[-3000:]


def test_a_bad_config_fails_before_any_job_naming_the_key(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**SMALL_STUDY, "recipe": {"group_sise": 4}}))
    done = snakemake(tmp_path, "-n")
    assert done.returncode != 0
    assert "config key recipe: unknown key(s) 'group_sise'" in done.stdout + done.stderr
    assert not (tmp_path / "results").exists()


def job_counts(done: subprocess.CompletedProcess) -> dict[str, int]:
    """The rules Snakemake scheduled and their jobs, from its job table."""
    text = done.stdout + done.stderr
    table = text.split("Job stats:", 1)[1].split("total", 1)[0] if "Job stats:" in text else ""
    return {line.split()[0]: int(line.split()[1]) for line in table.splitlines()[3:] if line.strip()}


def jobs(done: subprocess.CompletedProcess) -> set[str]:
    return set(job_counts(done))


def test_another_study_naming_the_same_runs_trains_none_of_them_and_reads_them_through_its_links(
        finished_study, tmp_path):
    """The run store: a study with other names for the first one's arms (and another description and plan)
    trains only its own new arm, calibrates nothing, and its analysis reads the first study's runs; since they
    were trained before its lock, its planned contrasts are exploratory."""
    work = tmp_path / "work"
    shutil.copytree(finished_study.parent.parent, work, symlinks=True)
    first = yaml.safe_load((work / "study.yaml").read_text())
    second = {**first, "study": "again", "analysis": {"base": "base"},
              "arms": {"base": {"description": "outcome-only, named otherwise"}, "dense": first["arms"]["mc_k2"],
                       "k1": {"credit": {"monte_carlo": {"k": 1}}}},
              "plan": {"primary": [{"id": "T1", "a": "dense", "b": "base", "direction": "less"}]}}
    (work / "study.yaml").write_text(yaml.safe_dump(second))
    dry = snakemake(work, "-n")
    assert dry.returncode == 0, dry.stderr[-4000:]
    assert job_counts(dry)["train"] == 2 and not jobs(dry) & {"prepare_data", "warm_start", "calibrate"}
    del second["arms"]["k1"]
    (work / "study.yaml").write_text(yaml.safe_dump(second))
    done = snakemake(work)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "train" not in jobs(done) and {"link_study", "prereg_lock", "contrasts"} <= jobs(done)
    again, mini = work / "results" / "again", work / "results" / "mini"
    for a, b in (("base", "outcome"), ("dense", "mc_k2")):
        for seed in (1, 2):
            assert (again / "runs" / a / f"seed{seed}").resolve() == (mini / "runs" / b / f"seed{seed}").resolve()
    assert (again / "calibration").resolve() == (mini / "calibration").resolve()
    ours, theirs = (read_contract(r / "analysis/contrasts.parquet", "contrasts").query("basis == 'tokens'")
                    for r in (again, mini))
    assert ours.query("contrast == 'dense-vs-base'")["mean"].tolist() == theirs.query(
        "contrast == 'mc_k2-vs-outcome'")["mean"].tolist() != []
    assert set(ours["label"]) == {"exploratory"}
    assert "after training started" in (again / "tables" / "prereg.md").read_text()


def test_analysis_only_never_trains_rebuilds_the_analysis_and_reports(finished_study, tmp_path):
    """Change the trainer's code and a training parameter (and the plan): the normal target would
    retrain; `analysis --config analysis_only=True` reruns only the analysis, which reports the stale
    runs and the demoted contrast; the HTML report shows every figure; a run never trained fails."""
    from conftest import checkout_copy
    repo, work = checkout_copy(tmp_path / "repo"), tmp_path / "work"  # the workflow, without environments or results
    shutil.copytree(finished_study.parent.parent, work, symlinks=True)
    with open(repo / "workflow/mcgrpo/trainer.py", "a") as f:
        f.write("\n# a change to the trainer's code\n")
    study = yaml.safe_load((work / "study.yaml").read_text())
    study["recipe"]["lr"] = 3e-4
    study["plan"]["secondary"][0]["direction"] = "greater"  # no dated amendment
    (work / "study.yaml").write_text(yaml.safe_dump(study))
    r = work / "results" / "mini"
    runs = {p: p.stat().st_mtime_ns for p in (r / "runs").rglob("*") if p.is_file()}
    outputs = {p: p.stat().st_mtime_ns for d in ("analysis", "figures", "tables") for p in (r / d).iterdir()}

    assert "train" in jobs(snakemake(work, "-n", repo=repo))  # the normal target would retrain
    done = snakemake(work, "analysis", "--config", "analysis_only=True", repo=repo)
    assert done.returncode == 0, done.stderr[-4000:]
    assert jobs(done) == {"drift", "contrasts", "robustness", "verifiers", "curves", "breakdown", "figures", "tables", "summary",
                          "analysis"}
    assert {p: p.stat().st_mtime_ns for p in runs} == runs
    assert all(p.stat().st_mtime_ns > t for p, t in outputs.items())
    prereg_table = (r / "tables" / "prereg.md").read_text()
    # recipe.lr is part of the experiment the lock covers: every planned contrast is demoted, with the reason
    assert "without a dated amendment: T1, S1 reported as exploratory" in prereg_table
    assert "recipe.lr changed after the lock (" in prereg_table
    assert "Warning: runs trained with a config other than the current one: mc_k2/seed1" in prereg_table
    assert "(warning: runs trained with a config other than the current one: mc_k2/seed1" in \
        (r / "summary.md").read_text()  # beside each verdict comparing mc_k2, too
    labels = read_contract(r / "analysis/contrasts.parquet", "contrasts").set_index("id")["label"]
    assert labels["T1"] == "exploratory" and labels["S1"] == "exploratory"

    report = snakemake(work, "--report", str(tmp_path / "report.html"), "--config", "analysis_only=True", repo=repo)
    assert report.returncode == 0, report.stderr[-4000:]
    html = (tmp_path / "report.html").read_text()
    for name in ("accuracy_vs_tokens", "accuracy_vs_time", "difference_from_base", "per_seed", "stage_seconds",
                 "drift"):
        assert f"{name}.png" in html
    assert "prereg.html" in html and "contrasts.html" in html
    assert "Study mini: results" in html and "T1 (exploratory" in html  # the summary is the first page
    assert "T1 (exploratory" in done.stderr  # and the run printed it at its end

    study["seeds"].append(3)  # a seed never trained
    (work / "study.yaml").write_text(yaml.safe_dump(study))
    missing = snakemake(work, "analysis", "--config", "analysis_only=True", repo=repo)
    assert missing.returncode != 0 and "train" not in jobs(missing)
    assert "Missing input files" in missing.stdout + missing.stderr
    assert "runs/mc_k2/seed3/evals.parquet" in missing.stdout + missing.stderr
