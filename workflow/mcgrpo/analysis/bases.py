"""Each planned contrast per warm-start base and pooled over the bases: does the verdict hold across bases?

A study over `bases` is one ordinary study per base (mcgrpo.core.config.base_study); each has its contrasts and
paired differences (analysis/contrasts.parquet, paired.parquet). Here they are read side by side.

Pooled: an OLS of the paired differences (one per base and training seed) on sum-coded base fixed effects,
statsmodels' `ols("diff ~ C(base, Sum)")`: a stratified paired analysis whose intercept is the unweighted mean over
bases of each base's mean difference, with its t interval on the residual degrees of freedom (pairs minus bases).
Fixed rather than random base effects (`mixedlm(..., groups=base)`): with two to five bases a between-base variance
is barely estimable (MixedLM often stops at the boundary, a variance of 0, or does not converge), and the question
is about these bases: is the verdict the same on each, and what is it over them. Whether the bases differ beyond
training-seed noise is the F test of the base effects (`heterogeneity_p`); a generalisation to unseen bases would
need many more of them. The pooled verdict is the plan's own rule (contrasts.apply_plan: Holm within each primary
family on the planned test), and it "holds across bases" when every base reaches the same verdict. Each base has
its own lock: where one base's study reports a contrast exploratory (its lock late, or its plan changed since), so
is the pooled row, its note naming the base. Where the within-base residuals leave nothing to test against (every
seed of each base alike, or no residual degrees of freedom), the pooled row is uninformative, with the reason, as a
contrast is (analysis/informative.py): untested, not confirmed, holding nothing.
Every verdict states its fragility: a base's row carries its study's robustness label and warning (its headline's),
and the pooled row is fragile where a base's verdict is, naming the base and its checks, or where the bases reach
different verdicts; its warning repeats each base's. The paper pools nothing; this rule is the workflow's: the
pooled fit reads every base's runs, so what makes a base's verdict fragile (a drifting arm, unlike runs, a crossed
interval across 0) is in the pooled data too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import statsmodels.formula.api as smf
from scipy import stats
from statsmodels.stats.anova import anova_lm

from mcgrpo.analysis import contrasts as contrast_stats
from mcgrpo.analysis.robustness import inconclusive
from mcgrpo.analysis.summary import found, planned_p
from mcgrpo.analysis.stats import spread
from mcgrpo.core.errors import DataError

COLUMNS = ["id", "contrast", "basis", "metric", "eval_set", "direction", "base", "n", "mean", "ci_low", "ci_high",
           "p", "p_holm", "confirmed", "heterogeneity_p", "holds_across_bases", "uninformative", "robustness", "warning",
           "label", "note"]
POOLED = "pooled"
NOTE = ("base N: that base's study (its own warm-started model, B and runs): mean over paired seeds [95% paired-t CI], "
        "its verdict (Holm within the primary family). pooled: OLS of every base's paired differences on sum-coded "
        "base fixed effects (statsmodels), the intercept = the mean over bases, 95% t interval; confirmed by the "
        "plan's rule (verdict: in the words every table gives it, an uninformative row's or an exploratory one's "
        "among them); heterogeneity_p: F test of differing bases; holds_across_bases: every base reaches the pooled "
        "verdict; robustness, warning: a base's as its headline gives them; the pooled row fragile where a base's "
        "verdict is or the bases disagree, with every base's warning; label, note: the pooled row is exploratory "
        "where a base's study reports the contrast so (its lock late, or its plan changed since), naming the base.")


def pooled_fit(pairs: pd.DataFrame, margin: float) -> dict:
    """The stratified paired analysis of `pairs` (columns base, diff): the pooled mean difference, its 95% interval,
    two-sided p, TOST p at ±margin, non-inferiority p, and the F test's p of differing bases (NaN with one); and why
    there is no test ('' where there is: `untestable`)."""
    data = pairs[["base", "diff"]].astype({"base": str, "diff": float})
    if data["diff"].isna().any():  # a reading past a curve's end: not defined, as in each base's contrasts
        return dict.fromkeys(("mean", "ci_low", "ci_high", "p", "tost_p", "ni_p", "heterogeneity_p"), np.nan) | {
            "n": len(data), "uninformative": "a reading is not defined (NaN) in a base: no statistic"}
    one = data["base"].nunique() == 1
    residuals = data["diff"] - data.groupby("base")["diff"].transform("mean")
    why = untestable(len(data), data["base"].nunique(), residuals.to_numpy())
    if why:  # statsmodels would divide by a residual variance of 0 (p = 0, 'confirmed') or of no degrees of freedom
        mean = float(data.groupby("base")["diff"].mean().mean())
        return dict.fromkeys(("ci_low", "ci_high", "p", "tost_p", "ni_p", "heterogeneity_p"), np.nan) | {
            "n": len(data), "mean": mean, "uninformative": why}
    fit = smf.ols("diff ~ 1" if one else "diff ~ C(base, Sum)", data).fit()
    b, se, df = fit.params["Intercept"], fit.bse["Intercept"], fit.df_resid
    low, high = fit.conf_int(0.05).loc["Intercept"]
    ni_p = stats.t.sf((b + margin) / se, df)
    tost_p = max(ni_p, stats.t.cdf((b - margin) / se, df))
    return {"n": int(fit.nobs), "mean": float(b), "ci_low": float(low), "ci_high": float(high),
            "p": float(fit.pvalues["Intercept"]), "tost_p": float(tost_p), "ni_p": float(ni_p),
            "heterogeneity_p": np.nan if one else float(anova_lm(fit).loc["C(base, Sum)", "PR(>F)"]),
            "uninformative": ""}


def untestable(pairs: int, bases: int, residuals: np.ndarray) -> str:
    """Why the pooled t test has nothing to test against ('' where it has): no residual degrees of freedom (one seed
    per base), or within-base residuals that do not spread (every seed of each base alike: stats.spread)."""
    if pairs <= bases:
        return (f"{pairs} paired seeds over {bases} bases leave no residual degrees of freedom: the pooled t test "
                f"needs a base with two seeds")
    if not spread(residuals):
        return ("within every base every seed gave the same difference: no variance is left to test the pooled mean "
                "against")
    return ""


def _plan(contrasts: pd.DataFrame) -> dict[tuple, dict]:
    """The planned contrasts of a base's contrasts.parquet, as contrasts.apply_plan's plan."""
    planned = contrasts[contrasts["id"] != ""]
    return {tuple(r[contrast_stats.KEY]): {c: r[c] for c in ("id", "label", "family", "direction", "note")}
            for _, r in planned.iterrows()}


def table(per_base: dict[int, tuple[pd.DataFrame, pd.DataFrame]], margin: float, alpha: float = 0.05,
          headlines: dict[int, pd.DataFrame] | None = None) -> pd.DataFrame:
    """One row per planned contrast and base (its own contrasts.parquet row), then its pooled row; each p is the
    planned test's (summary.planned_p), which decides its verdict, as the headline gives it.

    `per_base`: base -> (contrasts, paired) of that base's study. The plan is the first base's (every base's
    study has the same plan). `headlines`: base -> its study's headline (id, robustness, warning), whose words each
    base row carries and the pooled row's robustness and warning are made of; without them both are empty.
    """
    if not per_base:
        return pd.DataFrame(columns=COLUMNS)
    first = per_base[min(per_base)][0]
    plan = _plan(first)
    rows, pooled, judged_by = [], [], {}
    for key in plan:
        pairs, reported = [], {}
        for base, (contrasts, paired) in sorted(per_base.items()):
            mine = paired[(paired[contrast_stats.KEY] == pd.Series(key, index=contrast_stats.KEY)).all(axis=1)]
            if mine.empty:
                raise DataError(f"base {base}: no paired differences of {key[0]} ({key[1]}, {key[2]}, {key[3]}); "
                                f"every base's study must have the same plan and be analysed")
            pairs.append(mine.assign(base=base))
            row = contrasts.set_index(contrast_stats.KEY).loc[key]
            rows.append({"base": str(base), **{c: row[c] for c in ("n", "mean", "ci_low", "ci_high", "p_holm",
                                                                   "confirmed", "label", "note")}, **_key(key, plan),
                         "p": planned_p(row), "uninformative": row.get("uninformative", ""),
                         **_judged(headlines, base, plan[key]["id"])})
            reported[base] = (row["label"], row["note"])
        judged_by[key] = _pooled_label(plan[key], reported)
        both = pd.concat(pairs, ignore_index=True)
        pooled.append({**dict(zip(contrast_stats.KEY, key)), **pooled_fit(both, margin)})
    judged = contrast_stats.apply_plan(pd.DataFrame(pooled), judged_by, alpha)
    per = pd.DataFrame(rows)
    out = []
    for _, r in judged.iterrows():
        key = tuple(r[contrast_stats.KEY])
        bases = per[(per["id"] == plan[key]["id"])]
        # an untested pooled verdict holds nothing: its bases agreeing with 'not confirmed' would read as agreement
        holds = pd.NA if r["uninformative"] or pd.isna(r["confirmed"]) else all(
            pd.notna(c) and bool(c) == bool(r["confirmed"]) for c in bases["confirmed"])
        out += [*bases.to_dict("records"),
                {**_key(key, plan), "base": POOLED, **{c: r[c] for c in ("n", "mean", "ci_low", "ci_high",
                                                                         "p_holm", "confirmed", "heterogeneity_p",
                                                                         "uninformative", "label", "note")},
                 "p": planned_p(r), "holds_across_bases": holds, **_pooled_judged(r, bases, holds, headlines, margin)}]
    result = pd.DataFrame(out, columns=COLUMNS)
    result["confirmed"] = pd.array(result["confirmed"].tolist(), dtype="boolean")
    result["holds_across_bases"] = pd.array(result["holds_across_bases"].tolist(), dtype="boolean")
    return result


def _pooled_label(entry: dict, reported: dict[int, tuple[str, str]]) -> dict:
    """The plan entry the pooled row is judged by: the plan's label where every base's study reports it, else
    exploratory, its note naming each base reporting the contrast exploratory (its lock late, or its plan changed
    since): a pooled verdict would claim a preregistration that base's verdict does not have."""
    if len({label for label, _ in reported.values()}) == 1:
        return {**entry, "label": next(iter(reported.values()))[0]}
    why = "; ".join(f"base {base} reports {entry['id']} as {label}" + (f" ({note})" if note else "")
                    for base, (label, note) in sorted(reported.items()) if label == "exploratory")
    return {**entry, "label": "exploratory", "note": why}


def _judged(headlines: dict[int, pd.DataFrame] | None, base: int, plan_id: str) -> dict[str, str]:
    """A base row's robustness and warning: its study's headline's for `plan_id` ('' without headlines)."""
    if headlines is None:
        return {"robustness": "", "warning": ""}
    row = headlines[base].set_index("id").loc[plan_id]
    return {c: row[c] if isinstance(row[c], str) else "" for c in ("robustness", "warning")}


def _pooled_judged(pooled, bases: pd.DataFrame, holds, headlines: dict | None, margin: float) -> dict[str, str]:
    """The pooled row's robustness and warning (every base's, named). Its robustness: uninformative with its reason;
    none where exploratory (a demoted contrast has no checks); fragile where a base's verdict is (fragile, or
    uninformative: its data is in the pool) or the bases reach different verdicts, naming each; inconclusive where
    its interval reaches past the margin (robustness.inconclusive: never robust); else robust. A base that is only
    inconclusive fails nothing: pooling is what reads past it."""
    if headlines is None:
        return {"robustness": "", "warning": ""}
    warning = "; ".join(f"base {b}: {w}" for b, w in zip(bases["base"], bases["warning"]) if w)
    if pooled["uninformative"]:
        return {"robustness": f"uninformative: {pooled['uninformative']}", "warning": warning}
    if pooled["label"] == "exploratory":
        return {"robustness": "", "warning": warning}
    failed = [f"base {b}: {label}" for b, label in zip(bases["base"], bases["robustness"])
              if label.startswith(("fragile", "uninformative"))]
    failed += ["the bases reach different verdicts"] if holds is False else []
    if failed:
        return {"robustness": f"fragile: {'; '.join(failed)}", "warning": warning}
    row = {**pooled, "margin": margin}
    return {"robustness": inconclusive(row) if found(row) == "inconclusive" else "robust", "warning": warning}


def _key(key: tuple, plan: dict) -> dict:
    contrast, basis, metric, eval_set = key
    return {"id": plan[key]["id"], "contrast": contrast, "basis": basis, "metric": metric, "eval_set": eval_set,
            "direction": plan[key]["direction"]}
