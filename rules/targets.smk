# The targets of the rules all and analysis: figures and tables of each study, each marked for `snakemake --report
# report.html`, and the report's first page. Every table and figure a study shows is listed once, by the rule that
# writes it (mcgrpo.analysis.shown): the summary holds each to its analysis (SHOWN).
from mcgrpo.analysis import shown

FIGURE_NAMES, TABLE_NAMES = shown.FIGURES["figures"], shown.TABLES["tables"]
FIGURES = [f"{R}/{path}" for path in shown.figure_files("figures")]
FIGURE_PDFS = [f"{R}/figures/{name}.pdf" for name in FIGURE_NAMES]  # vector copies, for papers
TABLES = [f"{R}/{path}" for path in shown.table_files("tables")]

# The gradient tests and their prediction table and figure, for the studies that have them.
GRADIENT_STUDIES = [name for name, study in S.items() if study.gradient]
GRADIENT_TESTS = f"{R}/analysis/gradient_tests.parquet"
PREDICTION_TARGETS = [f"{R}/{path}" for path in (*shown.figure_files("prediction"), *shown.table_files("prediction"))]
# Alignment along training (evaluation.alignment), for the studies that measure it.
ALIGNMENT_STUDIES = [name for name, study in S.items() if study.alignment]
ALIGNMENT_TARGETS = [f"{R}/analysis/alignment.parquet"] + [f"{R}/{path}" for path in shown.table_files("alignment")]
# The three verifier rules side by side on every evaluation's samples (verifier.rule).
VERIFIER_TABLES = [f"{R}/{path}" for path in shown.table_files("verifiers")]
# Every table and figure any study shows: the summary's checksum of them (rules/figures.smk).
SHOWN = [f"{R}/{path}" for rule in shown.RULES for path in shown.rule_files(rule)]


def shown_files(wildcards):
    """An input function: every table and figure the job's study shows (its summary is written beside them) and the
    analysis files they are written from (which the summary holds them to)."""
    cfg = S[wildcards.study].cfg
    return [f"{R}/{path}".format(study=wildcards.study) for path in (*shown.files(cfg), *shown.sources(cfg))]


SUMMARY, SUMMARY_RST = f"{R}/summary.md", f"{R}/summary.rst"


def targets(study):
    """Every file the analysis of `study` ends in."""
    one = [*FIGURES, *TABLES, *(PREDICTION_TARGETS if study in GRADIENT_STUDIES else []),
           *(ALIGNMENT_TARGETS if study in ALIGNMENT_STUDIES else []), *VERIFIER_TABLES, SUMMARY]
    return [path.format(study=study) for path in one]


# The programme summary: every study's preregistered verdicts in one table (mcgrpo.programme).
PROGRAMME_SUMMARY = ([f"{PROGRAMME.folder}/verdicts.parquet", f"{PROGRAMME.folder}/verdicts.md"]
                     if PROGRAMME else [])
TARGETS = [path for study in S for path in targets(study)] + PROGRAMME_SUMMARY
# The report opens with the results summary once there is one (else with the study's description alone).
_SUMMARY_RST = SUMMARY_RST.format(study=FIRST["study"])
REPORT_TEXT = (str(Path(_SUMMARY_RST).resolve()) if not PROGRAMME and Path(_SUMMARY_RST).exists()
               else "workflow/mcgrpo/analysis/report_intro.rst")
