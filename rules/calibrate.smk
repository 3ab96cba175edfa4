# An equal-iteration study (budget.iterations) has no token budget: its B is its iteration count, written by the
# same verb without a calibration run, so that rule needs no model and runs where data jobs do (no GPU).
if EQUAL_ITERATIONS:

    rule iteration_budget:
        input:
            pool=rules.prepare_data.output.pool,
        output:
            BUDGET,
        params:
            run=lambda wildcards: json.dumps(study_config.calibration_config(config), sort_keys=True),
            data=folder_of("pool"),
        resources:
            **ANALYSIS_RESOURCES,
        container:
            config["containers"]["train"]
        conda:
            ENV
        log:
            f"{layout.calibration_dir(config)}/calibrate.log",
        shell:
            "$PYTHON -m mcgrpo calibrate --run-json {params.run:q} --data {params.data:q} --out {output:q} > {log:q} 2>&1"

    localrules:
        iteration_budget,

else:

    rule calibrate:
        input:
            model=MODEL,
            pool=rules.prepare_data.output.pool,
        output:
            BUDGET,
        params:
            run=lambda wildcards: json.dumps(study_config.calibration_config(config), sort_keys=True),
            data=folder_of("pool"),
        threads: config["recipe"]["threads"]
        resources:
            **GPU_RESOURCES,
            runtime=CPU_RESOURCES["runtime"],
        container:
            config["containers"]["train"]
        conda:
            ENV
        log:
            f"{layout.calibration_dir(config)}/calibrate.log",
        shell:
            "export MCGRPO_CONSOLE_FD=3; $PYTHON -m mcgrpo calibrate --run-json {params.run:q} --model {input.model:q} "
            "--data {params.data:q} --out {output:q} 3>&2 > {log:q} 2>&1"
