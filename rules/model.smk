# The embedded tiny model is built and warm-started here; a model with a source (hub id, folder, GGUF file)
# is only resolved and checked, so that training loads it from where it is and a dry run needs no weights.
if MODELS:

    rule warm_start:
        input:
            pool=data_file("pool.parquet"),
            evals=eval_files,
        output:
            directory(f"{SHARED}/models/{{model}}"),
        params:
            spec=lambda wildcards: json.dumps(layout.warm_start_spec(cfg_of(wildcards)), sort_keys=True),
            data=folder_of("pool"),
        threads: 2
        resources:
            mem_mb=CPU_RESOURCES["mem_mb"],
            runtime=CPU_RESOURCES["runtime"],
        container:
            CONTAINERS["train"]
        conda:
            ENV
        log:
            str(layout.shared_log(Path(f"{SHARED}/models/{{model}}"))),
        shell:
            "export MCGRPO_CONSOLE_FD=3; $PYTHON -m mcgrpo warm-start --model-json {params.spec:q} --data {params.data:q} "
            "--threads {threads} --out {output:q} 3>&2 > {log:q} 2>&1"


# One rule per model name (resolve_model, resolve_model_2, ...: a programme's studies name several), each for the
# studies of that model: the file is the study's own, results/<study>/models/<name>.json.
SOURCED = {}  # model name -> the studies whose model has a source
for _name, _study in S.items():
    if _study.cfg["model"]["source"] is not None:
        SOURCED.setdefault(_study.cfg["model"]["name"], []).append(_name)

for _index, (_model_name, _studies) in enumerate(SOURCED.items()):

    rule:
        name:
            numbered("resolve_model", _index)
        output:
            f"{R}/models/{_model_name}.json",
        params:
            spec=lambda wildcards: json.dumps(cfg_of(wildcards)["model"], sort_keys=True),
        wildcard_constraints:
            study=_alternatives(_studies),
        resources:
            mem_mb=CPU_RESOURCES["mem_mb"],
            runtime=CPU_RESOURCES["runtime"],
        container:
            CONTAINERS["train"]
        conda:
            ENV
        log:
            f"{R}/logs/resolve_model.log",
        shell:
            "$PYTHON -m mcgrpo resolve-model --model-json {params.spec:q} --out {output:q} > {log:q} 2>&1"

    # seconds of work, writing where the model is: no SLURM job of its own (see the Snakefile)
    workflow.localrules(numbered("resolve_model", _index))
