"""The analysis stage's steps, one per rule: each reads Parquet under results/<study>/ and writes
its outputs there, so any of them can be rerun from the stored runs alone.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from mcgrpo.analysis import (alike, along, bases, breakdown, contrasts, curves, drift, efficiency, figures,
                             informative, power, prereg, robustness, runs, shown, summary, tables, verifiers)
from mcgrpo.core import manifest, sealed, store, study_runs, trl_config, warmup
from mcgrpo.core import config as study_config
from mcgrpo.core.errors import ConfigError, DataError, IntegrityError, MissingFile
from mcgrpo.core.layout import study_dir
from mcgrpo.analysis.plan import keys


budget = study_runs.budget  # B of calibration/budget.parquet, which every run read through study_runs is held to


def _runs(cfg: dict, results: Path, samples: bool = True) -> dict:
    return runs.load(results, list(cfg["arms"]), cfg["seeds"], cfg["evaluation"]["sets"], samples,
                     cfg["analysis"]["clock"], cfg["arms"])


def _folders(cfg: dict, results: Path) -> dict[tuple[str, int], Path]:
    """Every run's folder of the plan (arms x seeds), checked by the one reader of a study's runs."""
    return study_runs.folders(results, list(cfg["arms"]), cfg["seeds"], cfg["arms"])


def _records(cfg: dict, results: Path) -> dict[tuple[str, int], dict]:
    """{(arm, seed): run.json} of the plan's runs, through the one reader of a study's runs."""
    return study_runs.records(results, list(cfg["arms"]), cfg["seeds"], cfg["arms"])


def _accepted(cfg: dict, results: Path) -> dict[str, dict[int, list[str]]]:
    """{arm: {seed: keys}} of the plan's runs stored with recipe differences accepted (run.json, through the one
    reader of a study's runs): every table and the summary that use them say so."""
    return study_runs.accepted_differences(results, list(cfg["arms"]), cfg["seeds"], cfg["arms"])


# An analysis file's metadata key: {arm/seedN: mcgrpo.core.manifest.digest} of the runs it was computed from. Its
# config_hash holds it to the study's config; this holds it to the runs, which a retraining (a run set aside by
# check-store --repair, or a base of a pooled study retrained) changes under the same config.
COMPUTED_FROM = "computed_from"


def _write(df: pd.DataFrame, results: Path, name: str, cfg: dict, runs: dict[str, str]) -> Path:
    """analysis/<name>.parquet, with the hash of `cfg` and the runs it was computed from: `runs`, computed_from's
    taken before the step read them, so that a run replaced while the step ran leaves the file refused as computed
    from changed runs, never labelled with a training it did not read."""
    return store.write_parquet(df, Path(results) / "analysis" / f"{name}.parquet", analysis_hash(cfg),
                               {COMPUTED_FROM: json.dumps(runs, sort_keys=True), sealed.KEY: sealed.of_frame(df)})


def computed_from(cfg: dict, results: Path) -> dict[str, str]:
    """{arm/seedN: digest} of the plan's runs as they are now, through the one reader of a study's runs."""
    return {f"{arm}/seed{seed}": manifest.digest(folder) for (arm, seed), folder in _folders(cfg, results).items()}


def analysis_hash(cfg: dict) -> str:
    """The config_hash an analysis file of study `cfg` carries: its `analysed` config's, so a step run by hand with
    the study's file (which may set a switch) and the workflow's job (which never sees one) agree."""
    return study_config.config_hash(analysed(cfg))


def analysed(cfg: dict) -> dict:
    """The config the analysis jobs of study `cfg` run with, and hash what they write with: the study less the
    switches saying how Snakemake ran (study_config.SWITCHES, what rules/common.smk leaves out of each job's config),
    its defaults filled again as each job's validation fills them (the rest of a validation only checks). A job's
    own config is its own `analysed`."""
    kept = {k: v for k, v in cfg.items() if k not in study_config.SWITCHES}
    return study_config.validate_schema(json.loads(json.dumps(kept, sort_keys=True)))


def analysis_reader(cfg: dict, results: Path, runs: dict[str, str] | None = None) -> Callable[..., pd.DataFrame]:
    """`read(name, kind=None)`: analysis/<name>.parquet, an earlier step's output, checked to be written for `cfg`
    (its config_hash) and computed from the study's runs as they are now (`runs`, computed_from's, else computed
    once per reader): one left from an earlier config or from runs since retrained, copied from another study or
    rewritten by hand (written without them) is named, never read; so is one whose rows were edited since it was
    written (its seal: mcgrpo.core.sealed)."""
    expected = analysis_hash(cfg)
    now = functools.cache(lambda: computed_from(cfg, results) if runs is None else runs)

    def read(name: str, kind: str | None = None) -> pd.DataFrame:
        path = Path(results) / "analysis" / f"{name}.parquet"
        frame = _read_held(path, "written for config", "config", expected, kind, now)
        sealed.held(path)
        return frame
    return read


def _read_held(path: Path, said: str, what: str, expected: str, kind: str | None = None,
               runs: Callable[[], dict[str, str]] | None = None, remedy: str | None = None) -> pd.DataFrame:
    """`path` (of contract `kind`, if given), refused where the config_hash it was written with is not `expected`,
    the study's `what` hash (_held_to), or, given `runs` (the study's runs now), where it was computed from others
    (_held_to_runs)."""
    frame = store.read_contract(path, kind) if kind else store.read_parquet(path)
    meta = store.parquet_metadata(path)
    found = meta.get("config_hash", "")
    _held_to(path, f"{said} {found[:12] or '(none)'}", found, what, expected, remedy)
    if runs is not None:
        _held_to_runs(path, meta, runs())
    return frame


def _held_to_runs(path: Path, meta: dict[str, str], now: dict[str, str]) -> None:
    """Refuse `path`, of metadata `meta`, where the runs it records it was computed from (COMPUTED_FROM) are not
    the study's `now`: its numbers would be another training's, under the same config."""
    try:
        then = json.loads(meta[COMPUTED_FROM])
    except (KeyError, ValueError):
        then = None
    if not isinstance(then, dict):
        raise IntegrityError(f"{path}: records no runs it was computed from (written before analysis files recorded "
                             f"them, or by hand); allowed: the file this study's analysis writes from its runs "
                             f"(snakemake --configfile STUDY --forcerun {path})")
    changed = [run for run in now if then.get(run) != now[run]] + [run for run in then if run not in now]
    if changed:
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise IntegrityError(f"{path}: computed from runs that have changed since: {', '.join(changed[:3])}{more} "
                             f"(retrained, set aside or replaced); allowed: the file this study's analysis writes "
                             f"from its runs now (snakemake --configfile STUDY --forcerun {path})")


def _held_to(path: Path, said: str, found: str, what: str, expected: str, remedy: str | None = None) -> None:
    """Refuse `path`, which `said` of itself, where its hash `found` is not the study's `what` hash `expected`;
    `remedy`: what makes the right file, where the analysis's --forcerun cannot."""
    if found != expected:
        raise IntegrityError(f"{path}: {said}, but this study's {what} hashes to {expected[:12]}: left from an "
                             f"earlier config or another study, or edited by hand; allowed: " + (remedy or
                             f"the file this study's analysis writes (snakemake --configfile STUDY --forcerun {path})"))


def _status(cfg: dict, results: Path) -> dict:
    """analysis/prereg.json, the contrasts step's plan against the lock, checked to be of `cfg`'s plan (its
    sha256_now) and of the lock as it is now (_held_to_lock): a stale or copied one would word the summary's
    preregistration note, and leave every label, for another plan or lock."""
    path = Path(results) / "analysis" / "prereg.json"
    status = store.read_json(path)
    found = str(status.get("sha256_now") if isinstance(status, dict) else None)
    _held_to(path, f"the plan against its lock for plan {found[:12]}", found, "plan",
             study_config.config_hash(prereg.material(cfg)))
    if why := sealed.json_problem(path, status):
        raise IntegrityError(why)
    _held_to_lock(path, status, Path(results))
    return status


def _held_to_lock(path: Path, status: dict, results: Path) -> None:
    """Refuse `path` (prereg.json), whose labels, and contrasts.parquet's written with it, are of the lock it records,
    where the study's lock is now another or none (removed, re-locked, an older one put back): the config and runs
    are the same, so nothing else tells, and a table, the summary or a programme would show a label that `mcgrpo
    contrast`, reading the lock, does not give."""
    lock = prereg.read_lock(results)
    now = (lock["sha256"], lock["locked_at"]) if lock else (None, None)
    then = (status.get("sha256_lock"), status.get("locked_at"))
    if then != now:
        raise IntegrityError(f"{path}: labels the plan against {_lock_words(*then)}, but {results / prereg.LOCK} is "
                             f"now {_lock_words(*now)} (removed, locked again or put back since); allowed: the labels "
                             f"against the lock as it is (snakemake --configfile STUDY --forcerun "
                             f"{results / 'analysis' / 'contrasts.parquet'})")


def _lock_words(sha256: str | None, locked_at: str | None) -> str:
    return f"the lock of {locked_at} (sha256 {sha256[:12]})" if sha256 else "no lock"


def drift_step(cfg: dict, results: Path) -> None:
    held = computed_from(cfg, results)  # before the runs are read (_write)
    evals = runs.evals_frame(_runs(cfg, results, samples=False))
    _write(drift.drift_table(evals, cfg["analysis"]["drift_gap"]), results, "drift", cfg, held)


def contrasts_step(cfg: dict, results: Path) -> None:
    """Every contrast with its statistics and crossed bootstrap, labelled against the lock."""
    a, held = cfg["analysis"], computed_from(cfg, results)
    status = prereg.status(results, cfg)
    table, paired = contrasts.build(_runs(cfg, results), keys(cfg), budget(results), a["margin"],
                                    prereg.labels(cfg, status), a["alpha"], a["resamples"], a["bootstrap_seed"],
                                    warmup.study(cfg))
    _write(table, results, "contrasts", cfg, held)
    _write(paired, results, "paired", cfg, held)
    store.write_json(sealed.with_seal(status), Path(results) / "analysis" / "prereg.json")


def robustness_step(cfg: dict, results: Path) -> None:
    """Beside every planned contrast: the crossed interval, the strict verifier, each arm's drift, the other clock,
    and whether each seed's runs were made alike (their run.json, each read once)."""
    held = computed_from(cfg, results)
    a, read = cfg["analysis"], analysis_reader(cfg, results, held)
    table = read("contrasts", "contrasts")
    metrics = {robustness.strict_metric(m) for m in table.loc[table["id"] != "", "metric"]} - {None}
    loaded = _runs(cfg, results, samples=not metrics <= runs.EVAL_METRICS)
    checks = robustness.table(table, loaded, read("drift", "drift"), budget(results), a["clock"], a["alpha"],
                              _records(cfg, results), warmup.study(cfg))
    _write(checks, results, "robustness", cfg, held)


def curves_step(cfg: dict, results: Path) -> None:
    """Differences at every evaluation, the share of budget to reach the base, the extrapolation."""
    a, B, held = cfg["analysis"], budget(results), computed_from(cfg, results)
    loaded = _runs(cfg, results, samples=not set(a["metrics"]) <= runs.EVAL_METRICS)
    grid = [(x, y, m, s) for x, y in study_config.pairs(cfg) for m in a["metrics"] for s in cfg["evaluation"]["sets"]]
    diffs = [curves.differences(loaded, x, y, m, s) for x, y, m, s in grid]
    # Without a token budget (an equal-iteration study) there is no share of B tokens, and the per-token
    # extrapolation has no B to be read at: the share of the base's training time stays, the extrapolation is empty.
    tokens = B.unit == "tokens"
    shares = [curves.budget_share(loaded, x, y, m, s, B, axis, a["resamples"], a["bootstrap_seed"])
              for x, y, m, s in grid for axis in curves.AXES if tokens or axis == "time"]
    measured = _efficiency(cfg, _gradient_tests(cfg, results))
    rates = {**(efficiency.measured_per_token(measured) if measured is not None else {}), **a["efficiency"]}
    rates = rates if tokens else {}
    extra = [curves.extrapolation(loaded, x, y, m, s, B, rates[x]) for x, y, m, s in grid if x in rates]
    _write(pd.concat(diffs, ignore_index=True) if diffs else pd.DataFrame(), results, "differences", cfg, held)
    _write(pd.DataFrame(shares), results, "budget_share", cfg, held)
    _write(pd.DataFrame(extra, columns=curves.EXTRAPOLATION_COLUMNS), results, "extrapolation", cfg, held)


def _gradient_tests(cfg: dict, results: Path) -> pd.DataFrame | None:
    """analysis/gradient_tests.parquet, when the study has gradient tests, held to the hash its stage writes (that of
    gradient_tests_config): `--config analysis_only=True` never reruns the stage, nor does a step run by hand, so a
    file measured under an earlier config (other arms, batches, recipe or model) or copied from another study would
    otherwise be read as this study's efficiencies, its prediction and its extrapolation, without a word."""
    planned, path = study_config.gradient_tests_config(cfg), Path(results) / "analysis" / "gradient_tests.parquet"
    if not planned:
        return None
    if not path.exists():  # read as none, the extrapolation would be the config's efficiencies alone, unsaid
        raise MissingFile(f"{path}: not found, but the study plans gradient tests, whose efficiencies the prediction "
                          f"and the extrapolation read; allowed: {MEASURE_AGAIN}")
    frame = _read_held(path, "measured for gradient tests", "gradient tests' config",
                       study_config.config_hash(planned), remedy=MEASURE_AGAIN)
    sealed.held(path, REMEASURE)
    return frame


# The gradient tests' stage is not part of an analysis-only run, so a --forcerun of its file cannot make it there
MEASURE_AGAIN = ("the file the study's gradient_tests stage writes: snakemake --configfile STUDY without "
                 "analysis_only, which runs it (and trains every run the config plans that is not stored yet)")
REMEASURE = ("the file the study's gradient_tests stage writes: snakemake --configfile STUDY --forcerun gradient_tests "
             "(without analysis_only), which measures it again")


def _efficiency(cfg: dict, tests: pd.DataFrame | None) -> pd.DataFrame | None:
    """The efficiencies of the gradient tests `tests` (_gradient_tests), where the study has them."""
    if tests is None:
        return None
    return efficiency.efficiency_table(tests, cfg["gradient_tests"]["resamples"], cfg["gradient_tests"]["seed"])


def prediction_step(cfg: dict, results: Path) -> None:
    """Efficiencies with intervals, and whether they predict training (the paper's Figure 2): table and figure."""
    results, a, held = Path(results), cfg["analysis"], computed_from(cfg, results)
    tests = _gradient_tests(cfg, results)
    measured = _efficiency(cfg, tests)
    metric, eval_set, base = a["metrics"][0], cfg["evaluation"]["sets"][0], a["base"] or "outcome"
    trained, read = measured[measured["arm"].isin([efficiency.BASE, *cfg["arms"]])], analysis_reader(cfg, results, held)
    table = efficiency.prediction_table(trained, read("contrasts", "contrasts"), base, metric, eval_set,
                                        read("extrapolation"))
    rho = efficiency.rank_agreement(table)
    fit = efficiency.second_moment_fit(tests, cfg["gradient_tests"]["resamples"], cfg["gradient_tests"]["seed"])
    _write(measured, results, "efficiency", cfg, held)
    _write(table.assign(**rho), results, "prediction", cfg, held)
    _write(fit, results, "second_moment", cfg, held)
    _write_tables(cfg, results, "prediction", read)
    with figures.stamped(drawn_from(cfg, results, "prediction", held)):
        figures.prediction(table, extrapolation_line(cfg, results, base, metric, eval_set), a["margin"],
                           results / "figures" / "prediction.png", rho, figures.arm_colours(list(cfg["arms"])))


def _prediction_tables(cfg: dict, results: Path, read: Callable[..., pd.DataFrame], said: dict | None = None
                       ) -> dict[str, tuple[pd.DataFrame, str, str]]:
    """name -> (table, title, note) of the prediction step's tables, from its analysis files as `read` holds them."""
    metric, eval_set = _headline(cfg)
    return {
        "efficiency": (read("efficiency"), "Gradient efficiency relative to outcome-only GRPO (per update and per "
                       "generated token, 95% bootstrap CIs over batches)",
                       "Alignment: cos(P_perp u, P_perp h); share_outside_v: ||P_perp u|| / ||u||; "
                       "projection_residual: the projector's numerical check; inner_se: E<u,h> in standard errors."),
        "prediction": (read("prediction"), "Does the gradient test predict training? (exploratory)",
                       tables.accepted_note(_accepted(cfg, results), f"{metric} on {eval_set}: per-update efficiency "
                                            f"beside the equal-updates difference, per-token beside the equal-tokens "
                                            f"difference, observed minus extrapolated accuracy; Spearman over the "
                                            f"trained arms.")),
        "second_moment": (read("second_moment"), "The update's second moment as a + b/k (k sweep) and the share due "
                          "to continuation sampling at each k (95% bootstrap CI)",
                          "Empty without a sweep of at least two k (gradient_tests)."),
    }


def extrapolation_line(cfg: dict, results: Path, base: str, metric: str, eval_set: str):
    """Efficiency e -> the base's mean accuracy at e x B minus at B (what a reward of efficiency e is supposed
    to reach at B), on e in [0.05, 1] where the base's runs reach."""
    B = budget(results)
    evals = runs.evals_frame(_runs(cfg, results, samples=False))
    mine = evals[(evals["arm"] == base) & (evals["eval_set"] == eval_set)]
    if mine.empty or metric not in mine:
        return None
    e = np.geomspace(0.05, 1.0, 40)
    mean, _, _ = curves.mean_curve(mine, "tokens_total", e * B, metric)
    at_b, _, _ = curves.mean_curve(mine, "tokens_total", np.array([B]), metric)
    return e, mean - at_b[0]


def breakdown_step(cfg: dict, results: Path) -> None:
    """Seconds per stage and group composition before B."""
    results, B, held = Path(results), budget(results), computed_from(cfg, results)
    rows, folders = [], _folders(cfg, results)
    for (arm, seed, eval_set), run in _runs(cfg, results, samples=False).items():
        if eval_set == cfg["evaluation"]["sets"][0]:  # every set is evaluated at the same iterations
            iterations = runs.read_iterations(folders[arm, seed], breakdown.COLUMNS)
            at_budget = run.coords("tokens_total")[contrasts.budget_row(run, B)]
            rows.append({"arm": arm, "seed": seed, **breakdown.run_totals(iterations, at_budget)})
    totals = pd.DataFrame(rows)
    _write(breakdown.stage_seconds(totals), results, "stages", cfg, held)
    _write(breakdown.group_shares(totals), results, "groups", cfg, held)


def _headline(cfg: dict) -> tuple[str, str]:
    """The metric and eval set the figures show: the first of each."""
    return cfg["analysis"]["metrics"][0], cfg["evaluation"]["sets"][0]


def hardware(cfg: dict, results: Path) -> str | None:
    """Where the runs were timed, from their run.json: 'NVIDIA H100' or 'CPU (x86_64), 2 threads' (every
    distinct one, in run order); None where no run records it."""
    seen = [alike.machine_words(run["hardware"]) for run in _records(cfg, results).values() if run.get("hardware")]
    return "; ".join(dict.fromkeys(seen)) or None


def figures_step(cfg: dict, results: Path) -> None:
    """The study's figures, each stamped with what they are drawn from (drawn_from, taken before they read it: a file
    replaced while they are drawn leaves them refused, never stamped as drawn from it)."""
    with figures.stamped(drawn_from(cfg, results, "figures")):
        _figures(cfg, results)


def _figures(cfg: dict, results: Path) -> None:
    results, B, margin = Path(results), budget(results), cfg["analysis"]["margin"]
    metric, eval_set = _headline(cfg)
    out, colours, where = results / "figures", figures.arm_colours(list(cfg["arms"])), hardware(cfg, results)
    evals = runs.evals_frame(_runs(cfg, results, samples=False))
    figures.accuracy_curves(evals, "tokens_total", B, out / "accuracy_vs_tokens.png", metric, eval_set, colours)
    figures.accuracy_curves(evals, runs.CLOCKS[cfg["analysis"]["clock"]], B, out / "accuracy_vs_time.png", metric,
                            eval_set, colours, where)
    # the arms' flags from the evaluations read above (the base arms' among them), not read again
    read, accepted = analysis_reader(cfg, results), _accepted(cfg, results)
    said, stale = _flags(cfg, evals, _bases(cfg), _overran(cfg, results)), _status(cfg, results).get("stale_runs")
    table, paired, diffs = read("contrasts", "contrasts"), read("paired", "paired"), read("differences")
    table = table[(table["metric"] == metric) & (table["eval_set"] == eval_set)]
    # the tables' words beside each bar; beside each panel of every evaluation, those about its arms (the points
    # read apart, and an amendment after the lock, are of the reading at B alone)
    panels = {r["contrast"]: summary.warning({**r, "warning": "", "note": ""}, accepted, stale, said) for r in
              table.to_dict("records")}
    table = table.assign(warning=tables.contrast_warnings(table, accepted, stale, said))
    figures.difference_from_base(diffs[(diffs["metric"] == metric) & (diffs["eval_set"] == eval_set)]
                                 if len(diffs) else diffs, B, margin, out / "difference_from_base.png", colours, panels)
    paired = paired[(paired["metric"] == metric) & (paired["eval_set"] == eval_set)]
    figures.per_seed(paired, table, margin, out / "per_seed.png", colours)
    figures.stage_seconds(read("stages"), out / "stage_seconds.png", where)
    figures.drift(read("drift", "drift"), cfg["analysis"]["drift_gap"], out / "drift.png", eval_set,
                  colours)


def headline(cfg: dict, results: Path, runs: dict[str, str] | None = None) -> pd.DataFrame:
    """The headline table (tables/headline.csv) of study `cfg` from its analysis files, each held to the study's
    config and runs (`runs`: computed_from's, where already taken): what a programme's summary holds each study's CSV
    to, so it never shows another verdict, and what pool-bases words each base's verdict by."""
    read = analysis_reader(cfg, results, runs)
    return tables.headline(read("contrasts", "contrasts"), read("robustness"), _accepted(cfg, results),
                           _status(cfg, results).get("stale_runs"), flags(cfg, results))


def tables_step(cfg: dict, results: Path) -> None:
    _write_tables(cfg, results, "tables", analysis_reader(cfg, results), flags(cfg, results))


def _write_tables(cfg: dict, results: Path, rule: str, read: Callable[..., pd.DataFrame], said: dict | None = None
                  ) -> None:
    """Write every table of analysis rule `rule` (shown.TABLES) from its analysis files as `read` holds them: what
    held_shown holds them to, from the same function, so the two never word a table apart."""
    for name, (df, title, note) in _MAKERS[rule](cfg, results, read, said).items():
        tables.write_table(df, Path(results) / "tables" / name, title=title, note=note)


def _tables(cfg: dict, results: Path, read: Callable[..., pd.DataFrame], said: dict
            ) -> dict[str, tuple[pd.DataFrame, str, str]]:
    """name -> (table, title, note) of every table the tables step writes, from the study's analysis files as `read`
    (analysis_reader's) holds them and its arms' flags `said` (flags')."""
    results, accepted = Path(results), _accepted(cfg, results)
    table, paired = read("contrasts", "contrasts"), read("paired", "paired")
    out = tables.study_tables(table, paired, _status(cfg, results), read("drift", "drift"), read("stages"),
                              read("groups"), read("budget_share"), read("extrapolation"),
                              cfg["analysis"]["drift_gap"], read("robustness"), cfg["analysis"]["clock"], accepted,
                              said)
    metric, eval_set = _headline(cfg)
    a = cfg["analysis"]
    planned = power.plan(paired[(paired["metric"] == metric) & (paired["eval_set"] == eval_set)], a["margin"],
                         a["alpha"], warmups=warmup.study(cfg))
    out["power"] = (planned, "Seeds planner: paired seeds for 80% power",
                    tables.accepted_note(accepted, power_note(a["margin"], a["alpha"])))
    return out


def held_shown(cfg: dict, results: Path, read: Callable[..., pd.DataFrame], said: dict) -> None:
    """Refuse any table or figure the study shows (shown.TABLES, shown.FIGURES: the report embeds them, a reader opens
    them beside the summary) that is not what its analysis files give now: a table's CSV, markdown and HTML copies
    (tables.held_csv, tables.held_copies), a figure's stamp and seal (figures.held_figure). One edited by hand, or
    an older copy put back (`cp -p`), is a verdict or a number the analysis does not give, and Snakemake, which
    reruns the summary after it (its mtime is newer, or the summary rule's checksum of it changed), would otherwise
    print the summary beside it without a word. A rule the study does not plan, or whose outputs are not there (a
    step run by hand before it), has nothing to hold. `read`, `said`: as _tables'."""
    folder = Path(results)
    for rule in shown.RULES:
        if shown.planned(cfg, rule) and shown.any_there(folder, rule):
            _held_tables(cfg, folder, rule, read, said)
            _held_figures(cfg, folder, rule)


def _held_tables(cfg: dict, folder: Path, rule: str, read: Callable[..., pd.DataFrame], said: dict) -> None:
    """Refuse a table of `rule` (its CSV, markdown or HTML copy) that is not the one its analysis files give now."""
    for name, (df, title, note) in (_MAKERS[rule](cfg, folder, read, said) if rule in _MAKERS else {}).items():
        csv = folder / "tables" / f"{name}.csv"
        if csv.exists():
            tables.held_csv(csv, df, rule=rule)
        tables.held_copies(folder / "tables" / name, df, title, note, rule=rule)


def _held_figures(cfg: dict, folder: Path, rule: str) -> None:
    """Refuse a figure of `rule` not drawn from what it reads now, or edited since (figures.held_figure)."""
    paths = [folder / path for path in shown.figure_files(rule)]
    stamp = drawn_from(cfg, folder, rule) if any(path.exists() for path in paths) else ""
    for path in paths:
        figures.held_figure(path, stamp, tables.rerun(path, rule))


# What each analysis rule's figures are drawn from besides the study's runs and config (drawn_from): the files it
# reads, relative to the study's folder.
FIGURE_SOURCES = {"figures": ("analysis/contrasts.parquet", "analysis/paired.parquet", "analysis/differences.parquet",
                              "analysis/stages.parquet", "analysis/drift.parquet", "analysis/prereg.json",
                              "calibration/budget.parquet"),
                  "prediction": ("analysis/prediction.parquet", "calibration/budget.parquet")}


def drawn_from(cfg: dict, results: Path, rule: str, runs: dict[str, str] | None = None) -> str:
    """The stamp of analysis rule `rule`'s figures (figures.stamped): a digest of the config its analysis hashes
    (analysis_hash), the study's runs as they are now (`runs`, computed_from's, where already taken) and the sha256 of
    each file it reads (FIGURE_SOURCES, '' for one not there). A figure is held to it rather than to its bytes
    (figures.held_figure says why); the analysis files are themselves held to the config and the runs."""
    files = {name: manifest.sha256(Path(results) / name) if (Path(results) / name).is_file() else ""
             for name in FIGURE_SOURCES[rule]}
    said = {"config": analysis_hash(cfg), "runs": computed_from(cfg, results) if runs is None else runs,
            "files": files}
    return hashlib.sha256(json.dumps(said, sort_keys=True).encode()).hexdigest()


def power_note(margin: float, alpha: float) -> str:
    return (f"seeds_to_exclude_0: paired seeds for 80% power to exclude 0 at alpha {alpha:g}; seeds_for_equivalence: "
            f"for 80% power to show equivalence within ±{100 * margin:g} points (never: |mean| is at least the "
            f"margin). mean, sd: of the per-seed differences now.\n{power.ASSUMPTION}")


def _bases(cfg: dict) -> list[str]:
    """The study's base arms: where a floor at the first evaluation is looked for."""
    return sorted({b for _, b in study_config.pairs(cfg)})


def _base_evals(cfg: dict, results: Path) -> tuple[pd.DataFrame, list[str]]:
    """(the evaluations of the study's base arms, those arms)."""
    bases = _bases(cfg)
    loaded = runs.load(results, bases, cfg["seeds"], cfg["evaluation"]["sets"], False, cfg["analysis"]["clock"],
                       cfg["arms"])
    return runs.evals_frame(loaded), bases


def _floors(cfg: dict, evals: pd.DataFrame, bases: list[str]) -> list[str]:
    """Warnings where a base arm scored 0 at its first evaluation in every seed (analysis/informative.py)."""
    return informative.floors_at_start(evals, bases, cfg["analysis"]["metrics"][0], cfg["evaluation"]["sets"])


def _overran(cfg: dict, results: Path) -> pd.DataFrame | None:
    """Where the study's verifier is math_verify, whether each check of each run's samples overran its CPU budget
    (math_verify_overran, with arm and seed), which its accuracies count as wrong; None elsewhere, or where no run
    recorded it."""
    return _overran_samples(cfg, results) if (cfg.get("verifier") or {}).get("rule") == "math_verify" else None


def _overran_samples(cfg: dict, results: Path) -> pd.DataFrame | None:
    """Whether each check of each run's samples overran its CPU budget (math_verify_overran, with arm and seed),
    whatever the study's verifier (the verifiers table says so of its math_verify column); None where no run
    recorded it."""
    pieces = []
    for (arm, seed), folder in _folders(cfg, results).items():
        path = manifest.checked(folder / "samples.parquet")
        if "math_verify_overran" in store.parquet_columns(path):  # runs from before it was recorded: not known
            pieces.append(store.read_parquet(path, columns=["math_verify_overran"]).assign(arm=arm, seed=seed))
    return pd.concat(pieces, ignore_index=True) if pieces else None


def _overruns(overran: pd.DataFrame | None) -> list[str]:
    """The summary's warning of how many math-verify checks overran (the verifiers table says it for every study, of
    its math_verify column)."""
    note = verifiers.overran_note(overran) if overran is not None else ""
    return [f"{note} The study's verifier is math_verify: its accuracies above count each as wrong."] if note else []


def flags(cfg: dict, results: Path) -> dict[tuple[str, str | None], str]:
    """{(arm, eval set, or None for every set): words} of the summary's warnings above the verdicts that concern one
    arm (a floor at its first evaluation, math-verify checks counted wrong): each verdict with the arm carries them
    in its warning (summary.warning) wherever it is shown."""
    return _flags(cfg, *_base_evals(cfg, results), _overran(cfg, results))


def _flags(cfg: dict, evals: pd.DataFrame, bases: list[str], overran: pd.DataFrame | None) -> dict:
    """flags of _base_evals's `evals` and `bases` and _overran's `overran`, already read, and of the ingested arms
    (summary.ingested_flags); two for one arm and set joined."""
    found: dict[tuple[str, str | None], str] = {}
    for key, words in [*informative.floor_flags(evals, bases, cfg["analysis"]["metrics"][0],
                                                cfg["evaluation"]["sets"]).items(),
                       *(verifiers.overran_flags(overran) if overran is not None else {}).items(),
                       *summary.ingested_flags(list(trl_config.arms(cfg, "ingested"))).items()]:
        found[key] = f"{found[key]}; {words}" if key in found else words
    return found


def summary_step(cfg: dict, results: Path) -> None:
    """summary.md (printed at the end of a run) and summary.rst (the report's first page)."""
    results, text = Path(results), summary_lines(cfg, results)
    store.write_text(summary.markdown(text), results / "summary.md")
    store.write_text(summary.rst(text, summary.DESCRIPTION.read_text()), results / "summary.rst")
    print(summary.markdown(text), end="")


def held_summary(cfg: dict, results: Path) -> str:
    """summary.md as the end of a run prints it, held to the summary the study's analysis gives now: a run that
    did not rerun the summary step (other targets, `--touch`, `--rerun-triggers mtime` after an edit of the
    config) would otherwise print the verdicts of an earlier config or training as this one's. Refused, naming it.
    summary.rst, the report's first page, is held alike: `snakemake --report` embeds it as it stands."""
    results, text = Path(results), summary_lines(cfg, results)
    now = summary.markdown(text)
    for path, given in ((results / "summary.md", now),
                        (results / "summary.rst", summary.rst(text, summary.DESCRIPTION.read_text()))):
        if (path.read_text() if path.is_file() else None) != given:
            raise IntegrityError(f"{path}: not the summary the study's analysis gives now (edited by hand, or left "
                                 f"from an earlier config or training: this run did not write it); allowed: the "
                                 f"summary step's own (snakemake --configfile STUDY --forcerun {path})")
    return now


def summary_lines(cfg: dict, results: Path) -> list[str]:
    """The summary's lines, from the study's analysis files (held to its config, runs and lock) beside the tables
    and figures they give now (held_shown)."""
    results, read = Path(results), analysis_reader(cfg, results)
    (evals, bases), overran = _base_evals(cfg, results), _overran(cfg, results)
    said = _flags(cfg, evals, bases, overran)
    held_shown(cfg, results, read, said)  # printed beside them: never beside a table or figure it disagrees with
    status, accepted = _status(cfg, results), _accepted(cfg, results)
    return summary.lines(cfg["study"], read("contrasts", "contrasts"), tables.prereg_note(status),
                         str(results), cfg["analysis"]["clock"], read("robustness"),
                         [*summary.accepted_warnings(accepted), *_floors(cfg, evals, bases), *_overruns(overran)],
                         stale=status.get("stale_runs"), accepted=accepted, flags=said)


def alignment_step(cfg: dict, results: Path) -> None:
    """Alignment along training beside accuracy, for every run measured (evaluation.alignment)."""
    results, pieces, held = Path(results), [], computed_from(cfg, results)
    for (arm, seed), folder in _folders(cfg, results).items():
        pieces.append(along.run_table(store.read_parquet(manifest.checked(folder / "alignment.parquet")),
                                      runs.read_evals(folder / "evals.parquet"), arm, seed))
    table = pd.concat([p for p in pieces if len(p)], ignore_index=True) if any(len(p) for p in pieces) else \
        pd.DataFrame(columns=along.COLUMNS)
    _write(table, results, "alignment", cfg, held)
    _write_tables(cfg, results, "alignment", analysis_reader(cfg, results, held))


def _alignment_tables(cfg: dict, results: Path, read: Callable[..., pd.DataFrame], said: dict | None = None
                      ) -> dict[str, tuple[pd.DataFrame, str, str]]:
    """name -> (table, title, note) of the alignment step's table, from its analysis file as `read` holds it."""
    spec = cfg["evaluation"]["alignment"]
    return {"alignment": (read("alignment"), "Alignment with the reference gradient along training (paper H.5)",
                          tables.accepted_note(_accepted(cfg, results), f"Every {spec['every']} iterations and at "
                          f"the end, on {spec['batches']} fixed batches: rule = the run's own credit, outcome-only "
                          f"GRPO's, or a control's, at the run's policy. alignment: cos(P_perp u, P_perp h); "
                          f"share_outside_v: ||P_perp u|| / ||u|| (means over batches); acc_default / acc_greedy: "
                          f"the run's accuracy at that iteration's evaluation."))}


def verifiers_step(cfg: dict, results: Path) -> None:
    """tables/verifiers: per arm, eval set and evaluation, accuracy under each verifier rule and how often each
    pair disagrees (analysis/verifiers.py), from every run's samples.parquet (analysis/verifiers.parquet)."""
    results, pieces, held = Path(results), [], computed_from(cfg, results)
    for (arm, seed), folder in _folders(cfg, results).items():
        pieces.append(runs.read_samples(folder / "samples.parquet").assign(arm=arm, seed=seed))
    samples = pd.concat(pieces, ignore_index=True)
    _write(verifiers.disagreements(samples, ["arm", "eval_set", "eval_index"]), results, "verifiers", cfg, held)
    _write_tables(cfg, results, "verifiers", analysis_reader(cfg, results, held))


def _verifiers_tables(cfg: dict, results: Path, read: Callable[..., pd.DataFrame], said: dict | None = None
                      ) -> dict[str, tuple[pd.DataFrame, str, str]]:
    """name -> (table, title, note) of the verifiers step's table, from its analysis file as `read` holds it and the
    runs' math_verify_overran (its note's warning)."""
    overran = _overran_samples(cfg, results)
    overran = verifiers.overran_note(overran) if overran is not None else ""
    return {"verifiers": (read("verifiers"), "The verifier rules side by side (verifier.rule)",
                          tables.accepted_note(_accepted(cfg, results), f"Over every seed's samples of each "
                          f"evaluation. acc_<rule>: accuracy under whole_box (the final box read whole), paper (C.1, "
                          f"H.1: the last number inside the final box, tolerance 1e-4) and math_verify (empty where "
                          f"it was not installed); <a>_vs_<b>: the share of samples the two rules judge differently. "
                          f"The study trains on {(cfg.get('verifier') or {}).get('rule', 'whole_box')}."
                          + (f" {overran}" if overran else "")))}


# rule -> its tables (name -> (table, title, note)) from its analysis files: what it writes and the summary holds
_MAKERS = {"tables": _tables, "prediction": _prediction_tables, "alignment": _alignment_tables,
           "verifiers": _verifiers_tables}


def pool_bases(cfg: dict) -> str:
    """A study over `bases`: every base's planned contrasts and the pooled ones, written to
    results/<study>/analysis/bases.parquet and tables/bases.*; returns the markdown table. Each base's analysis
    files are read held to its config and to its runs as they are now (analysis_reader): a base retrained, or a run
    of it set aside, since it was analysed is named, never pooled."""
    if not cfg.get("bases"):
        raise ConfigError(f"study {cfg['study']}: no bases to pool; allowed: a study with bases (a list of "
                          f"warm-start seeds), e.g. config/studies/bases.yaml")
    per_base, runs_read, judged = {}, {}, {}
    for base in cfg["bases"]:
        own = study_config.base_study(cfg, base)  # the base study its analysis jobs ran (less the switches)
        folder = study_dir(own)
        if not (folder / "analysis" / "paired.parquet").exists():
            raise DataError(f"{folder}/analysis/paired.parquet: base {base} not analysed yet; run "
                            f"snakemake --configfile <this study> --config base={base}")
        now = computed_from(own, folder)
        read = analysis_reader(own, folder, now)
        per_base[base] = (read("contrasts", "contrasts"), read("paired", "paired"))
        judged[base] = headline(own, folder, now)  # each base's verdicts as its study words them, warnings and all
        runs_read.update({f"base {base}: {run}": digest for run, digest in now.items()})
    a, out = cfg["analysis"], study_dir(cfg)
    table = bases.table(per_base, a["margin"], a["alpha"], judged)
    _write(table, out, "bases", cfg, runs_read)
    tables.write_table(bases_verdicts(table), out / "tables" / "bases",
                       title="Each planned contrast per warm-start base and pooled", note=bases.NOTE)
    return (out / "tables" / "bases.md").read_text()


def bases_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """The bases table as tables/bases.* show it: each row's verdict in the words every table gives it
    (summary.verdict: confirmed, not confirmed, uninformative, exploratory) beside the plan's raw `confirmed`, which
    alone reads an uninformative row as a plain False."""
    at = table.columns.get_loc("confirmed") + 1
    return table.iloc[:, :at].assign(verdict=[summary.verdict(r) for r in table.to_dict("records")]).join(
        table.iloc[:, at:])


def base_evals(cfg: dict, results: Path, base: str, eval_set: str) -> pd.DataFrame:
    """The base arm's evaluations on `eval_set`, every seed, read as every step reads runs (the base's alone: another
    arm still training never blocks it): what `mcgrpo screen` reads the base's accuracy curve and its spread over
    seeds from."""
    return runs.evals_frame(runs.load(results, [base], cfg["seeds"], [eval_set], False, cfg["analysis"]["clock"],
                                      cfg["arms"]))
