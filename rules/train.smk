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
        failed=lambda wildcards, output: str(Path(output[0]).parent / ".failed.log"),
    threads: config["recipe"]["threads"]
    # A preempted or timed-out run exits 75 after checkpointing (or is killed); the retry resumes it. A user
    # error (exit 2) or a bug (1) would fail the same way again: its log is kept beside the run, and the
    # retry (Snakemake retries every failure and clears the log) restores it and fails at once.
    retries: 2
    resources:
        gpu=TRAIN_RESOURCES["gpu"],
        cpus_per_gpu=TRAIN_RESOURCES["cpus_per_gpu"],
        mem_mb=TRAIN_RESOURCES["mem_mb"],
        runtime=train_runtime,
        attempt=lambda wildcards, attempt: attempt,
    container:
        config["containers"]["train"]
    conda:
        ENV
    log:
        f"{R}/logs/train/{{arm}}/seed{{seed}}.log",
    shell:
        "if [ {resources.attempt} -gt 1 ] && [ -e {params.failed:q} ]; then cp {params.failed:q} {log:q}; "
        "echo 'not retried: the failure above is not a preemption' >> {log:q}; exit 2; fi; "
        "rm -f {params.failed:q}; "
        "python -m mcgrpo train --run-json {params.run:q} --model {input.model:q} --data {params.data:q} "
        "--budget {input.budget:q} --out {params.out:q} > {log:q} 2>&1 "
        "|| {{ s=$?; case $s in 1|2) mkdir -p {params.out:q}; cp {log:q} {params.failed:q};; esac; exit $s; }}"
