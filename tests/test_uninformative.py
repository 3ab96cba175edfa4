"""A contrast whose data cannot tell its arms apart is "uninformative", with the reason, everywhere a verdict is
read (issue 41): each kind of degenerate data (floor, ceiling, a constant difference, one seed, an undefined
reading), written as run Parquet and analysed by the study's steps, against the nearest informative case."""

import copy
import json
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest
import yaml

from mcgrpo import programme, studies
from mcgrpo.analysis import informative, power, prereg, summary, tables, verifiers
from mcgrpo.cli import main
from mcgrpo.core import config as study_config
from mcgrpo.core.store import read_parquet, write_json, write_parquet
from test_runs import linked_run, seal_run, write_run

B, EVALS, PROBLEMS, SAMPLES = 100, 4, 6, 2  # write_run's evaluations at 0, 50, 100, 150 tokens: B is evaluation 2
AT_B = 2
PLAN = {"primary": [{"id": "T1", "a": "mc_k2", "b": "outcome", "direction": "two-sided", "family": "H"}]}


def study_folder(root, correct, seeds=(1, 2, 3), **columns):
    """A finished-looking study under `root`: `correct(arm, seed)` -> evaluations x problems x samples (bool);
    B, a lock written before the runs, run.json and sealed runs, as tests/test_steps.py builds them. `columns`:
    samples.parquet columns given outright (correct_strict=False: a strict verifier that credits nothing)."""
    from conftest import SMALL_STUDY
    cfg = studies.validate({**copy.deepcopy(SMALL_STUDY), "seeds": list(seeds), "plan": copy.deepcopy(PLAN),
                            "analysis": {"base": "outcome", "resamples": 200}})
    write_parquet(pd.DataFrame({"model": ["tiny"], "iteration": [0], "tokens_generated": [10], "B": [B]}),
                  root / "calibration" / "budget.parquet")
    write_json(prereg.make_lock(cfg, datetime(2025, 1, 1, tzinfo=timezone.utc)), root / "prereg.lock.json")
    for arm, seed in study_config.runs(cfg):
        folder = linked_run(root, arm, seed)
        write_run(folder, correct(arm, seed), eval_sets=("heldout",), **columns)
        write_json({"started": "2025-01-02T00:00:00+00:00", "config": study_config.run_config(cfg, arm, seed)},
                   folder / "run.json")
        seal_run(folder)
    return cfg


def analysed(tmp_path, correct, seeds=(1, 2, 3), **columns):
    """The study's contrasts, robustness, summary and headline from its run Parquet, through the CLI verbs."""
    root = tmp_path / "results"
    cfg = study_folder(root, correct, seeds, **columns)
    for verb in ("drift", "contrasts", "robustness", "summary"):
        assert main([verb, "--config-json", json.dumps(cfg), "--results", str(root)]) == 0
    contrasts, checks = read_parquet(root / "analysis" / "contrasts.parquet"), read_parquet(
        root / "analysis" / "robustness.parquet")
    planned = contrasts.set_index("id").loc["T1"]
    return {"row": planned, "checks": checks.set_index("id").loc["T1"], "summary": (root / "summary.md").read_text(),
            "headline": tables.headline(contrasts, checks).set_index("id").loc["T1"],
            "paired": read_parquet(root / "analysis" / "paired.parquet"), "root": root, "cfg": cfg}


def constant(value):
    return lambda arm, seed: np.full((EVALS, PROBLEMS, SAMPLES), value)


def nudged(correct, arm_, seed_, value):
    """`correct` with one sample of A's seed `seed_` at B set to `value`: the smallest change data can show."""
    def out(arm, seed):
        table = np.array(correct(arm, seed))
        if (arm, seed) == (arm_, seed_):
            table[AT_B, 0, 0] = value
        return table
    return out


def random_base(arm, seed, extra=lambda seed: 1):
    """Seeds that differ (drawn per seed); A = the base plus `extra(seed)` correct samples at B."""
    table = np.random.default_rng(seed).random((EVALS, PROBLEMS, SAMPLES)) < 0.5
    if arm == "mc_k2":
        wrong = np.flatnonzero(~table[AT_B])[:extra(seed)]
        table[AT_B].flat[wrong] = True
    return table


def assert_uninformative(out, why):
    row, checks, headline = out["row"], out["checks"], out["headline"]
    assert row["uninformative"].startswith(why) and not row["confirmed"]
    assert np.isnan(row["p"]) and np.isnan(row["p_holm"])  # no test, so no p (in its Holm family: not rejected)
    assert np.isnan(row["tost_p"]) and np.isnan(row["ni_p"]) and not row["noninferior"]
    assert summary.verdict(row) == "uninformative" and summary.result(row) == "mc_k2 cannot be told from outcome"
    assert checks["robustness"] == f"uninformative: {row['uninformative']}" and not checks["robust"]
    assert headline["verdict"] == "uninformative" and headline["robustness"] == checks["robustness"]
    text = out["summary"]
    assert f"p = n/a (no test: the data cannot tell the arms apart), {int(row['n'])} seed" in text
    assert f": uninformative: {why}" in text and "robust" not in text.split("uninformative:")[1].split("\n")[0]
    assert "mc_k2 matches" not in text and "on par" not in text


def assert_informative(out):
    row, checks = out["row"], out["checks"]
    assert row["uninformative"] == "" and np.isfinite(row["p"]) and np.isfinite(row["p_holm"])
    assert summary.verdict(row) in ("confirmed", "not confirmed")
    assert not checks["robustness"].startswith("uninformative") and out["headline"]["verdict"] == summary.verdict(row)
    sentence = next(line for line in out["summary"].splitlines() if line.startswith("- T1"))
    assert "uninformative" not in sentence and "n/a" not in sentence and "\nuninformative:" not in out["summary"]


def test_floor_everywhere_is_uninformative_one_seed_solving_one_problem_is_not(tmp_path):
    out = analysed(tmp_path / "floor", constant(False))
    assert_uninformative(out, "every reading of both arms scored 0: the model solved no held-out problem")
    assert "Warning: the base arm outcome scored 0 (acc_default on heldout) at its first evaluation in every " \
           "seed (3)" in out["summary"]
    plan = power.plan(out["paired"], 0.02).set_index(["basis", "metric"]).loc["tokens", "acc_default"]
    assert plan["seeds_to_exclude_0"] == plan["seeds_for_equivalence"] == np.inf  # was 2 for equivalence
    assert plan["note"].startswith("no number of seeds helps: every reading of both arms scored 0")
    near = analysed(tmp_path / "near", nudged(constant(False), "mc_k2", 1, True))
    assert_informative(near)
    assert near["row"]["mean"] == pytest.approx(1 / (PROBLEMS * SAMPLES) / 3)
    assert power.plan(near["paired"], 0.02)["note"].eq("").all()


def test_ceiling_everywhere_is_uninformative_one_sample_missed_is_not(tmp_path):
    out = analysed(tmp_path / "ceiling", constant(True))
    assert_uninformative(out, "every reading of both arms scored 1: the model solved every held-out problem")
    assert "Warning" not in out["summary"]  # a base at the ceiling is no floor
    plans = power.plan(out["paired"], 0.02)
    assert plans[plans["metric"] == "acc_default"]["note"].str.startswith("no number of seeds helps").all()
    assert_informative(analysed(tmp_path / "near", nudged(constant(True), "mc_k2", 1, False)))


def test_the_same_difference_in_every_seed_is_uninformative_one_seed_differing_by_a_sample_is_not(tmp_path):
    out = analysed(tmp_path / "constant", random_base)
    assert_uninformative(out, "every seed gave the same difference (+8.3 points): with no variance across seeds")
    assert out["row"]["mean"] == pytest.approx(1 / 12) and out["row"]["ci_low"] == pytest.approx(1 / 12)
    assert power.plan(out["paired"], 0.02).set_index(["basis", "metric"]).loc[("tokens", "acc_default"), "note"].startswith(
        "no SD to plan from: every seed gave the same difference")
    # the smallest variance the data can show (one sample of 12 in one seed) is informative
    near = analysed(tmp_path / "near", lambda arm, seed: random_base(arm, seed, lambda s: 2 if s == 1 else 1))
    assert_informative(near)
    assert near["row"]["p"] == pytest.approx(0.0572, abs=1e-3)  # t = 4 on 2 degrees of freedom


def test_one_seed_is_uninformative_two_are_not(tmp_path):
    out = analysed(tmp_path / "one", lambda arm, seed: random_base(arm, seed, lambda s: 3), seeds=(1,))
    assert_uninformative(out, "only 1 seed ran both arms: the paired test needs at least two")
    assert ", 1 seed: uninformative" in out["summary"]
    assert_informative(analysed(tmp_path / "two", lambda arm, seed: random_base(arm, seed, lambda s: s), seeds=(1, 2)))


def test_an_undefined_reading_is_uninformative_through_the_contrast_verb(tmp_path, capsys):
    """A score that is NaN (a metric read from evals.parquet, undefined at B in one run) against the same
    metric defined everywhere; `mcgrpo contrast` says which."""
    def greedy(nan: bool):
        root = tmp_path / f"nan{nan}" / "results"
        cfg = study_folder(root, lambda arm, seed: random_base(arm, seed, lambda s: s))
        for arm, seed in study_config.runs(cfg):
            folder = root / "runs" / arm / f"seed{seed}"
            evals = read_parquet(folder / "evals.parquet")
            undefined = (evals["eval_index"] == AT_B) & (nan and (arm, seed) == ("mc_k2", 2))
            write_parquet(evals.assign(acc_greedy=evals["acc_default"].where(~undefined)), folder / "evals.parquet")
            seal_run(folder)
        assert main(["contrast", "--results", str(root), "--a", "mc_k2", "--b", "outcome",
                     "--metric", "acc_greedy", "--out", str(root / "one.parquet")]) == 0
        return read_parquet(root / "one.parquet").iloc[0], capsys.readouterr().out
    row, printed = greedy(nan=True)
    assert row["uninformative"] == "the reading of seed 2 is not defined (its score is NaN): no statistic"
    assert "verdict: uninformative: the reading of seed 2 is not defined" in printed
    row, printed = greedy(nan=False)
    assert row["uninformative"] == "" and np.isfinite(row["p"]) and "verdict: exploratory" in printed  # unplanned


def test_a_base_off_the_floor_at_its_first_evaluation_in_one_seed_gives_no_warning():
    evals = pd.DataFrame({"arm": "outcome", "seed": [1, 1, 2, 2], "eval_index": [0, 1, 0, 1], "eval_set": "heldout",
                          "acc_default": [0.0, 0.5, 0.0, 0.5]})
    assert informative.floors_at_start(evals, ["outcome"], "acc_default", ["heldout"])[0].startswith(
        "the base arm outcome scored 0 (acc_default on heldout) at its first evaluation in every seed (2)")
    evals.loc[2, "acc_default"] = 1 / 12
    assert informative.floors_at_start(evals, ["outcome"], "acc_default", ["heldout"]) == []


def pairs(diffs, value_b=0.5):
    diffs = np.asarray(diffs, float)
    return pd.DataFrame({"seed": range(len(diffs)), "value_a": value_b + diffs, "value_b": value_b, "diff": diffs,
                         "clamped": False})


def test_a_small_real_variance_is_informative_float_rounding_is_not():
    """The default study's contrasts differ between seeds by a few samples: far above the tolerance; a constant
    difference that float rounding spreads (0.3 - 0.2 against 0.1) far below it."""
    assert informative.reason(pairs([0.3 - 0.2, 0.1, 0.1])).startswith("every seed gave the same difference")
    one_sample_in_64k = 1 / (1000 * 64)
    assert informative.reason(pairs([0.1, 0.1 + one_sample_in_64k, 0.1])) == ""
    assert informative.reason(pairs([-0.039, -0.061, -0.012, -0.050])) == ""
    # one arm at the floor and the other not is a difference, not a floor
    assert informative.reason(pairs([0.0, -0.1, -0.2], value_b=0.2)) == ""


def test_the_programme_table_says_uninformative_and_why_p_is_missing(tmp_path):
    out = analysed(tmp_path / "floor", constant(False))
    informative_ = analysed(tmp_path / "near", nudged(constant(False), "mc_k2", 1, True))
    heads = {}
    for name, o in (("floor", out), ("near", informative_)):
        contrasts = read_parquet(o["root"] / "analysis" / "contrasts.parquet")
        tables.write_table(tables.headline(contrasts, read_parquet(o["root"] / "analysis" / "robustness.parquet")),
                           o["root"] / "tables" / "headline")
        heads[name] = o["root"] / "tables" / "headline.csv"
    table = programme.verdicts(heads).set_index("study")
    assert table.loc["floor", "verdict"] == "uninformative" and table.loc["floor", "p"] == "n/a (uninformative)"
    assert table.loc["floor", "robustness"] == ("uninformative: every reading of both arms scored 0: the model "
                                                "solved no held-out problem")
    assert table.loc["near", "verdict"] == "not confirmed" and float(table.loc["near", "p"]) > 0.05
    assert not table.loc["near", "robustness"].startswith("uninformative")


def test_a_strict_verifier_that_credits_nothing_makes_the_verdict_fragile_not_robust(tmp_path):
    """The default verifier tells the arms apart, the strict one credited no sample (SmolLM2-135M on GSM8K never
    boxed a right answer): a check whose own data cannot tell the arms apart agrees with no test, so it does not
    hold, and says why. The nearest case, a strict verifier crediting half the default's samples, is read as a test."""
    varied = lambda arm, seed: random_base(arm, seed, extra=lambda seed: seed)  # noqa: E731 (differences vary)
    out = analysed(tmp_path / "nothing", varied, correct_strict=False)
    assert_informative(out)
    checks = out["checks"]
    # not "the model solved no held-out problem": the default verifier credited it (SmolLM2 on arith, unboxed)
    assert checks["strict_uninformative"] == f"every reading of both arms scored 0: {informative.FLOOR_STRICT}"
    assert not checks["strict_holds"] and not checks["robust"]
    assert "the strict verifier cannot tell the arms apart (every reading of both arms scored 0: " in checks["robustness"]
    assert checks["robustness"].startswith("fragile: ") and "on the strict verifier" not in checks["robustness"]
    assert "the strict verifier cannot tell the arms apart" in out["summary"]
    near = analysed(tmp_path / "near", varied)["checks"]
    assert near["strict_uninformative"] == "" and np.isfinite(near["strict_p"]) and not pd.isna(near["strict_holds"])
    assert "cannot tell" not in near["robustness"]


def test_a_floor_at_start_is_carried_beside_each_verdict_it_concerns_in_the_summary_and_the_headline(tmp_path):
    """Every arm at 0 before training, lifted by it: summary.md warned above the verdicts that the base started at the
    floor, but the verdict itself, the headline and so a programme's verdicts (held to steps.headline) read plain.
    Now each verdict against that base carries it in its warning, in every place it is shown."""
    from mcgrpo.analysis import steps

    def lifted(arm, seed):
        table = random_base(arm, seed, lambda s: s)
        table[0] = False
        return table
    out = analysed(tmp_path, lifted)
    assert_informative(out)
    flag = "outcome scored 0 (acc_default on heldout) at its first evaluation in every seed"
    t1 = next(line for line in out["summary"].splitlines() if line.startswith("- T1"))
    assert "Warning: the base arm outcome scored 0" in out["summary"] and t1.endswith(f" (warning: {flag})")
    assert steps.headline(out["cfg"], out["root"]).set_index("id").loc["T1", "warning"] == flag
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(out["cfg"]))
    assert main(["contrast", "--results", str(out["root"]), "--a", "mc_k2", "--b", "outcome", "--config", str(study),
                 "--out", str(tmp_path / "one.parquet")]) == 0
    assert read_parquet(tmp_path / "one.parquet").iloc[0]["warning"] == flag


def test_math_verify_overruns_are_carried_beside_each_verdict_with_the_arm():
    """The summary's warning that math-verify checks overran (counted wrong) concerns the arms whose samples overran:
    their verdicts' warning (summary.warning, which the summary, the tables and so a programme's verdicts word them
    by) carries it; a verdict of other arms reads as before."""
    samples = pd.DataFrame({"arm": ["mc_k2", "mc_k2", "outcome"], "seed": 1, "math_verify_overran": [True, True, None]})
    flags = verifiers.overran_flags(samples)
    assert flags == {("mc_k2", None): "math-verify overran on 2 of mc_k2's samples, each counted wrong"}
    row = {"a": "mc_k2", "b": "outcome", "eval_set": "heldout", "warning": ""}
    assert summary.warning(row, flags=flags) == flags["mc_k2", None]
    assert summary.warning({**row, "a": "filter"}, flags=flags) == ""
