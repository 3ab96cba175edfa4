"""An ingested run through every analysis step (issue 47.1): its iterations have no groups, prompts or stage times
(TRL's logs do not hold them), and the study still analyses to its summary.

Fast tier: the breakdown of such a run (the groups table died with `cannot convert float NaN to integer`). Slow tier:
a study with an mcgrpo arm and an ingested arm (a hand-written TRL folder of tiny checkpoints) run by Snakemake to
its summary, every analysis step on the way.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import SMALL_STUDY, snakemake
from mcgrpo import studies
from mcgrpo.analysis import breakdown
from mcgrpo.core import config as study_config
from test_ingest import recipe_arguments, write_states

NAN = math.nan

# the words beside every verdict with an ingested arm (mcgrpo.analysis.summary.ingested_flags)
OWN_RECORDS = "mine's tokens and training time are its TRL logs' own records (ingested, not counted by mcgrpo)"


def _iterations(recorded: bool) -> dict[str, np.ndarray]:
    """Three iterations as mcgrpo records them, or as an ingested run does (groups, prompts, stages NaN)."""
    value = (lambda v: v) if recorded else (lambda v: NAN)
    rows = [{"tokens_total": t, **{f"t_{s}": value(0.5) for s in breakdown.STAGES},
             "groups_all_wrong": value(1), "groups_all_correct": value(0), "groups_mixed": value(1),
             "cand_pred_mean": NAN, "chosen_pred_mean": NAN, "prompts_distinct": value(2 * (i + 1))}
            for i, t in enumerate((100, 250, 400))]
    return {c: np.array([r[c] for r in rows], dtype=float) for c in breakdown.COLUMNS}


def test_a_run_without_groups_prompts_or_stage_times_is_broken_down_as_not_recorded():
    totals = breakdown.run_totals(_iterations(False), 250)
    assert totals["iterations"] == 2 and all(math.isnan(totals[f"groups_{g}"]) for g in breakdown.GROUPS)
    assert math.isnan(totals["prompts_distinct"]) and all(totals[s] == 0.0 or math.isnan(totals[s])
                                                          for s in breakdown.STAGES)
    recorded = breakdown.run_totals(_iterations(True), 250)
    assert (recorded["groups_all_wrong"], recorded["groups_mixed"], recorded["prompts_distinct"]) == (2, 2, 4)
    table = pd.DataFrame([{"arm": "mine", "seed": 1, **totals}, {"arm": "outcome", "seed": 1, **recorded}])
    shares = breakdown.group_shares(table).set_index("arm")
    assert math.isnan(shares.loc["mine", "share_mixed"]) and shares.loc["outcome", "share_mixed"] == 0.5


def _trl_folder(folder, tokenizer, model, mean_lengths=(20.5, 22.0, 21.875, 24.25, 23.0), saved=(2, 4, 5),
                lr: float = 1e-4):
    """A TRL output folder as GRPOTrainer leaves it: tiny checkpoints, each with its own trainer_state.json."""
    import torch
    from mcgrpo.train import models
    entries, seen = [], 0
    for step, length in enumerate(mean_lengths, start=1):
        seen += round(length * 8) + 80
        entries.append({"step": step, "loss": 0.01, "grad_norm": 0.5, "learning_rate": lr, "num_tokens": seen,
                        "completions/mean_length": length, "step_time": 1.5})
    for step in saved:
        trained = copy.deepcopy(model)
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(0.02 * step * torch.randn_like(p))
        models.save(trained, tokenizer, folder / f"checkpoint-{step}")
    write_states(folder, {"global_step": len(mean_lengths), "train_batch_size": 8, "logging_steps": 1,
                          "log_history": entries}, saved)


@pytest.mark.slow
def test_a_study_with_an_ingested_arm_runs_to_its_summary(tmp_path, tiny):
    """Snakemake plans the ingested arm's runs as train jobs that store the folders (no training), and every
    analysis step (drift, contrasts, curves, breakdown, figures, tables, robustness, summary) runs on them. Seed 2's
    folder trained at twice the recipe's learning rate, accepted by the arm: the headline and summary say so."""
    for seed in (1, 2):
        _trl_folder(tmp_path / "trl" / f"seed{seed}", tiny[1], tiny[0], lr=1e-4 * seed)
    ingested = {"trl_output": str(tmp_path / "trl/seed{seed}"), "accept_differences": True}
    study = {**copy.deepcopy(SMALL_STUDY), "arms": {"outcome": {}, "mine": {"trainer": {"ingested": ingested}}},
             "plan": {"primary": [{"id": "T1", "a": "mine", "b": "outcome"}]}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    cfg = studies.validate(copy.deepcopy(study))
    for seed in (1, 2):  # its settings, the recipe's but seed 2's learning rate (read without trl: its fields)
        recipe_arguments(tmp_path / "trl" / f"seed{seed}" / "checkpoint-5" / "training_args.bin",
                         study_config.run_config(cfg, "mine", seed), learning_rate=1e-4 * seed)
    done = snakemake(tmp_path, "--cores", "2")
    assert done.returncode == 0, done.stderr[-4000:]
    results = tmp_path / "results" / "mini"
    groups = pd.read_csv(results / "tables" / "groups.csv").set_index("arm")
    assert groups.loc["mine", ["share_mixed"]].isna().all() and groups.loc["outcome", "share_mixed"] >= 0
    headline = pd.read_csv(results / "tables" / "headline.csv")
    assert headline["n"].tolist() == [2] and "tokens_a" in headline
    assert headline["warning"].iloc[0].endswith(f"mine: recipe differences accepted (learning_rate); {OWN_RECORDS}")
    summary = (results / "summary.md").read_text()
    assert "T1" in summary and ("Warning: arm mine's runs of seed 2 were stored with recipe differences accepted "
                                "(accept_differences): learning_rate differs from the study's recipe") in summary
    record = json.loads((results / "runs" / "mine" / "seed1" / "run.json").read_text())
    assert record["ingested"]["stop_step"] == 4 and record["attempts"] == []
    assert not record["ingested"]["accepted_differences"]  # seed 1: the recipe's own


def test_runs_stored_with_recipe_differences_accepted_are_named_in_every_table_and_the_summary(tmp_path):
    """Issue 47.2: a run ingested with accept_differences says so in run.json; every table and the summary read
    from those runs say so too, naming the keys (read from run.json through the one reader of a study's runs), and
    the headline and contrasts tables mark each contrast with that arm. A study without such a run has no mark."""
    from datetime import datetime, timezone

    from conftest import SMALL_STUDY
    from mcgrpo import studies
    from mcgrpo.analysis import prereg, steps
    from mcgrpo.core import config as study_config
    from mcgrpo.core import study_runs
    from mcgrpo.core.store import write_json, write_parquet
    from test_runs import copy_study, linked_run, seal_run, write_iterations, write_run

    for seed in (1, 2, 3):  # what validation reads of each seed's folder: its log, one run's own
        folder = tmp_path / "trl" / f"seed{seed}"
        (folder / "checkpoint-4").mkdir(parents=True)
        (folder / "checkpoint-4" / "trainer_state.json").write_text(json.dumps(
            {"global_step": 4, "train_batch_size": 16, "logging_steps": 1, "log_history": [], "trial_name": seed}))
    ingested = {"trl_output": str(tmp_path / "trl" / "seed{seed}"), "accept_differences": True}
    cfg = studies.validate({**copy.deepcopy(SMALL_STUDY), "seeds": [1, 2, 3],
                            "arms": {"outcome": {}, "mine": {"trainer": {"ingested": ingested}}},
                            "plan": {"primary": [{"id": "T1", "a": "mine", "b": "outcome"}]}})
    root = tmp_path / "results"
    write_parquet(pd.DataFrame({"model": ["tiny"], "iteration": [0], "tokens_generated": [10], "B": [100]}),
                  root / "calibration" / "budget.parquet")
    write_json(prereg.make_lock(cfg, datetime(2025, 1, 1, tzinfo=timezone.utc)), root / "prereg.lock.json")
    rng = np.random.default_rng(0)
    keys = {1: ["train_batch_size", "learning_rate"], 2: ["train_batch_size"], 3: []}  # seed 3: the recipe's own
    for arm, seed in study_config.runs(cfg):
        run_dir = linked_run(root, arm, seed)
        _, evals = write_run(run_dir, rng.random((4, 6, 2)) < np.linspace(0.3, 0.6, 4)[:, None, None],
                             eval_sets=("heldout",))
        write_iterations(run_dir, evals)
        record = {"config": study_config.run_config(cfg, arm, seed)}
        if arm == "mine":  # the block ingest writes (mcgrpo.integrations.ingest.ingest)
            record["ingested"] = {"differences": [f"{k} ... (the log); the recipe's ..." for k in keys[seed]],
                                  "differing_keys": keys[seed], "accepted_differences": bool(keys[seed])}
        write_json(record, run_dir / "run.json")
        seal_run(run_dir)
    plain = tmp_path / "plain" / "results"  # a copy beside its own store
    copy_study(root, plain)
    assert study_runs.accepted_differences(root, list(cfg["arms"]), cfg["seeds"], cfg["arms"]) == {
        "mine": {1: ["train_batch_size", "learning_rate"], 2: ["train_batch_size"]}}
    for step in ("drift", "contrasts", "robustness", "curves", "breakdown", "tables", "summary"):
        getattr(steps, f"{step}_step")(cfg, root)

    warning = ("arm mine's runs of seeds 1, 2 were stored with recipe differences accepted (accept_differences): "
               "train_batch_size, learning_rate differ from the study's recipe, so every contrast with mine compares "
               "another recipe (run.json: ingested.differences)")
    assert f"Warning: {warning}." in (root / "summary.md").read_text()
    mark = "mine: recipe differences accepted (train_batch_size, learning_rate)"
    headline = pd.read_csv(root / "tables" / "headline.csv")
    assert headline["id"].tolist() == ["T1"] and headline["warning"].iloc[0] == f"{mark}; {OWN_RECORDS}"
    contrasts = pd.read_csv(root / "tables" / "contrasts.csv")
    assert len(contrasts) > 1 and contrasts["warning"].str.endswith(f"{mark}; {OWN_RECORDS}").all()
    for table in (root / "tables").glob("*.md"):
        assert f"Warning: {warning}." in table.read_text(), table.name
    assert warning in (root / "tables" / "headline.html").read_text().replace("&#x27;", "'")

    # the same study, its mine runs all of the recipe: no mark anywhere but what every ingested arm's verdict rests on
    for seed in (1, 2):
        run_json = plain / "runs" / "mine" / f"seed{seed}" / "run.json"
        record = json.loads(run_json.read_text())
        record["ingested"] = {"differences": [], "differing_keys": [], "accepted_differences": False}
        run_json.unlink()  # a file of the store beside: rewritten, then the run resealed
        write_json(record, run_json)
        seal_run(run_json.parent)
    for step in ("drift", "contrasts", "robustness", "curves", "breakdown", "tables", "summary"):
        getattr(steps, f"{step}_step")(cfg, plain)
    assert "recipe differences" not in (plain / "summary.md").read_text()
    assert not any("Warning: arm mine" in t.read_text() for t in (plain / "tables").glob("*.md"))
    assert (pd.read_csv(plain / "tables" / "headline.csv")["warning"] == OWN_RECORDS).all()
