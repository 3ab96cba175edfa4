# The study's links into the run store (results/_shared/runs, mcgrpo.core.layout): runs/<arm>/seed<N> and
# calibration/, and runs/store.parquet saying which stored run each is, which every analysis rule takes as input.
# Made first (by its priority, like the lock), so that a run's folder, log and checkpoints can be watched through
# the study's own path while it trains: a link to a run not yet trained points at nothing until then. Redone when
# the study's JSON changes, which reruns every analysis rule anyway (their params hold it too).
rule link_study:
    output:
        STORE,
    params:
        study=lambda wildcards: S[wildcards.study].json,  # braces, never wildcards
        folder=study_folder,
    priority: 100
    resources:
        **ANALYSIS_RESOURCES,
    container:
        CONTAINERS["analysis"]
    conda:
        ENV
    log:
        f"{R}/logs/link_study.log",
    shell:
        f"{IN_TURN} $PYTHON -m mcgrpo link-study --config-json {{params.study:q}} --out {{output:q}}"


localrules:
    link_study,  # seconds of work: no SLURM job of its own (see the Snakefile)
