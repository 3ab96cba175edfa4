# Data files are named inside the task block, not as inputs, so that a study dry-runs where they are absent.
rule prepare_data:
    output:
        pool=f"{R}/data/pool.parquet",
        evals=expand(f"{R}/data/eval_{{name}}.parquet", name=EVAL_SETS),
        removed=f"{R}/data/removed.parquet",
    params:
        task=lambda wildcards: json.dumps(config["task"], sort_keys=True),  # braces, never wildcards
        out=lambda wildcards, output: str(Path(output.pool).parent),
    resources:
        mem_mb=CPU_RESOURCES["mem_mb"],
        runtime=CPU_RESOURCES["runtime"],
    container:
        config["containers"]["analysis"]
    conda:
        ENV
    log:
        f"{R}/logs/prepare_data.log",
    shell:
        "python -m mcgrpo prepare-data --task-json {params.task:q} --out {params.out} > {log} 2>&1"
