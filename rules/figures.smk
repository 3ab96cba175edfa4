# Figures and tables of the study (the targets, FIGURES and TABLES, are in targets.smk).
use rule drift as figures with:
    input:
        run_files("evals.parquet"),
        run_files("manifest.json"),  # what vouches for them (mcgrpo.core.manifest)
        rules.contrasts.output.contrasts,
        rules.contrasts.output.paired,
        rules.curves.output,
        rules.breakdown.output,
        rules.drift.output,
        store=STORE,
    output:
        [reported(path, "figure") for path in FIGURES],
        FIGURE_PDFS,
    params:
        **analysis_step("figures"),
    log:
        f"{R}/logs/figures.log",


use rule drift as tables with:
    input:
        rules.contrasts.output,
        rules.robustness.output,
        rules.curves.output,
        rules.breakdown.output,
        rules.drift.output,
        store=STORE,
    output:
        [reported(path, "table") if path.endswith(".html") else path for path in TABLES],
    params:
        **analysis_step("tables"),
    log:
        f"{R}/logs/tables.log",


# The results summary: printed when a run ends (the Snakefile's onsuccess), the first page of the report.
use rule drift as summary with:
    input:
        shown_files,  # every table and figure the study shows, which the summary holds to its analysis
        rules.contrasts.output,
        rules.robustness.output,
        store=STORE,
    output:
        SUMMARY,
        SUMMARY_RST,
    params:
        **analysis_step("summary"),
        # the summary holds each table (its CSV, markdown and HTML copies) and figure it shows to the analysis: an
        # older one put back under an old mtime reruns it
        shown=sealed(*SHOWN),
    log:
        f"{R}/logs/summary.log",


# Alignment along training beside accuracy (evaluation.alignment; paper H.5).
if ALIGNMENT_STUDIES:

    use rule drift as alignment with:
        input:
            run_files("alignment.parquet"),
            run_files("evals.parquet"),
            run_files("manifest.json"),  # what vouches for them (mcgrpo.core.manifest)
            store=STORE,
        wildcard_constraints:
            study=_alternatives(ALIGNMENT_STUDIES),
        output:
            ALIGNMENT_TARGETS,
        params:
            **analysis_step("alignment"),
        log:
            f"{R}/logs/alignment.log",

    localrules:
        alignment,  # seconds of work: no SLURM job of its own (see the Snakefile)

# The verifier rules side by side: accuracy under each and how often they disagree, per arm and evaluation.
use rule drift as verifiers with:
    input:
        run_files("samples.parquet"),
        store=STORE,
    output:
        f"{R}/analysis/verifiers.parquet",
        [reported(path, "table") if path.endswith(".html") else path for path in VERIFIER_TABLES],
    params:
        **analysis_step("verifiers"),
    log:
        f"{R}/logs/verifiers.log",
