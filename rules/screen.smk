# `snakemake screen --config screen_arm=NAME`: one arm's gradient tests against outcome-only before any training
# (mcgrpo screen), building the study's data and model first when they are not there yet. One study's target (a
# programme refuses screen_arm): its paths are the study's own, no wildcard.
SCREENED = S[FIRST["study"]]
SCREEN = f"{SCREENED.folder}/screen/{SCREEN_ARM}"


rule screen:
    input:
        model=SCREENED.model,
        pool=f"{SCREENED.data}/pool.parquet",
    output:
        f"{SCREEN}/screen.parquet",
        f"{SCREEN}/gradient_tests.parquet",
    params:
        study=lambda wildcards: json.dumps(FIRST, sort_keys=True),  # braces, never wildcards
        arm=SCREEN_ARM,
        out=SCREEN,
    threads: FIRST["recipe"]["threads"]
    resources:
        **GPU_RESOURCES,
        runtime=FIRST["resources"]["gradient_tests"]["runtime"],
    container:
        CONTAINERS["train"]
    conda:
        ENV
    log:
        f"{SCREENED.folder}/logs/screen.{SCREEN_ARM}.log",
    shell:
        "export MCGRPO_CONSOLE_FD=3; $PYTHON -m mcgrpo screen --config-json {params.study:q} --arm {params.arm:q} "
        "--out {params.out:q} 3>&2 > {log:q} 2>&1; cat {log:q}"
