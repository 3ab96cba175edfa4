rule drift:
    input:
        ALL_EVALS,
        budget=BUDGET,
    output:
        f"{R}/analysis/drift.parquet",
    params:
        study=STUDY_JSON,
    log:
        f"{R}/logs/drift.log",
    shell:
        "python -m mcgrpo drift --config-json {params.study:q} --results {R} > {log} 2>&1"
