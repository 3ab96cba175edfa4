"""`mcgrpo screen`: one arm's gradient tests against outcome-only, in minutes and without training.

The study's own gradient tests (train/gradients.py, paper 2.4, A, H.3) restricted to one arm and its shuffled
control, on the study's model and data at the initial policy: efficiency per update and per generated token
relative to outcome-only (95% bootstrap intervals over batches, analysis/efficiency.py), alignment outside V and
the share of the update outside V. The per-token efficiency e then predicts the equal-tokens difference the arm
would show at B, read off the base's accuracy curve as acc(e B) - acc(B) (the heuristic extrapolation of the
prediction step: an arm that learns e times as much per token is where outcome-only is at e B): the study's
trained base when its runs are there, or a curve given as a file. Nothing is trained and nothing of the study's
results is written over: the tables go to their own folder.
"""

from __future__ import annotations

import copy
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from mcgrpo import studies
from mcgrpo.core import layout, store
from mcgrpo.core.errors import ConfigError, DataError, MissingFile

MIN_BATCHES = 2  # gradient_tests.batches' minimum in the schema: a bootstrap over batches needs two
SHUFFLED = "{arm}_shuffled"  # the control: the arm's credit permuted within each completion


def screen_config(cfg: dict, arm: str, batches: int | None = None) -> dict:
    """The study with gradient tests of `arm` alone (and its shuffled control when its credit is not
    outcome-only), validated: the study's gradient_tests settings (batches, reference, seed), or the schema's."""
    if arm not in cfg["arms"]:
        raise ConfigError(f"--arm {arm!r}: not an arm of study {cfg['study']!r}; allowed: {', '.join(cfg['arms'])}")
    from mcgrpo.train.credit import CONSTANT
    credit = cfg["arms"][arm].get("credit") or {"outcome": {}}
    # no control where shuffling within a completion is the identity (a built-in whose credit is constant there:
    # the study's checks refuse such a control)
    constant = arm == "outcome" or next(iter(credit)) in CONSTANT
    controls = {} if constant else {SHUFFLED.format(arm=arm): {"shuffled": credit}}
    tests = {k: v for k, v in (cfg.get("gradient_tests") or {}).items() if k not in ("arms", "controls", "k_sweep")}
    tests.update(enabled=True, arms=[] if arm == "outcome" else [arm], controls=controls, k_sweep=[])
    if batches is not None:
        if batches < MIN_BATCHES:
            raise ConfigError(f"--batches {batches}: the intervals are bootstrapped over batches, which needs at "
                              f"least {MIN_BATCHES}; allowed: an integer >= {MIN_BATCHES}")
        tests["batches"] = batches
    out = copy.deepcopy({k: v for k, v in cfg.items() if k != "gradient_tests"})
    try:
        return studies.validate({**out, "gradient_tests": tests})
    except ConfigError as e:
        raise ConfigError(f"screening arm {arm!r}:\n{e}") from None


def measure(cfg: dict, arm: str, batches: int | None, log: Callable[[str], None]) -> pd.DataFrame:
    """The long table of the gradient tests (arm, batch, measure, value) of outcome-only, the arm and its control."""
    import torch
    from mcgrpo import data
    from mcgrpo.core import config as study_config
    from mcgrpo.train import gradients, models
    from mcgrpo.train.job import ran_as_planned
    run = study_config.gradient_tests_config(screen_config(cfg, arm, batches))
    model, pool = layout.model_path(cfg), layout.data_dir(cfg)
    missing = [str(p) for p in (model, pool) if not Path(p).exists()]
    if missing:
        raise MissingFile(f"{', '.join(missing)}: the study's model and data are not built yet; build them with "
                          f"`snakemake --configfile STUDY.yaml screen --config screen_arm={arm}` (or "
                          f"`snakemake --cores 1 --configfile STUDY.yaml {model}`)")
    torch.set_num_threads(run["recipe"]["threads"])
    problems, _ = data.read(pool, [])
    policy, tokenizer = models.load(model)
    imported = set(sys.modules)  # the plugins' code as its identity was taken above (job.ran_as_planned)
    tests = gradients.run(run, policy, tokenizer, problems, log=log)
    ran_as_planned(run, imported, "the screen measured", "screen it again")  # as a job, before anything is written
    return tests


@dataclass
class Curve:
    """The base's accuracy curve as the prediction reads it: on efficiencies e in [0.05, 1], acc(e B) - acc(B), the
    mean over seeds and its 95% t band over seeds (NaN: no band, a single seed or a curve file), at B."""
    e: np.ndarray
    diff: np.ndarray
    low: np.ndarray
    high: np.ndarray
    budget: float
    seeds: int  # the base's seeds it is read from (0: a curve file)


GRID = np.geomspace(0.05, 1.0, 40)


NO_BASE = "no trained base in the study's results and no --curve given"


def base_curve(cfg: dict, curve: str | None, budget: float | None) -> tuple[Curve | None, str]:
    """(the base's curve, where it comes from; or None, why there is none): from a file with columns tokens and
    accuracy (B: `budget`, else its last tokens), else from the study's trained base runs and its B (the
    prediction step's line, with its spread over seeds)."""
    if curve is not None:
        return _curve_file(Path(curve), budget), f"curve {curve}"
    if budget is not None:
        raise ConfigError(f"--budget {budget:g}: given without --curve, but the study's trained base is read at the "
                          f"B its runs trained to, never at another; allowed: --budget with --curve FILE, or neither")
    return study_curve(cfg)


def study_curve(cfg: dict) -> tuple[Curve | None, str]:
    """The study's trained base's curve and where it comes from, or None and why not: NO_BASE only where the study
    has no runs linked; runs that are there but cannot be read (a file edited after sealing, a run that never
    finished) are named in the words of the reader that refuses them, which say the remedy."""
    from mcgrpo.analysis import steps
    from mcgrpo.core import study_runs
    elsewhere = trained_elsewhere(cfg)
    results, a = layout.study_dir(cfg), cfg["analysis"]
    base, metric = a["base"] or "outcome", a["metrics"][0]
    if elsewhere or not study_runs.index_path(results).exists():
        return None, elsewhere or NO_BASE
    unread = f"no curve is read from the study's trained {base} runs: "
    try:
        B = float(steps.budget(results))
        mine = steps.base_evals(cfg, results, base, cfg["evaluation"]["sets"][0])
    except (DataError, FileNotFoundError) as e:  # the screen reads the base as every step reads the study's runs
        return None, f"{unread}the study's runs cannot be read: {e}"
    if metric not in mine:
        recorded = ", ".join(c for c in mine.columns if c.startswith("acc_"))
        return None, (f"{unread}the study's first metric {metric} is not in their evals.parquet, which the screen "
                      f"reads (it records {recorded}); give --curve FILE")
    curve = seed_curve(mine, metric, B)
    return curve, f"the study's trained {base} runs, {curve.seeds} seed{'' if curve.seeds == 1 else 's'}"


def _curve_file(path: Path, budget: float | None) -> Curve:
    if not path.exists():
        raise MissingFile(f"--curve {path}: not found; allowed: a CSV or Parquet file with columns tokens, accuracy")
    frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    lacking = {"tokens", "accuracy"} - set(frame.columns)
    if lacking:
        raise DataError(f"--curve {path}: no column(s) {', '.join(sorted(lacking))}; allowed: a table with "
                        f"columns tokens (generated tokens) and accuracy (the base's mean accuracy there)")
    frame = frame.sort_values("tokens")
    tokens, accuracy = frame["tokens"].to_numpy(float), frame["accuracy"].to_numpy(float)
    _check_curve(path, tokens, accuracy)
    B = float(budget if budget is not None else tokens[-1])
    if B > tokens[-1]:
        raise DataError(f"--budget {budget:g}: beyond the last point of --curve {path} (tokens {tokens[-1]:g}), so "
                        f"acc(B) and every acc(e B) past it would be the curve's last accuracy held flat, a predicted "
                        f"difference of 0 that no point measured; allowed: a B the curve reaches (at most "
                        f"{tokens[-1]:g} generated tokens; B counts tokens, not thousands), or no --budget (its "
                        f"last point)")
    inside = GRID * B >= tokens[0]
    diff = np.where(inside, np.interp(GRID * B, tokens, accuracy) - np.interp(B, tokens, accuracy), np.nan)
    return Curve(GRID, diff, np.full_like(diff, np.nan), np.full_like(diff, np.nan), B, 0)


def _check_curve(path: Path, tokens: np.ndarray, accuracy: np.ndarray) -> None:
    """Refuses a curve file the prediction would misread without a word: an unknown or negative count of tokens
    (sorted last, it would be taken for B), or an accuracy outside [0, 1] (a percentage, read as a fraction, would
    print a difference a hundred times too large in points)."""
    bad_tokens = ~np.isfinite(tokens) | (tokens < 0)
    bad_accuracy = ~np.isfinite(accuracy) | (accuracy < 0) | (accuracy > 1)
    for column, bad, values, allowed in (("tokens", bad_tokens, tokens, "finite counts of generated tokens, >= 0"),
                                         ("accuracy", bad_accuracy, accuracy, "a share of correct samples in [0, 1], "
                                                                              "not a percentage")):
        if bad.any():
            raise DataError(f"--curve {path}: column {column} holds {values[bad][0]:g}; allowed: {allowed}")


def trained_elsewhere(cfg: dict) -> str:
    """Why the study's trained base runs are not this config's base ('' where they are, or there are none): the
    study's index links runs whose keys differ from the ones this config trains (a key of the task, model, recipe,
    budget or base arm edited since they trained, or overridden on the command line). The screen measures the
    arm under this config, so reading the prediction off that base's curve would mix two configs without a word."""
    from mcgrpo.core import study_runs
    results, base = layout.study_dir(cfg), cfg["analysis"]["base"] or "outcome"
    try:
        linked = study_runs.index(results)
    except DataError:
        return ""  # no index: no trained base to read (study_curve says so)
    planned = layout.run_keys(cfg)
    seeds = sorted(seed for (arm, seed), key in linked.items() if arm == base and planned.get((arm, seed), key) != key)
    if not seeds:
        return ""
    return (f"the study's trained {base} runs (seed {', '.join(map(str, seeds))}, {study_runs.index_path(results)}) "
            f"were trained under another config than this one (their run keys are not this config's: a key of the "
            f"task, model, recipe, budget or the {base} arm changed since, or a --config override), so their curve "
            f"is not this config's base and no prediction is read from it; give --curve FILE, or train the base "
            f"under this config (rerun the workflow)")


def seed_curve(evals: pd.DataFrame, metric: str, B: float) -> Curve:
    """acc(e B) - acc(B) of each seed of the base (evaluations: seed, tokens_total and `metric`), its mean and the
    95% t band over seeds: the uncertainty of the base's own curve, which the prediction carries."""
    from scipy import stats
    per_seed = []
    for _, run in evals.sort_values("tokens_total").groupby("seed"):
        x, y = run["tokens_total"].to_numpy(float), run[metric].to_numpy(float)
        per_seed.append(np.interp(GRID * B, x, y) - np.interp(B, x, y))
    per_seed = np.array(per_seed)
    mean = per_seed.mean(axis=0)
    if len(per_seed) < 2:
        return Curve(GRID, mean, np.full_like(mean, np.nan), np.full_like(mean, np.nan), B, len(per_seed))
    half = stats.t.ppf(0.975, len(per_seed) - 1) * stats.sem(per_seed, axis=0)
    return Curve(GRID, mean, mean - half, mean + half, B, len(per_seed))


def predicted_difference(efficiency: np.ndarray, curve: Curve) -> np.ndarray:
    """acc(e B) - acc(B) on the base's mean curve at each per-token efficiency e (NaN outside the curve: above 1 or
    below its first point there is nothing to read)."""
    x = np.asarray(efficiency, dtype=float)
    return np.where((x >= curve.e[0]) & (x <= curve.e[-1]), np.interp(x, curve.e, curve.diff), np.nan)


def predicted_interval(e_low: float, e_high: float, curve: Curve) -> tuple[float, float, str]:
    """(low, high, note): the lowest and highest the base's curve reads over the efficiency's interval
    [e_low, e_high], on its band where it has one (the curve's uncertainty and the efficiency's, together), low to
    high whatever the curve's slope; the part of the interval beyond the curve is left out and the note says so
    ('' where nothing needs saying)."""
    lo, hi = sorted((e_low, e_high))
    first, last = curve.e[0], curve.e[-1]
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return np.nan, np.nan, ("the efficiency's interval is not defined (some bootstrap resamples of the batches "
                                "have no finite efficiency, as where outcome-only's update is 0 in every batch "
                                "drawn; more batches can define it)")
    if hi < first or lo > last:
        return np.nan, np.nan, f"the efficiency's interval lies outside the base's curve (e {first:g} to {last:g})"
    a, b = max(lo, first), min(hi, last)
    e = np.concatenate([[a], curve.e[(curve.e > a) & (curve.e < b)], [b]])
    banded = np.isfinite(curve.low).all()
    low = np.interp(e, curve.e, curve.low if banded else curve.diff)
    high = np.interp(e, curve.e, curve.high if banded else curve.diff)
    notes = []
    if hi > last:
        notes.append(f"the interval is read up to e = {last:g}, where the base's curve ends (B)")
    if lo < first:
        notes.append(f"the interval is read from e = {first:g}, where the base's curve begins")
    if not banded:
        notes.append("the base's curve carries no uncertainty of its own here ("
                     + ("a curve file" if curve.seeds == 0 else "one seed") + "): the interval is the efficiency's")
    return float(np.nanmin(low)), float(np.nanmax(high)), "; ".join(notes)


def base_without_gradient(tests: pd.DataFrame) -> str:
    """Why no efficiency is defined where outcome-only's update was exactly 0 in every batch (every efficiency is
    relative to it: a ratio over 0); '' otherwise."""
    from mcgrpo.analysis.efficiency import BASE
    inner = tests[(tests["arm"] == BASE) & (tests["measure"] == "inner")]["value"].to_numpy(dtype=float)
    if not len(inner) or (inner != 0).any():
        return ""
    return (f"not defined: {BASE}'s update was exactly 0 in all {len(inner)} batches (no group held both a right "
            f"and a wrong rollout), and every efficiency is relative to it; more batches (--batches) may find "
            f"groups it learns from")


def against_reference(tests: pd.DataFrame, arm: str) -> str:
    """Why `arm`'s efficiency predicts nothing where its update, or outcome-only's, does not climb the reference
    gradient on average (E<u, h> <= 0); '' otherwise. Efficiency squares E<u, h>, so an update that lowers expected
    accuracy reads as efficient as one that raises it as much, and the prediction (an arm that learns e times as
    much per token) would read a curve the arm does not climb."""
    from mcgrpo.analysis.efficiency import BASE
    inner = tests[tests["measure"] == "inner"].groupby("arm")["value"].mean()
    falling = [who for who in dict.fromkeys([BASE, arm]) if who in inner and not inner[who] > 0]
    if not falling:
        return ""
    return (f"not defined: E<u, h> of {' and '.join(falling)} is {', '.join(f'{inner[w]:.3g}' for w in falling)}, "
            f"not positive: its update does not climb the reference gradient on average, and efficiency squares "
            f"that sign away (see inner_se)")


def summarize(tests: pd.DataFrame, cfg: dict, curve: Curve | None) -> pd.DataFrame:
    """One row per measured rule (outcome-only first): the efficiency table, and the predicted equal-tokens
    difference at its per-token efficiency with its interval (accuracy fractions, as contrasts.parquet) and a note
    where one applies."""
    from mcgrpo.analysis import efficiency
    spec = cfg.get("gradient_tests") or {}
    table = efficiency.efficiency_table(tests, spec.get("resamples", 2000), spec.get("seed", 0))
    if curve is None:
        return table.assign(predicted_diff=np.nan, predicted_diff_low=np.nan, predicted_diff_high=np.nan,
                            predicted_note="", budget=np.nan)
    point = predicted_difference(table["per_token"].to_numpy(), curve)
    intervals = [predicted_interval(lo, hi, curve) for lo, hi in zip(table["per_token_low"], table["per_token_high"])]
    silent = base_without_gradient(tests)
    backwards = [against_reference(tests, arm) if not silent else "" for arm in table["arm"]]
    point = np.where([bool(b) for b in backwards], np.nan, point)
    intervals = [(np.nan, np.nan, "") if b else i for b, i in zip(backwards, intervals)]
    notes = [b or (note if np.isfinite(p) else silent or "; ".join(filter(None, [
        f"per-token efficiency {e:.3g} lies outside the base's curve (e {curve.e[0]:g} to {curve.e[-1]:g})", note])))
        for b, p, e, (_, _, note) in zip(backwards, point, table["per_token"], intervals)]
    return table.assign(predicted_diff=point, predicted_diff_low=[i[0] for i in intervals],
                        predicted_diff_high=[i[1] for i in intervals], predicted_note=notes, budget=curve.budget)


def render(table: pd.DataFrame, arm: str, curve_from: str) -> list[str]:
    """Readable lines: per rule, efficiency per update and per token with intervals, alignment, share outside V,
    and the prediction in points (1 point = 0.01 accuracy), as the summary speaks."""
    from mcgrpo.analysis import formats
    from mcgrpo.train.gradients import alignment_text
    lines = []
    for row in table.itertuples():
        lines.append(f"{row.arm}: per update {row.per_update:.3g} [{row.per_update_low:.3g}, {row.per_update_high:.3g}], "
                     f"per token {row.per_token:.3g} [{row.per_token_low:.3g}, {row.per_token_high:.3g}], "
                     f"alignment outside V {alignment_text(row.alignment)}, share outside V {row.share_outside_v:.3f}, "
                     f"{row.tokens:.0f} tokens per batch")
    mine = table[table["arm"] == arm]
    if len(mine) and np.isfinite(mine["budget"].iloc[0]):
        r = mine.iloc[0]
        interval = (f"[{formats.points(r.predicted_diff_low)}, {formats.points(r.predicted_diff_high)}]"
                    if np.isfinite(r.predicted_diff_low) else "[not defined]")
        value = formats.points(r.predicted_diff) if np.isfinite(r.predicted_diff) else "not defined"
        note = getattr(r, "predicted_note", "") or ""
        lines.append(f"predicted equal-tokens difference of {arm} against outcome-only at B = {r.budget:.0f} "
                     f"({curve_from}): {value} {interval} points" + (f" ({note})" if note else ""))
    else:
        lines.append(f"no predicted equal-tokens difference: {curve_from}")
    return lines


def screen(cfg: dict, arm: str, batches: int | None = None, out: str | Path | None = None, curve: str | None = None,
           budget: float | None = None, log: Callable[[str], None] = print) -> tuple[pd.DataFrame, Path, str]:
    """Measure, summarize and write: (the summary table, the folder written, where the curve came from)."""
    start = time.perf_counter()
    # first: a curve file it refuses is named before minutes of measuring
    line, curve_from = base_curve(cfg, curve, budget)
    tests = measure(cfg, arm, batches, lambda line: log(f"[{time.perf_counter() - start:6.1f} s] {line}"))
    table = summarize(tests, cfg, line)
    folder = Path(out) if out else layout.study_dir(cfg) / "screen" / arm
    store.write_parquet(tests, folder / "gradient_tests.parquet")
    store.write_parquet(table, folder / "screen.parquet")
    return table, folder, curve_from
