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
from mcgrpo.analysis import breakdown

NAN = math.nan


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


def _trl_folder(folder, tokenizer, model, mean_lengths=(20.5, 22.0, 21.875, 24.25, 23.0), saved=(2, 4, 5)):
    """A TRL output folder as GRPOTrainer leaves it: tiny checkpoints and the newest one's trainer_state.json."""
    import torch
    from mcgrpo.train import models
    entries, seen = [], 0
    for step, length in enumerate(mean_lengths, start=1):
        seen += round(length * 8) + 80
        entries.append({"step": step, "loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-4, "num_tokens": seen,
                        "completions/mean_length": length, "step_time": 1.5})
    for step in saved:
        trained = copy.deepcopy(model)
        with torch.no_grad():
            for p in trained.parameters():
                p.add_(0.02 * step * torch.randn_like(p))
        models.save(trained, tokenizer, folder / f"checkpoint-{step}")
    (folder / f"checkpoint-{max(saved)}" / "trainer_state.json").write_text(json.dumps(
        {"global_step": len(mean_lengths), "train_batch_size": 8, "logging_steps": 1, "log_history": entries}))


@pytest.mark.slow
def test_a_study_with_an_ingested_arm_runs_to_its_summary(tmp_path, tiny):
    """Snakemake plans the ingested arm's runs as train jobs that store the folders (no training), and every
    analysis step (drift, contrasts, curves, breakdown, figures, tables, robustness, summary) runs on them."""
    for seed in (1, 2):
        _trl_folder(tmp_path / "trl" / f"seed{seed}", tiny[1], tiny[0])
    study = {**copy.deepcopy(SMALL_STUDY),
             "arms": {"outcome": {}, "mine": {"trainer": {"ingested": {"trl_output": str(tmp_path / "trl/seed{seed}")}}}},
             "plan": {"primary": [{"id": "T1", "a": "mine", "b": "outcome"}]}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    done = snakemake(tmp_path, "--cores", "2")
    assert done.returncode == 0, done.stderr[-4000:]
    results = tmp_path / "results" / "mini"
    groups = pd.read_csv(results / "tables" / "groups.csv").set_index("arm")
    assert groups.loc["mine", ["share_mixed"]].isna().all() and groups.loc["outcome", "share_mixed"] >= 0
    headline = pd.read_csv(results / "tables" / "headline.csv")
    assert headline["n"].tolist() == [2] and "tokens_a" in headline
    assert "T1" in (results / "summary.md").read_text()
    record = json.loads((results / "runs" / "mine" / "seed1" / "run.json").read_text())
    assert record["ingested"]["stop_step"] == 4 and record["attempts"] == []
