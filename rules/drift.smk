# Analysis rules read the run Parquet files only; `--config analysis_only=True` leaves out every rule that
# could write them, so these never wait on (or trigger) a training job.
ANALYSIS_RESOURCES = dict(mem_mb=CPU_RESOURCES["mem_mb"], runtime=CPU_RESOURCES["runtime"])
# Snakemake calls a job with existing outputs and a missing, unproducible input up to date; an analysis-only
# run must instead refuse to report on runs that were never trained.
ANALYSIS_INPUTS = [BUDGET, *(path for name in ("evals.parquet", "samples.parquet", "iterations.parquet", "run.json")
                             for path in run_files(name))]
MISSING = [path for path in ANALYSIS_INPUTS if not Path(path).exists()] if config["analysis_only"] else []
if MISSING:
    raise WorkflowError(f"Missing input files for the analysis (analysis_only=True never trains): {', '.join(MISSING)}")


rule drift:
    input:
        run_files("evals.parquet"),
        budget=BUDGET,
    output:
        f"{R}/analysis/drift.parquet",
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
        f"{R}/logs/drift.log",
    shell:
        "python -m mcgrpo drift --config-json {params.study:q} --results {params.results} > {log} 2>&1"
