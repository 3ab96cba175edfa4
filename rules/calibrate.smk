rule calibrate:
    input:
        model=MODEL,
        pool=rules.prepare_data.output.pool,
    output:
        BUDGET,
    params:
        run=lambda wildcards: json.dumps(study_config.calibration_config(config), sort_keys=True),
        data=folder_of("pool"),
    threads: config["recipe"]["threads"]
    resources:
        gpu=TRAIN_RESOURCES["gpu"],
        cpus_per_gpu=TRAIN_RESOURCES["cpus_per_gpu"],
        mem_mb=TRAIN_RESOURCES["mem_mb"],
        runtime=CPU_RESOURCES["runtime"],
    container:
        config["containers"]["train"]
    conda:
        ENV
    log:
        f"{R}/logs/calibrate.log",
    shell:
        "python -m mcgrpo calibrate --run-json {params.run:q} --model {input.model} "
        "--data {params.data} --out {output} > {log} 2>&1"
