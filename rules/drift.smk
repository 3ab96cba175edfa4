# Drift per run and evaluation; also the template of every analysis rule (`use rule drift as ... with:`),
# which differ only in their files and verb (their shared helpers: analysis_helpers.smk).
rule drift:
    input:
        run_files("evals.parquet"),
        run_files("manifest.json"),  # what vouches for them (mcgrpo.core.manifest)
        store=STORE,
    output:
        f"{R}/analysis/drift.parquet",
    params:
        **analysis_step("drift"),
    resources:
        **ANALYSIS_RESOURCES,
    container:
        CONTAINERS["analysis"]
    conda:
        ENV
    log:
        f"{R}/logs/drift.log",
    shell:
        f"{IN_TURN} $PYTHON -m mcgrpo {{params.verb:q}} --config-json {{params.study:q}} --results {{params.results:q}}"
