"""Runs survive preemption: killed or signalled training resumes to the same Parquet; writes are atomic."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import ROOT
from mcgrpo.train import checkpoint, models
from mcgrpo.core import config as study_config, store
from mcgrpo import studies
from mcgrpo import data
from mcgrpo.core.budget import budget_table
from mcgrpo.core.errors import CheckpointMismatch
from mcgrpo.train.models.tiny import build_model
from mcgrpo.train.trainer import Trainer

STAGE_NAMES = ["select", "generate", "credit", "update", "sync"]
WALL_TIME = [*(f"{k}_{s}" for k in ("t", "cpu") for s in STAGE_NAMES), "train_seconds", "train_cpu_seconds",
             "eval_seconds"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "workflow")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Data, a small model and a budget on disk, and the train command for a run directory."""
    from conftest import SMALL_STUDY
    root = tmp_path_factory.mktemp("resume")
    cfg = studies.validate({**json.loads(json.dumps(SMALL_STUDY)), "budget": {"tokens": 6000},
                                 "evaluation": {"samples": 2, "per_budget": 12}})
    data.write(*data.build(cfg["task"]), root / "data", "")
    from mcgrpo.train.models.tiny import build_tokenizer
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=0), tokenizer, root / "model")
    store.write_parquet(budget_table("tiny", [], 6000, "config"), root / "budget.parquet")
    run = json.dumps(study_config.run_config(cfg, "mc_k2", 1))

    def command(out):
        return [sys.executable, "-m", "mcgrpo", "train", "--run-json", run, "--model", str(root / "model"),
                "--data", str(root / "data"), "--budget", str(root / "budget.parquet"), "--out", str(out)]
    reference = root / "uninterrupted"
    done = subprocess.run(command(reference), env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return command, reference


def _frames(run_dir):
    return {k: store.read_contract(run_dir / f"{k}.parquet", k) for k in ("iterations", "evals", "samples", "prompts")}


def _assert_same_run(a, b):
    fa, fb = _frames(a), _frames(b)
    for name in fa:
        keep = [c for c in fa[name].columns if c not in WALL_TIME]
        pd.testing.assert_frame_equal(fa[name][keep], fb[name][keep], check_exact=True, obj=name)


def _interrupt(command, out, sig) -> int:
    """Start a run, send `sig` at a random moment after its second checkpoint, return its status."""
    proc = subprocess.Popen(command(out), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while len(list((out / "checkpoints").glob("ckpt-*.json"))) < 2:
        assert proc.poll() is None, "the run ended before its second checkpoint"
        assert time.time() < deadline
        time.sleep(0.005)
    time.sleep(random.Random(int(sig)).uniform(0.0, 0.3))
    proc.send_signal(sig)
    proc.wait(timeout=300)
    return proc.returncode


@pytest.mark.parametrize("sig, status", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, 75)])
def test_interrupted_run_resumes_to_the_same_parquet(inputs, tmp_path, sig, status):
    command, reference = inputs
    out = tmp_path / "run"
    assert _interrupt(command, out, sig) == status
    assert not (out / "run.json").exists()
    assert list((out / "checkpoints").glob("ckpt-*.pt"))
    resumed = subprocess.run(command(out), env=ENV, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_same_run(reference, out)
    assert not (out / "checkpoints").exists()  # a finished run keeps its Parquet, not its checkpoints


def _trainer(study, world, tmp_path, config_hash="h1", budget=900):
    tokenizer = __import__("mcgrpo.train.models.tiny", fromlist=["x"]).build_tokenizer()
    model = build_model(tokenizer, 32, 1, 2, 64, 96, seed=0)
    pool, evals = world
    return Trainer(study_config.run_config(study, "outcome", 1), model, tokenizer, pool, evals, budget,
                   checkpoint_dir=tmp_path / "ckpt", config_hash=config_hash)


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(study, world, tmp_path):
    torch.set_num_threads(1)
    _trainer(study, world, tmp_path).run(max_iterations=3)
    manifests = sorted((tmp_path / "ckpt").glob("ckpt-*.json"))
    assert len(manifests) == checkpoint.KEEP
    newest = tmp_path / "ckpt" / store.read_json(manifests[-1])["file"]
    newest.write_bytes(newest.read_bytes()[:-100])  # a torn write
    state = checkpoint.latest(tmp_path / "ckpt", "h1")
    assert state["next_iteration"] == store.read_json(manifests[0])["iteration"]


def test_a_checkpoint_of_another_config_is_refused(study, world, tmp_path):
    _trainer(study, world, tmp_path).run(max_iterations=2)
    with pytest.raises(CheckpointMismatch, match="resuming would mix two configurations"):
        _trainer(study, world, tmp_path, config_hash="h2").run()


WRITER = """
import sys, numpy as np, pandas as pd
from mcgrpo.core import store
frame = pd.DataFrame({"x": np.arange(400_000), "y": np.random.default_rng(0).random(400_000)})
while True:
    store.write_parquet(frame, sys.argv[1])
"""


def test_a_killed_writer_never_leaves_a_partial_file(tmp_path):
    target = tmp_path / "evals.parquet"
    seen = 0
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], env=ENV)
        stop = time.time() + 1.5 + random.Random(attempt).uniform(0, 1)
        while time.time() < stop:
            if target.exists():
                try:
                    frame = store.read_parquet(target)
                except FileNotFoundError:
                    continue
                assert len(frame) == 400_000  # whole, never partial
                seen += 1
        proc.kill()
        proc.wait()
        if target.exists():
            assert len(store.read_parquet(target)) == 400_000
    assert seen > 0


def test_readers_name_the_file_and_the_missing_column(tmp_path):
    path = store.write_parquet(pd.DataFrame({"iteration": [0]}), tmp_path / "iterations.parquet")
    with pytest.raises(store.SchemaError, match=r"iterations.parquet: missing required column\(s\) tokens_total"):
        store.read_contract(path, "iterations")
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "foreign.parquet")
    with pytest.raises(store.SchemaError, match="foreign.parquet: schema_version 'missing'"):
        store.read_parquet(tmp_path / "foreign.parquet")
