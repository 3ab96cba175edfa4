"""What a user hands the analysis verbs run by hand (`mcgrpo contrast`, `mcgrpo power`) never changes a verdict or a
plan of seeds without a word: a paired.parquet from before it recorded the iterations read, a lock from before
locks held the recipe, an index whose seeds are not the lock's, a --config whose margin is not the lock's, a
--metric or --basis the analysis never read."""

import copy
import json
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import SMALL_STUDY
from mcgrpo import studies
from mcgrpo.analysis import informative, prereg
from mcgrpo.cli import main
from mcgrpo.core import config as study_config, sealed
from mcgrpo.core.errors import DataError
from mcgrpo.core.store import read_json, read_parquet, write_json, write_parquet
from mcgrpo.core.warmup import Warmup
from test_runs import linked_run, seal_run, write_run

PLAN = {"primary": [{"id": "T1", "a": "arm", "b": "outcome", "direction": "two-sided", "family": "H"}]}
FILTER = {"selection": {"critic_filter": {"candidates": 4, "keep": 1}}}  # 32 prompts of 2: 16 iterations of warm-up
DENSE = {"credit": {"monte_carlo": {"k": 2}}}
NEVER_CHOSE = ("arm arm's filter never chose a prompt before the readings: its warm-up (selection.critic_filter."
               "warmup_prompts 32, 16 iterations of 2 prompts) lasted through every seed's reading")


def add_runs(root, cfg, seeds):
    """Runs of `cfg`'s arms for `seeds` (evaluated at 0, 50, 100, 150 tokens, iterations 0-3: B = 100 is read after
    iteration 2), `arm` a few samples ahead of `outcome`, by seed, so that the difference spreads."""
    for arm in cfg["arms"]:
        for seed in seeds:
            folder = linked_run(root, arm, seed)
            table = np.random.default_rng(seed).random((4, 6, 2)) < 0.5
            if arm == "arm":
                table[2].flat[np.flatnonzero(~table[2])[:seed]] = True
            write_run(folder, table, eval_sets=("heldout",))
            write_json({"started": "2025-01-02T00:00:00+00:00", "config": study_config.run_config(cfg, arm, seed)},
                       folder / "run.json")
            seal_run(folder)


def analysed(tmp_path, spec, seeds=(1, 2, 3), **analysis):
    """A study of `arm` (`spec`) against `outcome`, locked before training and analysed by its own steps; returns
    (its results folder, its config, the config's file)."""
    root = tmp_path / "results"
    cfg = studies.validate({**copy.deepcopy(SMALL_STUDY), "seeds": list(seeds), "plan": copy.deepcopy(PLAN),
                            "arms": {"outcome": {}, "arm": spec},
                            "analysis": {"base": "outcome", "resamples": 200, **analysis}})
    write_parquet(pd.DataFrame({"model": ["tiny"], "iteration": [0], "tokens_generated": [10], "B": [100]}),
                  root / "calibration" / "budget.parquet")
    write_json(prereg.make_lock(cfg, datetime(2025, 1, 1, tzinfo=timezone.utc)), root / "prereg.lock.json")
    add_runs(root, cfg, seeds)
    for verb in ("drift", "contrasts", "robustness"):
        assert main([verb, "--config-json", json.dumps(cfg), "--results", str(root)]) == 0
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return root, cfg, path


def contrast(root, capsys, *more) -> tuple[pd.Series, str]:
    out = root.parent / "one.parquet"
    assert main(["contrast", "--results", str(root), "--a", "arm", "--b", "outcome", "--out", str(out), *more]) == 0
    return read_parquet(out).iloc[0], capsys.readouterr().out


def power(root, capsys, *more) -> tuple[int, str, str]:
    status = main(["power", "--results", str(root), "--basis", "tokens", *more])
    said = capsys.readouterr()
    return status, said.out, said.err


def relock(root, change):
    """The study's lock as an older mcgrpo wrote it: `change(material)`, its sha256 written again."""
    lock = read_json(root / "prereg.lock.json")
    change(lock["material"])
    lock["sha256"] = study_config.config_hash(lock["material"])
    write_json(lock, root / "prereg.lock.json")


def test_a_paired_file_from_before_it_recorded_iterations_is_refused_where_an_arm_filters(tmp_path, capsys):
    """analysis/paired.parquet written before it recorded iteration_a/iteration_b (same config, same runs): the filter's
    warm-up was not checked, so `power` planned 5 seeds for a filter that chose no prompt before the readings (the
    study's analysis: no number of seeds helps). Now the file is refused, by name, with the rerun that writes it."""
    root, cfg, study = analysed(tmp_path, FILTER)
    status, out, _ = power(root, capsys, "--config", str(study))
    assert status == 0 and "no number of seeds helps: " + NEVER_CHOSE in out
    path = root / "analysis" / "paired.parquet"
    _without_iterations(path)
    for more in ((), ("--config", str(study))):
        status, out, err = power(root, capsys, *more)
        assert status == 2 and "arm-vs-outcome" not in out
        assert (f"{path}: records no iteration_a (written before paired readings recorded the iterations they "
                f"weigh), so whether a filter had chosen a prompt by the reading cannot be told for arm-vs-outcome "
                f"(arm arm: selection.critic_filter.warmup_prompts 32, 16 iterations of 2 prompts); allowed: the file "
                f"the study's contrasts step writes now (snakemake --configfile STUDY --forcerun {path})") in err
    # any reader of such readings with the study's warm-ups (the tables' seeds planner) refuses them too
    pairs = read_parquet(path)
    with pytest.raises(DataError, match="analysis/paired.parquet: records no iteration_a"):
        informative.check(pairs[pairs["basis"] == "tokens"], {"arm": Warmup("arm", "critic_filter", 32, 2)})
    assert informative.check(pairs[pairs["basis"] == "tokens"], {})[0] == ""  # no filter: nothing to read there


def _without_iterations(path) -> None:
    """paired.parquet as a contrasts step that recorded no iterations wrote it: its rows sealed (sealed.KEY) as read."""
    old = pq.read_table(path)
    new = old.drop(["iteration_a", "iteration_b"])
    meta = {**old.schema.metadata, sealed.KEY.encode(): sealed.of_rows(new).encode()}
    pq.write_table(new.replace_schema_metadata(meta), path)


def test_a_paired_file_without_iterations_is_read_where_no_arm_filters(tmp_path, capsys):
    root, _, study = analysed(tmp_path, DENSE)
    path = root / "analysis" / "paired.parquet"
    _without_iterations(path)
    status, out, _ = power(root, capsys, "--config", str(study))
    assert status == 0 and "| arm-vs-outcome | tokens | acc_default |" in out


@pytest.mark.parametrize("lock", ["before the experiment", "none"])
def test_the_warm_up_is_read_from_the_runs_where_the_lock_holds_no_recipe(tmp_path, capsys, lock):
    """A lock from before locks covered the experiment (recipe included), or none: the verbs read no warm-up, so a
    filter that chose no prompt before the readings was read `not confirmed, and fragile` by `contrast` and planned
    5 seeds by `power`, where the study's analysis says uninformative. Now its runs' config gives the warm-up."""
    root, _, study = analysed(tmp_path, FILTER)
    mine = read_parquet(root / "analysis" / "contrasts.parquet").set_index("id").loc["T1"]
    assert mine["uninformative"].startswith(NEVER_CHOSE)
    if lock == "none":
        (root / "prereg.lock.json").unlink()
    else:
        relock(root, lambda m: m.pop("experiment"))
    row, out = contrast(root, capsys)
    assert row["uninformative"] == mine["uninformative"] and np.isnan(row["p"])
    assert f"verdict: uninformative: {NEVER_CHOSE}" in out
    status, out, _ = power(root, capsys)
    assert status == 0 and "no number of seeds helps: " + NEVER_CHOSE in out
    # paired.parquet without its runs: where no lock names the recipe the warm-up cannot be read, said so by name
    (root / "runs" / "store.parquet").unlink()
    status, out, err = power(root, capsys)
    assert status == 2 and "arm-vs-outcome" not in out
    said = "no lock" if lock == "none" else "the lock holds no recipe"
    assert (f"{root / 'runs' / 'store.parquet'}: not found, and {said} says which arms filter their prompts, so no filter's warm-up can be checked; allowed: the "
            f"results folder as the workflow wrote it, its runs' index included") in err


def test_seeds_the_lock_does_not_fix_are_said_and_the_studys_config_reads_its_own(tmp_path, capsys):
    """The study's config went from 3 seeds to 4 after the lock and seed 4 was trained (the index lists it): from the
    results folder alone, `contrast` read T1 on 4 seeds as primary and confirmed without a word, where the workflow
    reads it exploratory (seeds changed without a dated amendment). Now a warning says so. And --config reads the
    seeds the study's config names, as the workflow's contrasts step does, not every seed the index lists."""
    root, cfg, study = analysed(tmp_path, DENSE)
    add_runs(root, cfg, [4])
    row, out = contrast(root, capsys)
    assert row["label"] == "primary" and row["n"] == 4
    warning = ("read on seeds 1, 2, 3, 4 (those runs/store.parquet lists), but the lock fixes seeds 1, 2, 3: the "
               "study's config changed its seeds since the lock, which the workflow reads as exploratory without a "
               "dated amendment; give --config STUDY.yaml to label it as the workflow does")
    assert row["warning"] == warning and f"warning: {warning}" in out
    row, out = contrast(root, capsys, "--config", str(study))  # the study's config: seeds 1-3, as its analysis read
    mine = read_parquet(root / "analysis" / "contrasts.parquet").set_index("id").loc["T1"]
    assert row["n"] == 3 and row["mean"] == pytest.approx(mine["mean"]) and row["label"] == "primary"
    assert row["warning"] == "" and "warning:" not in out
    four = tmp_path / "four.yaml"
    four.write_text(yaml.safe_dump({**cfg, "seeds": [1, 2, 3, 4]}))
    row, out = contrast(root, capsys, "--config", str(four))
    assert row["n"] == 4 and row["label"] == "exploratory" and "demoted: seeds changed" in out
    row, _ = contrast(root, capsys, "--alpha", "0.1")  # demoted already: the seeds change nothing
    assert row["label"] == "exploratory" and row["warning"] == ""


def test_power_plans_with_the_studys_margin_and_alpha_given_its_config(tmp_path, capsys):
    """The study's power table plans with its config's analysis.margin and alpha; given that config, `power` planned
    with the lock's (margin 0.02, where the study's, amended, is 0.05)."""
    root, cfg, study = analysed(tmp_path, DENSE, margin=0.05, alpha=0.1)
    relock(root, lambda m: m.update(margin=0.02))
    relock(root, lambda m: m["experiment"]["analysis"].update(alpha=0.05))
    status, out, _ = power(root, capsys, "--config", str(study))
    assert status == 0 and "planned with: margin 0.05 (the study's), alpha 0.1 (the study's)" in out
    assert "within ±5 points" in out and "at alpha 0.1;" in out
    status, out, _ = power(root, capsys)
    assert status == 0 and "planned with: margin 0.02 (the lock's), alpha 0.05 (the lock's)" in out


@pytest.mark.parametrize("more, words", [
    (("--metric", "acc_greedy"), "--metric acc_greedy: {path} holds no readings of it; allowed: acc_default, "
                                 "acc_strict, pass@2_default"),
    (("--basis", "time_c"), "--basis time_c: {path} holds no acc_default readings on it; allowed: time, tokens, "
                            "updates"),
])
def test_power_refuses_a_metric_or_basis_the_analysis_never_read(tmp_path, capsys, more, words):
    """Before, an empty table: nothing to plan, and no word why."""
    root, _, _ = analysed(tmp_path, DENSE)
    status = main(["power", "--results", str(root), *more])
    assert status == 2
    assert words.format(path=root / "analysis" / "paired.parquet") in capsys.readouterr().err
