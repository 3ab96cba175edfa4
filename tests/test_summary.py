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
