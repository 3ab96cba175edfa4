# B, one per calibration (results/_shared/calibrations/<hash>, the {calibration} wildcard), shared by every study
# calibrated alike. An equal-iteration study (budget.iterations) has no token budget: its B is its iteration count,
# written by the same verb without a calibration run, so that rule needs no model and runs where data jobs do (no GPU).
CALIBRATION = f"{SHARED}/calibrations/{{calibration}}"
BUDGET = f"{CALIBRATION}/budget.parquet"
ITERATION_CALIBRATIONS = [key for key, name in CALIBRATIONS.items() if S[name].equal_iterations]
TOKEN_CALIBRATIONS = [key for key, name in CALIBRATIONS.items() if not S[name].equal_iterations]


if ITERATION_CALIBRATIONS:

    rule iteration_budget:
        input:
            pool=data_file("pool.parquet"),
        output:
            BUDGET,
        params:
            run=calibration_json,
            data=folder_of("pool"),
        wildcard_constraints:
            calibration=_alternatives(ITERATION_CALIBRATIONS),
        resources:
            **ANALYSIS_RESOURCES,
        container:
            CONTAINERS["train"]
        conda:
            ENV
        log:
            f"{CALIBRATION}/calibrate.log",
        shell:
            "$PYTHON -m mcgrpo calibrate --run-json {params.run:q} --data {params.data:q} --out {output:q} > {log:q} 2>&1"

    localrules:
        iteration_budget,

if TOKEN_CALIBRATIONS:

    rule calibrate:
        input:
            model=model_of,
            pool=data_file("pool.parquet"),
        output:
            BUDGET,
        params:
            run=calibration_json,
            data=folder_of("pool"),
        wildcard_constraints:
            calibration=_alternatives(TOKEN_CALIBRATIONS),
        threads: threads_of
        resources:
            **GPU_RESOURCES,
            runtime=CPU_RESOURCES["runtime"],
        container:
            CONTAINERS["train"]
        conda:
            ENV
        log:
            f"{CALIBRATION}/calibrate.log",
        shell:
            "export MCGRPO_CONSOLE_FD=3; $PYTHON -m mcgrpo calibrate --run-json {params.run:q} --model {input.model:q} "
            "--data {params.data:q} --out {output:q} 3>&2 > {log:q} 2>&1"
