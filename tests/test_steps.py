"""The analysis steps and the `contrast` verb on a small synthetic results folder (no training)."""

import copy
import json
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest
import yaml

from mcgrpo.core import config as study_config
from mcgrpo import studies
from mcgrpo.analysis import prereg, steps
from mcgrpo.core import sealed
from mcgrpo.cli import main
from mcgrpo.core.errors import DataError
from mcgrpo.core.store import parquet_metadata, read_contract, read_json, read_parquet, write_json, write_parquet
from test_runs import copy_study, linked_run, seal_run, write_iterations, write_run

B = 100
PLAN = {"primary": [{"id": "T1", "a": "mc_k2", "b": "outcome", "direction": "less", "family": "H"},
                    {"id": "T2", "a": "mc_k2", "b": "outcome", "basis": "time", "family": "H"}],
        "secondary": [{"id": "S1", "a": "mc_k2", "b": "outcome", "metric": "acc_strict"}]}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """(config, results folder) of a finished-looking study: 2 arms x 3 seeds, 4 evaluations of
    6 problems x 2 samples, iterations, run.json, B and a lock written before the runs started."""
    from conftest import SMALL_STUDY
    cfg = studies.validate({**copy.deepcopy(SMALL_STUDY), "seeds": [1, 2, 3], "plan": copy.deepcopy(PLAN),
                                 "analysis": {"base": "outcome", "efficiency": {"mc_k2": 0.5}}})
    root = tmp_path_factory.mktemp("results")
    rng = np.random.default_rng(0)
    write_parquet(pd.DataFrame({"model": ["tiny"], "iteration": [0], "tokens_generated": [10], "B": [B]}),
                  root / "calibration" / "budget.parquet")
    locked = datetime(2025, 1, 1, tzinfo=timezone.utc)
    write_json(prereg.make_lock(cfg, locked), root / "prereg.lock.json")
    for arm, seed in study_config.runs(cfg):
        folder = linked_run(root, arm, seed)
        skill = np.linspace(0.3, 0.7 if arm == "outcome" else 0.5, 4)[:, None, None]
        _, evals = write_run(folder, rng.random((4, 6, 2)) < skill, eval_sets=("heldout",))
        write_iterations(folder, evals)
        write_json({"started": "2025-01-02T00:00:00+00:00", "config": study_config.run_config(cfg, arm, seed)},
                   folder / "run.json")
        seal_run(folder)
    for name in ("drift", "contrasts", "robustness", "curves", "breakdown", "figures", "tables", "summary"):
        assert main([name, "--config-json", json.dumps(cfg), "--results", str(root)]) == 0
    return cfg, root


def test_every_step_writes_its_outputs(results):
    cfg, root = results
    for kind in ("drift", "contrasts", "paired"):
        assert len(read_contract(root / "analysis" / f"{kind}.parquet", kind)) > 0
    for name in ("differences", "budget_share", "extrapolation", "stages", "groups"):
        assert len(read_parquet(root / "analysis" / f"{name}.parquet")) > 0
    for name in ("accuracy_vs_tokens", "accuracy_vs_time", "difference_from_base", "per_seed", "stage_seconds",
                 "drift"):
        assert (root / "figures" / f"{name}.png").stat().st_size > 1000
        assert (root / "figures" / f"{name}.pdf").stat().st_size > 1000
    for name in ("headline", "robustness", "prereg", "contrasts", "equal_bases", "pass_at_k", "budget_share", "stage_seconds", "groups",
                 "drift", "extrapolation", "power"):
        for ext in ("csv", "md", "html"):
            assert (root / "tables" / f"{name}.{ext}").stat().st_size > 0


def test_contrasts_cover_every_pair_basis_metric_and_label_from_the_lock(results):
    _, root = results
    table = read_contract(root / "analysis" / "contrasts.parquet", "contrasts")
    assert set(zip(table["basis"], table["metric"])) == {
        (b, m) for b in ("tokens", "updates", "time") for m in ("acc_default", "acc_strict")} | {("tokens", "pass@2_default")}
    assert (table["n"] == 3).all() and table["crossed_low"].notna().all()
    labelled = table.set_index("id").drop(index="")
    assert labelled["label"].to_dict() == {"T1": "primary", "T2": "primary", "S1": "secondary"}
    assert read_json(root / "analysis" / "prereg.json")["state"] == "matches"
    md = (root / "tables" / "prereg.md").read_text()
    assert "The plan matches its lock of 2025-01-01T00:00:00+00:00." in md
    # the secondary contrast's family reads the same in every table: none (a Holm family is a primary's)
    families = [pd.read_csv(root / "tables" / f"{name}.csv", keep_default_na=False).set_index("id").loc[i, "family"]
                for name in ("prereg", "contrasts") for i in ("S1", "T1")]
    assert families == ["", "H", "", "H"]


@pytest.mark.parametrize("basis, metric", [("tokens", "acc_default"), ("time", "acc_default"),
                                           ("updates", "acc_strict"), ("tokens", "pass@2_default")])
def test_contrast_verb_recomputes_the_same_row_from_the_folder_alone(results, tmp_path, capsys, basis, metric):
    _, root = results
    out = tmp_path / "one.parquet"
    assert main(["contrast", "--results", str(root), "--a", "mc_k2", "--b", "outcome", "--basis", basis,
                 "--metric", metric, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    one = read_contract(out, "contrasts").iloc[0]
    table = read_contract(root / "analysis" / "contrasts.parquet", "contrasts")
    row = table[(table["basis"] == basis) & (table["metric"] == metric)].iloc[0]
    for column in ("n", "mean", "ci_low", "ci_high", "p", "p_holm", "tost_p", "crossed_low", "crossed_high",
                   "label", "id"):
        assert one[column] == pytest.approx(row[column], nan_ok=True) if isinstance(row[column], float) \
            else one[column] == row[column]
    paired = read_parquet(tmp_path / "one.paired.parquet")
    assert paired["seed"].tolist() == [1, 2, 3] and f"| {metric} |" in printed
    assert "| tokens_a | tokens_b |" in printed  # the tokens each arm was read at, as the tables show them
    assert ("warning: " in printed) == bool(one["warning"]), printed


def test_contrast_verb_names_what_is_allowed(results, capsys):
    _, root = results
    base = ["contrast", "--results", str(root), "--b", "outcome"]
    assert main([*base, "--a", "mc_k2", "--metric", "acc_greedy"]) == 2
    assert ("'acc_greedy' is not recorded for mc_k2/seed1 (heldout); allowed: acc_default, acc_strict, "
            "pass@<k>_default (k <= 2), pass@<k>_strict (k <= 2)") in capsys.readouterr().err
    assert main([*base, "--a", "mc_k9"]) == 2
    err = capsys.readouterr().err
    assert "arm 'mc_k9': not in " in err and "runs/store.parquet; allowed: mc_k2, outcome" in err
    assert main([*base, "--a", "mc_k2", "--basis", "flops"]) == 2
    assert "basis 'flops': expected one of tokens, iterations, updates, time, time_c" in capsys.readouterr().err
    assert main([*base, "--a", "mc_k2", "--eval-set", "ood"]) == 2
    assert "--eval-set 'ood': not evaluated; allowed: heldout" in capsys.readouterr().err


def test_tables_read_back_as_the_analysis_parquet_says(results):
    _, root = results
    table = read_contract(root / "analysis" / "contrasts.parquet", "contrasts")
    csv = pd.read_csv(root / "tables" / "contrasts.csv")
    assert len(csv) == len(table) and csv["mean"].tolist() == pytest.approx(table["mean"].tolist())
    bases = pd.read_csv(root / "tables" / "equal_bases.csv")
    assert list(bases.columns) == ["contrast", "metric", "eval_set", "n", "tokens", "updates", "time"]
    pass_k = pd.read_csv(root / "tables" / "pass_at_k.csv")
    assert pass_k["k"].tolist() == [1, 2] and (pass_k["a"] <= 1).all()


def test_budget_is_read_from_the_calibration_table(results):
    assert steps.budget(results[1]) == B


def test_summary_states_every_planned_contrast_and_the_report_opens_with_it(results):
    cfg, root = results
    text = (root / "summary.md").read_text()
    table = read_contract(root / "analysis" / "contrasts.parquet", "contrasts").set_index("id")
    t1 = table.loc["T1"]
    assert (f"- T1 (primary, family H; predicted: mc_k2 trails outcome): mc_k2 trails outcome at equal tokens: "
            f"{100 * t1['mean']:+.1f} [{100 * t1['ci_low']:+.1f}, {100 * t1['ci_high']:+.1f}] points") in text
    assert [line[2:4] for line in text.splitlines() if line[:3] in ("- T", "- S")] == ["T1", "T2", "S1"]
    # each sentence ends with the verdict and its robustness, as analysis/robustness.parquet labels it
    checks = read_parquet(root / "analysis" / "robustness.parquet").set_index("id")
    t1_line = next(line for line in text.splitlines() if line.startswith("- T1"))
    assert t1["confirmed"] and not checks.loc["T1", "robust"]  # these runs drift: a confirmed but fragile verdict
    assert t1_line.endswith(f": confirmed, but {checks.loc['T1', 'robustness']}")
    page = (root / "summary.rst").read_text()
    assert page.startswith("Study mini: results\n") and "GRPO interventions compared at matched compute" in page


def test_headline_table_has_one_readable_line_per_planned_contrast(results):
    _, root = results
    csv = pd.read_csv(root / "tables" / "headline.csv")
    assert csv["id"].tolist() == ["T1", "T2", "S1"]
    assert list(csv.columns) == ["id", "label", "contrast", "basis", "n", "tokens_a", "tokens_b", "difference", "p",
                                 "p_holm", "result", "verdict", "crossed", "strict", "drift", "other_clock", "alike",
                                 "robustness", "warning"]
    checks = read_parquet(root / "analysis" / "robustness.parquet").set_index("id")
    assert csv["robustness"].tolist() == checks.loc[["T1", "T2", "S1"], "robustness"].tolist()
    assert csv["other_clock"].fillna("").tolist() == ["", "not recorded", ""]  # these runs predate the CPU clock
    assert csv["alike"].tolist() == ["not recorded"] * 3  # and versions and hardware in run.json
    assert csv["contrast"].iloc[0] == "mc_k2 minus outcome" and csv["basis"].tolist()[:2] == ["equal tokens", "equal time (T*)"]
    assert set(csv["verdict"]) <= {"confirmed", "not confirmed", "exploratory"}
    # the result in the summary's words, beside the verdict: an inconclusive one is never read as a plain 'not confirmed'
    summary_md = (root / "summary.md").read_text()
    assert all(f"{i} (" in summary_md and f": {words} at " in summary_md for i, words in zip(csv["id"], csv["result"]))
    md = (root / "tables" / "headline.md").read_text()
    assert f"| {csv['p'].iloc[0]:.3f} |" in md or "| <0.001 |" in md


# Every analysis step the summary waits for, in order: what the workflow reruns when the study's config changes
# (the figures among them: the summary holds them to the analysis, steps.held_shown).
ANALYSIS = ("drift", "contrasts", "robustness", "curves", "breakdown", "figures", "tables", "summary")


def rerun(names, cfg, folder) -> None:
    """The analysis steps `names` under `cfg`, as the workflow reruns every analysis rule whose study config
    changed: a step reads only earlier steps' outputs written for the same config."""
    for name in names:
        getattr(steps, f"{name}_step")(cfg, folder)


def _clocked(root, tmp_path, cpu: bool):
    """A copy of the results whose mc_k2 runs shared their cores: 3x the wall seconds of outcome's, the same CPU
    seconds (`cpu`: evaluations record the CPU clock; else they predate it)."""
    copy_ = tmp_path / "clocked"
    copy_study(root, copy_)
    for path in copy_.glob("runs/*/seed*/*.parquet"):
        if path.name not in ("evals.parquet", "iterations.parquet"):  # both record the clock, the same at each
            continue
        frame = read_parquet(path)
        cpu_seconds = frame["train_seconds"]
        frame["train_seconds"] = cpu_seconds * (3 if path.parts[-3] == "mc_k2" else 1)
        write_parquet(frame.assign(train_cpu_seconds=cpu_seconds) if cpu else frame, path)
        seal_run(path.parent)
    return copy_


def test_the_cpu_clock_option_times_the_equal_time_bases(results, tmp_path):
    """Wall time says mc_k2 is 3x slower (a neighbour's load), CPU time says both arms cost the same: equal time
    on the wall clock reads mc_k2 a third of the way to B, on the CPU clock at B, as equal tokens does."""
    cfg, root = results
    folder = _clocked(root, tmp_path, cpu=True)

    def time_rows(clock):
        steps.contrasts_step({**cfg, "analysis": {**cfg["analysis"], "clock": clock}}, folder)
        paired = read_contract(folder / "analysis" / "paired.parquet", "paired")
        mine = paired[paired["metric"] == "acc_default"].set_index(["basis", "seed"])
        return mine.loc["time"], mine.loc["tokens"]

    wall, tokens = time_rows("wall")
    cpu, _ = time_rows("cpu")
    assert wall["at"].tolist() == [4.0] * 3 and cpu["at"].tolist() == [4.0] * 3  # T*: outcome's 4 s at B
    np.testing.assert_allclose(cpu["diff"], tokens["diff"])
    assert not np.allclose(wall["diff"], tokens["diff"])
    for seed, value in wall["value_a"].items():  # two thirds of the way from its evaluation 0 (0 s) to 1 (6 s)
        evals = read_parquet(folder / "runs" / "mc_k2" / f"seed{seed}" / "evals.parquet").sort_values("eval_index")
        assert value == pytest.approx(np.interp(4.0, evals["train_seconds"], evals["acc_default"]))
    rerun(ANALYSIS, {**cfg, "analysis": {**cfg["analysis"], "clock": "cpu"}}, folder)
    assert "Equal time is read on the process CPU time of the training stages" in (folder / "summary.md").read_text()


def test_robustness_reads_equal_time_on_the_other_clock_beside_the_studys(results, tmp_path):
    """The same 3x-slower wall clock: the study reads equal time on the wall clock, the robustness check on the CPU
    clock, which reads mc_k2 at B as equal tokens does."""
    cfg, root = results
    folder = _clocked(root, tmp_path, cpu=True)
    steps.drift_step(cfg, folder)
    steps.contrasts_step(cfg, folder)
    steps.robustness_step(cfg, folder)
    checks = read_parquet(folder / "analysis" / "robustness.parquet").set_index("id")
    contrasts = read_contract(folder / "analysis" / "contrasts.parquet", "contrasts").set_index("id")
    assert checks.index.tolist() == ["T1", "T2", "S1"] and checks.loc["T2", "other_clock"] == "cpu"
    assert checks.loc["T2", "clock_mean"] == pytest.approx(contrasts.loc["T1", "mean"])  # T1: equal tokens
    assert contrasts.loc["T2", "mean"] != pytest.approx(contrasts.loc["T1", "mean"])
    assert checks.loc["T1", "other_clock"] == "" and np.isnan(checks.loc["T1", "clock_mean"])


def test_the_robustness_step_reads_each_runs_json_for_the_alike_check(results, tmp_path):
    """mc_k2's seed-2 run made under another torch and timed on a GPU: every contrast pairing it is fragile on the
    stack (the first key that differs), the other seeds' pairs alike; the headline names it."""
    cfg, root = results
    folder = tmp_path / "alike"
    copy_study(root, folder)
    for path in folder.glob("runs/*/seed*/run.json"):
        record, other = read_json(path), path.parts[-3:-1] == ("mc_k2", "seed2")
        record["versions"] = {"mcgrpo": "0.9.0", "torch": "2.11.0+cu130" if other else "2.13.0+cpu",
                              "transformers": "5.24.0", "python": "3.11.7"}
        record["hardware"] = {"device": "cuda:0" if other else "cpu", "gpu": "NVIDIA A100" if other else None,
                              "cpu": "AMD EPYC", "threads": 1}
        write_json(record, path)
        seal_run(path.parent)
    steps.drift_step(cfg, folder)  # computed from the runs as they are now, as Snakemake reruns them
    steps.contrasts_step(cfg, folder)
    steps.robustness_step(cfg, folder)
    checks = read_parquet(folder / "analysis" / "robustness.parquet").set_index("id")
    words = "seed 2's runs were made under different stacks (mc_k2: torch 2.11.0+cu130; outcome: torch 2.13.0+cpu)"
    assert checks["alike_unlike"].tolist() == [words] * 3 and checks["alike_compared"].tolist() == [3] * 3
    assert checks["alike_holds"].tolist() == [False] * 3 and all(words in label for label in checks["robustness"])


def test_the_cpu_clock_refuses_runs_that_never_recorded_it(results, tmp_path):
    cfg, root = results
    folder = _clocked(root, tmp_path, cpu=False)
    with pytest.raises(DataError, match=r"evals.parquet: no column train_cpu_seconds .* allowed: retrain it, "
                                        r"or analysis.clock: wall"):
        steps.contrasts_step({**cfg, "analysis": {**cfg["analysis"], "clock": "cpu"}}, folder)


def test_a_recipe_changed_after_the_lock_reaches_the_summary(results, tmp_path):
    """Issue 30: recipe.lr changed after the lock (and the runs retrained): the summary must stop saying the plan
    matches its lock, and T1 must be reported exploratory with the dated reason."""
    cfg, root = results
    folder = tmp_path / "relearned"
    copy_study(root, folder)
    cfg = {**cfg, "recipe": {**cfg["recipe"], "lr": cfg["recipe"]["lr"] * 2}}
    rerun(ANALYSIS, cfg, folder)  # each rule the workflow reruns
    text = (folder / "summary.md").read_text()
    assert "matches its lock" not in text and "recipe.lr changed after the lock (2025-01-01)" in text
    assert "T1 (exploratory" in text  # "T1 (exploratory; predicted: ...)"
    labelled = read_contract(folder / "analysis" / "contrasts.parquet", "contrasts").set_index("id").drop(index="")
    assert labelled.loc["T1", "label"] == "exploratory"


def test_a_math_verify_study_says_in_its_summary_how_many_checks_overran(results, tmp_path):
    """A study whose verifier is math_verify counts a check that overran its CPU budget as wrong in the accuracies
    its verdicts read: the summary says so (a study on another rule finds it in the verifiers table only)."""
    cfg, root = results
    folder = tmp_path / "overran"
    copy_study(root, folder)
    run = folder / "runs" / "mc_k2" / "seed2"
    samples = read_parquet(run / "samples.parquet")
    write_parquet(samples.assign(math_verify_overran=np.arange(len(samples)) < 3), run / "samples.parquet", "")
    seal_run(run)
    rerun(ANALYSIS, cfg, folder)
    assert "math-verify" not in (folder / "summary.md").read_text()
    cfg = {**cfg, "verifier": {"rule": "math_verify"}}
    rerun(ANALYSIS, cfg, folder)
    assert ("Warning: math-verify overran its CPU budget on 3 sample(s), each counted wrong (samples.parquet "
            "math_verify_overran; mc_k2 seed 2: 3). The study's verifier is math_verify: its accuracies above count "
            "each as wrong.") in (folder / "summary.md").read_text()


@pytest.mark.parametrize("name, kind", [("contrasts", "contrasts"), ("robustness", None), ("paired", "paired")])
def test_an_analysis_file_of_another_config_or_rewritten_is_named_never_read(results, tmp_path, name, kind):
    """A step's output read by a later step (the summary's verdicts come from contrasts.parquet and
    robustness.parquet) left from an earlier config, copied from another study, or rewritten by hand through
    write_parquet (here: every mean's sign flipped) would change the verdict without a word: its config_hash is
    held to the study's."""
    from mcgrpo.core.errors import IntegrityError
    cfg, root = results
    folder = tmp_path / "edited"
    copy_study(root, folder)
    path = folder / "analysis" / f"{name}.parquet"
    frame = read_contract(path, kind) if kind else read_parquet(path)
    write_parquet(frame, path)  # rewritten by hand, without the config's hash
    step = steps.tables_step if name == "paired" else steps.summary_step
    with pytest.raises(IntegrityError, match=rf"{path}: written for config \(none\), but this study's config hashes "
                                             rf"to {study_config.config_hash(cfg)[:12]}"):
        step(cfg, folder)
    other = {**cfg, "study": "another"}
    write_parquet(frame, path, study_config.config_hash(other))  # another study's
    with pytest.raises(IntegrityError, match="left from an earlier config or another study"):
        step(cfg, folder)
    computed_from = {steps.COMPUTED_FROM: parquet_metadata(root / "analysis" / f"{name}.parquet")[steps.COMPUTED_FROM]}
    write_parquet(frame, path, study_config.config_hash(cfg))  # the config's hash, but no word of its runs
    with pytest.raises(IntegrityError, match=rf"{path}: records no runs it was computed from"):
        step(cfg, folder)
    write_parquet(frame, path, study_config.config_hash(cfg), computed_from)  # and its runs', but no seal
    with pytest.raises(IntegrityError, match=rf"{path}: records no seal of its content"):
        step(cfg, folder)
    write_parquet(frame, path, study_config.config_hash(cfg), {**computed_from, sealed.KEY: sealed.of_frame(frame)})
    step(cfg, folder)


@pytest.mark.parametrize("edit", ["mean", "dtype", "rows", "column", "index"])
def test_an_analysis_file_edited_with_its_metadata_kept_is_named_never_read(results, tmp_path, edit):
    """contrasts.parquet edited and written back with its metadata copied (pandas or pyarrow): its config_hash and
    computed_from still the study's, so the tables and summary worded T1 from the edited mean (a verdict turned
    from 'trails' to 'beats' without a word). Its seal of its rows is held: a value, a dtype, rows repeated or a
    column added is named."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from mcgrpo.core.errors import IntegrityError
    cfg, root = results
    folder = tmp_path / "edited"
    copy_study(root, folder)
    path = folder / "analysis" / "contrasts.parquet"
    table = pq.read_table(path)
    frame = table.to_pandas()
    frame = {"mean": lambda f: f.assign(mean=-f["mean"]), "dtype": lambda f: f.astype({"n": "float64"}),
             "rows": lambda f: pd.concat([f, f.iloc[:1]]), "column": lambda f: f.assign(extra=1),
             "index": lambda f: f}[edit](frame)
    meta = dict(table.schema.metadata)
    if edit == "index":  # pandas' metadata names a column as the frame's index: it leaves the frame (a KeyError)
        meta[b"pandas"] = json.dumps({**json.loads(meta[b"pandas"]), "index_columns": ["note"]}).encode()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(meta), path)
    with pytest.raises(IntegrityError, match=rf"{path}: its content hashes to \w{{12}}, but it records \w{{12}} as "
                                             rf"written: edited since it was written; allowed: the file this "
                                             rf"study's analysis writes \(snakemake --configfile STUDY --forcerun "
                                             rf"{path}\)"):
        steps.tables_step(cfg, folder)
    pq.write_table(table, path)  # as written
    steps.tables_step(cfg, folder)


def test_a_verdict_whose_arm_has_runs_of_another_config_says_so_beside_it(results, tmp_path):
    """analysis_only after an edit reads runs trained under the config before it: the summary said so only in its
    plan note, above verdicts that read as plain ones; now each verdict whose arms have such runs says so too."""
    cfg, root = results
    folder = tmp_path / "edited"
    copy_study(root, folder)
    edited = copy.deepcopy(cfg)
    edited["arms"]["mc_k2"]["credit"]["monte_carlo"]["k"] = 3
    rerun(ANALYSIS, edited, folder)
    said = (folder / "summary.md").read_text()
    beside = "(warning: runs trained with a config other than the current one: mc_k2/seed1, mc_k2/seed2, mc_k2/seed3)"
    assert [line[:4] for line in said.splitlines() if beside in line] == ["- T1", "- T2", "- S1"]  # all compare mc_k2
    assert beside not in (root / "summary.md").read_text()


def test_an_analysis_file_computed_from_runs_since_retrained_is_named_never_read(results, tmp_path):
    """Under the same config, a run retrained since the analysis (set aside by check-store --repair and trained
    again, or a pooled study's base retrained) leaves every analysis file of the study with the old run's numbers,
    its config_hash still the study's: a later step run by hand, `mcgrpo power --config` or pool-bases read them
    without a word. Each file records the runs it was computed from (their manifests' digests); a step reads it only
    where they are the study's runs now, and names the runs that changed."""
    from mcgrpo.core.errors import IntegrityError
    cfg, root = results
    folder = tmp_path / "retrained"
    copy_study(root, folder)
    steps.tables_step(cfg, folder)  # the copy's runs are the ones its files were computed from
    run = folder / "runs" / "mc_k2" / "seed2"
    _, evals = write_run(run, np.random.default_rng(7).random((4, 6, 2)) < 0.9, eval_sets=("heldout",))
    write_iterations(run, evals)
    seal_run(run)  # trained again: a valid run, sealed, not a damaged file
    with pytest.raises(IntegrityError, match=rf"{folder}/analysis/contrasts.parquet: computed from runs that have "
                                             rf"changed since: mc_k2/seed2 \(retrained, set aside or replaced\)"):
        steps.tables_step(cfg, folder)
    rerun(("drift", "contrasts", "robustness", "curves", "breakdown", "tables"), cfg, folder)
    assert read_contract(folder / "analysis" / "contrasts.parquet", "contrasts")["mean"].tolist() != \
        read_contract(root / "analysis" / "contrasts.parquet", "contrasts")["mean"].tolist()


def test_a_run_retrained_while_a_step_ran_leaves_its_file_refused_never_labelled_with_it(results, tmp_path,
                                                                                         monkeypatch):
    """A step records the runs it read as they were before it read them: a run replaced between its reading and its
    writing (a check-store --repair and a training by hand beside the analysis) leaves a file that the next reader
    refuses, not one labelled with the new training while its numbers are the old one's."""
    from mcgrpo.core.errors import IntegrityError
    cfg, root = results
    folder = tmp_path / "raced"
    copy_study(root, folder)
    read_runs = steps._runs

    def read_then_retrain(*args, **kwargs):
        loaded = read_runs(*args, **kwargs)
        run = folder / "runs" / "mc_k2" / "seed2"
        _, evals = write_run(run, np.random.default_rng(7).random((4, 6, 2)) < 0.9, eval_sets=("heldout",))
        write_iterations(run, evals)
        seal_run(run)
        return loaded
    monkeypatch.setattr(steps, "_runs", read_then_retrain)
    steps.drift_step(cfg, folder)
    monkeypatch.undo()
    with pytest.raises(IntegrityError, match=r"drift.parquet: computed from runs that have changed since: mc_k2/seed2"):
        steps.analysis_reader(cfg, folder)("drift", "drift")


def test_a_step_run_by_hand_without_its_budget_says_what_makes_it(results, tmp_path, capsys):
    cfg, root = results
    folder = tmp_path / "no-budget"
    copy_study(root, folder)
    (folder / "calibration" / "budget.parquet").unlink()
    assert main(["contrasts", "--config-json", json.dumps(cfg), "--results", str(folder)]) == 2
    assert (f"{folder}/calibration/budget.parquet: not found, so the study's B is unknown; allowed: the file its "
            f"calibration writes") in capsys.readouterr().err


def test_a_prereg_status_of_another_plan_is_named_never_worded(results, tmp_path):
    """analysis/prereg.json words the summary's note on the plan and its lock: one of another plan is refused."""
    from mcgrpo.core.errors import IntegrityError
    cfg, root = results
    folder = tmp_path / "stale"
    copy_study(root, folder)
    path = folder / "analysis" / "prereg.json"
    status = read_json(path)
    write_json({**status, "sha256_now": "0" * 64, "state": "matches"}, path)
    with pytest.raises(IntegrityError, match=rf"{path}: the plan against its lock for plan 000000000000, but this "
                                             rf"study's plan hashes to"):
        steps.summary_step(cfg, folder)
    write_json(status, path)
    steps.summary_step(cfg, folder)
    write_json({**status, "state": "changed", "changes": ["recipe.lr changed after the lock (2025-01-01)"]}, path)
    with pytest.raises(IntegrityError, match=rf"{path}: its content hashes to \w{{12}}, but it records \w{{12}} as "
                                             rf"written: edited since it was written"):
        steps.summary_step(cfg, folder)  # before: 'The plan changed since its lock ...' of a plan that matches
    write_json({k: v for k, v in status.items() if k != sealed.KEY}, path)
    with pytest.raises(IntegrityError, match=rf"{path}: records no seal of its content"):
        steps.summary_step(cfg, folder)


def test_labels_of_a_lock_since_removed_or_replaced_are_named_never_shown(results, tmp_path):
    """The config and runs unchanged, the lock removed (or locked again, or an older one put back) after the
    contrasts step labelled the study: contrasts.parquet and prereg.json still passed every check, so a step run by
    hand (or under --rerun-triggers mtime), and a programme's summary, showed T1 `primary` and its verdict, while
    `mcgrpo contrast`, reading the lock, gives `exploratory`. The labels are held to the lock as it is now."""
    from mcgrpo.core.errors import IntegrityError
    cfg, root = results
    folder = tmp_path / "relocked"
    copy_study(root, folder)
    lock, path = folder / "prereg.lock.json", folder / "analysis" / "prereg.json"
    kept = lock.read_bytes()
    lock.unlink()
    with pytest.raises(IntegrityError, match=rf"{path}: labels the plan against the lock of 2025-01-01T00:00:00\+00:00 "
                                             rf"\(sha256 [0-9a-f]{{12}}\), but {lock} is now no lock \(removed, locked "
                                             rf"again or put back since\); allowed: the labels against the lock as it "
                                             rf"is \(snakemake --configfile STUDY --forcerun {folder}/analysis/"
                                             rf"contrasts.parquet\)"):
        steps.headline(cfg, folder)  # what a programme's summary holds each study's headline to
    write_json(prereg.make_lock(cfg, datetime(2025, 6, 1, tzinfo=timezone.utc)), lock)  # locked again, late
    for step in (steps.tables_step, steps.summary_step):
        with pytest.raises(IntegrityError, match=r"but .*prereg.lock.json is now the lock of 2025-06-01"):
            step(cfg, folder)
    rerun(("contrasts", "robustness", "tables"), cfg, folder)
    assert set(steps.headline(cfg, folder)["label"]) == {"exploratory"}  # locked after training started
    lock.write_bytes(kept)
    with pytest.raises(IntegrityError, match=r"labels the plan against the lock of 2025-06-01"):
        steps.summary_step(cfg, folder)


def test_a_step_run_by_hand_with_the_studys_switches_reads_what_the_workflows_jobs_wrote(results, tmp_path):
    """The workflow hands each analysis job the study less the switches saying how it ran (analysis_only,
    tracking, ...); `mcgrpo <step> --config STUDY.yaml` by hand sees the file as written, switches and all. Both
    hash the analysed config, so the hand-run step reads the jobs' files instead of calling them another config's."""
    cfg, root = results
    folder = tmp_path / "by-hand"
    copy_study(root, folder)
    by_hand = {**cfg, "analysis_only": True, "tracking": "tensorboard"}
    assert steps.analysis_hash(by_hand) == steps.analysis_hash(cfg) == study_config.config_hash(cfg)
    steps.summary_step(by_hand, folder)
    other = {**by_hand, "analysis": {**cfg["analysis"], "alpha": 0.01}}  # a key an analysis computes from
    assert steps.analysis_hash(other) != steps.analysis_hash(cfg)


def _summary(cfg, tmp_path) -> list[str]:
    """The argv of the programme summary's rule over study `cfg`."""
    return ["summary", "--name", "p", "--parquet", str(tmp_path / "v.parquet"), "--markdown", str(tmp_path / "v.md"),
            "--studies", json.dumps(cfg), "--owner", "programmes/p.yaml"]


def test_the_programme_summary_holds_each_headline_to_the_studys_analysis(results, tmp_path, monkeypatch, capsys):
    """A study's tables/headline.csv edited by hand (or left from an earlier run) once reached the programme's
    verdicts.parquet as it was: now each headline must be the one the study's held analysis gives, or the summary
    stops naming the file, line and column, and the summary written before is left as it was."""
    from mcgrpo import programme
    cfg, root = results
    monkeypatch.chdir(tmp_path)
    copy_study(root, tmp_path / cfg["results_dir"] / cfg["study"])
    assert programme.main(_summary(cfg, tmp_path)) == 0
    assert read_json(tmp_path / programme.OWNER) == {"name": "p", "owner": "programmes/p.yaml"}  # who wrote it
    head = tmp_path / cfg["results_dir"] / cfg["study"] / "tables" / "headline.csv"
    csv = pd.read_csv(head, dtype=str, keep_default_na=False)
    assert read_parquet(tmp_path / "v.parquet")["verdict"].tolist() == csv["verdict"].tolist()
    was, before = csv.at[0, "verdict"], (tmp_path / "v.parquet").read_bytes()
    csv.at[0, "verdict"] = "not confirmed" if was == "confirmed" else "confirmed"
    csv.to_csv(head, index=False)
    assert programme.main(_summary(cfg, tmp_path)) == 2
    assert (f"{head.relative_to(tmp_path)}: line 2 (T1), column verdict: {csv.at[0, 'verdict']!r}, but the study's "
            f"analysis (analysis/contrasts.parquet, robustness.parquet) gives {was!r}") in capsys.readouterr().err
    assert (tmp_path / "v.parquet").read_bytes() == before
    # a study file edited since its analysis: its analysis files are refused, whatever the CSV says
    edited = {**cfg, "analysis": {**cfg["analysis"], "margin": 0.05}}
    assert programme.main(_summary(edited, tmp_path)) == 2
    assert "contrasts.parquet: written for config" in capsys.readouterr().err


def test_a_summary_this_run_did_not_write_is_named_never_printed_as_the_results(results, tmp_path, monkeypatch):
    """A run ends printing the first study's summary.md (a programme's verdicts.md) as it finds it: after `--touch`,
    a run of other targets, or `--rerun-triggers mtime` following an edit of the config, that was an earlier config's
    verdicts (here every contrast primary, where alpha changed after the lock makes them exploratory), printed as
    this run's results. It is printed only where it is what the analysis gives now; else the reason, naming it."""
    from mcgrpo import programme
    from mcgrpo.core.errors import IntegrityError
    cfg, root = results
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / cfg["results_dir"] / cfg["study"]
    copy_study(root, folder)
    steps.summary_step(cfg, folder)  # the copy's own (the summary names its folder)
    ours = programme.Programme("p", "p.yaml", {cfg["study"]: cfg})
    verdicts = ours.folder / "verdicts.md"
    assert programme.main([*_summary(cfg, tmp_path)[:5], "--markdown", str(verdicts), "--studies", json.dumps(cfg)]) == 0
    assert steps.held_summary(cfg, folder) == (folder / "summary.md").read_text()
    assert programme.held_summary(ours) == verdicts.read_text()
    edited = copy.deepcopy(cfg)
    edited["analysis"]["alpha"] = 0.5
    with pytest.raises(IntegrityError, match="contrasts.parquet: written for config"):  # --touch: nothing rerun
        steps.held_summary(edited, folder)
    rerun(ANALYSIS[:-1], edited, folder)  # all but the summary
    with pytest.raises(IntegrityError, match=rf"{folder}/summary.md: not the summary the study's analysis gives now "
                                             rf"\(edited by hand, or left from an earlier config or training: this "
                                             rf"run did not write it\); allowed: the summary step's own \(snakemake "
                                             rf"--configfile STUDY --forcerun {folder}/summary.md\)"):
        steps.held_summary(edited, folder)
    with pytest.raises(IntegrityError, match=rf"{verdicts}: not the verdicts its studies' analysis gives now"):
        programme.held_summary(programme.Programme("p", "p.yaml", {cfg["study"]: edited}))
    steps.summary_step(edited, folder)
    assert "T1 (exploratory" in steps.held_summary(edited, folder)


def test_the_reports_first_page_is_held_to_the_summary_its_analysis_gives(results, tmp_path):
    """summary.rst is the report's first page (rules/targets.smk's REPORT_TEXT), which `snakemake --report` embeds as
    it stands: only summary.md was held, so an edited summary.rst (the default study's T1 turned from 'trails' to
    'beats') opened the report with a verdict its analysis does not give. It is held as summary.md is."""
    from mcgrpo.core.errors import IntegrityError
    cfg, root = results
    folder = tmp_path / "edited"
    copy_study(root, folder)
    steps.summary_step(cfg, folder)  # the copy's own (the summary names its folder)
    steps.held_summary(cfg, folder)
    path = folder / "summary.rst"
    text = path.read_text()
    assert "mc\\_k2 trails outcome" in text
    path.write_text(text.replace("mc\\_k2 trails outcome", "mc\\_k2 beats outcome"))
    with pytest.raises(IntegrityError, match=rf"{path}: not the summary the study's analysis gives now \(edited by "
                                             rf"hand, or left from an earlier config or training"):
        steps.held_summary(cfg, folder)
    path.unlink()
    with pytest.raises(IntegrityError, match=rf"{path}: not the summary the study's analysis gives now"):
        steps.held_summary(cfg, folder)


def _beside_an_older_analysis(results, tmp_path):
    """(cfg, the study's folder, a copy analysed at another margin: every contrast exploratory, a copy to restore
    its files into)."""
    cfg, root = results
    older, folder = tmp_path / "older", tmp_path / "restored"
    copy_study(root, older)
    copy_study(root, folder)
    rerun(ANALYSIS, {**cfg, "analysis": {**cfg["analysis"], "margin": 0.05}}, older)
    return cfg, root, older, folder


def test_the_summary_is_never_written_beside_a_table_its_analysis_does_not_give(results, tmp_path):
    """An older tables/headline.csv put back (here: one of the study analysed at another margin, every contrast
    exploratory) is newer than summary.md, so Snakemake reruns the summary alone: it was written, and printed, beside
    a headline of other verdicts without a word. The summary step now holds each table to its analysis files."""
    from mcgrpo.core.errors import IntegrityError
    cfg, root, older, folder = _beside_an_older_analysis(results, tmp_path)
    path = folder / "tables" / "headline.csv"
    path.write_bytes((older / "tables" / "headline.csv").read_bytes())
    with pytest.raises(IntegrityError, match=rf"{path}: line 2 \(T1\), column label: 'exploratory', but the study's "
                                             rf"analysis gives 'primary': edited by hand, or left from an earlier run "
                                             rf"of the study; allowed: the table its analysis gives now \(snakemake "
                                             rf"--configfile STUDY --forcerun tables"):
        steps.summary_step(cfg, folder)
    steps.tables_step(cfg, folder)
    steps.summary_step(cfg, folder)
    assert path.read_bytes() == (root / "tables" / "headline.csv").read_bytes()


def test_the_summary_is_never_written_beside_a_readable_copy_its_analysis_does_not_give(results, tmp_path):
    """The summary held each table's CSV to its analysis files, but not the markdown and HTML copies of the same
    table, which a reader opens and the report embeds: an older tables/headline.html put back (here: the study's at
    another margin, every contrast exploratory), or a headline.md edited by hand, was shown beside a CSV and a summary
    that say otherwise, without a word. Each copy is now held to the table its analysis gives, naming the file and its
    first differing line."""
    from mcgrpo.core.errors import IntegrityError
    cfg, root, older, folder = _beside_an_older_analysis(results, tmp_path)
    page = folder / "tables" / "headline.html"
    page.write_bytes((older / "tables" / "headline.html").read_bytes())
    with pytest.raises(IntegrityError, match=rf"{page}: line 4: '<p>The plan changed since its lock of .*', but the "
                                             rf"study's analysis gives '<p>The plan matches its lock of .*': edited by "
                                             rf"hand, or left from an earlier run of the study; allowed: the copy its "
                                             rf"analysis writes now beside the CSV \(snakemake --configfile STUDY "
                                             rf"--forcerun tables"):
        steps.summary_step(cfg, folder)
    page.write_bytes((root / "tables" / "headline.html").read_bytes())
    # one verdict edited in the markdown copy, its CSV and HTML as the analysis gives them
    md = folder / "tables" / "headline.md"
    lines = md.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("| T1 |"))
    assert "| confirmed |" in lines[at]
    edited = lines[at].replace("| confirmed |", "| not confirmed |")
    md.write_text("\n".join([*lines[:at], edited, *lines[at + 1:]]))
    with pytest.raises(IntegrityError, match=rf"{md}: line {at + 1}: '\| T1 \|.*\| not confirmed \|.*', but the "
                                             rf"study's analysis gives '\| T1 \|.*\| confirmed \|.*'"):
        steps.summary_step(cfg, folder)
    steps.tables_step(cfg, folder)
    steps.summary_step(cfg, folder)
    for ext in ("md", "html"):
        assert (folder / "tables" / f"headline.{ext}").read_bytes() == (root / "tables" / f"headline.{ext}").read_bytes()


def test_analysis_only_names_a_removed_budget_or_gradient_tests_file_before_any_job(tmp_path):
    """analysis_only leaves out the rules that make B and the gradient tests. Snakemake calls a job whose input is
    missing and unproducible up to date while its outputs exist (even under --forcerun), and a rerun for another
    reason failed on a later step's file without naming the cause: each is now named before any job, as a run's
    missing file is."""
    from conftest import SMALL_STUDY, snakemake
    cfg = {**copy.deepcopy(SMALL_STUDY), "results_dir": str(tmp_path / "results"),
           "gradient_tests": {"batches": 6, "arms": ["mc_k2"]}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(cfg))
    study = tmp_path / "results" / "mini"
    for arm, seed in [(arm, seed) for arm in cfg["arms"] for seed in cfg["seeds"]]:
        for name in ("iterations.parquet", "evals.parquet", "samples.parquet", "prompts.parquet", "run.json",
                     "alignment.parquet", "manifest.json"):  # what the rules check is there: no run is read
            (study / "runs" / arm / f"seed{seed}").mkdir(parents=True, exist_ok=True)
            (study / "runs" / arm / f"seed{seed}" / name).touch()
    budget, tests = study / "calibration" / "budget.parquet", study / "analysis" / "gradient_tests.parquet"
    for path in (study / "runs" / "store.parquet", budget, tests):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    assert snakemake(tmp_path, "-n", "analysis", "--config", "analysis_only=True", timeout=300).returncode == 0
    for path in (tests, budget):
        path.unlink()
        done = snakemake(tmp_path, "-n", "analysis", "--config", "analysis_only=True", timeout=300)
        said = (done.stdout + done.stderr).replace(str(tmp_path) + "/", "")
        assert done.returncode != 0 and (f"Missing input files for the analysis (analysis_only=True never trains): "
                                         f"{path.relative_to(tmp_path)}; allowed: ") in said, said[-2000:]
        path.touch()

def test_contrast_verb_reads_as_the_study_does_its_lock_s_alpha_clock_and_bootstrap(results, tmp_path, capsys):
    """A study read on the CPU clock at alpha 0.2 with its own bootstrap: `mcgrpo contrast` once read it on the wall
    clock at 0.05 with 10000 resamples of seed 0 (its defaults), so its equal-time mean, interval and verdict were
    another contrast's than the contrasts step's, without a word. Now it reads what the lock fixes, and says so."""
    cfg, root = results
    folder = _clocked(root, tmp_path, cpu=True)
    cfg = {**cfg, "analysis": {**cfg["analysis"], "clock": "cpu", "alpha": 0.2, "resamples": 300,
                               "bootstrap_seed": 7}}
    write_json(prereg.make_lock(cfg, datetime(2025, 1, 1, tzinfo=timezone.utc)), folder / "prereg.lock.json")
    steps.contrasts_step(cfg, folder)
    table = read_contract(folder / "analysis" / "contrasts.parquet", "contrasts").set_index("id")
    for basis, id_ in (("time", "T2"), ("tokens", "T1")):
        out = tmp_path / f"{basis}.parquet"
        assert main(["contrast", "--results", str(folder), "--a", "mc_k2", "--b", "outcome", "--basis", basis,
                     "--out", str(out)]) == 0
        one = read_contract(out, "contrasts").iloc[0]
        for column in ("mean", "ci_low", "ci_high", "p", "p_holm", "crossed_low", "crossed_high", "confirmed"):
            assert one[column] == pytest.approx(table.loc[id_, column], nan_ok=True), (basis, column)
    assert ("read with: margin 0.02 (the lock's), alpha 0.2 (the lock's), clock cpu (the lock's), resamples 300 "
            "(the lock's), bootstrap_seed 7 (the lock's)") in capsys.readouterr().out


def test_contrast_verb_with_the_study_labels_a_plan_changed_since_the_lock_as_the_workflow_does(results, tmp_path,
                                                                                                 capsys):
    """T1's prediction edited after the lock, without a dated amendment: the workflow reports it exploratory, while
    the verb, reading the lock's own plan, still printed it primary. With --config it labels and reads the contrast
    as the contrasts step does, and says whose analysis block it read with."""
    import yaml
    cfg, root = results
    folder = tmp_path / "edited"
    copy_study(root, folder)
    edited = copy.deepcopy(cfg)
    edited["plan"]["primary"][0]["direction"] = "greater"
    edited["results_dir"], edited["study"] = str(tmp_path), "edited"
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(edited))
    steps.contrasts_step(edited, folder)
    workflow = read_contract(folder / "analysis" / "contrasts.parquet", "contrasts").set_index("id").loc["T1"]
    assert workflow["label"] == "exploratory"
    verb = ["contrast", "--results", str(folder), "--a", "mc_k2", "--b", "outcome", "--out"]
    assert main([*verb, str(tmp_path / "lock.parquet")]) == 0
    assert read_contract(tmp_path / "lock.parquet", "contrasts").iloc[0]["label"] == "primary"  # cannot tell
    # but says that the study's tables do not: it once printed `primary` and the verdict without a word
    assert (f"warning: the study's last analysis ({folder}/analysis/prereg.json) reports T1 exploratory (demoted: "
            f"changed after the lock without a dated amendment), not primary: its config changed the plan since the "
            f"lock, which this reading of the lock alone cannot tell; give --config STUDY.yaml to label it as the "
            f"workflow does\n") in capsys.readouterr().out
    del edited["plan"]["primary"][0]  # T1 dropped from the plan since the lock: exploratory in the tables too
    steps.contrasts_step(studies.validate(edited), folder)
    assert main([*verb, str(tmp_path / "lock.parquet")]) == 0
    assert "reports T1 exploratory (no longer in the study's plan), not primary" in capsys.readouterr().out
    amended = copy.deepcopy(edited)  # T1 back, its new prediction covered by a dated amendment: primary still
    amended["plan"]["primary"].insert(0, {**cfg["plan"]["primary"][0], "direction": "greater"})
    amended["plan"]["amendments"] = [{"date": "2025-02-01", "note": "T1 predicts a gain", "ids": ["T1"]}]
    steps.contrasts_step(studies.validate(amended), folder)
    assert main([*verb, str(tmp_path / "lock.parquet")]) == 0
    assert ("reports T1 primary (amended 2025-02-01: T1 predicts a gain): its config changed the plan since the lock"
            in capsys.readouterr().out)
    status = read_json(folder / "analysis" / "prereg.json")  # its note edited away: the verb printed primary unsaid
    write_json({**status, "labels": {**status["labels"], "T1": {**status["labels"]["T1"], "note": ""}}},
               folder / "analysis" / "prereg.json")
    assert main([*verb, str(tmp_path / "lock.parquet")]) == 0
    assert (f"warning: {folder}/analysis/prereg.json: its content hashes to " in (out := capsys.readouterr().out)
            and "as written: edited since it was written: whether the study's config changed the plan since the lock "
                "cannot be told from it; give --config STUDY.yaml to label it as the workflow does" in out)
    write_json(status, folder / "analysis" / "prereg.json")
    assert main([*verb, str(tmp_path / "study.parquet"), "--config", str(study)]) == 0
    one = read_contract(tmp_path / "study.parquet", "contrasts").iloc[0]
    assert one["label"] == "exploratory" and one["mean"] == pytest.approx(workflow["mean"])
    assert "margin 0.02 (the study's)" in capsys.readouterr().out


def test_contrast_verb_reads_a_planned_contrast_given_other_than_planned_as_exploratory(results, tmp_path, capsys):
    """`--alpha 0.5` (or any reading the lock fixes, given otherwise) once printed T1 `primary`, Holm-adjusted, with
    `verdict: confirmed`, worded as the preregistered verdict, which the study's lock reads at 0.05; the workflow
    reports a contrast read so after the lock as exploratory. The verb now does, naming what departs; a value given
    as the lock's own keeps the planned test."""
    import yaml
    cfg, root = results
    verb = ["contrast", "--results", str(root), "--a", "mc_k2", "--b", "outcome", "--out"]
    assert main([*verb, str(tmp_path / "given.parquet"), "--alpha", "0.5", "--resamples", "200"]) == 0
    one, printed = read_parquet(tmp_path / "given.parquet").iloc[0], capsys.readouterr().out
    assert one["label"] == "exploratory" and pd.isna(one["confirmed"]) and one["robustness"] == ""
    assert ("verdict: exploratory (demoted: read with alpha 0.5 (given; the lock's: 0.05); resamples 200 (given; "
            "the lock's: 10000), not as planned; leave out --alpha, --resamples to read the planned test)\n") in printed
    assert main([*verb, str(tmp_path / "same.parquet"), "--alpha", "0.05", "--margin", "0.02"]) == 0
    same = read_parquet(tmp_path / "same.parquet").iloc[0]
    workflow = read_contract(root / "analysis" / "contrasts.parquet", "contrasts").set_index("id").loc["T1"]
    assert same["label"] == "primary" and same["p_holm"] == pytest.approx(workflow["p_holm"])
    assert "(demoted" not in capsys.readouterr().out
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(cfg))
    assert main([*verb, str(tmp_path / "study.parquet"), "--config", str(study), "--drift-gap", "0.3"]) == 0
    assert read_parquet(tmp_path / "study.parquet").iloc[0]["label"] == "exploratory"
    assert "(demoted: read with drift_gap 0.3 (given; the study's: 0.1), not as planned" in capsys.readouterr().out


def test_contrast_verb_never_writes_over_a_file_it_did_not_write(results, tmp_path, capsys):
    """--out once wrote wherever it pointed (a study's analysis/contrasts.parquet, a run's file), and an --out not
    ending in .parquet got its per-seed values written over the contrast itself. Both are refused, naming --out."""
    _, root = results
    folder = tmp_path / "copy"
    copy_study(root, folder)
    base = ["contrast", "--results", str(folder), "--a", "mc_k2", "--b", "outcome", "--out"]
    analysis = folder / "analysis" / "contrasts.parquet"
    before = analysis.read_bytes()
    assert main([*base, str(analysis)]) == 2
    assert f"{analysis} exists and was not written by `mcgrpo contrast`" in capsys.readouterr().err
    assert analysis.read_bytes() == before
    assert main([*base, str(tmp_path / "one.pq")]) == 2
    assert "allowed: a file name ending in .parquet" in capsys.readouterr().err
    mine = tmp_path / "one.parquet"
    assert main([*base, str(mine)]) == 0 and main([*base, str(mine)]) == 0  # its own output, written again
    assert read_contract(mine, "contrasts")["n"].tolist() == [3]


def test_contrast_verb_prints_the_verdict_with_its_robustness_and_the_study_s_warning(results, tmp_path, capsys):
    """The verb printed `verdict: not confirmed` bare where summary.md and the headline give the robustness step's
    label beside it, and, given the study, left out the runs trained under another config that every table names
    beside the verdict. Now it reads the same checks and words the verdict and its warning as the summary does."""
    import yaml
    from mcgrpo.analysis import summary
    cfg, root = results
    workflow = read_contract(root / "analysis" / "contrasts.parquet", "contrasts").set_index("id").loc["T2"]
    label = read_parquet(root / "analysis" / "robustness.parquet").set_index("id").loc["T2", "robustness"]
    verb = ["contrast", "--results", str(root), "--a", "mc_k2", "--b", "outcome", "--basis", "time", "--out"]
    assert main([*verb, str(tmp_path / "lock.parquet")]) == 0
    assert read_parquet(tmp_path / "lock.parquet").iloc[0]["robustness"] == label
    printed = capsys.readouterr().out
    said = next(line for line in (root / "summary.md").read_text().splitlines() if line.startswith("- T2"))
    assert f"result: {summary.result(workflow)} at {summary.basis_words(workflow)}\n" in printed
    assert f": {summary.result(workflow)} at {summary.basis_words(workflow)}: " in said
    assert f"verdict: {summary.judged(workflow, label)}\n" in printed and said.endswith(summary.judged(workflow, label))
    assert label.startswith(("robust", "fragile")) and label.split(":")[0] in summary.judged(workflow, label)
    retrained = copy.deepcopy(cfg)
    retrained["arms"]["mc_k2"]["credit"]["monte_carlo"]["k"] = 3  # mc_k2's runs: trained under another config
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(retrained))
    assert main([*verb, str(tmp_path / "study.parquet"), "--config", str(study)]) == 0
    stale = "runs trained with a config other than the current one: mc_k2/seed1, mc_k2/seed2, mc_k2/seed3"
    assert f"warning: {stale}\n" in capsys.readouterr().out
    assert read_parquet(tmp_path / "study.parquet").iloc[0]["warning"] == stale
