# Data files are named inside the task block, not as inputs, so that a study dry-runs where they are absent.
# One data folder (results/_shared/data/<hash>) per task; its evaluation files are named by the task's eval sets, so a
# programme whose tasks name different eval sets has one such rule per set of names (prepare_data, prepare_data_2,
# ...), each for the data folders of its tasks.
DATA = f"{SHARED}/data/{{data}}"
DATA_GROUPS = {}  # eval set names -> the data folders whose task has them
for _key, _name in DATA_SETS.items():
    DATA_GROUPS.setdefault(tuple(S[_name].cfg["task"]["eval_sets"]), []).append(_key)


for _index, (_names, _keys) in enumerate(DATA_GROUPS.items()):

    rule:
        name:
            numbered("prepare_data", _index)
        output:
            pool=f"{DATA}/pool.parquet",
            evals=expand(f"{DATA}/eval_{{name}}.parquet", name=_names, allow_missing=True),
            removed=f"{DATA}/removed.parquet",
        params:
            task=lambda wildcards: json.dumps(cfg_of(wildcards)["task"], sort_keys=True),  # braces, never wildcards
            out=lambda wildcards, output: str(Path(output.pool).parent),
        wildcard_constraints:
            data=_alternatives(_keys),
        resources:
            mem_mb=CPU_RESOURCES["mem_mb"],
            runtime=CPU_RESOURCES["runtime"],
        container:
            CONTAINERS["analysis"]
        conda:
            ENV
        log:
            str(layout.shared_log(Path(DATA))),
        shell:
            "$PYTHON -m mcgrpo prepare-data --task-json {params.task:q} --out {params.out:q} > {log:q} 2>&1"
