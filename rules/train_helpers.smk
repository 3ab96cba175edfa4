# The helpers of the rules that train (calibrate.smk, train.smk), beside them; snakemake --lint wants a rule file's
# functions in a file of their own. What the analysis shares too is in common.smk. Here: the signals a SLURM job
# step passes on to what it started (the trainer checkpoints on them), the claims that keep another process's run,
# a run's config, names and resources, and the checkpoints dropped once every job has succeeded.
import contextlib
import shutil
import signal

import pandas as pd
import psutil
from snakemake.jobs import Job
from snakemake.logging import logger

from mcgrpo.core import run_claims


# calibrate.smk: the calibration run's config.
def calibration_json(wildcards):
    return json.dumps(study_config.calibration_config(cfg_of(wildcards)), sort_keys=True)


# train.smk.
# Inside a SLURM job Snakemake runs twice more: the jobstep executor in the batch step and, under srun, the one
# that runs the rule. SLURM's --signal, `scancel --signal` and a preemption's SIGTERM reach only that second
# Snakemake, the step's task (seen with proctrack/cgroup): SIGUSR1's default action would end it, the step and the
# trainer with it, and SIGTERM's handler (Snakemake's scheduler installs it after this file is read) waits for the
# running jobs, which never hear of it and are killed when the grace time ends. Here both signals are passed on to
# the processes it started: the trainer, which the rule execs, checkpoints and exits.


def pass_on(signum, frame):
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            child.send_signal(signum)


def passing_on_termination(graceful):
    """Snakemake's graceful SIGTERM handler, passing the signal on first."""

    def exit_gracefully(self, *args):
        pass_on(signal.SIGTERM, None)
        graceful(self, *args)

    return exit_gracefully


if workflow.remote_exec:
    from snakemake.scheduling.job_scheduler import JobScheduler

    signal.signal(signal.SIGUSR1, pass_on)
    JobScheduler.exit_gracefully = passing_on_termination(JobScheduler.exit_gracefully)


def keeping_claimed_runs(remove):
    """Snakemake removes a job's outputs and log before it runs it. A train job's are kept while another process
    holds the run's claim (it is training the run: its log is being written) or has reserved it (its job started,
    its trainer not yet claiming), or when the run was missing as this DAG was built and is finished now (another
    process trained it meanwhile): the trainer then waits for the claim and trains only what is not finished
    (mcgrpo.core.run_claims). Otherwise this process reserves the run, then removes them. A job that writes a
    study's folder removes its own, in its study's turn (IN_TURN, common.smk): another Snakemake's jobs may be
    reading them now."""

    async def remove_existing_output(self):
        if study_turns.__name__ in (self.rule.shellcmd or ""):
            return
        if self.rule.name == "train":
            folder = Path(self.output[0]).parent
            other = run_claims.reserve(folder)
            if other is not None:
                logger.info(f"{folder}: claimed by {run_claims.describe(other) if other else 'another process'}; "
                            f"its files are kept and this job waits for it")
                return
            if self.dag.reason(self).missing_output and run_claims.finished(folder):
                logger.info(f"{folder}: finished by another process since this DAG was built; kept as it is")
                return
        await remove(self)

    remove_existing_output.keeps_claimed_runs = True
    return remove_existing_output


if not getattr(Job.remove_existing_output, "keeps_claimed_runs", False):  # once per process (mcgrpo.dryrun: many)
    Job.remove_existing_output = keeping_claimed_runs(Job.remove_existing_output)


def run_json(wildcards):
    """One run's effective config: editing another arm, the analysis or any name never reruns this run."""
    study, (arm, seed) = RUNS[wildcards.run]
    return json.dumps(study_config.run_config(S[study].cfg, arm, seed), sort_keys=True)


def run_label(wildcards):
    """study/arm: what the run's messages and trackers call it."""
    study, (arm, seed) = RUNS[wildcards.run]
    return f"{study}/{arm}"


def train_runtime(wildcards, input):
    """Minutes for a training job, from the calibrated B once it exists (dry-runs use the config's guess)."""
    budget = Path(input.budget)
    B = int(pd.read_parquet(budget)["B"].iloc[0]) if budget.exists() else None
    return study_config.train_runtime(cfg_of(wildcards), B)


def train_slurm_extra(wildcards):
    """sbatch's options of a training job. SIGUSR1 to the job step 90 s plus a checkpoint's time before the time
    limit, whatever the runtime (mcgrpo.core.config.signal_lead; a runtime too short for it is refused before any
    job). The SLURM log opened for appending: a job that requeues itself after progress (mcgrpo.train.requeue)
    runs again under its id, into the same log (%j.log), and keeps every attempt's lines. A rule resource, not a
    default one, so that overriding default-resources (partition, account) keeps it."""
    return f"--signal=USR1@{study_config.signal_lead(cfg_of(wildcards))} --open-mode=append"


def slurm_name(wildcards):
    """<study>.train.<arm>.s<seed>: the train job's SLURM comment (squeue -o %k), set by the job as it starts
    (the executor plugin names jobs by its run's UUID and owns --job-name and --comment)."""
    study, (arm, seed) = RUNS[wildcards.run]
    return f"{study}.train.{arm}.s{seed}"


def clear_finished_checkpoints():
    """Called once every job has succeeded (the Snakefile's onsuccess). A finished run keeps its checkpoint until
    Snakemake has accepted its outputs: if SLURM ends a job just after the trainer wrote them (a time limit inside
    the kill grace), Snakemake deletes them and the retry writes them again from the final checkpoint instead of
    training from zero."""
    for key in RUNS:
        run = Path(RUN.format(run=key))
        if all((run / name).exists() for name in RUN_FILES):
            shutil.rmtree(run / "checkpoints", ignore_errors=True)
