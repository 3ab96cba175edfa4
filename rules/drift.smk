rule drift:
    input:
        ALL_EVALS,
        budget=BUDGET,
    output:
        f"{R}/analysis/drift.parquet",
    params:
        study=STUDY_JSON,
        results=folder_of("budget", 1),
    conda:
        ENV
    log:
        f"{R}/logs/drift.log",
    shell:
        "python -m mcgrpo drift --config-json {params.study:q} --results {params.results} > {log} 2>&1"
