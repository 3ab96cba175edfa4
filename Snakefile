# mcgrpo: matched-compute evaluation of GRPO training interventions.
# `snakemake --cores 2` runs the embedded default study (config/config.yaml) end to end on the CPU.
from snakemake.utils import min_version

min_version("9")


# A study given with --configfile replaces the default study rather than merging into it;
# --config key=value still overrides single keys of either.
if not workflow.overwrite_configfiles:

    configfile: f"{workflow.basedir}/config/config.yaml"


include: "rules/common.smk"
include: "rules/targets.smk"


# A failed job's reason on the terminal, under --quiet=rules too: its rule (and where it is defined), its log's path
# and that log's last lines, instead of the shell command (mcgrpo.core.joblog; docs/troubleshooting.md).
from snakemake.logging import logger  # noqa: E402
from mcgrpo.core import joblog  # noqa: E402 (the package's path is set in common.smk)

FAILED_JOBS = joblog.install(logger, workflow)


report: REPORT_TEXT


# Every rule that writes a run's Parquet files (or what they depend on), and the study's links to them.
# `--config analysis_only=True` leaves them out: the analysis target then never schedules training nor relinks,
# and a missing run file fails as a missing input instead.
if not ANALYSIS_ONLY:

    include: "rules/train_helpers.smk"
    include: "rules/data.smk"
    include: "rules/model.smk"
    include: "rules/prereg.smk"
    include: "rules/calibrate.smk"
    include: "rules/train.smk"
    include: "rules/store.smk"


include: "rules/analysis_helpers.smk"
include: "rules/drift.smk"
include: "rules/contrasts.smk"
include: "rules/figures.smk"


# Small rules, seconds of work each: on SLURM they run in the submitting Snakemake rather than as jobs of
# their own (10-15 s of queueing and polling each). The other rules of seconds (prereg_lock, link_study,
# iteration_budget, resolve_model, prediction, alignment) say so where they are defined; tests/test_hpc.py checks
# that only prepare_data, warm_start, calibrate, train and gradient_tests are SLURM jobs.
localrules:
    drift,
    contrasts,
    curves,
    breakdown,
    figures,
    tables,
    summary,
    robustness,
    verifiers,


if GRADIENT_STUDIES:

    include: "rules/gradients.smk"


if SCREEN_ARM and not ANALYSIS_ONLY:

    include: "rules/screen.smk"


rule all:
    default_target: True
    input:
        TARGETS,


# Everything downstream of the run Parquet files: snakemake analysis --config analysis_only=True
rule analysis:
    input:
        TARGETS,


# A programme's summary: every study's preregistered verdicts (its headline table) in one table.
if PROGRAMME:

    rule programme_summary:
        input:
            **{name: f"{R}/tables/headline.csv".format(study=name) for name in S},
        output:
            parquet=PROGRAMME_SUMMARY[0],
            markdown=PROGRAMME_SUMMARY[1],
        params:
            name=PROGRAMME.name,
            # each headline is held to its study's analysis; a function: the JSON's braces are no wildcards
            studies=lambda wildcards: [S[name].json for name in S],
            owner=programmes.owner(PROGRAMME),
        resources:
            **ANALYSIS_RESOURCES,
        container:
            CONTAINERS["analysis"]
        conda:
            "workflow/envs/mcgrpo.yaml"  # ENV, from this file's folder
        log:
            f"{PROGRAMME.folder}/summary.log",
        shell:
            "$PYTHON -m mcgrpo.programme summary --name {params.name:q} --parquet {output.parquet:q} "
            "--markdown {output.markdown:q} --studies {params.studies:q} --owner {params.owner:q} > {log:q} 2>&1"

    localrules:
        programme_summary,


# A run that went on after a failure (--keep-going, the SLURM profiles) ends with every failed job, one line each.
onerror:
    if FAILED_JOBS and (workflow.execution_settings.keep_going or len(FAILED_JOBS.jobs) > 1):
        logger.error(FAILED_JOBS.recap())


# Once every job has succeeded: finished runs drop their checkpoints (rules/train.smk), and the results are the
# last thing a run prints (a run that did not reach the summary prints nothing here; one whose summary is not what
# the analysis gives now says why instead: analysis_helpers.smk's held_results).
onsuccess:
    if not ANALYSIS_ONLY:
        clear_finished_checkpoints()
    said = held_results()  # the summary, held to the analysis now, or why it is not printed
    if said:
        print(file=sys.stderr)
        print(said, file=sys.stderr)
