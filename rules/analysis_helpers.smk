# The helpers of the analysis rules (drift.smk, the template, and the `use rule drift as` rules of contrasts.smk,
# figures.smk and gradients.smk), beside them; snakemake --lint wants a rule file's functions in a file of their
# own. What training shares too is in common.smk.
from mcgrpo.core import manifest, study_runs
from mcgrpo.core import sealed as content_seal


def run_files(name):
    """An input function: every stored run's file `name` (evals.parquet, samples.parquet, run.json, ...) of the
    job's study. An analysis-only run never relinks: it reads the runs the study's links point at, as trained (the
    prereg table names any stale one)."""

    def files(wildcards):
        return study_files(S[wildcards.study], name)

    return files


def study_files(study, name):
    if ANALYSIS_ONLY:
        return [str(layout.study_run(study.folder, arm, seed) / name) for arm, seed in study_config.runs(study.cfg)]
    return [f"{RUN.format(run=key)}/{name}" for key in study.named]


def made_by_training(name, study):
    """What the analysis of `study` reads that only the rules analysis_only leaves out make: its index, every run's
    files, B (every reading at B; calibrate writes it) and the gradient tests (the curves and prediction read them)."""
    return [STORE.format(study=name), str(study_runs.budget_path(study.folder)),
            *([GRADIENT_TESTS.format(study=name)] if name in GRADIENT_STUDIES else []),
            *(p for file in RUN_FILES for p in study_files(study, file))]


# Snakemake calls a job with existing outputs and a missing, unproducible input up to date (even under --forcerun),
# and a rerun for another reason then fails on a later step's file, naming no cause; an analysis-only run must
# instead refuse to report on runs never trained, or on a B or gradient tests since removed.
MISSING = [path for name, study in S.items() for path in made_by_training(name, study)
           if not Path(path).exists()] if ANALYSIS_ONLY else []
if MISSING:
    raise WorkflowError(f"Missing input files for the analysis (analysis_only=True never trains): {', '.join(MISSING)}; "
                        f"allowed: the files the workflow makes (rerun it without analysis_only: it makes them again, "
                        f"and retrains what reads them), or a config without the runs never trained")


def analysis_step(verb):
    """The params of analysis rule `verb` (rules/drift.smk's template runs `$PYTHON -m mcgrpo <verb>`); the
    study's JSON is a function, since it holds braces that are never wildcards."""
    return dict(verb=verb, study=lambda wildcards: S[wildcards.study].json, results=folder_of("store", 1),  # runs/store.parquet
                sealed=sealed_runs, folder=study_folder,
                # analysis files seal their own content (mcgrpo.core.sealed), and every reader refuses one without a
                # seal: a param added with the seal, so that the first run after it writes each study's files again
                content=content_seal.KEY)


def sealed_runs(wildcards):
    """A checksum trigger: one value that changes whenever a stored run's file does, even restored with `cp -p` to
    an mtime older than the analysis (Snakemake's mtime trigger misses it). A param of wildcards alone is recorded
    and compared on every invocation; the analysis then reruns and names the file. Only files touched since they
    were sealed are hashed (mcgrpo.core.manifest.fingerprint)."""
    return manifest.fingerprint([Path(path).parent for path in study_files(S[wildcards.study], "manifest.json")])


def held_results():
    """What a run prints as it ends: the first study's summary (a programme's verdicts), held to what its analysis
    gives now (mcgrpo.analysis.steps.held_summary, mcgrpo.programme.held_summary), else why it is not printed: a run
    that did not write it (other targets, --touch, --rerun-triggers mtime after an edit) must not show an earlier
    config's verdicts as the results. '' where no summary was written yet."""
    from mcgrpo.analysis import steps
    from mcgrpo.core.errors import McgrpoError

    path = Path(PROGRAMME_SUMMARY[1] if PROGRAMME else SUMMARY.format(study=FIRST["study"]))
    if not path.exists():
        return ""
    try:
        if PROGRAMME:
            return programmes.held_summary(PROGRAMME)
        return steps.held_summary(FIRST, S[FIRST["study"]].folder)
    except McgrpoError as e:
        return f"The results are not printed: {e}"


def holding_report(create):
    """`snakemake --report` runs no job: it embeds the files as they are. So before it writes the report, every
    study's summary (and a programme's verdicts), which it opens with and which holds every table and figure the
    study shows to its analysis (steps.held_summary), is held to what the analysis gives now; one edited, put back or
    left from an earlier config stops the report, naming it, rather than be shown as the study's results."""
    from mcgrpo.analysis import steps

    def create_report(*args, **kwargs):
        with stopping():
            for name, study in S.items():
                if Path(SUMMARY.format(study=name)).exists():
                    steps.held_summary(study.cfg, study.folder)
            if PROGRAMME and Path(PROGRAMME_SUMMARY[1]).exists():
                programmes.held_summary(PROGRAMME)
        return create(*args, **kwargs)

    return create_report


workflow.create_report = holding_report(workflow.create_report)


# contrasts.smk
def lock_input(wildcards):
    """The lock is an input where it exists or can be made; an analysis-only rerun of a study that was never
    locked labels every contrast exploratory instead of failing."""
    lock = LOCK.format(study=wildcards.study)
    return [lock] if not ANALYSIS_ONLY or Path(lock).exists() else []


def sealed(*patterns):
    """A checksum trigger, as sealed_runs, for study files that no run's manifest vouches for but an analysis rule
    reads (the lock, the gradient tests, the tables the summary is written beside): their sha256, '' for one not
    there. Snakemake's mtime trigger misses such a file put back with an older mtime (`cp -p`, `touch -r`): a lock
    of another plan, other gradient tests or an older table would leave every label and the summary's word on the
    plan, the prediction, or a table the summary disagrees with, as they were without a word."""

    def digests(wildcards):
        paths = [Path(pattern.format(study=wildcards.study)) for pattern in patterns]
        return [manifest.sha256(path) if path.is_file() else "" for path in paths]

    return digests


def gradient_tests_input(wildcards):
    """The study's gradient tests, an input of the analysis that reads them, where it has them."""
    return [GRADIENT_TESTS.format(study=wildcards.study)] if wildcards.study in GRADIENT_STUDIES else []


# figures.smk
def reported(path, kind):
    """`path` marked for `snakemake --report`, captioned by workflow/report/<kind>_<name>.rst."""
    name = Path(path).stem
    return report(path, caption=f"../workflow/report/{kind}_{name}.rst", category=kind.capitalize() + "s",
                  labels={"name": name.replace("_", " ")})
