# The gradient tests (paper 2.4, A, H.3): each arm's update against a reference gradient on fixed batches at
# the initial policy, before any training; then whether they predict training (the paper's Figure 2).
# Included only when the study has an enabled gradient_tests block.
if not config["analysis_only"]:

    rule gradient_tests:
        input:
            model=MODEL,
            pool=rules.prepare_data.output.pool,
        output:
            GRADIENT_TESTS,
        params:
            run=lambda wildcards: json.dumps(GRADIENT_CONFIG, sort_keys=True),  # braces, never wildcards
            data=folder_of("pool"),
        threads: config["recipe"]["threads"]
        resources:
            **GPU_RESOURCES,
            runtime=config["resources"]["gradient_tests"]["runtime"],
        container:
            config["containers"]["train"]
        conda:
            ENV
        log:
            f"{R}/logs/gradient_tests.log",
        shell:
            "export MCGRPO_CONSOLE_FD=3; $PYTHON -m mcgrpo gradient-tests --run-json {params.run:q} "
            "--model {input.model:q} --data {params.data:q} --out {output:q} 3>&2 > {log:q} 2>&1"


use rule drift as prediction with:
    input:
        GRADIENT_TESTS,
        rules.contrasts.output.contrasts,
        rules.curves.output,
        run_files("evals.parquet"),
        store=STORE,
    output:
        f"{R}/analysis/efficiency.parquet",
        f"{R}/analysis/prediction.parquet",
        PREDICTION_TARGETS,
    params:
        **analysis_step("prediction"),
    log:
        f"{R}/logs/prediction.log",


localrules:
    prediction,  # seconds of work: no SLURM job of its own (see the Snakefile)
