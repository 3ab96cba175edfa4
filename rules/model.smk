rule warm_start:
    input:
        pool=rules.prepare_data.output.pool,
        evals=rules.prepare_data.output.evals,
    output:
        directory(MODEL),
    params:
        spec=json.dumps({"model": config["model"], "task": config["task"]}, sort_keys=True),
        data=folder_of("pool"),
    threads: 2
    conda:
        ENV
    log:
        f"{R}/logs/warm_start.log",
    shell:
        "python -m mcgrpo warm-start --model-json {params.spec:q} --data {params.data} "
        "--threads {threads} --out {output} > {log} 2>&1"
