rule contrasts:
    input:
        ALL_EVALS,
        budget=BUDGET,
    output:
        contrasts=f"{R}/analysis/contrasts.parquet",
        paired=f"{R}/analysis/paired.parquet",
    params:
        study=STUDY_JSON,
        results=folder_of("budget", 1),
    conda:
        ENV
    log:
        f"{R}/logs/contrasts.log",
    shell:
        "python -m mcgrpo contrasts --config-json {params.study:q} --results {params.results} > {log} 2>&1"
