rule train:
    input:
        model=MODEL,
        budget=BUDGET,
        pool=rules.prepare_data.output.pool,
        evals=rules.prepare_data.output.evals,
        lock=ancient(LOCK),  # the plan is locked before the first run; re-locking never retrains
    output:
        [f"{RUN}/{name}" for name in RUN_FILES],
    params:
        run=run_json,
        data=folder_of("pool"),
        out=lambda wildcards, output: str(Path(output[0]).parent),
    threads: config["recipe"]["threads"]
    # A preempted or timed-out run exits 75 after checkpointing, and the retry resumes it as a new job: the
    # profile's `retries` (or --retries), at the submitting level only. No `retries:` here, since Snakemake inside
    # a SLURM job runs with --retries 0 and a rule's own count would override it: the retry would then restart in
    # the allocation that is about to end.
    resources:
        gpu=TRAIN_RESOURCES["gpu"],
        cpus_per_gpu=TRAIN_RESOURCES["cpus_per_gpu"],
        mem_mb=TRAIN_RESOURCES["mem_mb"],
        runtime=train_runtime,
        slurm_extra=train_signal,
    container:
        config["containers"]["train"]
    conda:
        ENV
    log:
        f"{R}/logs/train/{{arm}}/seed{{seed}}.log",
    # exec: the trainer is the step's process, so that SLURM's signal reaches it and no shell in between dies
    # of it; >>: a retry appends to the log of the attempts before it.
    shell:
        "exec python -m mcgrpo train --run-json {params.run:q} --model {input.model} --data {params.data} "
        "--budget {input.budget} --out {params.out} >> {log} 2>&1"


# A finished run keeps its checkpoint until Snakemake has accepted its outputs: if SLURM ends a job just after the
# trainer wrote them (a time limit inside the kill grace), Snakemake deletes them and the retry writes them again
# from the final checkpoint instead of training from zero. Once every job has succeeded, the checkpoints go.
onsuccess:
    for arm, seed in study_config.runs(config):
        run = Path(RUN.format(arm=arm, seed=seed))
        if all((run / name).exists() for name in RUN_FILES):
            shutil.rmtree(run / "checkpoints", ignore_errors=True)
