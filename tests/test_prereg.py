import copy
import json
from datetime import datetime, timezone

import pytest

from mcgrpo.analysis import plan as analysis, prereg, tables
from mcgrpo.core import config as study_config
from mcgrpo import studies
from mcgrpo.cli import main
from mcgrpo.core.manifest import seal
from mcgrpo.core.store import write_json

LOCKED_AT = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
PLAN = {"hypotheses": ["dense rewards trail at equal tokens"],
        "primary": [{"id": "T1", "a": "mc_k2", "b": "outcome", "direction": "less"},
                    {"id": "T2", "a": "mc_k2", "b": "outcome", "basis": "time", "direction": "less"}],
        "secondary": [{"id": "S1", "a": "mc_k2", "b": "outcome", "metric": "acc_strict"}]}


@pytest.fixture
def planned(study):
    return studies.validate({**copy.deepcopy(study), "plan": copy.deepcopy(PLAN)})


def changed(cfg, edit):
    cfg = copy.deepcopy(cfg)
    edit(cfg)
    return studies.validate(cfg)


def reported(status):
    return {i: e["reported"] for i, e in status["labels"].items()}


def test_an_unchanged_plan_keeps_its_labels(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    assert lock["locked_at"] == "2025-03-01T12:00:00+00:00" and len(lock["sha256"]) == 64
    status = prereg.compare(planned, lock, "2025-03-02T00:00:00+00:00")
    assert status["state"] == "matches" and status["sha256_now"] == lock["sha256"] and not status["changes"]
    assert reported(status) == {"T1": "primary", "T2": "primary", "S1": "secondary"}
    labels = prereg.labels(planned, status)
    assert labels[("mc_k2-vs-outcome", "time", "acc_default", "heldout")] == {
        "id": "T2", "label": "primary", "family": "main", "direction": "less", "note": ""}
    assert labels[("mc_k2-vs-outcome", "tokens", "acc_strict", "heldout")]["family"] == "secondary"


def test_descriptions_and_seed_order_are_not_changes(planned):
    """Editing an arm's free text or reordering seeds changes no contrast: nothing is demoted (also against
    a lock written before descriptions were left out of the material); a changed arm still is a change."""
    planned["arms"]["mc_k2"]["description"] = "as locked"
    lock = prereg.make_lock(planned, LOCKED_AT)
    old_lock = {**lock, "material": {**lock["material"], "arms": copy.deepcopy(planned["arms"])}}
    now = changed(planned, lambda c: (c["arms"]["mc_k2"].update(description="reworded"),
                                      c.update(seeds=c["seeds"][::-1])))
    for locked in (lock, old_lock):
        status = prereg.compare(now, locked)
        assert status["state"] == "matches" and not status["demoted"] and not status["changes"]
    arm = changed(planned, lambda c: c["arms"]["mc_k2"]["credit"]["monte_carlo"].update(k=4))
    assert prereg.compare(arm, lock)["demoted"] == ["T1", "T2", "S1"]


def test_a_changed_contrast_without_amendment_is_demoted_and_said_so(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    now = changed(planned, lambda c: c["plan"]["primary"][1].update(direction="greater"))
    status = prereg.compare(now, lock)
    assert status["state"] == "changed" and status["demoted"] == ["T2"]
    assert reported(status) == {"T1": "primary", "T2": "exploratory", "S1": "secondary"}
    assert status["labels"]["T2"]["note"] == "demoted: changed after the lock without a dated amendment"
    assert "T2: changed after the lock" in status["changes"]


def test_a_dated_amendment_naming_the_contrast_keeps_its_label(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    amendment = {"date": "2025-03-05", "note": "predict a gain at equal time", "ids": ["T2"]}
    now = changed(planned, lambda c: (c["plan"]["primary"][1].update(direction="greater"),
                                      c["plan"]["amendments"].append(amendment)))
    status = prereg.compare(now, lock)
    assert status["state"] == "amended" and status["amended"] == ["T2"] and not status["demoted"]
    assert reported(status)["T2"] == "primary"
    assert status["labels"]["T2"]["note"] == "amended 2025-03-05: predict a gain at equal time"


def test_a_backdated_amendment_covers_nothing(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    amendment = {"date": "2025-02-01", "note": "backdated", "ids": ["T2"]}
    now = changed(planned, lambda c: (c["plan"]["primary"][1].update(direction="greater"),
                                      c["plan"]["amendments"].append(amendment)))
    assert prereg.compare(now, lock)["demoted"] == ["T2"]


def test_a_new_contrast_and_a_changed_margin(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    added = changed(planned, lambda c: c["plan"]["secondary"].append(
        {"id": "S2", "a": "mc_k2", "b": "outcome", "basis": "updates"}))
    status = prereg.compare(added, lock)
    assert status["demoted"] == ["S2"] and status["labels"]["S2"]["note"].startswith("demoted: added after the lock")
    margin = changed(planned, lambda c: c["analysis"].update(margin=0.01))
    status = prereg.compare(margin, lock)
    assert status["state"] == "changed" and sorted(status["demoted"]) == ["S1", "T1", "T2"]
    assert status["labels"]["T1"]["note"] == "demoted: margin changed without a dated amendment"
    covered = changed(margin, lambda c: c["plan"]["amendments"].append({"date": "2025-03-01", "note": "margin 1"}))
    assert prereg.compare(covered, lock)["state"] == "amended"  # an amendment without ids covers the whole plan


def test_hypotheses_changed_without_amendment_is_a_changed_plan_demoting_nothing(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    status = prereg.compare(changed(planned, lambda c: c["plan"]["hypotheses"].append("more")), lock)
    assert status["state"] == "changed" and not status["demoted"] and "hypotheses changed" in status["changes"]


@pytest.mark.parametrize("lock_time, state, why", [
    (None, "missing", "demoted: no preregistration lock (prereg.lock.json)"),
    (datetime(2025, 3, 3, tzinfo=timezone.utc), "late",
     "demoted: locked at 2025-03-03T00:00:00+00:00, after training started at 2025-03-02T00:00:00+00:00"),
])
def test_a_missing_or_late_lock_makes_every_contrast_exploratory(planned, lock_time, state, why):
    lock = prereg.make_lock(planned, lock_time) if lock_time else None
    status = prereg.compare(planned, lock, "2025-03-02T00:00:00+00:00")
    assert status["state"] == state and set(reported(status).values()) == {"exploratory"}
    assert status["labels"]["T1"]["note"] == why


def test_status_reads_the_lock_run_start_times_and_stale_runs(tmp_path, planned):
    write_json(prereg.make_lock(planned, LOCKED_AT), tmp_path / "prereg.lock.json")
    for arm, seed in study_config.runs(planned):
        write_json({"started": f"2025-03-0{seed + 1}T00:00:00+00:00",
                    "config": study_config.run_config(planned, arm, seed)},
                   tmp_path / "runs" / arm / f"seed{seed}" / "run.json")
        seal(tmp_path / "runs" / arm / f"seed{seed}", ["run.json"], "")
    status = prereg.status(tmp_path, planned)
    assert status["state"] == "matches" and status["first_run_started"] == "2025-03-02T00:00:00+00:00"
    assert status["stale_runs"] == []
    retrained = changed(planned, lambda c: c["arms"]["mc_k2"]["credit"]["monte_carlo"].update(k=3))
    assert prereg.status(tmp_path, retrained)["stale_runs"] == ["mc_k2/seed1", "mc_k2/seed2"]


def test_a_lock_after_an_ingested_run_was_trained_is_late(tmp_path, planned):
    """An ingested run's run.json starts when mcgrpo stored it; the TRL run trained before, by its earliest
    checkpoint's time (ingested.saved_by). A lock between the two kept every planned label (the runs could have been
    seen before the plan was written)."""
    write_json(prereg.make_lock(planned, LOCKED_AT), tmp_path / "prereg.lock.json")
    for arm, seed in study_config.runs(planned):
        record = {"started": "2025-03-02T00:00:00+00:00", "config": study_config.run_config(planned, arm, seed)}
        if arm == "mc_k2":
            record["ingested"] = {"saved_by": "2025-02-20T09:00:00+00:00"}
        write_json(record, tmp_path / "runs" / arm / f"seed{seed}" / "run.json")
        seal(tmp_path / "runs" / arm / f"seed{seed}", ["run.json"], "")
    status = prereg.status(tmp_path, planned)
    assert status["state"] == "late" and status["first_run_started"] == "2025-02-20T09:00:00+00:00"
    assert reported(status) == {"T1": "exploratory", "T2": "exploratory", "S1": "exploratory"}


def test_planned_keys_default_to_the_first_evaluation_set(planned):
    assert analysis.planned_keys(planned) == [("mc_k2", "outcome", "tokens", "acc_default", "heldout"),
                                              ("mc_k2", "outcome", "time", "acc_default", "heldout"),
                                              ("mc_k2", "outcome", "tokens", "acc_strict", "heldout")]
    assert set(analysis.planned_keys(planned)) <= set(analysis.keys(planned))


@pytest.mark.parametrize("edit, message", [
    (lambda p: p["primary"].append({"id": "T1", "a": "mc_k2", "b": "outcome"}),
     "config key plan.primary[2].id: 'T1' is used twice"),
    (lambda p: p["secondary"].append({"id": "S9", "a": "mc_k9", "b": "outcome"}),
     "config key plan.secondary[1].a: 'mc_k9' is not an arm; allowed: outcome, mc_k2"),
    (lambda p: p["secondary"].append({"id": "S9", "a": "outcome", "b": "outcome"}),
     "config key plan.secondary[1]: an arm cannot be contrasted with itself"),
    (lambda p: p["secondary"].append({"id": "S9", "a": "mc_k2", "b": "outcome", "eval_set": "ood"}),
     "config key plan.secondary[1].eval_set: 'ood' is not evaluated; allowed: heldout"),
    (lambda p: p.setdefault("amendments", []).append({"date": "2025-01-01", "note": "x", "ids": ["T7"]}),
     "config key plan.amendments[0].ids: 'T7' not in the plan; allowed: S1, T1, T2"),
    (lambda p: p.setdefault("amendments", []).append({"date": "1 March", "note": "x"}),
     "config key plan.amendments[0].date: '1 March' is not allowed; allowed: a real calendar date"),
    (lambda p: p["primary"][0].update(metric="accuracy"), "config key plan.primary[0].metric: 'accuracy' is not allowed; allowed: acc_<verifier>"),
    (lambda p: p["primary"][0].update(direction="up"), "config key plan.primary[0].direction: 'up' is not one of"),
])
def test_a_bad_plan_fails_validation_naming_the_key(study, edit, message):
    plan = copy.deepcopy(PLAN)
    edit(plan)
    with pytest.raises(study_config.ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        studies.validate({**copy.deepcopy(study), "plan": plan})


def test_prereg_lock_verb_writes_once_and_refuses_to_relock(tmp_path, planned, capsys):
    out = tmp_path / "prereg.lock.json"
    args = ["prereg-lock", "--config-json", json.dumps(planned), "--out", str(out)]
    assert main(args) == 0
    lock = json.loads(out.read_text())
    assert lock["material"] == json.loads(json.dumps(prereg.material(planned)))
    assert main(args) == 2
    assert "the study is locked already; a changed plan needs a dated plan.amendments entry" in capsys.readouterr().err


def test_a_locked_study_has_no_lock_job_so_nothing_snakemake_decides_rewrites_its_lock(tmp_path):
    """Snakemake deletes a job's outputs before it runs it, and protected() stops nothing for root: a prereg_lock.py
    newer than the lock (an update of mcgrpo), --forceall or --forcerun prereg_lock re-locked a finished study as
    root, its preregistration gone and every planned contrast demoted. A study's lock that exists has no job."""
    import yaml
    from conftest import SMALL_STUDY, snakemake
    from test_pipeline import jobs
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(SMALL_STUDY))
    assert "prereg_lock" in jobs(snakemake(tmp_path, "-n", timeout=300))  # not locked yet: locked first
    lock = tmp_path / "results" / "mini" / "prereg.lock.json"
    lock.parent.mkdir(parents=True)
    lock.write_text('{"the": "lock"}')
    for forced in (["--forceall"], ["--forcerun", "prereg_lock"]):
        done = snakemake(tmp_path, "-n", *forced, timeout=300)
        assert done.returncode == 0 and jobs(done) and "prereg_lock" not in jobs(done), (forced, done.stderr[-2000:])
    done = snakemake(tmp_path, "-n", "prereg_lock", timeout=300)
    assert done.returncode == 0 and not jobs(done), done.stderr[-2000:]
    assert "Nothing to be done: prereg_lock has no job in this workflow (every study is locked" in done.stderr
    assert lock.read_text() == '{"the": "lock"}'


def test_a_recipe_changed_after_the_lock_demotes_the_planned_contrasts_with_a_dated_reason(planned):
    """The lock covers the experiment, not only the plan's text (issue 30: recipe.lr changed and the runs retrained,
    and the summary still said the plan matched its lock)."""
    lock = prereg.make_lock(planned, LOCKED_AT)
    now = changed(planned, lambda c: c["recipe"].update(lr=c["recipe"]["lr"] * 2))
    status = prereg.compare(now, lock, "2025-03-02T00:00:00+00:00")
    assert status["state"] == "changed" and status["demoted"] == ["T1", "T2", "S1"]
    assert reported(status) == {"T1": "exploratory", "T2": "exploratory", "S1": "exploratory"}
    assert status["labels"]["T1"]["note"] == ("demoted: recipe.lr changed after the lock (2025-03-01) without a dated "
                                              "amendment")
    note = tables.prereg_note(status)
    assert "matches its lock" not in note and "T1, T2, S1 reported as exploratory" in note
    assert "recipe.lr changed after the lock (2025-03-01)" in note


@pytest.mark.parametrize("edit, path", [
    (lambda c: c["task"]["pool"].update(size=48), "task.pool.size"),
    (lambda c: c["model"]["tiny"].update(hidden_size=64), "model.tiny.hidden_size"),
    (lambda c: c["evaluation"].update(samples=4), "evaluation.samples"),
    (lambda c: c["analysis"].update(bases=["tokens"]), "bases"),
    # these moved a verdict or its interval with every planned label kept (the lock did not hold them)
    (lambda c: c.update(verifier={"rule": "paper"}), "verifier"),
    (lambda c: c["analysis"].update(alpha=0.1), "analysis.alpha"),
    (lambda c: c["analysis"].update(clock="cpu"), "analysis.clock"),
    (lambda c: c["analysis"].update(bootstrap_seed=7), "analysis.bootstrap_seed"),
    # the drift check's threshold (the paper's 10 points): raised after the results, a fragile verdict read robust
    (lambda c: c["analysis"].update(drift_gap=0.5), "analysis.drift_gap"),
])
def test_every_part_of_the_experiment_is_covered(planned, edit, path):
    status = prereg.compare(changed(planned, edit), prereg.make_lock(planned, LOCKED_AT))
    assert status["demoted"] == ["T1", "T2", "S1"] and f"{path} changed after the lock (2025-03-01)" in status["changes"]


def test_a_dated_amendment_naming_the_contrast_keeps_it_primary_after_a_recipe_change(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    amendment = {"date": "2025-03-05", "note": "recipe.lr doubled: the first runs diverged", "ids": ["T1"]}
    now = changed(planned, lambda c: (c["recipe"].update(lr=c["recipe"]["lr"] * 2),
                                      c["plan"]["amendments"].append(amendment)))
    status = prereg.compare(now, lock)
    assert reported(status) == {"T1": "primary", "T2": "exploratory", "S1": "exploratory"}
    assert status["labels"]["T1"]["note"] == "amended 2025-03-05: recipe.lr doubled: the first runs diverged"


def test_edits_that_change_nothing_trained_demote_nothing(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    now = changed(planned, lambda c: (c["arms"]["mc_k2"].update(description="reworded"),
                                      c.update(arms=dict(reversed(list(c["arms"].items())))),
                                      c.update(seeds=c["seeds"][::-1])))
    status = prereg.compare(now, lock)
    assert status["state"] == "matches" and not status["changes"] and status["sha256_now"] == lock["sha256"]


def test_a_lock_from_before_the_experiment_was_covered_reads_and_says_so(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    old = {**lock, "material": {k: v for k, v in lock["material"].items() if k != "experiment"}}
    now = changed(planned, lambda c: c["recipe"].update(lr=c["recipe"]["lr"] * 2))
    status = prereg.compare(now, old)
    assert status["state"] == "matches" and reported(status)["T1"] == "primary"
    assert tables.prereg_note(status) == (
        "The plan matches its lock of 2025-03-01T12:00:00+00:00. Note: its lock predates locks covering the task, "
        "model, recipe, evaluation and analysis bases: changes to them since cannot be told.")
    assert prereg.labels(prereg.locked_config(old), prereg.compare(prereg.locked_config(old), old))  # contrast verb


def test_another_trl_run_in_an_ingested_folder_after_the_lock_demotes_the_planned_contrasts(planned, tmp_path):
    """The lock held an ingested arm's path, not its run: a folder whose run was replaced after the lock (the run
    re-ingested, its start after the lock) kept every planned label."""
    folder = tmp_path / "seed{seed}"
    for seed in planned["seeds"]:
        (tmp_path / f"seed{seed}" / "checkpoint-2").mkdir(parents=True)
        (tmp_path / f"seed{seed}" / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"seed": seed}))
    cfg = changed(planned, lambda c: c["arms"].update(mc_k2={"trainer": {"ingested": {"trl_output": str(folder)}}}))
    lock = prereg.make_lock(cfg, LOCKED_AT)
    assert prereg.compare(cfg, lock)["state"] == "matches"
    (tmp_path / "seed1" / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"seed": 1, "other": 1}))
    status = prereg.compare(cfg, lock, "2025-03-02T00:00:00+00:00")
    assert status["demoted"] == ["T1", "T2", "S1"]
    assert "ingested.mc_k2.1.trainer_state_sha256 changed after the lock (2025-03-01)" in status["changes"]


def test_a_lock_from_before_ingested_identities_held_checkpoint_files_reads_and_says_so(planned, tmp_path):
    """A run's identity gained checkpoint_files (every checkpoint's files) after such locks were written: their
    planned labels stand, with a note that changes to those files cannot be told, and not a change to every
    ingested run (which demoted every planned contrast of a study locked before); what they hold still demotes."""
    folder = tmp_path / "seed{seed}"
    for seed in planned["seeds"]:
        (tmp_path / f"seed{seed}" / "checkpoint-2").mkdir(parents=True)
        (tmp_path / f"seed{seed}" / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"seed": seed}))
    cfg = changed(planned, lambda c: c["arms"].update(mc_k2={"trainer": {"ingested": {"trl_output": str(folder)}}}))
    old = copy.deepcopy(prereg.make_lock(cfg, LOCKED_AT))
    for seeds in old["material"]["experiment"]["ingested"].values():
        for ident in seeds.values():
            del ident["checkpoint_files"]
    status = prereg.compare(cfg, old)
    assert status["state"] == "matches" and not status["changes"]
    assert status["uncovered"] == ("its lock predates locks covering the ingested arms' checkpoint files (weights, "
                                   "arguments, earlier logs): changes to them since cannot be told")
    (tmp_path / "seed1" / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"seed": 1, "other": 1}))
    assert prereg.compare(cfg, old, "2025-03-02T00:00:00+00:00")["demoted"] == ["T1", "T2", "S1"]


def test_a_lock_from_before_the_verifier_and_analysis_were_covered_reads_and_says_so(planned):
    lock = prereg.make_lock(planned, LOCKED_AT)
    old = copy.deepcopy(lock)
    for key in prereg.LATER:
        del old["material"]["experiment"][key]
    status = prereg.compare(changed(planned, lambda c: c["analysis"].update(alpha=0.1)), old)
    assert status["state"] == "matches" and reported(status)["T1"] == "primary"
    assert status["uncovered"] == ("its lock predates locks covering verifier, analysis.alpha, analysis.clock, "
                                   "analysis.resamples, analysis.bootstrap_seed, the ingested arms' folders, "
                                   "analysis.drift_gap: changes to them since cannot be told")
    assert prereg.compare(planned, lock)["uncovered"] == ""
    assert prereg.compare(prereg.locked_config(lock), lock)["state"] == "matches"  # the contrast verb's reading


def test_a_lock_from_before_the_drift_gap_was_covered_demotes_nothing_and_says_what_it_cannot_tell(planned):
    """analysis.drift_gap moves a verdict's robustness label (drift holds where no evaluation's gap exceeds it): raised
    after the lock, a fragile verdict read robust with every label kept. Now the lock holds it; a lock written before
    it did still matches the same study, and says it cannot tell that key."""
    old = copy.deepcopy(prereg.make_lock(planned, LOCKED_AT))
    del old["material"]["experiment"][prereg.DRIFT_GAP]
    for cfg in (planned, changed(planned, lambda c: c["analysis"].update(drift_gap=0.5))):
        status = prereg.compare(cfg, old)
        assert status["state"] == "matches" and not status["demoted"]
        assert status["uncovered"] == "its lock predates locks covering analysis.drift_gap: changes to them since " \
                                      "cannot be told"
    assert prereg.compare(prereg.locked_config(old), old)["state"] == "matches"
