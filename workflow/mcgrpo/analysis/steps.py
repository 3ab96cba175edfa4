"""The analysis stage's steps, one per rule: each reads Parquet under results/<study>/ and writes
its outputs there, so any of them can be rerun from the stored runs alone.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mcgrpo.analysis import breakdown, contrasts, curves, drift, figures, power, prereg, runs, summary, tables
from mcgrpo.core import store
from mcgrpo.core import config as study_config
from mcgrpo.analysis.plan import keys, planned_keys


def budget(results: Path) -> int:
    """B, as calibration/budget.parquet records it."""
    return int(store.read_contract(Path(results) / "calibration" / "budget.parquet", "budget")["B"].iloc[0])


def _runs(cfg: dict, results: Path, samples: bool = True) -> dict:
    return runs.load(results, list(cfg["arms"]), cfg["seeds"], cfg["evaluation"]["sets"], samples)


def _write(df: pd.DataFrame, results: Path, name: str, cfg: dict) -> Path:
    return store.write_parquet(df, Path(results) / "analysis" / f"{name}.parquet", study_config.config_hash(cfg))


def _read(results: Path, name: str, kind: str | None = None) -> pd.DataFrame:
    path = Path(results) / "analysis" / f"{name}.parquet"
    return store.read_contract(path, kind) if kind else store.read_parquet(path)


def drift_step(cfg: dict, results: Path) -> None:
    evals = runs.evals_frame(_runs(cfg, results, samples=False))
    _write(drift.drift_table(evals, cfg["analysis"]["drift_gap"]), results, "drift", cfg)


def contrasts_step(cfg: dict, results: Path) -> None:
    """Every contrast with its statistics and crossed bootstrap, labelled against the lock."""
    a = cfg["analysis"]
    status = prereg.status(results, cfg)
    table, paired = contrasts.build(_runs(cfg, results), keys(cfg), budget(results), a["margin"],
                                    prereg.labels(cfg, status), a["alpha"], a["resamples"], a["bootstrap_seed"])
    _write(table, results, "contrasts", cfg)
    _write(paired, results, "paired", cfg)
    store.write_json(status, Path(results) / "analysis" / "prereg.json")


def curves_step(cfg: dict, results: Path) -> None:
    """Differences at every evaluation, the share of budget to reach the base, the extrapolation."""
    a, B = cfg["analysis"], budget(results)
    loaded = _runs(cfg, results, samples=not set(a["metrics"]) <= runs.EVAL_METRICS)
    grid = [(x, y, m, s) for x, y in study_config.pairs(cfg) for m in a["metrics"] for s in cfg["evaluation"]["sets"]]
    diffs = [curves.differences(loaded, x, y, m, s) for x, y, m, s in grid]
    shares = [curves.budget_share(loaded, x, y, m, s, B, axis, a["resamples"], a["bootstrap_seed"])
              for x, y, m, s in grid for axis in curves.AXES]
    extra = [curves.extrapolation(loaded, x, y, m, s, B, a["efficiency"][x])
             for x, y, m, s in grid if x in a["efficiency"]]
    _write(pd.concat(diffs, ignore_index=True) if diffs else pd.DataFrame(), results, "differences", cfg)
    _write(pd.DataFrame(shares), results, "budget_share", cfg)
    _write(pd.DataFrame(extra, columns=curves.EXTRAPOLATION_COLUMNS), results, "extrapolation", cfg)


def breakdown_step(cfg: dict, results: Path) -> None:
    """Seconds per stage and group composition before B."""
    results, B = Path(results), budget(results)
    rows = []
    for (arm, seed, eval_set), run in _runs(cfg, results, samples=False).items():
        if eval_set == cfg["evaluation"]["sets"][0]:  # every set is evaluated at the same iterations
            iterations = runs.read_iterations(results / "runs" / arm / f"seed{seed}", breakdown.COLUMNS)
            at_budget = run.coords("tokens_total")[contrasts.budget_row(run, B)]
            rows.append({"arm": arm, "seed": seed, **breakdown.run_totals(iterations, at_budget)})
    totals = pd.DataFrame(rows)
    _write(breakdown.stage_seconds(totals), results, "stages", cfg)
    _write(breakdown.group_shares(totals), results, "groups", cfg)


def _headline(cfg: dict) -> tuple[str, str]:
    """The metric and eval set the figures show: the first of each."""
    return cfg["analysis"]["metrics"][0], cfg["evaluation"]["sets"][0]


def hardware(cfg: dict, results: Path) -> str | None:
    """Where the runs were timed, from their run.json: 'NVIDIA H100' or 'CPU (x86_64), 2 threads' (every
    distinct one, in run order); None where no run records it."""
    seen = []
    for arm, seed in study_config.runs(cfg):
        path = Path(results) / "runs" / arm / f"seed{seed}" / "run.json"
        h = store.read_json(path).get("hardware") if path.exists() else None
        if h:
            threads = f"{h['threads']} thread{'s' if h['threads'] != 1 else ''}"
            seen.append(h["gpu"] or f"CPU ({h['cpu']}), {threads}")
    return "; ".join(dict.fromkeys(seen)) or None


def figures_step(cfg: dict, results: Path) -> None:
    results, B, margin = Path(results), budget(results), cfg["analysis"]["margin"]
    metric, eval_set = _headline(cfg)
    out, colours, where = results / "figures", figures.arm_colours(list(cfg["arms"])), hardware(cfg, results)
    evals = runs.evals_frame(_runs(cfg, results, samples=False))
    figures.accuracy_curves(evals, "tokens_total", B, out / "accuracy_vs_tokens.png", metric, eval_set, colours)
    figures.accuracy_curves(evals, "train_seconds", B, out / "accuracy_vs_time.png", metric, eval_set, colours,
                            where)
    diffs = _read(results, "differences")
    figures.difference_from_base(diffs[(diffs["metric"] == metric) & (diffs["eval_set"] == eval_set)]
                                 if len(diffs) else diffs, B, margin, out / "difference_from_base.png", colours)
    table, paired = _read(results, "contrasts", "contrasts"), _read(results, "paired", "paired")
    table = table[(table["metric"] == metric) & (table["eval_set"] == eval_set)]
    paired = paired[(paired["metric"] == metric) & (paired["eval_set"] == eval_set)]
    figures.per_seed(paired, table, margin, out / "per_seed.png", colours)
    figures.stage_seconds(_read(results, "stages"), out / "stage_seconds.png", where)
    figures.drift(_read(results, "drift", "drift"), cfg["analysis"]["drift_gap"], out / "drift.png", eval_set,
                  colours)


def tables_step(cfg: dict, results: Path) -> None:
    results = Path(results)
    out = results / "tables"
    table, paired = _read(results, "contrasts", "contrasts"), _read(results, "paired", "paired")
    status = store.read_json(results / "analysis" / "prereg.json")
    for name, (df, title, note) in tables.study_tables(
            table, paired, status, _read(results, "drift", "drift"), _read(results, "stages"),
            _read(results, "groups"), _read(results, "budget_share"), _read(results, "extrapolation"),
            cfg["analysis"]["drift_gap"]).items():
        tables.write_table(df, out / name, title=title, note=note)
    metric, eval_set = _headline(cfg)
    a = cfg["analysis"]
    planned = power.plan(paired[(paired["metric"] == metric) & (paired["eval_set"] == eval_set)], a["margin"],
                         a["alpha"])
    tables.write_table(planned, out / "power", title="Seeds planner: paired seeds for 80% power",
                       note=power_note(a["margin"], a["alpha"]))


def power_note(margin: float, alpha: float) -> str:
    return (f"seeds_to_exclude_0: paired seeds for 80% power to exclude 0 at alpha {alpha:g}; seeds_for_equivalence: "
            f"for 80% power to show equivalence within ±{100 * margin:g} points (never: |mean| is at least the "
            f"margin). mean, sd: of the per-seed differences now.\n{power.ASSUMPTION}")


def summary_step(cfg: dict, results: Path) -> None:
    """summary.md (printed at the end of a run) and summary.rst (the report's first page)."""
    results = Path(results)
    status = store.read_json(results / "analysis" / "prereg.json")
    text = summary.lines(cfg["study"], _read(results, "contrasts", "contrasts"), tables.prereg_note(status),
                         str(results))
    store.write_text(summary.markdown(text), results / "summary.md")
    store.write_text(summary.rst(text, summary.DESCRIPTION.read_text()), results / "summary.rst")
    print(summary.markdown(text), end="")


def _shared_seeds(results: Path, arms: set[str]) -> list[int]:
    """Seeds that every arm in `arms` has a run folder for; an unknown arm is an error."""
    present = sorted(p.name for p in (results / "runs").glob("*") if p.is_dir())
    seeds = []
    for arm in sorted(arms):
        if arm not in present:
            raise ValueError(f"arm {arm!r}: no runs/{arm}/ in {results}; allowed: {', '.join(present) or 'none'}")
        seeds.append({int(p.name[4:]) for p in (results / "runs" / arm).glob("seed*") if p.name[4:].isdigit()})
    shared = sorted(set.intersection(*seeds))
    if not shared:
        raise ValueError(f"arms {', '.join(sorted(arms))} share no seed under {results / 'runs'}")
    return shared


def _family(wanted: tuple, plan: dict[tuple, dict], planned: list[tuple]) -> list[tuple]:
    """The other contrasts of `wanted`'s primary Holm family (none unless it is primary)."""
    mine = plan.get(contrasts.label_key(wanted), {})
    if mine.get("label") != "primary":
        return []
    return [k for k in planned if k != wanted and plan[contrasts.label_key(k)]["label"] == "primary"
            and plan[contrasts.label_key(k)]["family"] == mine["family"]]


def _locked_plan(results: Path) -> tuple[dict | None, dict[tuple, dict]]:
    """The lock's part of the config and the labels it gives (none without a lock, all exploratory if late)."""
    path = results / "prereg.lock.json"
    if not path.exists():
        return None, {}
    lock = store.read_json(path)
    locked = prereg.locked_config(lock)
    return locked, prereg.labels(locked, prereg.compare(locked, lock, prereg.first_start(results, locked)))


def contrast(results: Path, a: str, b: str, basis: str, metric: str, eval_set: str | None = None,
             margin: float | None = None, resamples: int = 10_000, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One contrast from a results folder alone: arms and seeds from runs/, B from calibration/,
    the margin and labels from prereg.lock.json (margin 0.02 without one). A primary contrast is
    Holm-adjusted with the rest of its locked family, which is recomputed with it.
    """
    results = Path(results)
    seeds = _shared_seeds(results, {a, b})
    sets = sorted(runs.read_evals(results / "runs" / a / f"seed{seeds[0]}" / "evals.parquet")["eval_set"].unique())
    if eval_set is None and len(sets) != 1:
        raise ValueError(f"runs hold eval sets {', '.join(sets)}: choose one with --eval-set")
    eval_set = eval_set or sets[0]
    if eval_set not in sets:
        raise ValueError(f"--eval-set {eval_set!r}: not evaluated; allowed: {', '.join(sets)}")
    locked, plan = _locked_plan(results)
    wanted = (a, b, basis, metric, eval_set)
    chosen = [wanted, *_family(wanted, plan, planned_keys(locked) if locked else [])]
    arms = {arm for k in chosen for arm in k[:2]}
    loaded = runs.load(results, sorted(arms), _shared_seeds(results, arms), sorted({k[4] for k in chosen}))
    margin = margin if margin is not None else locked["analysis"]["margin"] if locked else 0.02
    table, paired = contrasts.build(loaded, chosen, budget(results), margin, plan, resamples=resamples, seed=seed)
    mine = (paired[contrasts.KEY] == [contrasts.name(a, b), basis, metric, eval_set]).all(axis=1)
    return table.iloc[:1].reset_index(drop=True), paired[mine].reset_index(drop=True)
