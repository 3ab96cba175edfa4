# The targets of the rules all and analysis: figures and tables of each study, each marked for `snakemake --report
# report.html`, and the report's first page.
FIGURE_NAMES = ("accuracy_vs_tokens", "accuracy_vs_time", "difference_from_base", "per_seed", "stage_seconds",
                "drift")
TABLE_NAMES = ("headline", "robustness", "prereg", "contrasts", "equal_bases", "pass_at_k", "budget_share", "stage_seconds", "groups",
               "drift", "extrapolation", "power")
FIGURES = [f"{R}/figures/{name}.png" for name in FIGURE_NAMES]
FIGURE_PDFS = [f"{R}/figures/{name}.pdf" for name in FIGURE_NAMES]  # vector copies, for papers
TABLES = [f"{R}/tables/{name}.{ext}" for name in TABLE_NAMES for ext in ("csv", "md", "html")]

# The gradient tests and their prediction table and figure, for the studies that have them.
GRADIENT_STUDIES = [name for name, study in S.items() if study.gradient]
GRADIENT_TESTS = f"{R}/analysis/gradient_tests.parquet"
PREDICTION_TARGETS = [f"{R}/figures/prediction.png"] + [f"{R}/tables/{name}.{ext}" for name in ("efficiency", "prediction")
                                                        for ext in ("csv", "md", "html")]
# Alignment along training (evaluation.alignment), for the studies that measure it.
ALIGNMENT_STUDIES = [name for name, study in S.items() if study.alignment]
ALIGNMENT_TARGETS = [f"{R}/analysis/alignment.parquet"] + [f"{R}/tables/alignment.{ext}" for ext in ("csv", "md", "html")]
# The three verifier rules side by side on every evaluation's samples (verifier.rule).
VERIFIER_TABLES = [f"{R}/tables/verifiers.{ext}" for ext in ("csv", "md", "html")]
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
