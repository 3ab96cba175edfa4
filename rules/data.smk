# Data files are named inside the task block, not as inputs, so that a study dry-runs where they are absent.
rule prepare_data:
    output:
        pool=f"{DATA}/pool.parquet",
        evals=expand(f"{DATA}/eval_{{name}}.parquet", name=EVAL_SETS),
        removed=f"{DATA}/removed.parquet",
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
        str(layout.shared_log(Path(DATA))),
    shell:
        "$PYTHON -m mcgrpo prepare-data --task-json {params.task:q} --out {params.out:q} > {log:q} 2>&1"
