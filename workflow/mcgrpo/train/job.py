"""A training job: one run (arm, seed) from its effective config to its Parquet and run.json.

What the `train` verb runs once the CLI has parsed its arguments: signals, attempts, the tracker, resuming
from the newest checkpoint, run.json (the run's config, identity, attempts, versions and hardware), and last
the run's manifest (mcgrpo.core.manifest).
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import sys
import traceback
from pathlib import Path
from typing import Callable, Iterator

from mcgrpo import __version__
from mcgrpo.core import config as study_config, manifest, store
from mcgrpo.core.errors import Interrupted, McgrpoError


def logged(failed_log: str | None, work: Callable[[], None]) -> None:
    """Run `work`; a failure that is not a preemption (a user error's message, a bug's traceback) is left in
    `failed_log`, if given: the train rule's retry then reports it and stops instead of failing the same way
    again."""
    try:
        work()
    except Interrupted:
        raise
    except Exception as e:
        if failed_log:
            store.write_text(f"mcgrpo train: error: {e}\n" if isinstance(e, McgrpoError) else traceback.format_exc(),
                             failed_log)
        raise


STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # what SLURM sends before a time limit or a preemption


class Stops:
    """The stop signals a job has caught, SIGTERM or SIGUSR1 (what SLURM sends before a time limit or a
    preemption), from the job's first moment: checking its plugins as planned imports their code, and importing
    torch takes seconds, and a signal in those seconds must still end the attempt as a preemption (status 75, once
    the trainer has checkpointed), not kill the job (143)."""

    def __init__(self) -> None:
        self.caught: list[str] = []
        self.trainer = None  # set once built: asked to stop at its next iteration boundary

    @classmethod
    def catch(cls) -> "Stops":
        stops = cls()
        for sig in STOP_SIGNALS:
            signal.signal(sig, stops._request)
        return stops

    def _request(self, signum, frame) -> None:
        self.caught.append(signal.Signals(signum).name)
        _say_running(self.caught[-1], "the run checkpoints and stops once that call returns (one that never returns "
                                      "ends with the job, at its time limit)")
        if self.trainer is not None:
            self.trainer.stop_requested = True

    def release(self) -> None:
        """Give the signals back to their default, for a job with no trainer to checkpoint (an ingest): one caught
        already ends the job now, as it would have uncaught."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        for name in self.caught[:1]:
            signal.raise_signal(signal.Signals[name])


@contextlib.contextmanager
def named_when_stopped() -> Iterator[None]:
    """For a job with no trainer to checkpoint (calibrate, the gradient tests, screen): SIGTERM or SIGUSR1 ends it as
    their default action does, after a line naming the plugin call in progress, if one is; else a call that never
    returns would end at the job's time limit with no word of which plugin it was."""

    def stop(signum, frame) -> None:
        _say_running(signal.Signals(signum).name, "the job ends")
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
    previous = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _say_running(signal_name: str, then: str) -> None:
    """A line in the job's log naming the plugin call a stop signal came during (contract.running), if any."""
    contract = sys.modules.get("mcgrpo.train.contract")  # not imported: no plugin has run
    busy = contract.running() if contract is not None else ""
    if not busy:
        return
    line = f"mcgrpo: {signal_name} caught during a plugin call, {busy}: {then}\n"
    try:  # one write(2): a print from a signal handler that lands inside another print to stderr would raise
        os.write(sys.stderr.fileno(), line.encode())
    except (AttributeError, OSError, ValueError):  # a stderr with no file descriptor (captured in a test)
        sys.stderr.write(line)


def train(run: dict, files: dict[str, str], names: tuple[str, str], backend: str,
          runner: Callable | None = None, stops: Stops | None = None) -> None:
    """One run (arm, seed): resume from its newest checkpoint, train to the budget, write its Parquet.

    `files` names the model, data, budget and out folder; `names` is (study, arm), what messages and trackers
    call the run; `backend` the experiment tracker (mcgrpo.train.tracking). `runner` builds what trains the run
    (default: mcgrpo's Trainer): called as runner(run, model, tokenizer, pool, evals, B, checkpoint_dir, tracker,
    arm, identity), it returns an object with run() -> RunLog, stop_requested, resumed_at, next_iteration and
    checkpoint_seconds, and optionally `record`, a dict run.json adds. The CLI passes another trainer's (mcgrpo.integrations.trl.TRLRun for a TRL arm), so that
    this module never imports the layer above it.

    SIGTERM or SIGUSR1 (what SLURM sends before a time limit or a preemption) makes the trainer checkpoint
    at the next iteration boundary and exit with status 75; under SLURM an attempt that made progress first
    requeues its job, which resumes the run under its id (mcgrpo.train.requeue), and one without progress leaves it
    to Snakemake's retry. The final checkpoint stays (the workflow removes it once Snakemake has the outputs): a run ended by its job
    after finishing is written again from it, not trained again. Each attempt is logged and kept in run.json.
    """
    stops = stops or Stops.catch()  # the CLI catches them before it checks the plugins (Stops)
    imported = set(sys.modules)  # the plugins' code the job checked as planned (mcgrpo.cli.common._as_planned)
    import torch
    from mcgrpo.train import attempts, models, requeue, tracking
    from mcgrpo import data
    from mcgrpo.data.checks import check_run_data
    from mcgrpo.core import run_claims, run_data, study_runs
    study, arm = names
    out = Path(files["out"])
    if run_claims.acquire(out).done:  # waits while another process trains this run (mcgrpo.core.run_claims)
        return
    tracker = tracking.open_tracker(backend, out, run, study, arm)  # a missing library fails here, before any work
    history = attempts.start(out / "checkpoints")
    for entry in history[:-1]:
        print(f"earlier: {attempts.describe(entry)}", file=sys.stderr)
    torch.set_num_threads(run["recipe"]["threads"])
    B = study_runs.read_budget(files["budget"])  # the file of its calibration, never another's copied there
    identity = study_config.run_identity(run, B)  # checkpoints of another B never resume into this run
    pool, evals = data.read(files["data"], run["evaluation"]["sets"])
    check_run_data(pool, evals, run, files["data"])
    # the problems it trains and is evaluated on: recorded in run.json, and never resumed from a checkpoint of others
    trained_on = run_data.fingerprint(files["data"], run["evaluation"]["sets"])
    models.held_to_source(files["model"], run["model"]["source"])  # the model its run.json will say it trained
    model, tokenizer = models.load(files["model"])
    started_from = models.fingerprint(model, tokenizer)  # the weights it starts from: recorded, as the data are
    for folder in (out, out / "checkpoints"):
        store.remove_orphans(folder)
    trainer = (runner or mcgrpo_trainer)(run, model, tokenizer, pool, evals, B, out / "checkpoints", tracker, arm,
                                         checkpoint_identity(identity, trained_on, started_from))
    stops.trainer = trainer
    trainer.stop_requested = bool(stops.caught)
    # what this attempt trains with (its engine built): a run resumed under another stack or on another machine is
    # told by the alike check (mcgrpo.analysis.alike), which run.json's versions and hardware, the last attempt's, hide
    attempts.note(out / "checkpoints", history, stack=stack(run), machine=hardware(model))
    try:
        log = trainer.run()
    except Interrupted:
        # recorded; under SLURM, the job requeued where the attempt made progress (no Snakemake retry spent)
        requeue.end_interrupted(out / "checkpoints", history, f"{study}.train.{arm}.s{run['seed']}",
                                signal=stops.caught[0], resumed_at=trainer.resumed_at, iterations=trainer.next_iteration,
                                checkpoint_seconds=trainer.checkpoint_seconds)
        raise
    finally:
        if tracker:
            tracker.close()
    attempts.end(out / "checkpoints", history, "finished", resumed_at=trainer.resumed_at,
                 iterations=trainer.next_iteration, checkpoint_seconds=trainer.checkpoint_seconds)
    print(attempts.describe(history[-1]), file=sys.stderr)
    ran_as_planned(run, imported)
    write_run(out, run, B, log, model, {
        "started": history[0]["started"], "ended": history[-1]["ended"], "attempts": history,
        "tracking": backend,  # where it logged: <out>/tracking/ (mcgrpo.train.tracking)
        run_data.DATA: trained_on,  # held to the data folder by every reader (mcgrpo.core.run_data)
        run_data.MODEL: started_from,  # and the study's runs to each other
        **getattr(trainer, "record", {}),  # what another trainer adds (TRL's settings that differ from the recipe)
    })


def ran_as_planned(run: dict, imported: set[str], during: str = "this run trained",
                   again: str = "rerun the workflow: it plans the edited plugin's runs afresh") -> None:
    """Refuse to store a run whose plugin was edited while it trained and whose code was imported during it (inside
    a call, after the job checked the plugin as planned): its numbers may be the edited code's, stored under the
    identity of the code it was planned with, beside that code's runs. `during`, `again`: what the message calls
    the computation and how to make it afresh (a screen's: mcgrpo.screen)."""
    from mcgrpo.core import plugins
    from mcgrpo.core.errors import PluginError
    edited = plugins.edited_while_running(run.get("plugins", []), imported)
    if edited:
        raise PluginError(f"edited while {during}: {'; '.join(edited)}: it may have computed with the edited "
                          f"code under the identity it was planned with, so it is not stored; allowed: a plugin's "
                          f"files left as they are until its runs end, or its modules imported at the top of its "
                          f"own ({again})")


def checkpoint_identity(identity: str, trained_on: dict[str, str], started_from: str) -> str:
    """What a run's checkpoints belong to: its identity (config and B), the problems it reads and the weights it
    starts from (models.fingerprint), so that a run never resumes after its data folder or its model folder (a warm
    start's, or a source's) was replaced."""
    return study_config.config_hash({"identity": identity, "data": trained_on, "model": started_from})


def mcgrpo_trainer(run, model, tokenizer, pool, evals, B, checkpoint_dir, tracker, arm, identity):
    """mcgrpo's own Trainer for a run: the default runner of `train`."""
    from mcgrpo.train.trainer import Trainer
    return Trainer(run, model, tokenizer, pool, evals, B, checkpoint_dir=checkpoint_dir, config_hash=identity,
                   tracker=tracker, arm=arm)


def write_run(out: Path, run: dict, B: int, log, model, extra: dict) -> None:
    """A finished run's files in its folder `out`: its Parquet, run.json (the config, identity, versions, hardware,
    clocks and `extra`), and last its manifest. A run trained here, or one TRL made (mcgrpo.integrations.ingest)."""
    cfg_hash, identity = study_config.config_hash(run), study_config.run_identity(run, B)
    frames = log.frames()
    for name, frame in frames.items():
        store.write_parquet(frame, out / f"{name}.parquet", identity)
    store.write_json({
        "config": run, "config_hash": cfg_hash, "identity": identity, "B": B, "finished": True,
        "versions": versions(run, frames["samples"]),
        "hardware": hardware(model),
        "git_sha": store.git_sha(),
        # Both clocks of the training stages: wall time far above CPU time (x threads) means a shared machine.
        "clock": _clocks(log.iterations), **extra,
    }, out / "run.json")
    # Last: the manifest vouches for every file above (mcgrpo.core.manifest); a run without one never finished.
    manifest.seal(out, [f"{name}.parquet" for name in frames] + ["run.json"], identity, cfg_hash)


def versions(run: dict, samples) -> dict:
    """The software whose versions decide run `run`'s numbers, as its run.json records them (the one place that
    decides them; mcgrpo.analysis.alike compares them): mcgrpo and its code's sha256 (store.code_sha256), torch,
    transformers, python, TRL's for a TRL arm,
    vLLM's where the run's engine is vllm, and math-verify's where it scored the run's evaluations (its column of
    `samples` holds verdicts; null where the package was not installed). A run that used neither gets no key for
    them: its run.json reads as one written before they were recorded, which CI's image-vs-host comparison and
    every stored run's readers expect."""
    out = stack(run)
    if "correct_math_verify" in samples and samples["correct_math_verify"].notna().any():
        from importlib.metadata import PackageNotFoundError, version  # the worker imports it, never this process
        try:
            out["math_verify"] = version("math-verify")
        except PackageNotFoundError:  # importable without its metadata (a copied folder): known to have scored
            out["math_verify"] = "unknown"
    return out


def stack(run: dict) -> dict:
    """versions() but math-verify's, known once a run's engine is built: what each attempt records (a TRL run's
    vLLM, imported when its trainer starts generating, is run.json's only)."""
    import torch
    import transformers
    out = {"mcgrpo": __version__, "mcgrpo_code": store.code_sha256(), "torch": torch.__version__,
           "transformers": transformers.__version__, "python": platform.python_version(),
           **({"trl": run["trl"]["version"]} if "trl" in run else {})}
    # vLLM generated where the engine is vllm, and where a TRL arm's GRPOConfig says use_vllm (TRL imports it then)
    if (run.get("engine") or {}).get("name") == "vllm" or ("trl" in run and "vllm" in sys.modules):
        import vllm  # imported already: the engine generates with it
        out["vllm"] = vllm.__version__
    return out


def hardware(model) -> dict:
    """Where a run was timed: its device, the GPU's name or None, the CPU's model name and torch's threads (the
    figures' time axes name it)."""
    import torch
    from mcgrpo.core.machine import cpu_model
    return {"device": str(model.device), "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "cpu": cpu_model(), "threads": torch.get_num_threads()}


def _clocks(iterations: list[dict]) -> dict:
    """Training-stage seconds by the wall clock and by process CPU time, and the load a neighbour added."""
    last = iterations[-1] if iterations else {}
    wall, cpu = last.get("train_seconds", 0.0), last.get("train_cpu_seconds", 0.0)
    return {"train_seconds": wall, "train_cpu_seconds": cpu, "cpu_share": cpu / wall if wall else None}
