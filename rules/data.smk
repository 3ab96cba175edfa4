rule prepare_data:
    output:
        pool=f"{R}/data/pool.parquet",
        evals=expand(f"{R}/data/eval_{{name}}.parquet", name=EVAL_SETS),
    params:
        task=json.dumps(config["task"], sort_keys=True),
        out=lambda wildcards, output: str(Path(output.pool).parent),
    conda:
        ENV
    log:
        f"{R}/logs/prepare_data.log",
    shell:
        "python -m mcgrpo prepare-data --task-json {params.task:q} --out {params.out} > {log} 2>&1"
