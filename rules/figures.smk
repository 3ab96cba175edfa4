rule figures:
    input:
        ALL_EVALS,
        budget=BUDGET,
    output:
        FIGURES,
    params:
        study=STUDY_JSON,
        results=folder_of("budget", 1),
    conda:
        ENV
    log:
        f"{R}/logs/figures.log",
    shell:
        "python -m mcgrpo figures --config-json {params.study:q} --results {params.results} > {log} 2>&1"


rule tables:
    input:
        contrasts=rules.contrasts.output.contrasts,
        drift=rules.drift.output[0],
    output:
        TABLES,
    params:
        results=folder_of("contrasts", 1),
    conda:
        ENV
    log:
        f"{R}/logs/tables.log",
    shell:
        "python -m mcgrpo tables --results {params.results} > {log} 2>&1"
