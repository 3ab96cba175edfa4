import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from mcgrpo.analysis.contrasts import CONTRAST_COLUMNS, apply_plan, budget_row, build, paired, read_at
from mcgrpo.analysis.runs import Run
from mcgrpo.analysis.stats import crossed_bootstrap
from mcgrpo.core.store import COLUMNS

B = 100


def make_run(arm, seed, tokens, updates, seconds, correct, samples=10, problems=None):
    """A run whose evaluation e scored correct[e][j] of `samples` on problem j (one problem if scalars)."""
    correct = np.array(correct, dtype=float).reshape(len(tokens), -1)
    acc = correct.mean(axis=1) / samples
    evals = pd.DataFrame({"eval_index": range(len(tokens)), "tokens_total": tokens, "iteration": range(len(tokens)),
                          "updates": updates, "train_seconds": np.asarray(seconds, float), "eval_set": "test",
                          "acc_default": acc, "acc_strict": acc})
    ids = np.array(problems or [f"q{j}" for j in range(correct.shape[1])], dtype=object)
    return Run(arm, seed, "test", evals, ids, np.full(correct.shape, samples),
               {"default": correct, "strict": correct})


def runs_of(*runs):
    return {(r.arm, r.seed, r.eval_set): r for r in runs}


# Hand case (one problem, 10 samples, so accuracies are tenths): A reaches B at tokens 105 (updates 8,
# 20 s); the base at 110 (updates 10, 16 s) and evaluates once more past B (updates 15), which no basis
# but time_c may use. Seed 2 has no base run and seed 3 no A run: neither may be paired.
HAND = runs_of(
    make_run("a", 0, [0, 50, 105], [0, 4, 8], [0, 10, 20], [1, 3, 5]),
    make_run("base", 0, [0, 60, 110, 170], [0, 5, 10, 15], [0, 8, 16, 24], [2, 4, 6, 9]),
    make_run("a", 1, [0, 50, 120], [0, 6, 12], [0, 10, 30], [1, 3, 7]),
    make_run("base", 1, [0, 60, 110, 170], [0, 5, 10, 15], [0, 8, 16, 24], [2, 4, 6, 9]),
    make_run("a", 2, [0, 100], [0, 1], [0, 1], [0, 10]),
    make_run("base", 3, [0, 100], [0, 1], [0, 1], [0, 10]),
)


@pytest.mark.parametrize("basis, value_a, value_b, at, at_b, moved", [
    ("tokens", [0.5, 0.7], [0.6, 0.6], [105, 120], [110, 110], ["", ""]),
    # seed 0: the base at A's 8 updates -> 0.4 + 3/5 * 0.2. Seed 1: A made 12 updates, the base only 10 by B,
    # so A is read at 10 (0.3 + 4/6 * 0.4) against the base at B, never the base clamped at its B (0.6 vs 0.7)
    ("updates", [0.5, 0.3 + 4 / 6 * 0.4], [0.52, 0.6], [8, 10], [8, 10], ["b", "a"]),
    # T* = min(20, 16) = 16 -> A: 0.3 + 6/10 * 0.2; seed 1: min(30, 16) -> 0.3 + 6/20 * 0.4
    ("time", [0.42, 0.42], [0.6, 0.6], [16, 16], [16, 16], ["a", "a"]),
])
def test_paired_hand_cases_pair_common_seeds_only(basis, value_a, value_b, at, at_b, moved):
    out, table = paired(HAND, "a", "base", basis, "acc_default", "test", B)
    assert set(COLUMNS["paired"]) <= set(out.columns)
    assert out["seed"].tolist() == [0, 1]
    np.testing.assert_allclose(out["value_a"], value_a)
    np.testing.assert_allclose(out["value_b"], value_b)
    np.testing.assert_allclose(out["diff"], np.subtract(value_a, value_b))
    np.testing.assert_allclose(out["at"], at)
    np.testing.assert_allclose(out["at_b"], at_b)
    assert out["moved"].tolist() == moved and not out["clamped"].any()
    assert set(out["contrast"]) == {"a-vs-base"} and set(out["basis"]) == {basis}
    np.testing.assert_allclose(table.mean(axis=1), out["diff"])


def test_time_c_reads_a_past_its_budget_at_the_bases_time_at_b():
    # A reaches B at 10 s and trains on to 20 s; the base needs T_c = 16 s to reach B.
    past = runs_of(make_run("a", 0, [0, 50, 105, 160], [0, 4, 8, 12], [0, 5, 10, 20], [1, 3, 5, 8]),
                   make_run("base", 0, [0, 60, 110], [0, 5, 10], [0, 8, 16], [2, 4, 6]))
    time, _ = paired(past, "a", "base", "time", "acc_default", "test", B)
    np.testing.assert_allclose([time["at"][0], time["value_a"][0], time["value_b"][0]], [10, 0.5, 0.45])
    tc, _ = paired(past, "a", "base", "time_c", "acc_default", "test", B)
    np.testing.assert_allclose([tc["at"][0], tc["value_a"][0], tc["value_b"][0]], [16, 0.5 + 0.6 * 0.3, 0.6])


def test_time_c_refuses_a_run_that_ends_before_t_c():
    with pytest.raises(ValueError, match=r"run a/seed0 ends at 20.0 s of training, before T_c = 30.0 s"):
        short = runs_of(make_run("a", 0, [0, 105], [0, 8], [0, 20], [1, 5]),
                        make_run("base", 0, [0, 110], [0, 10], [0, 30], [2, 6]))
        paired(short, "a", "base", "time_c", "acc_default", "test", B)


def test_read_at_exact_first_of_ties_interpolated_and_clamped():
    x, table = np.array([0.0, 5.0, 5.0, 10.0]), np.array([[0.0], [1.0], [2.0], [4.0]])
    assert read_at(x, table, 5.0) == ([1.0], False)  # the first evaluation at that position
    row, clamped = read_at(x, table, 7.5)
    assert row[0] == pytest.approx(3.0) and not clamped
    for outside in (12.0, -1.0):  # beyond the curve: not defined, never its end value
        row, undefined = read_at(x, table, outside)
        assert undefined and np.isnan(row).all()


# A clock flat between two evaluations (an ingested run's summed step_time, a coarse clock): seed 0's A reaches B
# at 10 s, the second evaluation at 10 s; seed 1's A is at 16 s at two evaluations, where the base reaches B.
FLAT = runs_of(
    make_run("a", 0, [0, 50, 105], [0, 4, 8], [0, 10, 10], [1, 3, 5]),
    make_run("base", 0, [0, 60, 110], [0, 5, 10], [0, 8, 16], [2, 4, 6]),
    make_run("a", 1, [0, 40, 70, 90, 120], [0, 3, 6, 9, 12], [0, 10, 16, 16, 30], [1, 2, 3, 4, 7]),
    make_run("base", 1, [0, 60, 110], [0, 5, 10], [0, 8, 16], [2, 4, 6]),
)


def test_a_flat_clock_is_read_at_the_last_evaluation_of_that_time_on_the_time_bases():
    """Where a run's clock is equal at two evaluations, the time bases read the first: seed 0's A, said to be read
    "at its own B" (at 10 s), was read at the evaluation before B (0.3, 50 tokens). The last evaluation at that
    time is what the run had done by then on its clock, and B's at its own B."""
    time, _ = paired(FLAT, "a", "base", "time", "acc_default", "test", B)
    np.testing.assert_allclose(time["at"], [10, 16])
    np.testing.assert_allclose(time["value_a"], [0.5, 0.4])  # seed 1: the second evaluation at 16 s (90 tokens)
    np.testing.assert_allclose(time["tokens_a"], [105, 90])
    np.testing.assert_allclose(time["value_b"], [0.4 + 2 / 8 * 0.2, 0.6])
    assert time["moved"].tolist() == ["b", "a"]
    seed1 = {key: run for key, run in FLAT.items() if key[1] == 1}  # seed 0's A ends before T_c
    tc, _ = paired(seed1, "a", "base", "time_c", "acc_default", "test", B)
    np.testing.assert_allclose([tc["value_a"].iloc[0], tc["tokens_a"].iloc[0]], [0.4, 90])
    updates, _ = paired(FLAT, "a", "base", "updates", "acc_default", "test", B)  # counts: untouched
    np.testing.assert_allclose(updates["value_a"], [0.5, 0.4 + 1 / 3 * 0.3])


def test_equal_updates_say_which_arm_was_read_where():
    table, _ = build(HAND, [("a", "base", "updates", "acc_default", "test")], B, 0.02, resamples=200)
    assert table["read"].iloc[0] == "A at the base's position (seed 1); base at A's position (seed 0)"
    tokens, _ = build(HAND, [("a", "base", "tokens", "acc_default", "test")], B, 0.02, resamples=200)
    assert tokens["read"].iloc[0] == "each at its own B"


def test_a_contrast_with_an_undefined_reading_is_not_defined():
    from mcgrpo.analysis.contrasts import summary
    pairs = pd.DataFrame({"diff": [0.1, np.nan, 0.2]})
    out = summary(pairs, None, 0.02)
    assert out["n"] == 3 and not out["noninferior"]
    assert all(np.isnan(out[k]) for k in ("mean", "ci_low", "ci_high", "p", "tost_p", "seeds_higher"))


def test_paired_rejects_unknown_basis_and_unknown_metric():
    with pytest.raises(ValueError, match="'flops'.*tokens, iterations, updates, time, time_c"):
        paired(HAND, "a", "base", "flops", "acc_default", "test", B)
    with pytest.raises(ValueError, match=r"'acc_greedy' is not recorded for a/seed0 \(test\); allowed: acc_default, "
                                         r"acc_strict, pass@<k>_default \(k <= 10\)"):
        paired(HAND, "a", "base", "tokens", "acc_greedy", "test", B)


def test_budget_row_first_at_or_past_budget_and_error():
    r = make_run("a", 4, [0, 90, 100, 130], [0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3])
    assert budget_row(r, 100) == 2 and budget_row(r, 91) == 2
    with pytest.raises(ValueError, match=r"a/seed4 never reached B=200 tokens on test.*max tokens_total 130"):
        budget_row(r, 200)


def test_pass_at_k_and_strict_come_from_per_problem_counts():
    # 3 problems x 4 samples; pass@2 per problem from c = 0, 2, 4: 0, 5/6, 1
    a = make_run("a", 0, [0, 100], [0, 1], [0, 1], [[0, 0, 0], [0, 2, 4]], samples=4)
    b = make_run("base", 0, [0, 100], [0, 1], [0, 1], [[0, 0, 0], [0, 0, 0]], samples=4)
    out, table = paired(runs_of(a, b), "a", "base", "tokens", "pass@2_default", "test", B)
    np.testing.assert_allclose(table, [[0, 5 / 6, 1]])
    assert out["value_a"][0] == pytest.approx((5 / 6 + 1) / 3)


def test_paired_refuses_runs_that_scored_different_problems():
    a = make_run("a", 0, [0, 100], [0, 1], [0, 1], [[1, 1], [1, 1]], problems=["x", "y"])
    b = make_run("base", 0, [0, 100], [0, 1], [0, 1], [[1, 1], [1, 1]], problems=["x", "z"])
    with pytest.raises(ValueError, match="a/seed0 and base/seed0 scored different problems on test"):
        paired(runs_of(a, b), "a", "base", "tokens", "acc_default", "test", B)


def seeds_table(shift, seeds=6, problems=5, rng=None):
    """Runs of arms a and base over `seeds`, A ahead by about `shift` samples per problem."""
    rng = rng or np.random.default_rng(0)
    out = []
    for seed in range(seeds):
        base = rng.integers(2, 6, (2, problems))
        out.append(make_run("base", seed, [0, 100], [0, 10], [0, 10], base))
        out.append(make_run("a", seed, [0, 100], [0, 5], [0, 20], np.clip(base + shift + rng.integers(-1, 2, base.shape), 0, 10)))
    return runs_of(*out)


def test_build_statistics_match_scipy_and_the_crossed_bootstrap():
    runs = seeds_table(1)
    table, pairs = build(runs, [("a", "base", "tokens", "acc_default", "test")], B, 0.02, resamples=500, seed=3)
    assert list(table.columns) == CONTRAST_COLUMNS and set(COLUMNS["contrasts"]) <= set(table.columns)
    r = table.iloc[0]
    assert r["p"] == pytest.approx(stats.ttest_rel(pairs["value_a"], pairs["value_b"]).pvalue)
    assert r["n"] == 6 and r["seeds_higher"] == (pairs["diff"] > 0).sum()
    _, per_problem = paired(runs, "a", "base", "tokens", "acc_default", "test", B)
    assert (r["crossed_low"], r["crossed_high"]) == pytest.approx(crossed_bootstrap(per_problem, 500, 3))
    assert r["label"] == "exploratory" and pd.isna(r["confirmed"]) and np.isnan(r["p_holm"])


def test_apply_plan_holm_within_primary_families_on_the_planned_test():
    rng = np.random.default_rng(1)
    rows = pd.DataFrame({"contrast": [f"c{i}-vs-base" for i in range(5)], "basis": "tokens",
                         "metric": "acc_default", "eval_set": "test", "mean": [0.03, -0.02, 0.001, 0.04, 0.01],
                         "p": rng.uniform(0, 0.05, 5), "tost_p": rng.uniform(0, 0.05, 5), "ni_p": rng.uniform(0, 0.05, 5)})
    plan = {("c0-vs-base", "tokens", "acc_default", "test"): {"id": "T1", "label": "primary", "family": "H1",
                                                             "direction": "greater"},
            ("c1-vs-base", "tokens", "acc_default", "test"): {"id": "T2", "label": "primary", "family": "H1",
                                                             "direction": "greater"},
            ("c2-vs-base", "tokens", "acc_default", "test"): {"id": "T3", "label": "primary", "family": "H1",
                                                             "direction": "equivalent"},
            ("c3-vs-base", "tokens", "acc_default", "test"): {"id": "T4", "label": "primary", "family": "H2",
                                                             "direction": "two-sided"},
            ("c4-vs-base", "tokens", "acc_default", "test"): {"id": "S1", "label": "secondary",
                                                             "family": "secondary", "direction": "noninferior"}}
    out = apply_plan(rows, plan).set_index("id")
    h1 = multipletests([rows["p"][0], rows["p"][1], rows["tost_p"][2]], method="holm")[1]
    np.testing.assert_allclose(out.loc[["T1", "T2", "T3"], "p_holm"], h1)
    assert out.loc["T4", "p_holm"] == pytest.approx(rows["p"][3])  # a family of one
    assert np.isnan(out.loc["S1", "p_holm"])  # secondary: unadjusted
    # T2 rejects but in the wrong direction; S1 is judged on its own non-inferiority p
    assert out.loc["T1", "confirmed"] == (h1[0] < 0.05) and not out.loc["T2", "confirmed"]
    assert out.loc["S1", "confirmed"] == (rows["ni_p"][4] < 0.05)
    assert out["label"].tolist() == ["primary"] * 4 + ["secondary"]



def test_an_uninformative_contrast_keeps_its_place_in_its_holm_family():
    """T1 at p = 0.03 in a preregistered family of two whose T2 read the floor (uninformative, untested): the family
    is the one planned, so T1's Holm p is 0.06, not confirmed. Before, T2 took no place and T1 was confirmed at
    0.03, as if the plan had made one test: a sibling's degenerate data made a verdict easier to reach."""
    rows = pd.DataFrame({"contrast": ["c0-vs-base", "c1-vs-base"], "basis": "tokens", "metric": "acc_default",
                         "eval_set": "test", "mean": [0.03, 0.0], "p": [0.03, np.nan], "tost_p": np.nan,
                         "ni_p": np.nan, "uninformative": ["", "every reading of both arms scored 0: ..."]})
    plan = {(f"c{i}-vs-base", "tokens", "acc_default", "test"): {"id": f"T{i + 1}", "label": "primary",
                                                                "family": "H1", "direction": "greater"}
            for i in range(2)}
    out = apply_plan(rows, plan).set_index("id")
    assert out.loc["T1", "p_holm"] == pytest.approx(0.06) and not out.loc["T1", "confirmed"]
    assert np.isnan(out.loc["T2", "p_holm"]) and not out.loc["T2", "confirmed"]

def test_build_of_nothing_is_an_empty_table_with_the_contract():
    table, pairs = build({}, [], B, 0.02)
    assert list(table.columns) == CONTRAST_COLUMNS and table.empty and pairs.empty


def test_the_equal_bases_table_marks_where_a_was_read_at_the_bases_count():
    from mcgrpo.analysis.tables import _bases
    keys = [("a", "base", basis, "acc_default", "test") for basis in ("tokens", "updates")]
    table, _ = build(HAND, keys, B, 0.02, resamples=200)
    row = _bases(table).iloc[0]
    assert row["updates"].endswith(" (A read at the base's count)") and "read" not in row["tokens"]


def test_a_verdict_at_equal_updates_with_a_read_at_the_bases_count_says_so_wherever_it_is_shown():
    """Only the equal-bases table said that equal updates read A at the base's count (A short of its own B); the
    summary, the headline (and so a programme's verdicts) said 'equal updates' alone. Now each says it; equal tokens
    is worded as before."""
    from mcgrpo.analysis import summary
    from mcgrpo.analysis.tables import headline
    plan = {("a-vs-base", basis, "acc_default", "test"): {"id": i, "label": "secondary", "family": "",
                                                          "direction": "less", "note": ""}
            for i, basis in (("S1", "tokens"), ("S2", "updates"))}
    keys = [("a", "base", basis, "acc_default", "test") for basis in ("tokens", "updates")]
    table, _ = build(HAND, keys, B, 0.02, plan, resamples=200)
    basis = headline(table).set_index("id")["basis"]
    assert basis.to_dict() == {"S1": "equal tokens", "S2": "equal updates (A read at the base's count)"}
    said = {line[2:4]: line for line in summary.lines("s", table, "", "r") if line.startswith("- S")}
    assert " at equal updates (A read at the base's count): " in said["S2"] and " at equal tokens: " in said["S1"]


def test_each_arms_tokens_at_the_point_read_and_a_warning_where_they_are_a_tenth_of_b_apart():
    """HAND: at equal tokens seed 0 reads A at 105 and the base at 110 (5% of B apart), seed 1 A at 120 against 110
    (10%: not more than a tenth, no warning); at equal updates seed 0's base is read at 8 updates, 60 + 3/5 * 50 =
    90 tokens. A run read at 1.43 B beside one at 1.06 B (the issue's reward that generates) is warned of."""
    out, _ = paired(HAND, "a", "base", "tokens", "acc_default", "test", B)
    np.testing.assert_allclose(out["tokens_a"], [105, 120])
    np.testing.assert_allclose(out["tokens_b"], [110, 110])
    out, _ = paired(HAND, "a", "base", "updates", "acc_default", "test", B)
    np.testing.assert_allclose(out["tokens_b"], [90, 110])
    table, _ = build(HAND, [("a", "base", "tokens", "acc_default", "test")], B, 0.02, resamples=50)
    assert table[["tokens_a", "tokens_b"]].iloc[0].tolist() == [112.5, 110.0] and table["warning"].iloc[0] == ""
    far = runs_of(make_run("a", 0, [0, 50, 143], [0, 4, 8], [0, 10, 20], [1, 3, 5]),
                  make_run("base", 0, [0, 60, 106], [0, 5, 10], [0, 8, 16], [2, 4, 6]),
                  make_run("a", 1, [0, 50, 104], [0, 4, 8], [0, 10, 20], [1, 3, 5]),
                  make_run("base", 1, [0, 60, 106], [0, 5, 10], [0, 8, 16], [2, 4, 6]))
    table, _ = build(far, [("a", "base", "tokens", "acc_default", "test"),
                           ("a", "base", "updates", "acc_default", "test")], B, 0.02, resamples=50)
    assert table["warning"].tolist() == ["arms read up to 37% of B apart in tokens (seed 0; more than 10% of B): "
                                         "not equal tokens there", ""]
    assert table["mean"].iloc[0] == pytest.approx(-0.1)  # the reading itself unchanged: each arm at its B evaluation


def test_the_headline_and_contrasts_tables_show_the_tokens_read_and_the_warning():
    from mcgrpo.analysis import tables
    far = runs_of(make_run("a", 0, [0, 50, 143], [0, 4, 8], [0, 10, 20], [1, 3, 5]),
                  make_run("base", 0, [0, 60, 106], [0, 5, 10], [0, 8, 16], [2, 4, 6]),
                  make_run("a", 1, [0, 50, 141], [0, 4, 8], [0, 10, 20], [1, 3, 5]),
                  make_run("base", 1, [0, 60, 106], [0, 5, 10], [0, 8, 16], [2, 4, 7]))
    plan = {("a-vs-base", "tokens", "acc_default", "test"): {"id": "T1", "label": "primary", "family": "F"}}
    table, _ = build(far, [("a", "base", "tokens", "acc_default", "test")], B, 0.02, plan, resamples=50)
    headline = tables.headline(table)
    assert headline[["tokens_a", "tokens_b"]].iloc[0].tolist() == [142.0, 106.0]
    assert headline["warning"].iloc[0].startswith("arms read up to 37% of B apart")
    cells = tables.readable(tables._contrasts(table))
    assert cells[["tokens_a", "tokens_b"]].iloc[0].tolist() == ["142", "106"]
