rule contrasts:
    input:
        ALL_EVALS,
        budget=BUDGET,
    output:
        contrasts=f"{R}/analysis/contrasts.parquet",
        paired=f"{R}/analysis/paired.parquet",
    params:
        study=STUDY_JSON,
    log:
        f"{R}/logs/contrasts.log",
    shell:
        "python -m mcgrpo contrasts --config-json {params.study:q} --results {R} > {log} 2>&1"
