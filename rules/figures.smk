rule figures:
    input:
        ALL_EVALS,
        budget=BUDGET,
    output:
        FIGURES,
    params:
        study=STUDY_JSON,
    log:
        f"{R}/logs/figures.log",
    shell:
        "python -m mcgrpo figures --config-json {params.study:q} --results {R} > {log} 2>&1"


rule tables:
    input:
        rules.contrasts.output,
        rules.drift.output,
    output:
        TABLES,
    log:
        f"{R}/logs/tables.log",
    shell:
        "python -m mcgrpo tables --results {R} > {log} 2>&1"
