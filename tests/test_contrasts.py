import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from mcgrpo.contrasts import budget_eval, build, load_evals, paired, summarize
from mcgrpo.store import COLUMNS, write_parquet

B = 100


def run(arm, seed, tokens, updates, seconds, acc, strict=None, eval_set="test"):
    """A synthetic run's evals with every contract column."""
    k = len(tokens)
    return pd.DataFrame({
        "eval_index": range(k), "tokens_total": tokens, "iteration": range(k), "updates": updates,
        "train_seconds": np.asarray(seconds, float), "eval_set": eval_set,
        "acc_default": acc, "acc_strict": acc if strict is None else strict,
        "boxed_share": 1.0, "truncated_share": 0.0, "mean_length": 100.0, "eval_seconds": 1.0,
        "arm": arm, "seed": seed})


# Hand case: A reaches B at tokens 105 (updates 8, 20 s); the base at 110 (updates 10, 16 s)
# and evaluates once more past B (updates 15), which no basis may use.
HAND = pd.concat([
    run("a", 0, [0, 50, 105], [0, 4, 8], [0, 10, 20], [0.1, 0.3, 0.5]),
    run("base", 0, [0, 60, 110, 170], [0, 5, 10, 15], [0, 8, 16, 24], [0.2, 0.4, 0.6, 0.9]),
    run("a", 1, [0, 50, 120], [0, 6, 12], [0, 10, 30], [0.1, 0.3, 0.7]),
    run("base", 1, [0, 60, 110, 170], [0, 5, 10, 15], [0, 8, 16, 24], [0.2, 0.4, 0.6, 0.9]),
    run("a", 2, [0, 100], [0, 1], [0, 1], [0.0, 1.0]),  # no base seed 2
    run("base", 3, [0, 100], [0, 1], [0, 1], [0.0, 1.0]),  # no A seed 3
], ignore_index=True)


@pytest.mark.parametrize("basis, value_a, value_b, at", [
    ("tokens", [0.5, 0.7], [0.6, 0.6], [105, 120]),
    # base at A's updates 8 -> 0.4 + 3/5 * 0.2; at 12 clamped to its B-eval 0.6, not 0.72
    ("updates", [0.5, 0.7], [0.52, 0.6], [8, 12]),
    # T* = min(20, 16) = 16 -> A: 0.3 + 6/10 * 0.2; seed 1: min(30, 16) -> 0.3 + 6/20 * 0.4
    ("time", [0.42, 0.42], [0.6, 0.6], [16, 16]),
])
def test_paired_hand_cases_pair_common_seeds_only(basis, value_a, value_b, at):
    out = paired(HAND, "a", "base", basis, "acc_default", B, "test")
    assert set(out.columns) == {*COLUMNS["paired"], "metric", "eval_set"}
    assert out["seed"].tolist() == [0, 1]
    np.testing.assert_allclose(out["value_a"], value_a)
    np.testing.assert_allclose(out["value_b"], value_b)
    np.testing.assert_allclose(out["diff"], np.subtract(value_a, value_b))
    np.testing.assert_allclose(out["at"], at)
    assert set(out["contrast"]) == {"a-vs-base"} and set(out["basis"]) == {basis}


def test_paired_filters_eval_set_and_uses_metric():
    other = run("a", 0, [0, 100], [0, 1], [0, 1], [0.9, 0.9], eval_set="other")
    strict = HAND.assign(acc_strict=HAND["acc_default"] / 2)
    out = paired(pd.concat([strict, other]), "a", "base", "tokens", "acc_strict", B, "test")
    np.testing.assert_allclose(out["value_a"], [0.25, 0.35])
    assert paired(HAND, "a", "base", "tokens", "acc_default", B, "other").empty


def test_paired_rejects_unknown_basis():
    with pytest.raises(ValueError, match="'flops'.*tokens, updates, time"):
        paired(HAND, "a", "base", "flops", "acc_default", B, "test")


def test_budget_eval_first_at_or_past_budget_and_error():
    r = run("a", 4, [0, 90, 100, 130], [0, 1, 2, 3], [0, 1, 2, 3], [0, 0.1, 0.2, 0.3])
    assert budget_eval(r, 100)["eval_index"] == 2
    assert budget_eval(r, 91)["eval_index"] == 2
    with pytest.raises(ValueError, match=r"a/seed4 never reached B=200.*max tokens_total 130"):
        budget_eval(r, 200)


def test_summarize_matches_scipy_and_holm_within_family():
    rng = np.random.default_rng(1)
    rows = [{"contrast": c, "basis": basis, "metric": "acc_default", "eval_set": "test", "seed": s,
             "value_a": 0.5 + shift + rng.normal(0, 0.02), "value_b": 0.5, "diff": np.nan, "at": 0}
            for c, shift in [("x-vs-base", 0.03), ("y-vs-base", 0.0), ("z-vs-base", 0.05)]
            for basis in ("tokens", "time") for s in range(5)]
    df = pd.DataFrame(rows).assign(diff=lambda d: d["value_a"] - d["value_b"])
    out = summarize(df, margin=0.02, families={"z-vs-base": "other"}, labels={"x-vs-base": "primary"})
    assert list(out.columns) == [*COLUMNS["contrasts"], "eval_set"]
    assert len(out) == 6 and (out["n"] == 5).all()
    for _, r in out.iterrows():
        g = df[(df["contrast"] == r["contrast"]) & (df["basis"] == r["basis"])]
        assert r["p"] == pytest.approx(stats.ttest_rel(g["value_a"], g["value_b"]).pvalue)
        assert r["mean"] == pytest.approx(g["diff"].mean())
    tokens = out[out["basis"] == "tokens"].set_index("contrast")
    expected = multipletests(tokens.loc[["x-vs-base", "y-vs-base"], "p"], method="holm")[1]
    np.testing.assert_allclose(tokens.loc[["x-vs-base", "y-vs-base"], "p_holm"], expected)
    assert tokens.loc["z-vs-base", "p_holm"] == pytest.approx(tokens.loc["z-vs-base", "p"])
    assert tokens["family"].tolist() == ["main", "main", "other"]
    assert tokens["label"].tolist() == ["primary", "exploratory", "exploratory"]
    assert out["crossed_low"].isna().all() and out["crossed_high"].isna().all()
    assert (out["margin"] == 0.02).all()


def test_summarize_single_seed_reports_mean_without_test():
    out = summarize(paired(HAND, "a", "base", "tokens", "acc_default", B, "test").iloc[:1], 0.02)
    r = out.iloc[0]
    assert r["n"] == 1 and r["mean"] == pytest.approx(-0.1) and r["seeds_higher"] == 0
    assert np.isnan([r["ci_low"], r["ci_high"], r["p"], r["p_holm"], r["tost_p"]]).all()


def write_runs(root, frame):
    for (arm, seed), r in frame.groupby(["arm", "seed"]):
        write_parquet(r.drop(columns=["arm", "seed"]), root / "runs" / arm / f"seed{seed}" / "evals.parquet")


def test_load_evals_tags_runs_and_names_missing_file(tmp_path):
    write_runs(tmp_path, HAND)
    evals = load_evals(tmp_path, ["a", "base"], [0, 1])
    assert len(evals) == 14 and set(zip(evals["arm"], evals["seed"])) == {
        ("a", 0), ("a", 1), ("base", 0), ("base", 1)}
    with pytest.raises(FileNotFoundError, match=r"runs/a/seed3/evals.parquet"):
        load_evals(tmp_path, ["a", "base"], [0, 3])


def test_build_every_pair_basis_metric_and_eval_set(tmp_path):
    rng = np.random.default_rng(2)
    frames = [run(arm, seed, [0, 60, 110], [0, 5, 10], [0, 8, 16 + seed],
                  rng.uniform(0, 1, 3), rng.uniform(0, 1, 3), eval_set=es)
              for arm in ("x", "y", "base") for seed in range(3) for es in ("test", "ood")]
    write_runs(tmp_path, pd.concat(frames, ignore_index=True))
    contrasts, pairs = build(tmp_path, [("x", "base"), ("y", "base")], [0, 1, 2], B,
                             ["test", "ood"], margin=0.02)
    assert len(contrasts) == 2 * 3 * 2 * 2 and (contrasts["n"] == 3).all()
    assert len(pairs) == len(contrasts) * 3
    assert set(contrasts["contrast"]) == {"x-vs-base", "y-vs-base"}
    one = pairs[(pairs["contrast"] == "x-vs-base") & (pairs["basis"] == "updates")
                & (pairs["metric"] == "acc_strict") & (pairs["eval_set"] == "ood")]
    row = contrasts.set_index(["contrast", "basis", "metric", "eval_set"]).loc[
        ("x-vs-base", "updates", "acc_strict", "ood")]
    assert row["p"] == pytest.approx(stats.ttest_rel(one["value_a"], one["value_b"]).pvalue)
    fam = contrasts[(contrasts["basis"] == "time") & (contrasts["metric"] == "acc_default")
                    & (contrasts["eval_set"] == "test")]
    np.testing.assert_allclose(fam["p_holm"], multipletests(fam["p"], method="holm")[1])
