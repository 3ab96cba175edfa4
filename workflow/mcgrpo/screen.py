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
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from mcgrpo import studies
from mcgrpo.core import layout, store
from mcgrpo.core.errors import ConfigError, DataError, MissingFile

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
    return gradients.run(run, policy, tokenizer, problems, log=log)


def base_curve(cfg: dict, curve: str | None, budget: float | None) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(e, acc(e B) - acc(B), B) on e in [0.05, 1]: from a file with columns tokens and accuracy (B: `budget`,
    else its last tokens), else from the study's trained base runs and its B (the prediction step's line); None
    when neither is there."""
    e = np.geomspace(0.05, 1.0, 40)
    if curve is not None:
        path = Path(curve)
        if not path.exists():
            raise MissingFile(f"--curve {path}: not found; allowed: a CSV or Parquet file with columns tokens, accuracy")
        frame = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        lacking = {"tokens", "accuracy"} - set(frame.columns)
        if lacking:
            raise DataError(f"--curve {path}: no column(s) {', '.join(sorted(lacking))}; allowed: a table with "
                            f"columns tokens (generated tokens) and accuracy (the base's mean accuracy there)")
        frame = frame.sort_values("tokens")
        tokens, accuracy = frame["tokens"].to_numpy(float), frame["accuracy"].to_numpy(float)
        B = float(budget if budget is not None else tokens[-1])
        inside = e * B >= tokens[0]
        diff = np.where(inside, np.interp(e * B, tokens, accuracy) - np.interp(B, tokens, accuracy), np.nan)
        return e, diff, B
    from mcgrpo.analysis import steps
    results, a = layout.study_dir(cfg), cfg["analysis"]
    try:
        B = float(steps.budget(results))
        line = steps.extrapolation_line(cfg, results, a["base"] or "outcome", a["metrics"][0],
                                        cfg["evaluation"]["sets"][0])
    except (DataError, FileNotFoundError):
        return None  # the base is not trained yet: no curve to read the prediction from
    return None if line is None else (*line, B)


def predicted_difference(efficiency: np.ndarray, curve) -> np.ndarray:
    """acc(e B) - acc(B) on the base's curve at each per-token efficiency e (NaN outside the curve: above 1 or
    below its first point there is nothing to read)."""
    e, diff, _ = curve
    x = np.asarray(efficiency, dtype=float)
    return np.where((x >= e[0]) & (x <= e[-1]), np.interp(x, e, diff), np.nan)


def summarize(tests: pd.DataFrame, cfg: dict, curve) -> pd.DataFrame:
    """One row per measured rule (outcome-only first): the efficiency table, and the predicted equal-tokens
    difference at its per-token efficiency and at the ends of its interval."""
    from mcgrpo.analysis import efficiency
    spec = cfg.get("gradient_tests") or {}
    table = efficiency.efficiency_table(tests, spec.get("resamples", 2000), spec.get("seed", 0))
    for column in ("per_token", "per_token_low", "per_token_high"):
        table[column.replace("per_token", "predicted_diff")] = (
            predicted_difference(table[column].to_numpy(), curve) if curve is not None else np.nan)
    return table.assign(budget=curve[2] if curve is not None else np.nan)


def render(table: pd.DataFrame, arm: str, curve_from: str) -> list[str]:
    """Readable lines: per rule, efficiency per update and per token with intervals, alignment, share outside V,
    and the prediction."""
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
        lines.append(f"predicted equal-tokens difference of {arm} against outcome-only at B = {r.budget:.0f} "
                     f"({curve_from}): {r.predicted_diff:+.3f} [{r.predicted_diff_low:+.3f}, {r.predicted_diff_high:+.3f}]"
                     f" (NaN: per-token efficiency outside the curve)")
    else:
        lines.append(f"no predicted equal-tokens difference: {curve_from}")
    return lines


def screen(cfg: dict, arm: str, batches: int | None = None, out: str | Path | None = None, curve: str | None = None,
           budget: float | None = None, log: Callable[[str], None] = print) -> tuple[pd.DataFrame, Path, str]:
    """Measure, summarize and write: (the summary table, the folder written, where the curve came from)."""
    start = time.perf_counter()
    tests = measure(cfg, arm, batches, lambda line: log(f"[{time.perf_counter() - start:6.1f} s] {line}"))
    line = base_curve(cfg, curve, budget)
    curve_from = (f"curve {curve}" if curve else f"the study's trained {cfg['analysis']['base'] or 'outcome'} runs"
                  if line is not None else "no trained base in the study's results and no --curve given")
    table = summarize(tests, cfg, line)
    folder = Path(out) if out else layout.study_dir(cfg) / "screen" / arm
    store.write_parquet(tests, folder / "gradient_tests.parquet")
    store.write_parquet(table, folder / "screen.parquet")
    return table, folder, curve_from
