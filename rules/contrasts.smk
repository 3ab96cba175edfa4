# The lock is an input where it exists or can be made; an analysis-only rerun of a study that was never
# locked labels every contrast exploratory instead of failing.
LOCK_INPUT = [LOCK] if not config["analysis_only"] or Path(LOCK).exists() else []


rule contrasts:
    input:
        run_files("evals.parquet"),
        run_files("samples.parquet"),
        run_files("run.json"),
        LOCK_INPUT,
        budget=BUDGET,
    output:
        contrasts=f"{R}/analysis/contrasts.parquet",
        paired=f"{R}/analysis/paired.parquet",
        prereg=f"{R}/analysis/prereg.json",
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
        f"{R}/logs/contrasts.log",
    shell:
        "python -m mcgrpo contrasts --config-json {params.study:q} --results {params.results} > {log} 2>&1"


rule curves:
    input:
        run_files("evals.parquet"),
        run_files("samples.parquet"),
        budget=BUDGET,
    output:
        f"{R}/analysis/differences.parquet",
        f"{R}/analysis/budget_share.parquet",
        f"{R}/analysis/extrapolation.parquet",
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
        f"{R}/logs/curves.log",
    shell:
        "python -m mcgrpo curves --config-json {params.study:q} --results {params.results} > {log} 2>&1"


rule breakdown:
    input:
        run_files("evals.parquet"),
        run_files("iterations.parquet"),
        budget=BUDGET,
    output:
        f"{R}/analysis/stages.parquet",
        f"{R}/analysis/groups.parquet",
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
        f"{R}/logs/breakdown.log",
    shell:
        "python -m mcgrpo breakdown --config-json {params.study:q} --results {params.results} > {log} 2>&1"
