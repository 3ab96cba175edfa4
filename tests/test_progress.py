"""Progress: plain lines at a steady rate in a log file, the trainer's counts and evaluations in them."""

import io

from mcgrpo.core import progress
from mcgrpo.core import config as study_config
from mcgrpo.train.trainer import Trainer


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_log_file_gets_plain_lines_not_redraws():
    log = io.StringIO()
    with progress.bar("train", total=1000, unit="tok", stream=log) as shown:
        for _ in range(10):  # within LOG_SECONDS: no line until the last
            shown.set_postfix_str("reward 0.25", refresh=False)
            shown.update(100)
        progress.note(shown, "evaluation 1: acc 0.500")
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines[0].startswith("train: 0/1000 tok (0%) [00:00 elapsed, ? left]")
    assert lines[1] == "evaluation 1: acc 0.500"
    assert lines[2].startswith("train: 1000/1000 tok (100%)") and lines[2].endswith(", reward 0.25")
    assert len(lines) == 3


def test_a_terminal_gets_a_redrawn_bar():
    tty = Terminal()
    with progress.bar("warm start", total=3, unit="step", stream=tty) as shown:
        shown.update(3)
    assert "\r" in tty.getvalue() and "3/3" in tty.getvalue()


def test_training_shows_tokens_against_the_budget_and_every_evaluation(study, tiny, world, capsys):
    model, tokenizer = tiny
    pool, evals = world
    log = Trainer(study_config.run_config(study, "outcome", 1), model, tokenizer, pool, evals, 600, arm="outcome").run()
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0].startswith("train outcome seed 1: 0/600 tok")
    assert lines[1].startswith("evaluation 0 at 0 tokens, 0 updates: heldout acc_default ")
    assert sum(line.startswith("evaluation ") for line in lines) == len(log.evals)
    last = log.iterations[-1]
    assert lines[-1].startswith(f"train outcome seed 1: {last['tokens_total']}/{last['tokens_total']} tok (100%)")
    assert f"iteration {last['iteration']}, {last['updates']} updates" in lines[-1]
    assert f"last eval {log.evals[-1]['acc_default']:.3f}" in lines[-1]


def test_the_stage_clock_counts_cpu_time_apart_from_waiting():
    """Sleeping (a neighbour holding the core looks the same to this process) adds wall time, not CPU time."""
    import time

    from mcgrpo.core.clock import StageClock
    clock = StageClock()
    with clock.stage("generate"):
        time.sleep(0.2)
    with clock.stage("update"):
        sum(i * i for i in range(300_000))
    lap = clock.lap()
    assert lap["t_generate"] >= 0.2 and lap["cpu_generate"] < 0.05
    assert lap["cpu_update"] > 0 and set(lap) == {f"{k}_{s}" for k in ("t", "cpu")
                                                  for s in ("select", "generate", "credit", "update", "sync")}


def test_the_console_the_rule_hands_on_gets_the_progress_lines_not_the_notes(monkeypatch):
    """A rule runs `MCGRPO_CONSOLE_FD=3 ... 3>&2 > log 2>&1`: its bar lines reach Snakemake's terminal as well,
    timed, so that `make run` shows every long job start, advance and finish; the notes stay in the log."""
    import os
    import re
    read, write = os.pipe()
    monkeypatch.setenv(progress.CONSOLE_FD, str(write))
    log = io.StringIO()
    with progress.bar("train outcome seed 1", total=10, unit="tok", stream=log) as shown:
        progress.note(shown, "evaluation 0 at 0 tokens")
        shown.update(10)
    os.close(write)
    with os.fdopen(read) as pipe:
        echoed = pipe.read().splitlines()
    assert [re.sub(r"^\d\d:\d\d:\d\d ", "", line) for line in echoed] == [
        line for line in log.getvalue().splitlines() if not line.startswith("evaluation")]
    assert len(echoed) == 2 and all(re.match(r"\d\d:\d\d:\d\d train outcome seed 1: ", line) for line in echoed)


def test_no_console_where_none_is_handed_on(monkeypatch):
    monkeypatch.delenv(progress.CONSOLE_FD, raising=False)
    assert progress.console() is None
    monkeypatch.setenv(progress.CONSOLE_FD, "987")  # not an open descriptor: the log alone
    assert progress.console() is None
