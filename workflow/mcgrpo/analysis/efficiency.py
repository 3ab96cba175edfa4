"""Gradient efficiency and whether it predicts training (paper 2.4, A, 3.3, Figure 2), from the gradient
tests' table alone.

Efficiency of an update direction u is (E<u, h>)^2 / E||u||^2, E over the fixed batches; it is reported
relative to outcome-only GRPO's on the same batches, per update, and per generated token (each arm's ratio
divided by the tokens its update consumes, relative to outcome-only's). Intervals: percentile bootstrap
over batches, resampled together for every arm (they share their rollouts). The paper checks that E<u, h>
is positive (squaring hides its sign): `inner_se` says by how many standard errors.
The prediction table sets each efficiency beside the training contrast it should predict, per update
against equal updates and per token against equal tokens, with the rank agreement (Spearman) over arms.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from mcgrpo.analysis.contrasts import name

BASE = "outcome"  # the gradient tests' base: outcome-only GRPO (train/gradients.py measures it first)
EFFICIENCY_COLUMNS = ["arm", "batches", "per_update", "per_update_low", "per_update_high", "per_token",
                      "per_token_low", "per_token_high", "inner_se", "alignment", "alignment_sd",
                      "share_outside_v", "projection_residual", "cos_full", "tokens"]


def _matrix(tests: pd.DataFrame, measure: str, arms: list[str]) -> np.ndarray:
    """[arms, batches] of one measure, batches in order."""
    wide = tests[tests["measure"] == measure].pivot(index="arm", columns="batch", values="value")
    return wide.loc[arms].to_numpy(dtype=float)


def _ratios(inner: np.ndarray, sq: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-update and per-token efficiency relative to row 0 (the base), over the last axis (batches);
    leading axes (bootstrap resamples) are kept. An arm whose update is zero on every batch (no group with two
    outcomes) has no efficiency, NaN, and nothing is relative to a base without one: the prediction step names why."""
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = inner.mean(-1) ** 2 / sq.mean(-1)
        per_update = eff / eff[..., :1]
        per_token = per_update * tokens.mean(-1)[..., :1] / tokens.mean(-1)
    return per_update, per_token


def efficiency_table(tests: pd.DataFrame, resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """One row per measured arm: efficiencies relative to outcome-only with 95% bootstrap intervals, and the
    means of the geometric measures (alignment, share outside V, residual, full cosine)."""
    arms = [BASE] + [a for a in dict.fromkeys(tests["arm"]) if a != BASE]
    if BASE not in set(tests["arm"]):
        raise ValueError(f"gradient tests: no {BASE!r} rows to be relative to; arms: {', '.join(arms[1:])}")
    inner, sq, tokens = (_matrix(tests, m, arms) for m in ("inner", "sq_norm", "tokens"))
    n = inner.shape[1]
    per_update, per_token = _ratios(inner, sq, tokens)
    draw = np.random.default_rng(seed).integers(0, n, (resamples, n))
    boot_update, boot_token = _ratios(inner[:, draw].transpose(1, 0, 2), sq[:, draw].transpose(1, 0, 2),
                                      tokens[:, draw].transpose(1, 0, 2))
    means = {m: _matrix(tests, m, arms) for m in ("alignment", "share_outside_v", "projection_residual", "cos_full")}
    with np.errstate(divide="ignore", invalid="ignore"):
        inner_se = inner.mean(1) / (inner.std(1, ddof=1) / np.sqrt(n)) if n > 1 else np.full(len(arms), np.nan)
    rows = []
    for i, arm in enumerate(arms):
        alignment = means["alignment"][i]
        rows.append({
            "arm": arm, "batches": n, "per_update": per_update[i],
            "per_update_low": np.quantile(boot_update[:, i], 0.025), "per_update_high": np.quantile(boot_update[:, i], 0.975),
            "per_token": per_token[i],
            "per_token_low": np.quantile(boot_token[:, i], 0.025), "per_token_high": np.quantile(boot_token[:, i], 0.975),
            "inner_se": inner_se[i],
            "alignment": np.nanmean(alignment) if np.isfinite(alignment).any() else np.nan,
            "alignment_sd": np.nanstd(alignment, ddof=1) if np.isfinite(alignment).sum() > 1 else np.nan,
            "share_outside_v": means["share_outside_v"][i].mean(),
            "projection_residual": means["projection_residual"][i].max(),
            "cos_full": means["cos_full"][i].mean(), "tokens": tokens[i].mean()})
    return pd.DataFrame(rows, columns=EFFICIENCY_COLUMNS)


SWEEP = "sweep_k"  # train/gradients.py names the k sweep's rules sweep_k<k>


def second_moment_fit(tests: pd.DataFrame, resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """The k sweep's update second moment fitted as E||u_k||^2 = a + b / k (C.3.2), least squares over the
    sweep's k, and the share b / k / (a + b / k) due to continuation sampling at each k, with a bootstrap
    interval over batches; empty without a sweep of at least two k."""
    arms = [a for a in dict.fromkeys(tests["arm"]) if str(a).startswith(SWEEP)]
    if len(arms) < 2:
        return pd.DataFrame(columns=["k", "sq_norm", "a", "b", "continuation_share", "share_low", "share_high"])
    k = np.array([int(a[len(SWEEP):]) for a in arms], dtype=float)
    sq = _matrix(tests, "sq_norm", arms)
    design = np.stack([np.ones_like(k), 1 / k], axis=1)

    def shares(moments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        coef = np.linalg.lstsq(design, moments, rcond=None)[0]  # [2, resamples]
        return coef, (coef[1] / k[:, None]) / (coef[0] + coef[1] / k[:, None])

    coef, point = shares(sq.mean(1)[:, None])
    n = sq.shape[1]
    draw = np.random.default_rng(seed).integers(0, n, (resamples, n))
    _, boot = shares(sq[:, draw].mean(-1))
    return pd.DataFrame({"k": k.astype(int), "sq_norm": sq.mean(1), "a": coef[0, 0], "b": coef[1, 0],
                         "continuation_share": point[:, 0], "share_low": np.quantile(boot, 0.025, axis=1),
                         "share_high": np.quantile(boot, 0.975, axis=1)})


def measured_per_token(efficiency: pd.DataFrame) -> dict[str, float]:
    """arm -> measured per-token efficiency (what the extrapolation reads unless the config overrides it), of the
    arms whose update climbs the reference gradient on average (E<u, h> > 0, read from inner_se's sign), relative to
    an outcome-only that does too: efficiency squares E<u, h>, so an update that lowers expected accuracy reads as
    efficient as one that raises it, and extrapolating it as an arm that learns e times as much per token would
    compare training against a curve it does not climb. Such an arm gets no extrapolation (its efficiency table
    row still shows inner_se). An undefined inner_se (one batch, or no spread) says nothing of the sign: kept."""
    climbing = {row.arm for row in efficiency.itertuples() if not row.inner_se <= 0}
    if BASE not in climbing:
        return {}
    return {row.arm: float(row.per_token) for row in efficiency.itertuples() if row.arm != BASE and row.arm in climbing}


PREDICTION_PAIRS = (("per_update", "updates"), ("per_token", "tokens"))


def prediction_table(efficiency: pd.DataFrame, contrasts: pd.DataFrame, base: str, metric: str,
                     eval_set: str, extrapolation: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per trained arm with a gradient test: each efficiency [CI] beside its training contrast against the base
    [CI] (per update: equal updates; per token: equal tokens), and observed minus extrapolated accuracy."""
    rows = []
    for e in efficiency.itertuples():
        if e.arm == BASE:
            continue
        row = {"arm": e.arm, "contrast": name(e.arm, base)}
        for measure, basis in PREDICTION_PAIRS:
            c = contrasts[(contrasts["contrast"] == row["contrast"]) & (contrasts["basis"] == basis)
                          & (contrasts["metric"] == metric) & (contrasts["eval_set"] == eval_set)]
            row.update({measure: getattr(e, measure), f"{measure}_low": getattr(e, f"{measure}_low"),
                        f"{measure}_high": getattr(e, f"{measure}_high"),
                        f"diff_{basis}": c["mean"].iloc[0] if len(c) else np.nan,
                        f"diff_{basis}_low": c["ci_low"].iloc[0] if len(c) else np.nan,
                        f"diff_{basis}_high": c["ci_high"].iloc[0] if len(c) else np.nan})
        x = extrapolation if extrapolation is not None else pd.DataFrame(columns=["contrast", "metric", "eval_set"])
        x = x[(x["contrast"] == row["contrast"]) & (x["metric"] == metric) & (x["eval_set"] == eval_set)]
        row.update({"observed_minus_extrapolated": x["mean"].iloc[0] if len(x) else np.nan,
                    "ome_low": x["ci_low"].iloc[0] if len(x) else np.nan,
                    "ome_high": x["ci_high"].iloc[0] if len(x) else np.nan})
        rows.append(row)
    return pd.DataFrame(rows)


def rank_agreement(prediction: pd.DataFrame) -> dict[str, float]:
    """Spearman's rho between each efficiency and its training difference over the trained arms (NaN with
    fewer than three: a rank correlation of two points says nothing)."""
    out = {}
    for measure, basis in PREDICTION_PAIRS:
        both = prediction[[measure, f"diff_{basis}"]].dropna() if len(prediction) else pd.DataFrame()
        out[f"spearman_{measure}"] = (float(stats.spearmanr(both[measure], both[f"diff_{basis}"]).statistic)
                                      if len(both) >= 3 else np.nan)
        out[f"arms_{measure}"] = len(both)
    return out
