# The study's links into the run store (results/_shared/runs, mcgrpo.core.layout): runs/<arm>/seed<N> and
# calibration/, and runs/store.parquet saying which stored run each is, which every analysis rule takes as input.
# Made first (by its priority, like the lock), so that a run's folder, log and checkpoints can be watched through
# the study's own path while it trains: a link to a run not yet trained points at nothing until then. Redone only
# when the study's runs are other runs: the config reaches the script as snakemake.config, and the runs' names in
# the store, the params, are what makes it out of date.
rule link_study:
    output:
        STORE,
    params:
        runs=lambda wildcards: json.dumps({f"{arm}/seed{seed}": key for (arm, seed), key in RUN_KEYS.items()},
                                          sort_keys=True),
        calibration=layout.calibration_key(config),
    priority: 100
    resources:
        mem_mb=CPU_RESOURCES["mem_mb"],
        runtime=CPU_RESOURCES["runtime"],
    container:
        config["containers"]["analysis"]
    conda:
        ENV
    log:
        f"{R}/logs/link_study.log",
    script:
        "../workflow/scripts/link_study.py"


localrules:
    link_study,  # seconds of work: no SLURM job of its own (see the Snakefile)
