# Figures and tables of the study, each marked for `snakemake --report report.html`.
FIGURE_NAMES = ("accuracy_vs_tokens", "accuracy_vs_time", "difference_from_base", "per_seed", "tokens_vs_time",
                "stage_seconds", "drift")
TABLE_NAMES = ("prereg", "contrasts", "equal_bases", "pass_at_k", "budget_share", "stage_seconds", "groups",
               "drift", "extrapolation")
FIGURES = [f"{R}/figures/{name}.png" for name in FIGURE_NAMES]
TABLES = [f"{R}/tables/{name}.{ext}" for name in TABLE_NAMES for ext in ("csv", "md", "html")]



rule figures:
    input:
        run_files("evals.parquet"),
        rules.contrasts.output.contrasts,
        rules.contrasts.output.paired,
        rules.curves.output,
        rules.breakdown.output,
        rules.drift.output,
        budget=BUDGET,
    output:
        [reported(path, "figure") for path in FIGURES],
    params:
        study=lambda wildcards: STUDY_JSON,  # a function: the JSON holds braces, never wildcards
        results=folder_of("budget", 1),
    resources:
        **ANALYSIS_RESOURCES,
    container:
        config["containers"]["analysis"]
    conda:
        ENV
    log:
        f"{R}/logs/figures.log",
    shell:
        "python -m mcgrpo figures --config-json {params.study:q} --results {params.results} > {log} 2>&1"


rule tables:
    input:
        rules.contrasts.output,
        rules.curves.output,
        rules.breakdown.output,
        rules.drift.output,
        contrasts=rules.contrasts.output.contrasts,
    output:
        [reported(path, "table") if path.endswith(".html") else path for path in TABLES],
    params:
        study=lambda wildcards: STUDY_JSON,  # a function: the JSON holds braces, never wildcards
        results=folder_of("contrasts", 1),
    resources:
        **ANALYSIS_RESOURCES,
    container:
        config["containers"]["analysis"]
    conda:
        ENV
    log:
        f"{R}/logs/tables.log",
    shell:
        "python -m mcgrpo tables --config-json {params.study:q} --results {params.results} > {log} 2>&1"
