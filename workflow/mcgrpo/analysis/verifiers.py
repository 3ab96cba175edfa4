"""The three verifier rules side by side (`verifier.rule`): where do whole_box, paper and math_verify disagree?

Every evaluation records each rule's verdict per sample (samples.parquet correct_whole_box, correct_paper,
correct_math_verify), so the comparison costs no generation: per arm and evaluation, each rule's accuracy
and the share of samples on which each pair of rules disagrees. A verdict that holds under one rule only is
a verdict about the verifier. Samples without a rule's verdict (math-verify not installed, or files written
before the columns existed) leave that rule's numbers empty.
"""

from __future__ import annotations

from itertools import combinations

import pandas as pd

from mcgrpo.core.verify import RULES, rule_verdicts

PAIRS = [f"{a}_vs_{b}" for a, b in combinations(RULES, 2)]


def verdict_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """correct_<rule> of every rule, as nullable booleans (absent columns all null)."""
    return pd.DataFrame({rule: frame[f"correct_{rule}"].astype("boolean") if f"correct_{rule}" in frame
                         else pd.Series(pd.NA, index=frame.index, dtype="boolean") for rule in RULES})


def summary(verdicts: pd.DataFrame) -> dict:
    """n, each rule's accuracy, and each pair's disagreement rate and count (over samples both rules judged)."""
    out = {"n": len(verdicts), **{f"acc_{r}": verdicts[r].astype("Float64").mean() for r in RULES}}
    for a, b in combinations(RULES, 2):
        both = verdicts[a].notna() & verdicts[b].notna()
        differ = (verdicts.loc[both, a] != verdicts.loc[both, b]).sum()
        out[f"{a}_vs_{b}"] = differ / both.sum() if both.any() else float("nan")
        out[f"{a}_vs_{b}_count"] = int(differ)
    return out


def disagreements(samples: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """One row per group of `by` (e.g. arm, eval_set, eval_index): summary() of its samples."""
    verdicts = verdict_columns(samples)
    rows = [{**dict(zip(by, key)), **summary(verdicts.loc[group.index])}
            for key, group in samples.groupby(list(by), sort=True)]
    return pd.DataFrame(rows)


def overran_note(samples: pd.DataFrame) -> str:
    """A warning naming each run (arm, seed) whose math-verify checks overran their CPU budget and how many, since
    each was counted wrong; "" where none did (or math_verify_overran is absent or null: the package not installed)."""
    if "math_verify_overran" not in samples:
        return ""
    flagged = samples[samples["math_verify_overran"].astype("boolean").fillna(False).to_numpy(bool)]
    if flagged.empty:
        return ""
    runs = ", ".join(f"{arm} seed {seed}: {n}" for (arm, seed), n in flagged.groupby(["arm", "seed"]).size().items())
    return (f"Warning: math-verify overran its CPU budget on {len(flagged)} sample(s), each counted wrong "
            f"(samples.parquet math_verify_overran; {runs}).")


def overran_flags(samples: pd.DataFrame) -> dict[tuple[str, None], str]:
    """{(arm, None): words} per arm with math-verify checks that overran and were counted wrong (overran_note's, on
    every eval set), for the warning beside each verdict with the arm (summary.flag_cell); empty where none did."""
    if "math_verify_overran" not in samples:
        return {}
    flagged = samples[samples["math_verify_overran"].astype("boolean").fillna(False).to_numpy(bool)]
    return {(arm, None): f"math-verify overran on {n} of {arm}'s samples, each counted wrong"
            for arm, n in flagged.groupby("arm").size().items()}


def gold(problems: pd.DataFrame, math_verify=None) -> dict:
    """summary() of the gold solutions against their own answers: a rule that fails gold work is a rule
    that fails correct work."""
    verdicts = [rule_verdicts(s, a, math_verify) for s, a in zip(problems["solution"].fillna(""), problems["answer"])]
    return summary(pd.DataFrame(verdicts, columns=list(RULES)).astype("boolean"))
