# The gradient tests (paper 2.4, A, H.3): each arm's update against a reference gradient on fixed batches at
# the initial policy, before any training; then whether they predict training (the paper's Figure 2).
# Included only when the study has an enabled gradient_tests block.
if not ANALYSIS_ONLY:

    rule gradient_tests:
        input:
            model=model_of,
            pool=data_file("pool.parquet"),
        output:
            GRADIENT_TESTS,
        wildcard_constraints:
            study=_alternatives(GRADIENT_STUDIES),
        params:
            run=lambda wildcards: json.dumps(S[wildcards.study].gradient, sort_keys=True),  # braces, never wildcards
            data=folder_of("pool"),
            folder=study_folder,
        threads: threads_of
        resources:
            **GPU_RESOURCES,
            runtime=lambda wildcards: cfg_of(wildcards)["resources"]["gradient_tests"]["runtime"],
        container:
            CONTAINERS["train"]
        conda:
            ENV
        log:
            f"{R}/logs/gradient_tests.log",
        shell:
            f"export MCGRPO_CONSOLE_FD=3; {IN_TURN} $PYTHON -m mcgrpo gradient-tests --run-json {{params.run:q}} "
            "--model {input.model:q} --data {params.data:q} --out {output:q} 3>&2"


use rule drift as prediction with:
    input:
        GRADIENT_TESTS,
        rules.contrasts.output.contrasts,
        rules.curves.output,
        run_files("evals.parquet"),
        store=STORE,
    wildcard_constraints:
        study=_alternatives(GRADIENT_STUDIES),
    output:
        f"{R}/analysis/efficiency.parquet",
        f"{R}/analysis/prediction.parquet",
        f"{R}/analysis/second_moment.parquet",
        PREDICTION_TARGETS,
    params:
        **analysis_step("prediction"),
        measured=sealed(GRADIENT_TESTS),  # other gradient tests put in place under an old mtime rerun it
    log:
        f"{R}/logs/prediction.log",


localrules:
    prediction,  # seconds of work: no SLURM job of its own (see the Snakefile)
