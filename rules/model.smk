# The embedded tiny model is built and warm-started here; a model with a source (hub id, folder, GGUF file)
# is only resolved and checked, so that training loads it from where it is and a dry run needs no weights.
if config["model"]["source"] is None:

    rule warm_start:
        input:
            pool=rules.prepare_data.output.pool,
            evals=rules.prepare_data.output.evals,
        output:
            directory(MODEL),
        params:
            spec=lambda wildcards: json.dumps(layout.warm_start_spec(config), sort_keys=True),
            data=folder_of("pool"),
        threads: 2
        resources:
            mem_mb=CPU_RESOURCES["mem_mb"],
            runtime=CPU_RESOURCES["runtime"],
        container:
            config["containers"]["train"]
        conda:
            ENV
        log:
            str(layout.shared_log(Path(MODEL))),
        shell:
            "export MCGRPO_CONSOLE_FD=3; $PYTHON -m mcgrpo warm-start --model-json {params.spec:q} --data {params.data:q} "
            "--threads {threads} --out {output:q} 3>&2 > {log:q} 2>&1"

else:

    rule resolve_model:
        output:
            MODEL,
        params:
            spec=lambda wildcards: json.dumps(config["model"], sort_keys=True),
        resources:
            mem_mb=CPU_RESOURCES["mem_mb"],
            runtime=CPU_RESOURCES["runtime"],
        container:
            config["containers"]["train"]
        conda:
            ENV
        log:
            f"{R}/logs/resolve_model.log",
        shell:
            "$PYTHON -m mcgrpo resolve-model --model-json {params.spec:q} --out {output:q} > {log:q} 2>&1"

    localrules:
        resolve_model,  # seconds: writes where the model is (see the Snakefile)
