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
    # A preempted or timed-out run exits 75 after checkpointing, and the retry resumes it as a new job: the
    # profile's `retries` (or --retries), at the submitting level only. No `retries:` here, since Snakemake inside
    # a SLURM job runs with --retries 0 and a rule's own count would override it: the retry would then restart in
    # the allocation that is about to end. A user error (exit 2) or a bug (1) would fail the same way again: the
    # trainer leaves its error beside the run, and the retry reports it and fails at once.
    resources:
        **GPU_RESOURCES,
        runtime=train_runtime,
        slurm_extra=train_signal,
        attempt=lambda wildcards, attempt: attempt,
        # The study's `tracking`, as a resource rather than a param: switching it on or off never makes a finished
        # run out of date (a param would), and its logs (the run folder's tracking/) are no output, so Snakemake
        # never deletes them.
        tracking=lambda wildcards: cfg_of(wildcards)["tracking"],
        label=run_label,  # likewise: what the run is called (by the first study to train it) is no part of it
    container:
        CONTAINERS["train"]
    conda:
        ENV
    log:
        f"{RUN}/train.log",
    # exec: the trainer takes the shell's place, so that the signals the job's Snakemake passes on (common.smk)
    # reach it and no shell in between dies of them. Snakemake empties the log before every attempt; the trainer
    # starts it with one line per earlier attempt (from the record beside the checkpoints), and a failure that is
    # no preemption has its error appended after it.
    shell:
        "if [ {resources.attempt} -gt 1 ] && [ -e {params.failed:q} ]; then cat {params.failed:q} >> {log:q}; "
        "echo 'not retried: the failure above is not a preemption' >> {log:q}; exit 2; fi; "
        "rm -f {params.failed:q}; export MCGRPO_CONSOLE_FD=3; "
        "exec $PYTHON -m mcgrpo train --run-json {params.run:q} --model {input.model:q} --data {params.data:q} "
        "--budget {input.budget:q} --out {params.out:q} --failed-log {params.failed:q} --tracking {resources.tracking} "
        "--label {resources.label:q} "
        "3>&2 >> {log:q} 2>&1"

