# One training run (arm, seed) per job, keyed by its name in the run store (the {run} wildcard); its helpers are
# in train_helpers.smk.
rule train:
    input:
        model=model_of,
        budget=lambda wildcards: study_of(wildcards).budget,
        pool=data_file("pool.parquet"),
        evals=eval_files,
    # No study's file is an input (nor its lock): a stored run is the same job in every study that names it, and
    # Snakemake would retrain it for another study's set of inputs. The lock comes first by its priority (rules/
    # prereg.smk), and the analysis labels a contrast exploratory if any of its runs started before the lock.
    output:
        [f"{RUN}/{name}" for name in RUN_FILES],
    params:
        run=run_json,
        data=folder_of("pool"),
        out=lambda wildcards, output: str(Path(output[0]).parent),
        failed=lambda wildcards, output: str(Path(output[0]).parent / ".failed.log"),
    threads: threads_of
    # A preempted or timed-out run checkpoints and exits 75. Under SLURM, an attempt that made progress first
    # requeues its own job (mcgrpo.train.requeue): the same job runs again and resumes, no retry spent. An attempt
    # without progress fails, and the retry resumes it as a new job: the profile's `retries` (or --retries), at the
    # submitting level only. No `retries:` here, since Snakemake inside a SLURM job runs with --retries 0 and a
    # rule's own count would override it: the retry would then restart in the allocation that is about to end. A
    # user error (exit 2) or a bug (1) would fail the same way again: the trainer leaves its error beside the run,
    # and the retry reports it and fails at once.
    resources:
        **GPU_RESOURCES,
        runtime=train_runtime,
        slurm_extra=train_slurm_extra,
        attempt=lambda wildcards, attempt: attempt,
        # The study's `tracking`, as a resource rather than a param: switching it on or off never makes a finished
        # run out of date (a param would), and its logs (the run folder's tracking/) are no output, so Snakemake
        # never deletes them.
        tracking=lambda wildcards: cfg_of(wildcards)["tracking"],
        label=run_label,  # likewise: what the run is called (by the first study to train it) is no part of it
        slurm_name=slurm_name,  # and what squeue calls its job
    container:
        CONTAINERS["train"]
    conda:
        ENV
    log:
        f"{RUN}/train.log",
    # exec: the trainer takes the shell's place, so that the signals the job's Snakemake passes on (pass_on, above)
    # reach it and no shell in between dies of them. Snakemake empties the log before every attempt; the trainer
    # starts it with one line per earlier attempt (from the record beside the checkpoints), and a failure that is
    # no preemption has its error appended after it.
    # Under SLURM the job first names itself in its comment, <study>.train.<arm>.s<seed> (squeue -o %k), and marks
    # where this attempt starts in the SLURM log (appended to by every run of a requeued job), with how often SLURM
    # requeued it (SLURM_RESTART_COUNT does not reach the rule through the executor's two Snakemakes).
    shell:
        "if [ -n \"${{SLURM_JOB_ID:-}}\" ]; then echo \"mcgrpo: {resources.slurm_name}, SLURM job $SLURM_JOB_ID, "
        "$(scontrol show job $SLURM_JOB_ID 2>/dev/null | grep -o 'Restarts=[0-9]*' || true), on $(hostname), $(date -u +%FT%TZ)\" >&2; "
        "scontrol update JobId=$SLURM_JOB_ID Comment={resources.slurm_name:q} || true; fi; "
        "if [ {resources.attempt} -gt 1 ] && [ -e {params.failed:q} ]; then cat {params.failed:q} >> {log:q}; "
        "echo 'not retried: the failure above is not a preemption' >> {log:q}; exit 2; fi; "
        "rm -f {params.failed:q}; export MCGRPO_CONSOLE_FD=3; "
        "exec $PYTHON -m mcgrpo train --run-json {params.run:q} --model {input.model:q} --data {params.data:q} "
        "--budget {input.budget:q} --out {params.out:q} --failed-log {params.failed:q} --tracking {resources.tracking} "
        "--label {resources.label:q} "
        "3>&2 >> {log:q} 2>&1"
