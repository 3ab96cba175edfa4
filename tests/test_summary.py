"""The results summary and the reader's number formats."""

import numpy as np
import pandas as pd

from mcgrpo.analysis import formats, summary


def test_formats_points_p_and_tokens():
    assert formats.points(-0.0612) == "-6.1" and formats.points(0.0) == "+0.0"
    assert formats.percent(0.42187) == "42.2%"
    assert formats.interval(-0.061, -0.114, -0.007) == "-6.1 [-11.4, -0.7]"
    assert formats.interval(0.02, np.nan, np.nan) == "+2.0" and formats.interval(np.nan, 0, 1) == "not defined"
    assert formats.p_value(0.01234) == "0.012" and formats.p_value(0.0004) == "<0.001"
    assert formats.p_value(np.nan) == "n/a"
    assert [formats.tokens(n) for n in (600, 135_000, 1_250_000, 2e9)] == ["600", "135k", "1.25M", "2G"]


def row(**changes):
    base = {"id": "T1", "label": "primary", "family": "H1", "direction": "less", "a": "mc_k4", "b": "outcome",
            "basis": "tokens", "metric": "acc_default", "eval_set": "heldout", "n": 4, "mean": -0.061,
            "ci_low": -0.114, "ci_high": -0.007, "p": 0.031, "p_holm": 0.031, "margin": 0.02, "confirmed": True,
            "tost_p": 0.9, "ni_p": 0.8}
    return pd.Series({**base, **changes})


def test_a_confirmed_primary_contrast_in_one_sentence():
    assert summary.sentence(row()) == ("T1 (primary, family H1; predicted: mc_k4 trails outcome): mc_k4 trails outcome "
                                       "at equal tokens: "
                                       "-6.1 [-11.4, -0.7] points, p = 0.031 (Holm 0.031), 4 seeds: confirmed")


def test_verdicts_and_predictions_in_words():
    s2 = row(id="S2", label="secondary", direction="equivalent", basis="time", p_holm=np.nan, confirmed=False)
    # the prediction in brackets, then the result (A trails: the interval lies below 0), then the verdict
    assert summary.sentence(s2) == ("S2 (secondary; predicted: mc_k4 matches outcome within ±2 points): mc_k4 trails "
                                    "outcome at equal time (T*): -6.1 [-11.4, -0.7] points, p = 0.900, 4 seeds: "
                                    "not confirmed")  # TOST's p
    assert summary.verdict(row(confirmed=pd.NA)) == "exploratory"


def test_lines_list_planned_contrasts_first_primary_then_where_results_are():
    table = pd.DataFrame([row(id="S1", label="secondary"), row(id="", label="exploratory"), row()])
    text = summary.lines("default", table, "The plan matches its lock.", "results/default")
    contrasts = [line for line in text if line.startswith("- S") or line.startswith("- T")]
    assert [line[2:4] for line in contrasts] == ["T1", "S1"]
    assert text[0] == "# Study default: results" and "- figures: results/default/figures/ (PNG, and PDF for papers)" in text
    empty = summary.lines("x", table.iloc[:0], "No lock.", "r")
    assert "The plan names no contrast" in empty[4]


def test_rst_page_escapes_markup_and_braces_and_keeps_the_description():
    page = summary.rst(["# Study mini: results", "", "- mc_k4 at T* {x}"], "Description.")
    assert page.startswith("Study mini: results\n===================\n")
    assert "- mc\\_k4 at T\\* (x)" in page and page.endswith("Description.")


def _from_interval(mean: float, low: float, high: float, n: int, margin: float = 0.02) -> dict:
    """A row's mean, interval and TOST p at `margin` from a printed 95% paired-t interval over n seeds (what a
    reader of the README's table has)."""
    from scipy import stats
    se = (high - low) / (2 * stats.t.ppf(0.975, n - 1))
    tost_p = max(stats.t.sf((mean + margin) / se, n - 1), stats.t.cdf((mean - margin) / se, n - 1))
    return {"mean": mean, "ci_low": low, "ci_high": high, "n": n, "margin": margin, "tost_p": tost_p}


README = {  # README.md, "What it concludes": id -> (direction, basis, a, b, mean, low, high, p, confirmed)
    "T1": ("less", "tokens", "mc_k4", "outcome", -0.041, -0.080, -0.001, 0.047, True),
    "S1": ("less", "time", "mc_k4", "outcome", -0.041, -0.078, -0.004, 0.039, True),
    "S2": ("greater", "updates", "mc_k4", "outcome", -0.001, -0.039, 0.038, 0.95, False),
    "S3": ("greater", "tokens", "filter", "random", 0.031, -0.014, 0.077, 0.13, False),
}


def test_the_default_studys_words_from_its_numbers():
    """T1 and S1 trail (their intervals exclude 0); S2 and S3 include 0 and reach past ±2 points, so they are
    inconclusive (the paper shows equivalence by TOST only), never 'on par', and nothing called robust beside them."""
    words = {}
    for plan_id, (direction, basis, a, b, mean, low, high, p, confirmed) in README.items():
        r = row(id=plan_id, label="primary" if plan_id == "T1" else "secondary", direction=direction, basis=basis,
                a=a, b=b, p=p, p_holm=p, confirmed=confirmed, **_from_interval(mean, low, high, 4))
        label = "fragile: the crossed interval includes 0" if confirmed else "robust"  # as the README's T1, S1
        words[plan_id] = (summary.result(r), summary.judged(r, label))
    assert words == {
        "T1": ("mc_k4 trails outcome", "confirmed, but fragile: the crossed interval includes 0"),
        "S1": ("mc_k4 trails outcome", "confirmed, but fragile: the crossed interval includes 0"),
        "S2": ("mc_k4 against outcome is inconclusive (the interval reaches past ±2 points)", "not confirmed"),
        "S3": ("filter against random is inconclusive (the interval reaches past ±2 points)", "not confirmed")}


def test_a_two_seed_study_wider_than_the_margin_reads_inconclusive():
    """The issue's case: +0.6 [-16.8, +18.0] at 2 seeds was 'on par ... and robust'."""
    from mcgrpo.analysis import contrasts, robustness
    stats_ = contrasts.paired_summary(np.array([-0.008, 0.020]), 0.02)
    assert stats_["ci_high"] - stats_["ci_low"] > 2 * 0.02 and stats_["tost_p"] >= 0.05
    r = row(id="S2", label="secondary", direction="greater", basis="updates", n=2, confirmed=False,
            **{k: stats_[k] for k in ("mean", "ci_low", "ci_high", "p", "tost_p")})
    assert summary.found(r) == "inconclusive"
    text = summary.sentence(r, robustness.inconclusive(r))
    assert text.startswith("S2 (secondary; predicted: mc_k4 beats outcome): mc_k4 against outcome is inconclusive "
                           "(the interval reaches past ±2 points) at equal updates: +0.6 [")
    assert text.endswith("2 seeds: not confirmed") and "on par" not in text and "robust" not in text
    assert robustness.inconclusive(r).startswith("inconclusive: the interval +0.6 [") and \
        robustness.inconclusive(r).endswith("reaches past ±2 points, so there is no verdict to be robust")
    # within the margin it shows something: equivalence by TOST, else on par
    close = row(direction="greater", confirmed=False, mean=0.001, ci_low=-0.012, ci_high=0.014, tost_p=0.01)
    assert summary.result(close) == "mc_k4 matches outcome within ±2 points"
    assert summary.result({**close, "tost_p": 0.2}) == "mc_k4 is on par with outcome"
    assert summary.judged(close, "robust") == "not confirmed, and robust"
    # a check that overturns an inconclusive reading still says so
    assert summary.judged(r, "fragile: the crossed interval excludes 0 [+0.1, +1.2]").startswith("not confirmed, and fragile")


def test_an_accepted_difference_is_said_of_what_it_differs_in():
    """A GRPOConfig key differs from the study's recipe; `prompts` (the prompt tokens an ingested log implies) from its
    training prompts: the warning names each as what it is."""
    said = {keys: summary.accepted_warnings({"mine": {1: list(keys)}})[0]
            for keys in (("learning_rate",), ("prompts",), ("learning_rate", "prompts"))}
    assert "learning_rate differs from the study's recipe, so every contrast" in said[("learning_rate",)]
    assert "prompts differ from the study's training prompts, so" in said[("prompts",)]
    assert "learning_rate, prompts differ from the study's recipe and training prompts, so" in said[
        ("learning_rate", "prompts")]
    # what an ingested folder's checkpoints hold (mcgrpo.integrations.saved_model): never called the recipe
    model = summary.accepted_warnings({"mine": {1: ["model", "tokenizer", "learning_rate", "prompts"]}})[0]
    assert ("model, tokenizer, learning_rate, prompts differ from the study's recipe, initial model, tokenizer and "
            "training prompts, so") in model
    assert "tokenizer differs from the study's tokenizer, so" in summary.accepted_warnings({"mine": {1: ["tokenizer"]}})[0]


def _study(**status):
    """The default study's four planned contrasts (README) as contrasts.parquet rows, and a plan status."""
    rows = []
    for plan_id, (direction, basis, a, b, mean, low, high, p, confirmed) in README.items():
        r = row(id=plan_id, label="primary" if plan_id == "T1" else "secondary", direction=direction, basis=basis,
                a=a, b=b, p=p, p_holm=p, confirmed=confirmed, **_from_interval(mean, low, high, 4))
        rows.append({**r.to_dict(), "contrast": f"{a}-vs-{b}", "seeds_higher": 3, "crossed_low": low - 0.01,
                     "crossed_high": high + 0.01, "uninformative": "", "noninferior": False, "read": "each at its own B", "tokens_a": 1e5,
                     "tokens_b": 1.01e5, "warning": "", "note": ""})
    return pd.DataFrame(rows), {"state": "matches", "locked_at": "2025-01-01T00:00:00+00:00", "changes": [],
                                "demoted": [], "labels": {}, "stale_runs": [], **status}


def _tables(contrasts, status, accepted):
    from mcgrpo.analysis import tables
    empty = pd.DataFrame()
    drift = pd.DataFrame({"arm": [], "eval_set": [], "seed": [], "drifted": pd.Series([], dtype=bool), "gap": []})
    paired = contrasts[["contrast", "basis", "metric", "eval_set"]].assign(value_a=0.5, value_b=0.4)
    return tables.study_tables(contrasts, paired, status, drift, empty, empty, pd.DataFrame(), empty, 0.05,
                               accepted=accepted)


def test_a_verdict_on_stale_or_accepted_runs_says_so_beside_it_and_only_there():
    """Runs trained under another config than the current one were named only in the plan note, above every verdict
    alike; now each verdict whose arms include such runs carries it, in summary.md and in the headline, and the
    verdicts on other arms read as before."""
    from mcgrpo.analysis import tables
    contrasts, status = _study(stale_runs=["random/seed2", "outcome_x/seed1"])
    accepted = {"filter": {1: ["learning_rate"]}}
    text = summary.lines("default", contrasts, tables.prereg_note(status), "results/default",
                         stale=status["stale_runs"], accepted=accepted)
    plain = summary.lines("default", contrasts, tables.prereg_note(status), "results/default")
    verdicts = {line[2:4]: line for line in text if line.startswith("- ") and line[2:4] in README}
    before = {line[2:4]: line for line in plain if line.startswith("- ") and line[2:4] in README}
    assert verdicts["S3"] == before["S3"] + (" (warning: filter: recipe differences accepted (learning_rate); runs "
                                             "trained with a config other than the current one: random/seed2)")
    assert [verdicts[i] for i in ("T1", "S1", "S2")] == [before[i] for i in ("T1", "S1", "S2")]
    headline = _tables(contrasts, status, accepted)["headline"][0].set_index("id")["warning"]
    assert headline.to_dict() == {"T1": "", "S1": "", "S2": "", "S3": verdicts["S3"].rpartition("(warning: ")[2][:-1]}
    assert _tables(contrasts, status, accepted)["contrasts"][0].set_index("id")["warning"]["S3"] == headline["S3"]


def test_without_stale_or_accepted_runs_the_summary_and_tables_are_as_before():
    """The default study, no run trained under another config and none with accepted differences: every verdict's
    line and every table byte for byte what it was."""
    from mcgrpo.analysis import tables
    contrasts, status = _study()
    note = tables.prereg_note(status)
    assert summary.lines("default", contrasts, note, "r", stale=[], accepted={}) == summary.lines(
        "default", contrasts, note, "r")
    assert summary.sentence(contrasts.iloc[0], None, "") == summary.sentence(contrasts.iloc[0])
    written = _tables(contrasts, status, {})
    assert written["headline"][0]["warning"].tolist() == [""] * 4 and note == (
        "The plan matches its lock of 2025-01-01T00:00:00+00:00.")
    assert written["contrasts"][0]["warning"].tolist() == [""] * 4


def test_a_verdict_whose_arms_were_read_far_apart_says_so_in_the_summary_as_in_the_tables():
    """At equal tokens, arms read more than a tenth of B apart: the headline and contrasts tables (and so a programme's
    verdicts) warned beside the verdict, while summary.md printed it plain. Now every place words it as the headline."""
    from mcgrpo.analysis import tables
    contrasts, status = _study()
    apart = "arms read up to 30% of B apart in tokens (seed 2; more than 10% of B): not equal tokens there"
    contrasts.loc[contrasts["id"] == "T1", "warning"] = apart
    accepted = {"outcome": {1: ["learning_rate"]}}
    text = summary.lines("default", contrasts, tables.prereg_note(status), "r", accepted=accepted)
    t1 = next(line for line in text if line.startswith("- T1"))
    headline = _tables(contrasts, status, accepted)["headline"][0].set_index("id")["warning"]
    assert headline["T1"].startswith(apart + "; outcome: recipe differences accepted")
    assert t1.endswith(f" (warning: {headline['T1']})")


def test_an_equivalence_verdict_shows_its_planned_tests_p_in_the_prereg_table_as_in_the_headline():
    """The prereg table gave the two-sided t test's p beside every verdict: an equivalence confirmed by TOST at
    p = 0.01 read 'p 0.95, confirmed True' there, and 'p 0.01, confirmed' in the headline and summary."""
    contrasts, status = _study()
    s2 = contrasts.index[contrasts["id"] == "S2"][0]
    contrasts.loc[s2, ["direction", "p", "tost_p", "confirmed"]] = ["equivalent", 0.95, 0.01, True]
    status["labels"] = {r["id"]: {**r[["label", "family", "direction", "a", "b", "basis", "metric"]].to_dict(),
                                  "reported": r["label"], "note": ""} for _, r in contrasts.iterrows()}
    written = _tables(contrasts, status, {})
    headline, prereg = (written[name][0].set_index("id") for name in ("headline", "prereg"))
    assert prereg.loc["S2", "p"] == headline.loc["S2", "p"] == 0.01 and prereg.loc["S2", "verdict"] == "confirmed"
    assert (prereg["p"] == headline["p"]).all()


def _checks(contrasts, labels: dict[str, str]) -> pd.DataFrame:
    """analysis/robustness.parquet of the planned `contrasts`, each labelled as `labels` says ('robust', 'fragile:
    ...'): every check read, none failed but those the label names."""
    from mcgrpo.analysis import robustness
    rows = []
    for _, r in contrasts[contrasts["id"] != ""].iterrows():
        rows.append({**{c: r[c] for c in ("contrast", "basis", "metric", "eval_set", "id", "a", "b", "direction",
                                          "confirmed", "margin", "crossed_low", "crossed_high")},
                     "crossed_holds": True, "strict_metric": "acc_strict", "strict_mean": r["mean"],
                     "strict_low": r["ci_low"], "strict_high": r["ci_high"], "strict_p": r["p"], "strict_holds": True,
                     "strict_uninformative": "", "drifted_a": 0, "evaluations_a": 9, "drifted_b": 0,
                     "evaluations_b": 9, "drift_holds": True, "other_clock": "", "clock_recorded": True,
                     "clock_mean": np.nan, "clock_low": np.nan, "clock_high": np.nan, "clock_p": np.nan,
                     "clock_holds": None, "clock_uninformative": "", "alike_compared": 4, "alike_holds": True,
                     "alike_unlike": "", "robust": labels[r["id"]] == "robust", "robustness": labels[r["id"]]})
    return pd.DataFrame(rows, columns=robustness.COLUMNS)


def _planned_status(contrasts, **status) -> dict:
    """A plan status whose labels are the planned `contrasts`' own (the prereg table lists them)."""
    labels = {r["id"]: {**r[["label", "family", "direction", "a", "b", "basis", "metric"]].to_dict(),
                        "reported": r["label"], "note": r["note"]} for _, r in contrasts.iterrows() if r["id"]}
    return {"state": "matches", "locked_at": "2025-01-01T00:00:00+00:00", "changes": [], "amended": [],
            "demoted": [], "labels": labels, "stale_runs": [], **status}


FRAGILE = "fragile: on the strict verifier -0.5 [-3.5, +2.5]"


def test_every_table_that_shows_a_verdict_words_it_and_what_goes_beside_it_as_the_headline():
    """The prereg and contrasts tables had a `confirmed` column alone: T1 read 'True' there where the headline and
    summary said 'confirmed, but fragile: ...', and an uninformative S2 read 'False' in the contrasts table. Every
    table that shows a verdict now shows the headline's result, verdict, robustness and warning cells beside it,
    worded by one function (tables.verdict_cells)."""
    from mcgrpo.analysis import tables
    contrasts, _ = _study()
    s2 = contrasts.index[contrasts["id"] == "S2"][0]
    contrasts.loc[s2, ["uninformative", "confirmed", "p", "tost_p"]] = ["every seed gave the same difference", False,
                                                                       np.nan, np.nan]
    contrasts.loc[contrasts["id"] == "S3", "warning"] = "arms read up to 30% of B apart in tokens"
    status = _planned_status(contrasts)
    checks = _checks(contrasts, {"T1": FRAGILE, "S1": "robust", "S2": "uninformative: every seed gave the same "
                                 "difference", "S3": "robust"})
    written = tables.study_tables(contrasts, contrasts[["contrast", "basis", "metric", "eval_set"]].assign(
        value_a=0.5, value_b=0.4), status, pd.DataFrame({"arm": [], "eval_set": [], "seed": [], "drifted": pd.Series(
            [], dtype=bool), "gap": []}), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), 0.05, checks,
        accepted={"filter": {1: ["learning_rate"]}})
    headline = written["headline"][0].set_index("id")[tables.VERDICT_COLUMNS]
    assert headline.loc["T1"].tolist() == ["mc_k4 trails outcome", "confirmed", FRAGILE, ""]
    assert headline.loc["S2", ["verdict", "robustness"]].tolist() == [
        "uninformative", "uninformative: every seed gave the same difference"]
    assert headline.loc["S3", "warning"] == ("arms read up to 30% of B apart in tokens; filter: recipe differences "
                                             "accepted (learning_rate)")
    for name in ("prereg", "contrasts", "robustness"):
        table, _, note = written[name]
        assert "confirmed" not in table.columns, name  # the verdict is worded once, as the headline words it
        shown = table[table["id"] != ""].set_index("id")[tables.VERDICT_COLUMNS]
        pd.testing.assert_frame_equal(shown.loc[headline.index], headline, check_names=False, obj=name)
        assert tables.VERDICT_NOTE in note, name
    # the summary's sentence says the same beside the same verdict
    text = summary.lines("default", contrasts, "", "r", robustness=checks, accepted={"filter": {1: ["learning_rate"]}})
    assert next(line for line in text if line.startswith("- T1")).endswith(f": confirmed, but {FRAGILE}")


AMENDMENT = "amended 2025-02-01: the secondary contrast moved to equal time (T*) before any run finished"


def test_an_amended_contrasts_verdict_says_amended_wherever_it_is_shown():
    """A contrast amended after the lock kept its label, and the plan note said only 'with dated amendments': its
    verdict line in summary.md, the headline and every other table read as a plain preregistered verdict. Each now
    says it was amended after the lock, and when and why, in its warning; the plan note names the amended contrasts;
    the other verdicts read as before."""
    from mcgrpo.analysis import tables
    contrasts, _ = _study()
    plain_status = _planned_status(contrasts)
    contrasts.loc[contrasts["id"] == "S1", "note"] = AMENDMENT
    status = _planned_status(contrasts, state="amended", amended=["S1"], changes=["S1: changed after the lock"])
    note = tables.prereg_note(status)
    assert note == ("The plan changed since its lock of 2025-01-01T00:00:00+00:00, with dated amendments. Changes: S1: "
                    "changed after the lock. Amended after the lock: S1 (each verdict says so beside it, in its "
                    "warning).")
    said = f"{summary.AMENDED} ({AMENDMENT})"
    text = summary.lines("default", contrasts, note, "r")
    s1 = next(line for line in text if line.startswith("- S1"))
    assert s1.endswith(f": confirmed (warning: {said})")
    written = _tables(contrasts, status, {})
    for name in ("headline", "contrasts", "prereg"):
        warnings = written[name][0].set_index("id")["warning"]
        assert warnings["S1"] == said and (warnings.drop(index=["S1", ""], errors="ignore") == "").all(), name
    # a verdict not amended reads byte for byte as before; so does every line of a study without amendments
    plain = summary.lines("default", contrasts.assign(note=""), tables.prereg_note(plain_status), "r")
    assert [line for line in text if line.startswith("- ") and not line.startswith("- S1")] == [
        line for line in plain if line.startswith("- ") and not line.startswith("- S1")]
    assert summary.warning({"a": "x", "b": "y", "eval_set": "e", "note": "demoted: recipe.lr changed"}) == ""


def test_a_crossed_interval_that_is_not_defined_says_why_never_the_mean_alone():
    """The headline's crossed cell showed the mean alone ('-4.1') where the seed-by-problem bootstrap gave no interval:
    a point estimate whose interval seemed lost. It is not defined with one seed, or for a metric without per-problem
    scores (acc_greedy, read from evals.parquet alone): the cell now says n/a and why."""
    from mcgrpo.analysis import tables
    contrasts, status = _study()
    t1, s1 = (contrasts.index[contrasts["id"] == i][0] for i in ("T1", "S1"))
    contrasts.loc[t1, ["crossed_low", "crossed_high"]] = np.nan
    contrasts.loc[t1, "metric"] = "acc_greedy"
    contrasts.loc[s1, ["n", "ci_low", "ci_high", "crossed_low", "crossed_high"]] = [1, np.nan, np.nan, np.nan, np.nan]
    crossed = tables.headline(contrasts).set_index("id")["crossed"]
    assert crossed["T1"] == ("n/a (no per-problem scores of acc_greedy: it is read from evals.parquet, one number per "
                             "evaluation, so problems cannot be resampled)")
    assert crossed["S1"] == "n/a (1 seed: the seed-by-problem bootstrap needs two)"
    assert crossed["S2"] == "-0.1 [-4.9, +4.8]"  # defined: as it was
    assert tables.crossed_cell({"mean": np.nan, "crossed_low": np.nan, "crossed_high": np.nan, "n": 4,
                                "metric": "acc_default"}) == "not defined"
    # the pass@k table's crossed column is worded by the same cell
    contrasts.loc[s1, "basis"], contrasts.loc[s1, "metric"] = "tokens", "acc_default"
    paired = contrasts[["contrast", "basis", "metric", "eval_set"]].assign(value_a=0.5, value_b=0.4)
    shown = tables._pass_at_k(contrasts.loc[[s1]], paired)
    assert shown["crossed"].tolist() == ["n/a (1 seed: the seed-by-problem bootstrap needs two)"]
