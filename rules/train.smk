rule train:
    input:
        model=MODEL,
        budget=BUDGET,
        data=rules.prepare_data.output,
    output:
        [f"{RUN}/{name}" for name in RUN_FILES],
    params:
        run=run_json,
        data=f"{R}/data",
        out=RUN,
    threads: config["recipe"]["threads"]
    log:
        f"{R}/logs/train/{{arm}}/seed{{seed}}.log",
    shell:
        "python -m mcgrpo train --run-json {params.run:q} --model {input.model} --data {params.data} "
        "--budget {input.budget} --out {params.out} > {log} 2>&1"
