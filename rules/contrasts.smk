# Contrasts with their statistics, curves at every evaluation, and the per-stage and group breakdowns.
use rule drift as contrasts with:
    input:
        run_files("evals.parquet"),
        run_files("manifest.json"),  # what vouches for them (mcgrpo.core.manifest)
        run_files("samples.parquet"),
        run_files("run.json"),
        lock_input,
        store=STORE,
    output:
        contrasts=f"{R}/analysis/contrasts.parquet",
        paired=f"{R}/analysis/paired.parquet",
        prereg=f"{R}/analysis/prereg.json",
    params:
        **analysis_step("contrasts"),
        lock=sealed(LOCK),  # the labels are the lock's: a lock put back under an old mtime reruns them
    log:
        f"{R}/logs/contrasts.log",


# Beside every planned contrast: the crossed interval, the strict verifier, each arm's drift, the other clock, and
# whether each seed's runs were made alike (their run.json's versions and hardware).
use rule drift as robustness with:
    input:
        rules.contrasts.output.contrasts,
        rules.drift.output,
        run_files("evals.parquet"),
        run_files("manifest.json"),  # what vouches for them (mcgrpo.core.manifest)
        run_files("samples.parquet"),
        run_files("run.json"),
        store=STORE,
    output:
        f"{R}/analysis/robustness.parquet",
    params:
        **analysis_step("robustness"),
    log:
        f"{R}/logs/robustness.log",


use rule drift as curves with:
    input:
        gradient_tests_input,  # the extrapolation reads the measured per-token efficiency
        run_files("evals.parquet"),
        run_files("manifest.json"),  # what vouches for them (mcgrpo.core.manifest)
        run_files("samples.parquet"),
        store=STORE,
    output:
        f"{R}/analysis/differences.parquet",
        f"{R}/analysis/budget_share.parquet",
        f"{R}/analysis/extrapolation.parquet",
    params:
        **analysis_step("curves"),
        measured=sealed(GRADIENT_TESTS),  # the extrapolation reads them: other tests under an old mtime rerun it
    log:
        f"{R}/logs/curves.log",


use rule drift as breakdown with:
    input:
        run_files("evals.parquet"),
        run_files("manifest.json"),  # what vouches for them (mcgrpo.core.manifest)
        run_files("iterations.parquet"),
        store=STORE,
    output:
        f"{R}/analysis/stages.parquet",
        f"{R}/analysis/groups.parquet",
    params:
        **analysis_step("breakdown"),
    log:
        f"{R}/logs/breakdown.log",
