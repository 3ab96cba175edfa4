"""Experiment tracking: every iteration and evaluation row reaches TensorBoard or offline W&B, read back with
each library's own reader; a tracked run trains the same numbers; a resumed run logs each step once; the
trainer logs into the run folder with no network at all; the config key is checked and retrains nothing."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, SMALL_STUDY
from mcgrpo import data, studies
from mcgrpo.core import config as study_config, store
from mcgrpo.core.budget import budget_table
from mcgrpo.core.errors import ConfigError
from mcgrpo.train import models, tracking
from mcgrpo.train.models.tiny import build_model, build_tokenizer
from mcgrpo.train.trainer import Trainer

TIMING = ("t_", "cpu_", "train_seconds", "train_cpu_seconds", "eval_seconds")


def _train(study, world, tracker=None, checkpoints=None, max_iterations=None):
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                        max_positions=96, seed=0)
    pool, evals = world
    trainer = Trainer(study_config.run_config(study, "outcome", 1), model, tokenizer, pool, evals, 600,
                      checkpoint_dir=checkpoints, config_hash="h", tracker=tracker)
    log = trainer.run(max_iterations)
    if tracker:
        tracker.close()
    return log.frames()


def _untimed(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if c.startswith(TIMING)])


@pytest.fixture(scope="module")
def untracked(world):
    return _train(studies.validate(copy.deepcopy(SMALL_STUDY)), world)


def _same_numbers(a: dict, b: dict) -> None:
    for name in ("iterations", "evals", "samples", "prompts"):
        pd.testing.assert_frame_equal(_untimed(a[name]), _untimed(b[name]), check_exact=True, obj=name)


def _tensorboard(folder) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every event
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_gets_every_row_and_the_run_trains_the_same_numbers(study, world, untracked, tmp_path):
    frames = _train(study, world, tracking.open_tracker("tensorboard", tmp_path, {}))
    _same_numbers(frames, untracked)
    logged = _tensorboard(tmp_path / "tracking")
    its, evals = frames["iterations"], frames["evals"]
    assert logged["train/loss"] == [(t, pytest.approx(v, rel=1e-6)) for t, v in zip(its["tokens_total"], its["loss"])]
    assert [s for s, _ in logged["train/iteration"]] == its["tokens_total"].tolist()
    acc = logged["eval/heldout/acc_default"]
    assert acc == [(t, pytest.approx(v, rel=1e-6)) for t, v in zip(evals["tokens_total"], evals["acc_default"])]
    assert "eval/heldout/eval_set" not in logged and "train/groups_mixed" in logged


def _wandb_records(path) -> list[bytes]:
    """The records of a W&B transaction log (`run-<id>.wandb`): a 7-byte header (':W&B', magic, version), then
    LevelDB-log blocks of 32 KiB whose chunks each carry crc32c (4 bytes), length (2) and type (1: whole, 2-4:
    first, middle, last part). W&B 0.31 reads them in wandb-core only, so the test reads them here."""
    raw, records, part, offset = path.read_bytes(), [], b"", 7
    assert raw[:4] == b":W&B"
    while offset + 7 <= len(raw):
        if 32768 - offset % 32768 < 7:  # a block's tail too short for a chunk header is padding
            offset += 32768 - offset % 32768
            continue
        length, kind = int.from_bytes(raw[offset + 4:offset + 6], "little"), raw[offset + 6]
        part += raw[offset + 7:offset + 7 + length]
        offset += 7 + length
        if kind in (1, 4):
            records.append(part)
            part = b""
    return records


def _wandb_history(folder) -> list[dict]:
    """The history rows of the one offline W&B run under `folder`, parsed as W&B's own protobuf records."""
    from wandb.proto import wandb_internal_pb2
    (path,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    rows = []
    for raw in _wandb_records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                         for item in record.history.item})
    return rows


def test_offline_wandb_gets_every_row_and_the_run_trains_the_same_numbers(study, world, untracked, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))  # the run folder wins: dir= is passed
    run = study_config.run_config(study, "outcome", 1)
    frames = _train(study, world, tracking.open_tracker("wandb", tmp_path, run))
    _same_numbers(frames, untracked)
    history = _wandb_history(tmp_path / "tracking")
    its, evals = frames["iterations"], frames["evals"]
    by_step = {row["_step"]: row for row in history}
    assert [by_step[t]["train/loss"] for t in its["tokens_total"]] == pytest.approx(its["loss"].tolist())
    assert [by_step[t]["eval/heldout/acc_default"] for t in evals["tokens_total"]] == pytest.approx(
        evals["acc_default"].tolist())
    assert not (tmp_path / "elsewhere").exists()


def test_a_resumed_run_shows_each_step_once(study, world, tmp_path):
    """The first attempt logs iterations past its last checkpoint (evaluations, hence checkpoints, only at 0
    and B here); the resumed one redoes them. TensorBoard shows each step once (purge_step), and the earlier
    attempt's event file is kept."""
    study = {**study, "evaluation": {**study["evaluation"], "per_budget": 1}}
    checkpoints, folder = tmp_path / "checkpoints", tmp_path
    first = _train(study, world, tracking.open_tracker("tensorboard", folder, {}), checkpoints, max_iterations=3)
    assert len(first["iterations"]) == 3 and len(first["evals"]) == 1  # 3 iterations past the checkpoint
    frames = _train(study, world, tracking.open_tracker("tensorboard", folder, {}), checkpoints)
    assert len(list((folder / "tracking").glob("events.out.tfevents.*"))) == 2
    logged = _tensorboard(folder / "tracking")
    assert [s for s, _ in logged["train/loss"]] == frames["iterations"]["tokens_total"].tolist()
    assert [s for s, _ in logged["eval/heldout/acc_default"]] == frames["evals"]["tokens_total"].tolist()


def _offline() -> list[str]:
    """A command prefix that runs with loopback as the only network, where this machine allows it."""
    probe = ["unshare", "--net", "true"]
    if shutil.which("unshare") and subprocess.run(probe, capture_output=True).returncode == 0:
        ip = shutil.which("ip") or "/usr/sbin/ip"
        return ["unshare", "--net", "sh", "-c", f'{ip} link set lo up 2>/dev/null; exec "$@"', "offline"]
    return []


@pytest.mark.slow
def test_train_logs_into_the_run_folder_with_no_network(tmp_path):
    cfg = studies.validate(copy.deepcopy(SMALL_STUDY))
    data.write(*data.build(cfg["task"]), tmp_path / "data", "")
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=0), tokenizer, tmp_path / "model")
    store.write_parquet(budget_table("tiny", [], 300, "config"), tmp_path / "budget.parquet")
    out = tmp_path / "runs" / "outcome" / "seed1"
    command = [*_offline(), sys.executable, "-m", "mcgrpo", "train", "--tracking", "wandb",
               "--run-json", json.dumps(study_config.run_config(cfg, "outcome", 1)), "--model", str(tmp_path / "model"),
               "--data", str(tmp_path / "data"), "--budget", str(tmp_path / "budget.parquet"), "--out", str(out)]
    path = os.pathsep.join([str(ROOT / "workflow"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "WANDB_MODE": "online", "WANDB_DIR": str(tmp_path / "elsewhere")}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["tracking"] == "wandb"
    history = _wandb_history(out / "tracking")
    tokens = store.read_contract(out / "iterations.parquet", "iterations")["tokens_total"]
    assert [r["_step"] for r in history if "train/loss" in r] == tokens.tolist()


def test_the_tracking_key_is_checked_and_is_no_part_of_a_run(study):
    assert study["tracking"] == "none"
    with pytest.raises(ConfigError, match=r"config key tracking: 'tensorbord' is not one of \['none', 'tensorboard'"):
        studies.validate({**copy.deepcopy(SMALL_STUDY), "tracking": "tensorbord"})
    tracked = studies.validate({**copy.deepcopy(SMALL_STUDY), "tracking": "wandb"})
    assert study_config.run_config(tracked, "mc_k2", 1) == study_config.run_config(study, "mc_k2", 1)
    with pytest.raises(ConfigError, match="allowed: none, tensorboard, wandb"):
        tracking.open_tracker("mlflow", ".", {})


def test_numbers_and_flags_become_scalars_and_text_is_left_out():
    row = {"loss": np.float64(0.5), "updates": 3, "finished": np.bool_(True), "eval_set": "heldout", "p": np.nan}
    out = tracking.scalars("train", row)
    assert out.keys() == {"train/loss", "train/updates", "train/finished", "train/p"}
    assert out["train/finished"] == 1.0 and np.isnan(out["train/p"])
