# `snakemake screen --config screen_arm=NAME`: one arm's gradient tests against outcome-only before any training
# (mcgrpo screen), building the study's data and model first when they are not there yet.
rule screen:
    input:
        model=MODEL,
        pool=rules.prepare_data.output.pool,
    output:
        f"{R}/screen/{SCREEN_ARM}/screen.parquet",
        f"{R}/screen/{SCREEN_ARM}/gradient_tests.parquet",
    params:
        study=lambda wildcards: json.dumps(config, sort_keys=True),  # braces, never wildcards
        arm=SCREEN_ARM,
        out=f"{R}/screen/{SCREEN_ARM}",
    threads: config["recipe"]["threads"]
    resources:
        **GPU_RESOURCES,
        runtime=config["resources"]["gradient_tests"]["runtime"],
    container:
        config["containers"]["train"]
    conda:
        ENV
    log:
        f"{R}/logs/screen.{SCREEN_ARM}.log",
    shell:
        "export MCGRPO_CONSOLE_FD=3; $PYTHON -m mcgrpo screen --config-json {params.study:q} --arm {params.arm:q} "
        "--out {params.out:q} 3>&2 > {log:q} 2>&1; cat {log:q}"
