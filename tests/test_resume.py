"""Runs survive preemption: killed or signalled training resumes to the same Parquet; writes are atomic."""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from conftest import ROOT
from mcgrpo.analysis import alike
from mcgrpo.train import attempts, checkpoint, models
from mcgrpo.core import config as study_config, layout, manifest as run_manifest, run_data, store
from mcgrpo import studies
from mcgrpo import data
from mcgrpo.core.budget import budget_table
from mcgrpo.core.errors import CheckpointMismatch, Interrupted
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
    cfg["arms"]["mc_k2"]["description"] = "Monte-Carlo credit, k = 2"
    data.write(*data.build(cfg["task"]), root / "data", "")
    from mcgrpo.train.models.tiny import build_tokenizer
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=0), tokenizer, root / "model")
    store.write_parquet(budget_table("tiny", [], 6000, "config"), root / "budget.parquet")

    def command(out, config=cfg, budget=root / "budget.parquet", data_dir=root / "data"):
        run = json.dumps(study_config.run_config(config, "mc_k2", 1))
        return [sys.executable, "-m", "mcgrpo", "train", "--run-json", run, "--model", str(root / "model"),
                "--data", str(data_dir), "--budget", str(budget), "--out", str(out)]
    reference = root / "uninterrupted"
    done = subprocess.run(command(reference), env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return command, reference, cfg


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


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGKILL, -signal.SIGKILL), (signal.SIGTERM, 75)])
def test_interrupted_run_resumes_to_the_same_parquet(inputs, tmp_path, sig, status):
    """Resumed under a config whose seeds were reordered and whose arm description was edited: neither
    changes what the run trains, so it resumes (logged) to the uninterrupted run's Parquet."""
    command, reference, cfg = inputs
    out = tmp_path / "run"
    assert _interrupt(command, out, sig) == status
    assert not (out / "run.json").exists() and not (out / "manifest.json").exists()  # unsealed: never read
    assert list((out / "checkpoints").glob("ckpt-*.pt"))
    edited = copy.deepcopy(cfg)
    edited["seeds"] = edited["seeds"][::-1]
    edited["arms"]["mc_k2"]["description"] = "edited after the run started"
    assert study_config.calibration_config(edited) == study_config.calibration_config(cfg)
    resumed = subprocess.run(command(out, edited), env=ENV, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr and "ckpt-" in resumed.stderr
    _assert_same_run(reference, out)
    first, second = json.loads((out / "run.json").read_text())["attempts"]
    if sig == signal.SIGKILL:
        assert first["outcome"] is None and "killed before it recorded an end" in resumed.stderr
    else:
        assert first["outcome"] == "interrupted" and first["signal"] == "SIGTERM"
        assert f"interrupted by SIGTERM after {first['iterations']} iterations" in resumed.stderr
    assert second["outcome"] == "finished" and second["resumed_at"] > 0
    # each attempt (the killed one too) recorded what it trained with, and both trained what the run kept
    assert first["stack"] == second["stack"] and first["stack"].items() <= json.loads(
        (out / "run.json").read_text())["versions"].items()
    assert first["machine"]["device"] == "cpu" and alike.kept([first, second]) == [first, second]
    assert run_manifest.problems(out) == []  # sealed last, over every file the resumed run wrote


SLOW_IMPORT = """import os, pathlib, time
if os.environ.get("SLOW_IMPORT"):  # in the job, not in the test that plans its run
    pathlib.Path(__file__).with_name("importing").touch()
    time.sleep(3)  # a plugin whose import takes seconds (it imports torch, a model, ...)
from mcgrpo import api


class Outcome:
    def __call__(self, rollouts, ctx):
        advantages = api.group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps)
        return api.Credit(api.per_token(advantages, rollouts))
"""


@pytest.mark.slow
def test_a_preemption_while_the_job_imports_its_plugin_ends_as_a_preemption(inputs, tmp_path, monkeypatch):
    """The job checks its plugins (imports them) before it builds its trainer: SIGTERM then is caught, the trainer
    checkpoints at its first boundary and the job exits 75 (requeued or retried, resuming), not 143 (failed)."""
    command, _, cfg = inputs
    (tmp_path / "slow_credit.py").write_text(SLOW_IMPORT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_credit", raising=False)  # forgotten after the test
    with_plugin = copy.deepcopy(cfg)
    with_plugin["arms"]["mc_k2"]["credit"] = {"slow_credit:Outcome": {}}
    planned = command(tmp_path / "run", with_plugin)
    monkeypatch.delitem(sys.modules, "slow_credit")
    out = tmp_path / "run"
    proc = subprocess.Popen(planned, env={**ENV, "PYTHONPATH": f"{ENV['PYTHONPATH']}:{tmp_path}", "SLOW_IMPORT": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (tmp_path / "importing").exists():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-3000:]
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=300)[1]
    assert proc.returncode == 75, err[-3000:]
    (first,) = json.loads((out / "checkpoints" / attempts.FILE).read_text())["attempts"]
    assert first["outcome"] == "interrupted" and first["signal"] == "SIGTERM" and first["iterations"] >= 1
    assert not (out / "run.json").exists()


@pytest.mark.slow
def test_a_finished_run_ended_by_its_job_is_written_again_not_trained_again(inputs, tmp_path):
    """SLURM may end a job (TIMEOUT) just after the trainer wrote its outputs; Snakemake then deletes them and
    retries. The final checkpoint is kept, so the retry rewrites the same files without a single iteration."""
    command, reference, _ = inputs
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    for name in ("iterations", "evals", "samples", "prompts"):  # what Snakemake removes after a failed job
        (out / f"{name}.parquet").unlink()
    (out / "run.json").unlink()
    again = subprocess.run(command(out), env=ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    frames, before = _frames(out), _frames(reference)
    for name in frames:  # the same rows, wall time included: nothing ran again
        pd.testing.assert_frame_equal(frames[name], before[name], check_exact=True, obj=name)
    attempts = json.loads((out / "run.json").read_text())["attempts"]
    assert [a["outcome"] for a in attempts] == ["finished", "finished"]
    assert attempts[1]["resumed_at"] == attempts[1]["iterations"] == attempts[0]["iterations"]
    assert alike.kept(attempts) == attempts[:1]  # the second trained nothing: its stack is no part of the run


@pytest.mark.slow
def test_an_interrupted_run_whose_budget_changed_never_resumes(inputs, tmp_path):
    """A recalibrated B under an interrupted run: resuming would train a hybrid of two budgets, so the run
    refuses (exit 2, which the train rule does not retry), naming the folder to delete."""
    command, _, _ = inputs
    out = tmp_path / "run"
    assert _interrupt(command, out, signal.SIGTERM) == 75
    store.write_parquet(budget_table("tiny", [], 7000, "config"), tmp_path / "recalibrated.parquet")
    done = subprocess.run(command(out, budget=tmp_path / "recalibrated.parquet"), env=ENV, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "budget B changed" in done.stderr and f"Delete {out / 'checkpoints'}" in done.stderr
    assert "Traceback" not in done.stderr and not (out / "run.json").exists()


@pytest.mark.slow
def test_a_run_records_its_problems_and_never_resumes_onto_other_ones(inputs, tmp_path):
    """A run records the problems and the model it started from (mcgrpo.core.run_data). The data folder prepared again (here: one held-out answer changed) while a run was interrupted: before, it
    resumed and finished half on each set of problems, and its run.json said nothing of either. Its run.json records
    the problems it read; its checkpoints belong to them, so it refuses (exit 2), naming the folder to delete."""
    command, reference, cfg = inputs
    given = reference.parent / "data"
    record = json.loads((reference / "run.json").read_text())
    recorded = record["data"]
    assert recorded == run_data.fingerprint(given, cfg["evaluation"]["sets"])
    assert record["model_sha256"] == models.fingerprint(*models.load(reference.parent / "model", "cpu"))
    assert sorted(recorded) == ["eval_heldout.parquet", "pool.parquet"]
    out = tmp_path / "run"
    assert _interrupt(command, out, signal.SIGTERM) == 75
    edited = tmp_path / "data"
    shutil.copytree(given, edited)
    heldout = store.read_contract(edited / "eval_heldout.parquet", "problems")
    heldout.loc[0, "answer"] = "-1"
    store.write_parquet(heldout, edited / "eval_heldout.parquet", "")
    done = subprocess.run(command(out, data_dir=edited), env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "the problems of its data folder" in done.stderr and f"Delete {out / 'checkpoints'}" in done.stderr
    assert "Traceback" not in done.stderr and not (out / "run.json").exists()


@pytest.mark.slow
def test_a_model_reference_of_another_source_is_refused(inputs, tmp_path):
    """results/<study>/models/<name>.json (resolve_model's reference) left from an earlier model.source, or
    edited: a run trained by hand (`mcgrpo train --config`) loaded the model the file named while its run.json
    recorded the config's, a run of another model than it says. The reference is held to the run's model.source."""
    command, reference, cfg = inputs
    model = reference.parent / "model"
    ref = tmp_path / "models" / "tiny.json"
    store.write_json({"name": "tiny", "source": {"path": str(model)}, "resolved": {"location": str(model)}}, ref)
    edited = copy.deepcopy(cfg)
    edited["model"]["source"] = {"path": str(tmp_path / "another-model")}
    argv = command(tmp_path / "run", edited)
    argv[argv.index("--model") + 1] = str(ref)
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr[-3000:]
    assert (f"{ref}: resolves model.source {{'path': '{model}'}}, but the run's config has model.source "
            f"{{'path': '{tmp_path / 'another-model'}'}}") in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run" / "run.json").exists()


def _trainer(study, world, tmp_path, config_hash="h1", budget=900):
    tokenizer = __import__("mcgrpo.train.models.tiny", fromlist=["x"]).build_tokenizer()
    model = build_model(tokenizer, 32, 1, 2, 64, 96, seed=0)
    pool, evals = world
    return Trainer(study_config.run_config(study, "outcome", 1), model, tokenizer, pool, evals, budget,
                   checkpoint_dir=tmp_path / "ckpt", config_hash=config_hash)


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(study, world, tmp_path, caplog):
    torch.set_num_threads(1)
    _trainer(study, world, tmp_path).run(max_iterations=3)
    manifests = sorted((tmp_path / "ckpt").glob("ckpt-*.json"))
    assert len(manifests) == checkpoint.KEEP
    newest = tmp_path / "ckpt" / store.read_json(manifests[-1])["file"]
    newest.write_bytes(newest.read_bytes()[:-100])  # a torn write
    with caplog.at_level("INFO", logger="mcgrpo"):
        state = checkpoint.latest(tmp_path / "ckpt", "h1")
    assert state["next_iteration"] == store.read_json(manifests[0])["iteration"]
    assert f"checkpoint {newest} skipped: {newest.name} does not match its sha256" in caplog.text
    assert f"resuming from {tmp_path / 'ckpt' / store.read_json(manifests[0])['file']}" in caplog.text
    for manifest in manifests:  # every checkpoint damaged: a logged restart from scratch
        (tmp_path / "ckpt" / store.read_json(manifest)["file"]).write_bytes(b"")
    caplog.clear()
    with caplog.at_level("INFO", logger="mcgrpo"):
        assert checkpoint.latest(tmp_path / "ckpt", "h1") is None
    assert "every checkpoint in" in caplog.text and "restarting the run from scratch" in caplog.text


def test_a_checkpoint_of_another_config_is_refused(study, world, tmp_path):
    _trainer(study, world, tmp_path).run(max_iterations=2)
    with pytest.raises(CheckpointMismatch, match="resuming would mix two runs"):
        _trainer(study, world, tmp_path, config_hash="h2").run()


@pytest.mark.parametrize("replace", ["weights", "tokenizer"])
def test_a_run_never_resumes_after_its_model_folder_was_replaced(study, world, tmp_path, replace):
    """A warm start's or a source's model folder replaced while a run was interrupted (another model's weights, or
    its tokenizer, copied in under the same file names; a folder without the warm start's record, which nothing else
    holds): the run's checkpoints belong to the weights and tokenizer it started from (job.checkpoint_identity), so it
    refuses to resume, and says the model may be why."""
    from mcgrpo.train.job import checkpoint_identity
    tokenizer = __import__("mcgrpo.train.models.tiny", fromlist=["x"]).build_tokenizer()
    folder = tmp_path / "model"
    models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=0), tokenizer, folder)
    data_prints = {"pool.parquet": "p" * 64}

    def trainer():
        model, tok = models.load(folder, "cpu")
        return Trainer(study_config.run_config(study, "outcome", 1), model, tok, *world, 900,
                       checkpoint_dir=tmp_path / "ckpt",
                       config_hash=checkpoint_identity("i" * 64, data_prints, models.fingerprint(model, tok)))
    trainer().run(max_iterations=2)
    other = tmp_path / "other"
    if replace == "weights":
        models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=1), tokenizer, other)
        shutil.copyfile(other / "model.safetensors", folder / "model.safetensors")
    else:
        (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(CheckpointMismatch, match=r"ckpt-00000002.pt: written by a run with identity .*or the weights "
                                                 r"and tokenizer of the model it starts from: its model folder "
                                                 r"replaced\); resuming would mix two runs"):
        trainer().run()


def test_another_runs_checkpoint_copied_in_under_this_runs_names_is_never_resumed(tmp_path, caplog):
    """Not a leak (shown, not changed): another run's checkpoint file renamed over this run's is skipped, since it
    does not match the sha256 its manifest records; copied in with its manifest (its `file` edited to this name), it
    belongs to the other run's identity and is refused."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    checkpoint.save({"next_iteration": 1}, ours, 1, "ours")
    checkpoint.save({"next_iteration": 2}, ours, 2, "ours")
    checkpoint.save({"next_iteration": 9}, theirs, 9, "theirs")
    shutil.copyfile(theirs / "ckpt-00000009.pt", ours / "ckpt-00000002.pt")
    with caplog.at_level("INFO", logger="mcgrpo"):
        assert checkpoint.latest(ours, "ours")["next_iteration"] == 1
    assert "ckpt-00000002.pt does not match its sha256" in caplog.text
    store.write_json({**store.read_json(theirs / "ckpt-00000009.json"), "file": "ckpt-00000002.pt"},
                     ours / "ckpt-00000002.json")
    with pytest.raises(CheckpointMismatch, match=r"ckpt-00000002.pt: written by a run with identity theirs, this "
                                                 r"run's is ours"):
        checkpoint.latest(ours, "ours")


@pytest.mark.parametrize("named", ["../results.parquet", "ckpt-00000002.pt"])
def test_a_checkpoint_manifest_naming_another_file_is_skipped_and_never_deletes_it(tmp_path, caplog, named):
    """A checkpoint's manifest (ckpt-N.json) whose `file` names another file (edited, or copied beside the wrong
    checkpoint): before, resuming loaded that file as checkpoint N, and the next save, dropping checkpoint N as an
    old one, deleted it: a file outside the folder, or another checkpoint. A manifest belongs to the checkpoint of its
    own name: it is skipped otherwise, and a save deletes only checkpoint files by their own names."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    victim = tmp_path / "results.parquet"
    victim.write_bytes(b"a run's result")
    for iteration in (1, 2):
        checkpoint.save({"next_iteration": iteration}, folder, iteration, "h1")
    first = folder / "ckpt-00000001.json"
    target = folder / named
    manifest = store.read_json(first)
    store.write_json({**manifest, "file": named, "sha256": checkpoint._sha256(target)}, first)
    with caplog.at_level("INFO", logger="mcgrpo"):
        assert checkpoint.latest(folder, "h1")["next_iteration"] == 2  # the newest, whose manifest is its own
    for iteration in (3, 4):
        checkpoint.save({"next_iteration": iteration}, folder, iteration, "h1")
    assert victim.read_bytes() == b"a run's result"
    assert sorted(p.name for p in folder.iterdir()) == ["ckpt-00000003.json", "ckpt-00000003.pt",
                                                        "ckpt-00000004.json", "ckpt-00000004.pt"]
    (folder / "ckpt-00000004.pt").write_bytes(b"")  # the newest damaged: the fallback is the next, by its own name
    store.write_json({**store.read_json(folder / "ckpt-00000003.json"), "file": "ckpt-00000004.pt"},
                     folder / "ckpt-00000003.json")
    with caplog.at_level("INFO", logger="mcgrpo"):
        assert checkpoint.latest(folder, "h1") is None
    assert "ckpt-00000003.json names ckpt-00000004.pt, not its own checkpoint ckpt-00000003.pt" in caplog.text


WRITER = """
import sys, numpy as np, pandas as pd
from mcgrpo.core import store
frame = pd.DataFrame({"x": np.arange(400_000), "y": np.random.default_rng(0).random(400_000)})
while True:
    store.write_parquet(frame, sys.argv[1])
"""


def test_a_killed_writer_never_leaves_a_partial_file(tmp_path):
    """Killed mid-write, the writer leaves the last whole file (and an orphan temporary file, which
    remove_orphans clears); the output is readable by others (0644 under umask 022)."""
    target = tmp_path / "evals.parquet"
    seen = 0
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], env=ENV)
        deadline = time.time() + 120  # the interpreter's start is slow on a loaded machine
        while not list(tmp_path.glob(".evals.parquet.*.tmp")) and not target.exists():
            assert time.time() < deadline and proc.poll() is None
            time.sleep(0.005)
        stop = time.time() + 0.5 + random.Random(attempt).uniform(0, 1)
        while time.time() < stop or (not seen and time.time() < deadline):
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
        store.remove_orphans(tmp_path)
        assert [p.name for p in tmp_path.iterdir()] == ["evals.parquet"]
    assert seen > 0
    old_mask = os.umask(0o022)
    try:
        store.write_json({}, tmp_path / "run.json")
    finally:
        os.umask(old_mask)
    assert (tmp_path / "run.json").stat().st_mode & 0o777 == 0o644


def test_readers_name_the_file_and_the_missing_column(tmp_path):
    path = store.write_parquet(pd.DataFrame({"iteration": [0]}), tmp_path / "iterations.parquet")
    with pytest.raises(store.SchemaError, match=r"iterations.parquet: missing required column\(s\) tokens_total"):
        store.read_contract(path, "iterations")
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "foreign.parquet")
    with pytest.raises(store.SchemaError, match="foreign.parquet: schema_version 'missing'"):
        store.read_parquet(tmp_path / "foreign.parquet")


@pytest.mark.slow
def test_a_user_error_in_training_is_not_retried(tmp_path):
    """Snakemake retries every failed job; the train rule's retry of a user error (exit 2) restores the
    failed attempt's log and stops at once, while a preemption (exit 75) would resume."""
    import yaml
    from conftest import SMALL_STUDY, snakemake as run_snakemake
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(SMALL_STUDY))

    def snakemake(*args):
        return run_snakemake(tmp_path, "--cores", "1", "--retries", "2", *args)
    assert snakemake("--until", "prepare_data").returncode == 0
    evals = tmp_path / layout.data_dir(studies.validate(copy.deepcopy(SMALL_STUDY))) / "eval_heldout.parquet"
    store.write_parquet(store.read_parquet(evals).head(1), evals)  # fewer problems than the set's size
    stored = layout.run_dir(studies.validate(copy.deepcopy(SMALL_STUDY)), "outcome", 1)
    run = tmp_path / stored
    done = snakemake(str(stored / "run.json"))
    assert done.returncode != 0
    log = (run / "train.log").read_text()
    assert "eval_heldout.parquet holds 1 problems; task.eval_sets.heldout.size asks for 6" in log
    assert log.rstrip().endswith("not retried: the failure above is not a preemption")
    assert "Traceback" not in log and (run / ".failed.log").exists()
    assert (done.stdout + done.stderr).count("Trying to restart job") == 2  # Snakemake's retries, both at once


def test_an_attempt_names_its_slurm_job_and_how_often_slurm_requeued_it(tmp_path, monkeypatch):
    """A preemption under PreemptMode=REQUEUE runs the same job id again: the record tells the runs apart."""
    from mcgrpo.train import attempts
    monkeypatch.setenv("SLURM_JOB_ID", "204")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    first = attempts.start(tmp_path)
    attempts.end(tmp_path, first, "interrupted", signal="SIGTERM", iterations=16)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    history = attempts.start(tmp_path)
    assert [a["slurm_restarts"] for a in history] == [0, 1]
    assert attempts.describe(history[0]).startswith("attempt 1 (SLURM job 204) on ")
    assert attempts.describe(history[1]).startswith("attempt 2 (SLURM job 204, requeued 1x) on ")
    del history[0]["slurm_restarts"]  # a record from before restarts were kept
    assert attempts.describe(history[0]).startswith("attempt 1 (SLURM job 204) on ")


def test_a_run_without_evaluation_sets_checkpoints_at_each_evaluation_point(study, world, tmp_path):
    """A stop requested on an evaluation point's iteration checkpoints there (evaluate(), not the loop's
    elif, takes that boundary): a trainer built without evaluation sets once stopped without any checkpoint."""
    torch.set_num_threads(1)
    trainer = _trainer(study, (world[0], None), tmp_path, budget=20)  # its first iteration passes a point
    trainer.stop_requested = True
    with pytest.raises(Interrupted, match="stopped on request after iteration 0"):
        trainer.run()
    assert store.read_json(sorted((tmp_path / "ckpt").glob("ckpt-*.json"))[-1])["iteration"] == 1
