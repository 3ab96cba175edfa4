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
    # A preempted or timed-out run exits non-zero after checkpointing; the retry resumes it.
    retries: 2
    resources:
        gpu=TRAIN_RESOURCES["gpu"],
        cpus_per_gpu=TRAIN_RESOURCES["cpus_per_gpu"],
        mem_mb=TRAIN_RESOURCES["mem_mb"],
        runtime=train_runtime,
    container:
        config["containers"]["train"]
    conda:
        ENV
    log:
        f"{R}/logs/train/{{arm}}/seed{{seed}}.log",
    shell:
        "python -m mcgrpo train --run-json {params.run:q} --model {input.model} --data {params.data} "
        "--budget {input.budget} --out {params.out} > {log} 2>&1"
