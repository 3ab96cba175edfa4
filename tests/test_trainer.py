"""The training loop: budget stop, evaluation schedule, common random numbers, logged contracts."""

import importlib.util
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import cpu_workers
from conftest import ROOT, edited_study
from mcgrpo import api, studies
from mcgrpo.core import config as study_config
from mcgrpo.core.budget import budget_from_tokens, budget_table
from mcgrpo.core.errors import ConfigError
from mcgrpo.train.evaluation import eval_points
from mcgrpo.train.models.tiny import build_model
from mcgrpo.core.store import COLUMNS
from mcgrpo.train.trainer import Trainer


def test_eval_points_are_every_multiple_an_iteration_crossed():
    B, n = 1600, 16  # multiples every 100 tokens
    assert list(eval_points(0, 100, B, n)) == [1]
    assert list(eval_points(0, 99, B, n)) == []
    assert list(eval_points(99, 101, B, n)) == [1]
    assert list(eval_points(100, 199, B, n)) == []       # 100 was evaluated already
    assert list(eval_points(150, 420, B, n)) == [2, 3, 4]  # one iteration crossed three multiples


def test_budget_is_multiplier_times_mean_rounded_up():
    assert budget_from_tokens([1000, 2000, 3000], 48, 250_000) == 250_000
    assert budget_from_tokens([10_000, 12_000, 14_000], 48, 250_000) == 750_000  # 576,000 -> 750,000
    assert budget_from_tokens([100, 101], 16, 1000) == 2000
    with pytest.raises(ValueError, match="at least one"):
        budget_from_tokens([], 48, 1000)
    # a multiplier meant per thousand: B below one calibrated iteration (before, every run stopped after one)
    with pytest.raises(ConfigError, match=r"config key budget.multiplier: 0.048 gives B = 100 generated tokens "
                                          r"\(round_to 100\), below one iteration of the calibration \(2000 tokens on "
                                          r"average over 3\).*allowed: a multiplier of at least 1"):
        budget_from_tokens([1000, 2000, 3000], 0.048, 100)
    assert budget_from_tokens([1000, 2000, 3000], 0.5, 5000) == 5000  # round_to lifts it past one iteration
    table = budget_table("tiny", [5, 7], 1000, "calibrated")
    assert list(table.columns[:4]) == list(COLUMNS["budget"]) and table["B"].tolist() == [1000, 1000]


def _trainer(study, tiny, world, arm="outcome", seed=1, budget=600):
    model, tokenizer = tiny
    pool, evals = world
    return Trainer(study_config.run_config(study, arm, seed), model, tokenizer, pool, evals, budget)


def test_run_stops_at_first_iteration_boundary_at_or_after_budget(study, tiny, world):
    log = _trainer(study, tiny, world).run()
    tokens = [row["tokens_total"] for row in log.iterations]
    assert tokens[-1] >= 600 > tokens[-2]
    assert all(b > a for a, b in zip(tokens, tokens[1:]))
    assert [row["updates"] for row in log.iterations] == list(range(1, len(tokens) + 1))


def test_evaluations_follow_the_schedule(study, tiny, world):
    log = _trainer(study, tiny, world).run()
    frames = log.frames()
    evals, its = frames["evals"], frames["iterations"]
    assert evals["eval_index"].tolist() == list(range(len(evals)))
    assert evals["tokens_total"].iloc[0] == 0 and evals["train_seconds"].iloc[0] == 0
    step = 600 / 4
    for k in range(1, len(evals)):  # evaluation k: the first boundary at or after k B / per_budget
        assert evals["tokens_total"].iloc[k] == its["tokens_total"][its["tokens_total"] >= k * step].iloc[0]
    assert evals["tokens_total"].iloc[-1] >= 600 and len(evals) == 4 + 1
    # evaluation time is not training time
    assert its["train_seconds"].iloc[-1] == pytest.approx(
        its[["t_select", "t_generate", "t_credit", "t_update", "t_sync"]].to_numpy().sum())


def test_an_iteration_that_crosses_several_points_records_each_of_them(study, tiny, world):
    """Monte-Carlo iterations spend many tokens: with 16 points per B, one iteration crosses several.
    Every point keeps its own index, so index k is the same position in every arm."""
    study = {**study, "evaluation": {**study["evaluation"], "per_budget": 16}}
    frames = _trainer(study, tiny, world, arm="mc_k2").run().frames()
    evals, its, samples = frames["evals"], frames["iterations"], frames["samples"]
    assert evals["eval_index"].tolist() == list(range(17))
    step = 600 / 16
    reading = [its["tokens_total"][its["tokens_total"] >= k * step].iloc[0] for k in range(1, 17)]
    assert evals["tokens_total"].iloc[1:].tolist() == reading
    assert len(set(reading)) < len(reading)  # some boundary was the first after two points
    twice = evals[evals["tokens_total"].duplicated(keep=False) & (evals["tokens_total"] > 0)]
    first, second = twice["eval_index"].iloc[:2]
    a, b = (samples[samples["eval_index"] == i].drop(columns="eval_index").reset_index(drop=True) for i in (first, second))
    assert a.equals(b)  # evaluated once, recorded for both points
    assert twice["eval_seconds"].iloc[0] == 0.0


def test_logged_frames_hold_their_contracts(study, tiny, world):
    frames = _trainer(study, tiny, world, arm="mc_k2").run().frames()
    for name, frame in frames.items():
        missing = set(COLUMNS[name]) - set(frame.columns)
        assert not missing, (name, missing)
    its = frames["iterations"]
    assert (its["tokens_continuation"] > 0).all()
    assert (its["tokens_total"] == its[["tokens_rollout", "tokens_continuation", "tokens_discarded"]].sum(axis=1)).all()
    assert (its[["groups_all_wrong", "groups_all_correct", "groups_mixed"]].sum(axis=1) == 2).all()


def test_all_arms_of_a_seed_draw_identical_samples_at_tokens_zero(study, tiny, world):
    _, tokenizer = tiny

    def samples_at_zero(arm, seed):
        model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_positions=96, seed=0)
        trainer = _trainer(study, (model, tokenizer), world, arm=arm, seed=seed)
        trainer.evaluate()
        return trainer.log.frames()["samples"]

    outcome, mc = samples_at_zero("outcome", 1), samples_at_zero("mc_k2", 1)
    assert outcome.equals(mc)
    other_seed = samples_at_zero("outcome", 2)
    assert not outcome["text"].equals(other_seed["text"])


def test_a_run_is_reproducible(study, tiny, world):
    _, tokenizer = tiny

    def run():
        model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_positions=96, seed=0)
        return _trainer(study, (model, tokenizer), world, budget=300).run().frames()

    a, b = run(), run()
    timing = [c for c in a["iterations"].columns if c.startswith(("t_", "cpu_"))] + ["train_seconds",
                                                                                   "train_cpu_seconds"]
    assert a["iterations"].drop(columns=timing).equals(b["iterations"].drop(columns=timing))
    assert a["samples"].equals(b["samples"])


def test_each_stage_is_clocked_in_wall_and_process_cpu_time(study, tiny, world):
    its = _trainer(study, tiny, world).run().frames()["iterations"]
    stages = ["select", "generate", "credit", "update", "sync"]
    assert its["train_cpu_seconds"].iloc[-1] == pytest.approx(its[[f"cpu_{s}" for s in stages]].to_numpy().sum())
    assert (its["train_cpu_seconds"].diff().fillna(its["train_cpu_seconds"]) >= 0).all()
    assert its["train_cpu_seconds"].iloc[-1] > 0



@dataclass(kw_only=True)
class RefitsWhenTold(api.StreamSelector):
    """A selector that learns from the trained groups in `observe`, taking `seconds` of wall and CPU time there (a
    refit), and none in `select`."""
    seconds: float = 0.05

    def observe(self, iteration, selection, group_means, view):
        end = time.process_time() + self.seconds
        while time.process_time() < end:
            pass


def test_what_a_selector_learns_from_its_groups_is_training_time(tiny, world):
    """observe is selection's work: its seconds are the select stage's, on both clocks, as the paper times everything
    but evaluation, logging and checkpointing (before, it ran outside the stage clock and a refit there was free)."""
    cfg = studies.validate(edited_study(arms={"outcome": {}, "refits": {"selection": {
        f"{__name__}:RefitsWhenTold": {"seconds": 0.05}}}}))
    model, tokenizer = tiny
    its = Trainer(study_config.run_config(cfg, "refits", 1), model, tokenizer, world[0], None, 300,
                  arm="refits").run().frames()["iterations"]
    assert (its["cpu_select"] >= 0.045).all() and (its["t_select"] >= 0.045).all(), its[["t_select", "cpu_select"]]
    assert its["train_seconds"].iloc[-1] >= 0.045 * len(its)


@pytest.mark.parametrize("built", ["from mcgrpo.train.selection.predictors import PromptCritic as C; C()",
                                   "from mcgrpo.train.credit.critic import Critic as C; C()"])
def test_a_fit_imports_nothing_inside_the_stage_clock(built):
    """The prompt critic (select stage) and the learned critic (credit stage) import scikit-learn when built, outside
    the stage clock: imported at their first fit, its 1-2 s were training time, and again in every attempt that
    resumed the run (measured: a filter run resumed once timed 3.8 s against 2.7 s uninterrupted)."""
    code = ("import sys\n" + built + "\nprint('sklearn.linear_model' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "workflow")})
    assert done.stdout.strip() == "True", done.stderr[-2000:]


def test_a_resumed_run_starts_its_math_verify_worker_before_it_trains(study, tiny, world, tmp_path, monkeypatch):
    """A fresh run's evaluation 0 starts the math-verify worker (importing sympy, seconds); a resumed run has no
    evaluation 0, so its first reward check would start it inside the generate stage, as training time. The trainer
    starts it before its first iteration, fresh or resumed."""
    model, tokenizer = tiny
    pool, evals = world

    def trainer():
        return Trainer(study_config.run_config(study, "outcome", 1), model, tokenizer, pool, evals, 600,
                       checkpoint_dir=tmp_path / "ckpt", config_hash="h")
    trainer().run(max_iterations=2)
    resumed, started = trainer(), []

    class Worker:
        def ready(self):
            started.append(len(resumed.log.iterations))
    monkeypatch.setattr("mcgrpo.train.trainer.rule_backend", lambda rule: Worker())
    resumed.run(max_iterations=3)
    assert resumed.resumed_at == 2 and started == [2]  # once, before the resumed run's first iteration


BUSY = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"
SERVE = "import sys, time\nfor line in sys.stdin:\n    end = time.process_time() + float(line)\n" \
        "    while time.process_time() < end: pass\n    print('done', flush=True)\n"


# A worker that starts a child of its own, which works `seconds` of CPU, says so and its pid, and stays
SPAWN = "import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', sys.argv[1]])\nsys.stdin.read()\n"
GRANDCHILD = BUSY + "import os, time\nprint('done', os.getpid(), flush=True)\ntime.sleep(120)\n"


def _serve() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            bufsize=1)


def _ask(worker: subprocess.Popen, seconds: float) -> None:
    worker.stdin.write(f"{seconds}\n")
    assert worker.stdout.readline() == "done\n"


@pytest.mark.parametrize("how", ["ended", "helper", "multiprocessing", "multiprocessing, ended", "unnamed",
                                 "unnamed, started before training", "a worker's child"])
def test_the_cpu_clock_counts_a_stages_work_in_another_process(how):
    """A stage's work done in a child process is its CPU time too (the math-verify worker checks every reward a
    Monte-Carlo arm's continuations earn): a child that ended and was waited for, a running worker named as a helper,
    one started through multiprocessing, and a running one nobody named (a plugin's worker, started in the stage or
    before training, or a worker's own child), found as the stage ends. Before, the CPU clock read this process
    alone and saw none of it; then, the unnamed ones it did not see until they were waited for."""
    from mcgrpo.core import clock
    stage = clock.StageClock()
    if how == "unnamed":
        with stage.stage("credit"):
            worker = _serve()
            _ask(worker, 0.3)
        worker.kill()
        worker.wait()
    elif how == "unnamed, started before training":
        worker = _serve()
        _ask(worker, 0.3)  # before training: its start and this work are no stage's
        clock.discover()
        with stage.stage("credit"):
            _ask(worker, 0.3)
        worker.kill()
        worker.wait()
        cpu = stage.lap()["cpu_credit"]
        assert 0.25 <= cpu < 0.5, cpu  # the stage's work, not what the worker did before training
        return
    elif how == "a worker's child":
        with stage.stage("credit"):
            worker = subprocess.Popen([sys.executable, "-c", SPAWN, GRANDCHILD.format(seconds=0.3)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
            said, pid = worker.stdout.readline().split()
            assert said == "done"
        os.kill(int(pid), signal.SIGKILL)
        worker.kill()
        worker.wait()
    elif how == "ended":
        with stage.stage("credit"):
            subprocess.run([sys.executable, "-c", BUSY.format(seconds=0.3)], check=True)
    elif how == "helper":
        worker = _serve()
        clock.helper(worker.pid)
        try:
            with stage.stage("credit"):
                _ask(worker, 0.3)
        finally:
            worker.kill()
            worker.wait()
            clock.helper(worker.pid, running=False)
    elif how == "multiprocessing, ended":  # its last work and its end within the stage, not joined by its end
        import multiprocessing
        context = multiprocessing.get_context("spawn")
        ask, told = context.Queue(), context.Queue()
        child = context.Process(target=cpu_workers.serve, args=(ask, told))
        child.start()
        assert told.get(timeout=120) == "ready"
        with stage.stage("credit"):
            ask.put(0.3)
            ask.put(None)
            assert told.get(timeout=120) == "done"
            _ended_unjoined(child.pid)  # the clock's last reading finds it ended
        child.join(timeout=60)
    else:
        import multiprocessing
        context = multiprocessing.get_context("spawn")
        ask, told = context.Queue(), context.Queue()
        child = context.Process(target=cpu_workers.serve, args=(ask, told))
        child.start()
        try:
            assert told.get(timeout=120) == "ready"
            with stage.stage("credit"):
                ask.put(0.3)
                assert told.get(timeout=120) == "done"
        finally:
            ask.put(None)
            child.join(timeout=60)
    cpu = stage.lap()["cpu_credit"]
    assert 0.25 <= cpu < 2.0, cpu


# In a fresh interpreter (as a train job is): the process the subreaper of what it starts (adopting) and one stage, in
# which a shell starts a Python in the background and ends at once, orphaning it; the orphan works 0.3 s of CPU, says
# so, then stays ("running") or ends ("ended"). Prints the stage's CPU seconds and whether the orphan is left after
# the run (adopting's block).
ORPHANED = """
import os, signal, subprocess, sys, time
from mcgrpo.core import clock
stage = clock.StageClock()
with clock.adopting():
    with stage.stage("credit"):
        shell = subprocess.Popen(["sh", "-c", '"$0" -c "$1" &', sys.executable, sys.argv[2]], stdout=subprocess.PIPE,
                                 text=True)
        assert shell.wait() == 0
        said, pid = shell.stdout.readline().split()
        if sys.argv[1] == "ended":
            shell.stdout.read()  # the orphan's end closes the pipe
    pid = int(pid)
    cpu = stage.lap()["cpu_credit"]
    if sys.argv[1] == "running":
        os.kill(pid, signal.SIGKILL)
    while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":  # ours, so a zombie until reaped
        time.sleep(0.05)
    clock.discover()
print(cpu, os.path.exists(f"/proc/{pid}"))
"""


@pytest.mark.parametrize("how", ["running", "ended"])
def test_the_cpu_clock_counts_a_worker_orphaned_below_the_trainer(how):
    """A plugin's server started with `sh -c 'server &'`: the shell ends at once and Linux hands the server to init,
    no longer below the trainer, so its work was off the CPU clock (the arm read cheap there). The train job adopts
    such orphans (clock.adopting: the subreaper of what it starts); the clock finds one as the stage ends, running or
    ended unseen, and it is reaped by the run's end, so that none stays a zombie beyond it."""
    code = BUSY.format(seconds=0.3) + "import os, time\nprint('done', os.getpid(), flush=True)\n"
    if how == "running":
        code += "time.sleep(120)\n"
    done = subprocess.run([sys.executable, "-c", ORPHANED, how, code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "workflow")})
    assert done.returncode == 0, done.stderr[-2000:]
    cpu, left = done.stdout.split()
    assert 0.25 <= float(cpu) < 2.0, cpu
    assert left == "False"  # reaped: no zombie left


def test_no_stage_is_charged_for_the_protocols_checks_of_a_plugins_call():
    """mcgrpo checks each plugin call (what it was handed by value, the process's settings and code as it found them:
    mcgrpo.train.contract): instrumentation, as logging is, which an arm whose rules are called more often would
    otherwise pay for in training time. Here the check reads a 240 MB array by value (a tenth of a second or more);
    the call itself does nothing, and the stage is charged for the call alone."""
    import numpy as np
    from mcgrpo.core import clock
    from mcgrpo.train import contract
    subject, handed = contract.Subject("credit", "my_rules:Nothing", "arms.mine.credit"), np.ones(30_000_000)
    stage, checked = clock.StageClock(), tuple(clock._CHECKS)
    with stage.stage("credit"):
        subject.call(lambda values: None, handed)
    wall, cpu = clock._CHECKS[0] - checked[0], clock._CHECKS[1] - checked[1]
    lap = stage.lap()
    assert wall > 0.05 and cpu > 0.03, (wall, cpu)
    assert lap["t_credit"] < wall / 4 and lap["cpu_credit"] < cpu / 4, (lap, wall, cpu)

def test_adopting_is_put_back_after_the_run():
    """A process that runs a train job in-process (a test, a script calling mcgrpo.cli.main) is not left adopting
    what it starts later: a daemon it starts and stops afterwards would stay its zombie, never reaped."""
    from mcgrpo.core import clock
    was = clock._subreaper()
    if was is None:
        pytest.skip("no child subreaper here (not Linux)")
    with clock.adopting():
        assert clock._subreaper() == 1
    assert clock._subreaper() == was

def test_the_clock_leaves_a_plugins_own_ended_child_to_its_popen():
    """The clock reaps only the ended children nothing here waits for: a plugin's Popen whose child ended before the
    plugin waited for it still reads its exit status (reaped by the clock, Popen would read 0)."""
    from mcgrpo.core import clock
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    _ended_unjoined(child.pid)
    clock.discover()
    assert child.wait(timeout=60) == 3


def test_the_clock_leaves_a_plugins_child_waited_for_by_pid_and_counts_it_until_then():
    """A plugin's own child started without subprocess (os.posix_spawn, os.fork), which it waits for by pid, is no
    adopted orphan: reaped by the clock, the plugin's os.waitpid raised ChildProcessError. Ended and unwaited, it is
    still counted (from /proc), then from os.times once the plugin waited for it."""
    from mcgrpo.core import clock
    with clock.adopting():
        before = clock.cpu_seconds()
        pid = os.posix_spawn(sys.executable, [sys.executable, "-c", BUSY.format(seconds=0.3) + "raise SystemExit(7)"],
                             os.environ)
        _ended_unjoined(pid)
        clock.discover()
        zombie = clock.cpu_seconds() - before
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7
        waited = clock.cpu_seconds() - before
    assert 0.25 <= zombie < 2.0 and abs(waited - zombie) < 0.1, (zombie, waited)


def test_the_clock_reaps_an_orphan_it_saw_below_its_parent():
    """An orphan the clock saw below its parent (a shell that outlives its background job's start) was adopted once
    that parent ended: nobody else will wait for it, and `discover` reaps it once it has ended."""
    from mcgrpo.core import clock
    if clock._subreaper() is None:
        pytest.skip("no child subreaper here (not Linux)")
    with clock.adopting():
        shell = subprocess.Popen(["sh", "-c", "sleep 0.3 & echo $!; read x"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        orphan = int(shell.stdout.readline())
        clock.discover()  # seen below the shell
        shell.communicate("")
        _ended_unjoined(orphan)  # adopted by this process, so a zombie until reaped
        clock.discover()
        assert not Path(f"/proc/{orphan}").exists()


def _ended_unjoined(pid: int) -> None:
    """Wait until child `pid` has exited and is not yet waited for (a zombie)."""
    deadline = time.monotonic() + 60
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("seed, accuracy, warned", [(2, 0.0, 1), (1, 1 / 12, 0)])
def test_a_first_evaluation_at_zero_everywhere_warns_before_training(study, tiny, world, capfd, seed, accuracy, warned):
    """The untrained model solves nothing on seed 2's draws, one sample of 12 on seed 1's: only the first is
    warned of, at evaluation 0, before the budget is spent (issue 41)."""
    from mcgrpo.train.trainer import FLOOR_WARNING
    log = _trainer(study, tiny, world, seed=seed).run(max_iterations=0)
    assert [row["acc_default"] for row in log.evals] == [pytest.approx(accuracy)] and not log.iterations
    out, err = capfd.readouterr()
    assert (out + err).count(FLOOR_WARNING) == warned


def test_the_job_log_says_how_many_math_verify_checks_overran_at_an_evaluation():
    from mcgrpo.train.trainer import overran_warning
    assert overran_warning(3, [4, 5]) == ("warning: evaluation 4, 5: 3 math-verify check(s) overran their CPU budget "
                                          "and were counted wrong (samples.parquet math_verify_overran; "
                                          "docs/verifiers.md)")


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is not None, reason="math-verify is installed")
def test_without_math_verify_its_columns_are_null_and_nothing_overran():
    from mcgrpo.train.evaluation import rule_columns
    columns = rule_columns([r"\boxed{7}"], ["7"])
    assert columns["correct_math_verify"].isna().all() and columns["math_verify_overran"].isna().all()
    assert columns["math_verify_overran"].dtype == "boolean" and columns["correct_whole_box"].tolist() == [True]


def test_an_evaluation_whose_math_verify_checks_overran_says_so_in_the_job_log(study, tiny, world, capfd, monkeypatch):
    """Checks given a CPU budget of 10 us overrun it: each is marked and counted wrong, and the job log counts them.
    A fresh worker: one that sympy's caches have warmed (earlier tests) can finish a trivial check inside the first
    tick of CPU time the kernel accounts, before the timer can fire."""
    pytest.importorskip("math_verify")
    from mcgrpo.core import verify
    from mcgrpo.train.trainer import overran_warning
    with verify.MathVerify(timeout=1e-5) as fresh:
        monkeypatch.setattr(verify, "_SHARED", fresh)
        samples = _trainer(study, tiny, world).run(max_iterations=0).samples[0]
    overran = samples["math_verify_overran"].to_numpy(bool)
    assert overran.sum() > 0 and not samples["correct_math_verify"][overran].any()  # each counted wrong
    out, err = capfd.readouterr()
    assert overran_warning(int(overran.sum()), [0]) in out + err


def test_a_math_verify_study_checks_each_evaluation_sample_once(study, tiny, world, monkeypatch):
    """verifier.rule math_verify: a sample's verdict (correct_default) and its side-by-side column and overrun flag
    are one check, never a second that may finish where the first overran (MathVerify.remembering)."""
    pytest.importorskip("math_verify")
    from mcgrpo.core.verify import MathVerify
    asked, ask = [], MathVerify._ask
    monkeypatch.setattr(MathVerify, "_ask", lambda self, *key: asked.append(key) or ask(self, *key))
    samples = _trainer({**study, "verifier": {"rule": "math_verify"}}, tiny, world).run(max_iterations=0).samples[0]
    assert len(asked) == len(set(asked)) == samples["text"].nunique() > 0
    assert samples["correct_default"].tolist() == samples["correct_math_verify"].tolist()
