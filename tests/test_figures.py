import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mcgrpo.analysis import figures
from mcgrpo.analysis.figures import accuracy_curves, mean_curve
from mcgrpo.analysis.tables import interval, readable, write_table

PNG = b"\x89PNG\r\n\x1a\n"


def curves(eval_set="test"):
    """Two arms: 'a' with seeds 0 and 1, 'b' with one seed."""
    rows = [("a", 0, [0, 10], [0, 50], [0.0, 1.0]),
            ("a", 1, [0, 5, 12], [0, 30, 60], [0.2, 0.2, 0.6]),
            ("b", 0, [0, 6, 11], [0, 40, 80], [0.1, 0.3, 0.4])]
    return pd.concat([pd.DataFrame({"arm": arm, "seed": seed, "eval_index": range(len(tok)), "tokens_total": tok,
                                    "train_seconds": np.asarray(sec, float), "acc_default": acc,
                                    "eval_set": eval_set})
                      for arm, seed, tok, sec, acc in rows], ignore_index=True)


def test_mean_curve_hand_case():
    a = curves().query("arm == 'a'")
    mean, low, high = mean_curve(a, "tokens_total", np.array([0.0, 5.0, 10.0]), "acc_default")
    per_seed = np.array([[0.0, 0.5, 1.0], [0.2, 0.2, 0.2 + 5 / 7 * 0.4]])
    np.testing.assert_allclose(mean, per_seed.mean(axis=0))
    half = stats.t.ppf(0.975, 1) * np.abs(per_seed[0] - per_seed[1]) / 2  # sem of two values
    np.testing.assert_allclose(low, mean - half)
    np.testing.assert_allclose(high, mean + half)


def test_mean_curve_single_seed_has_no_band():
    b = curves().query("arm == 'b'")
    mean, low, high = mean_curve(b, "train_seconds", np.array([0.0, 20.0, 100.0]), "acc_default")
    np.testing.assert_allclose(mean, [0.1, 0.2, 0.4])  # clamped past the last eval
    assert np.isnan(low).all() and np.isnan(high).all()


@pytest.mark.parametrize("x", ["tokens_total", "train_seconds"])
def test_accuracy_curves_writes_png(tmp_path, x):
    path = accuracy_curves(curves(), x, B=10, path=tmp_path / "fig" / f"{x}.png")
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 1000


def test_accuracy_curves_rejects_bad_x_and_ambiguous_eval_set(tmp_path):
    with pytest.raises(ValueError, match="'iteration'.*tokens_total, train_seconds"):
        accuracy_curves(curves(), "iteration", 10, tmp_path / "f.png")
    both = pd.concat([curves("test"), curves("ood")])
    with pytest.raises(ValueError, match="ood, test"):
        accuracy_curves(both, "tokens_total", 10, tmp_path / "f.png")
    assert accuracy_curves(both, "tokens_total", 10, tmp_path / "f.png", eval_set="ood").exists()


def test_write_table_markdown_and_csv(tmp_path):
    df = pd.DataFrame({"contrast": ["a-vs-b", "c|d"], "n": [5, 1], "mean": [0.0123456, np.nan],
                       "drifted": [True, False]})
    csv, md, html = write_table(df, tmp_path / "out" / "contrasts.v1")
    assert (csv.name, md.name, html.name) == ("contrasts.v1.csv", "contrasts.v1.md", "contrasts.v1.html")
    assert md.read_text() == ("Readable copies: differences in points (1 point = 0.01 accuracy), accuracies and shares "
                              "in %.\n\n"
                              "| contrast | n | mean | drifted |\n"
                              "| --- | ---: | ---: | --- |\n"
                              "| a-vs-b | 5 | +1.2 | True |\n"
                              "| c\\|d | 1 | n/a | False |\n")
    pd.testing.assert_frame_equal(pd.read_csv(csv), df)
    assert sorted(p.name for p in csv.parent.iterdir()) == ["contrasts.v1.csv", "contrasts.v1.html", "contrasts.v1.md"]
    assert "<td>a-vs-b</td>" in html.read_text() and "<td>+1.2</td>" in html.read_text()
    assert "differences in points (1 point = 0.01 accuracy)" in md.read_text()


def test_write_table_selects_columns(tmp_path):
    df = pd.DataFrame({"x": [1.23456789], "b": ["x"], "c": [3]})
    csv, md, _ = write_table(df, tmp_path / "t", columns=["c", "x"])
    assert list(pd.read_csv(csv).columns) == ["c", "x"]
    assert md.read_text().splitlines()[2] == "| 3 | 1.23 |"


def test_html_table_is_the_bytes_pandas_writes():
    """The table is written by hand (pandas' formatter costs a millisecond a cell at the paper's scale); the bytes
    are pandas' to_html, escapes, stripped and doubled spaces included."""
    from mcgrpo.analysis.tables import _html_table
    cells = pd.DataFrame({"a b": ["x < y & z > w", " lead ", "two  spaces", "tab\there", "new\nline", "cr\rx",
                                  "q \"q\" 's'", "x" * 120, ""], "c<&>": ["1"] * 9})
    assert _html_table(cells) == cells.to_html(index=False, border=0, classes="table", escape=True)
    pivot = cells.rename_axis(columns="basis")  # a pivot's named columns: pandas adds a header cell per row
    assert _html_table(pivot) == pivot.to_html(index=False, border=0, classes="table", escape=True)


def test_write_table_title_and_note_head_the_readable_copies(tmp_path):
    csv, md, html = write_table(pd.DataFrame({"x": [1]}), tmp_path / "t", title="Title <1>", note="one\ntwo")
    assert md.read_text().startswith("### Title <1>\n\none\n\ntwo\n\n| x |")
    assert "<h3>Title &lt;1&gt;</h3>" in html.read_text() and "<p>two</p>" in html.read_text()
    assert csv.read_text() == "x\n1\n"


def test_interval_cells_in_points():
    assert interval(0.0123, -0.001, 0.0256) == "+1.2 [-0.1, +2.6]"
    assert interval(-0.5, np.nan, np.nan) == "-50.0" and interval(np.nan, 0, 1) == "not defined"


def test_readable_cells_by_column_kind_and_empty_tables_say_so(tmp_path):
    df = pd.DataFrame({"p": [0.01234, 0.0001], "share_mixed": [0.4219, 1.0], "tokens_total": [135_000, 600],
                       "seconds": [12.3456, 0.5]})
    assert readable(df).to_dict("list") == {"p": ["0.012", "<0.001"], "share_mixed": ["42.2%", "100.0%"],
                                            "tokens_total": ["135k", "600"], "seconds": ["12.3", "0.5"]}
    _, md, html = write_table(df[["p"]].iloc[:0], tmp_path / "empty", title="T", note="Empty without x.")
    assert md.read_text().endswith("Empty without x.\n\n*No rows in this study (the note says when there are).*\n")
    assert "<table" not in html.read_text() and "No rows in this study" in html.read_text()


CONTRASTS = pd.DataFrame({"contrast": ["a-vs-b", "a-vs-b", "c-vs-b", "c-vs-b"], "basis": ["tokens", "time"] * 2,
                          "metric": "acc_default", "eval_set": "test", "n": 3, "mean": [0.01, -0.02, 0.0, 0.03],
                          "ci_low": [-0.01, -0.04, -0.02, 0.01], "ci_high": [0.03, 0.0, 0.02, 0.05]})
PAIRED = pd.DataFrame({"contrast": np.repeat(CONTRASTS["contrast"], 3), "basis": np.repeat(CONTRASTS["basis"], 3),
                       "diff": np.random.default_rng(0).normal(0, 0.02, 12)})


@pytest.mark.parametrize("draw", [
    lambda p: figures.per_seed(PAIRED, CONTRASTS, 0.02, p),
    lambda p: figures.difference_from_base(pd.DataFrame({
        "contrast": "a-vs-b", "metric": "acc_default", "eval_set": "test", "eval_index": [0, 1, 2],
        "tokens": [0, 50, 100], "n": 3, "mean": [0, 0.01, 0.02], "ci_low": [0, -0.01, 0], "ci_high": [0, 0.03, 0.04]}),
        100, 0.02, p),
    lambda p: figures.stage_seconds(pd.DataFrame({"arm": ["a", "b"], "seeds": [2, 2], "total": [10.0, 20.0],
                                                  **{s: [2.0, 4.0] for s in figures.STAGES}}), p),
    lambda p: figures.drift(pd.DataFrame({"arm": "a", "seed": [0, 0, 1, 1], "eval_index": [0, 1] * 2, "eval_set": "test",
                                          "gap": [0.05, 0.2, 0.0, 0.1], "drifted": [False, True, False, False]}),
                            0.1, p, "test"),
    lambda p: figures.per_seed(PAIRED.iloc[:0], CONTRASTS.iloc[:0], 0.02, p),  # nothing to show: says so
])
def test_every_figure_writes_a_png_and_a_pdf(tmp_path, draw):
    path = draw(tmp_path / "figures" / "f.png")
    assert path.read_bytes()[:8] == PNG and path.stat().st_size > 1000
    assert path.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"


def test_curves_are_drawn_at_evaluations_only_so_the_band_never_bulges_between_them():
    """Arm a: evaluations 0, 1 at tokens (0, 0) and (10, 5), evaluation 2 only past the end: the grid is the
    mean position of each evaluation (0, 7.5) and the end (10), not an even grid between them."""
    a = curves().query("arm == 'a'")
    np.testing.assert_allclose(figures.evaluation_grid(a, "tokens_total", 10.0), [0.0, 7.5, 10.0])
    np.testing.assert_allclose(figures.evaluation_grid(a, "tokens_total", 7.5), [0.0, 7.5])


def test_one_colour_per_arm_in_the_study_order_and_axes_in_words():
    assert figures.arm_colours(["outcome", "mc_k4", "filter"]) == {"outcome": "C0", "mc_k4": "C1", "filter": "C2"}
    assert figures.time_label("training time (minutes)", "CPU (x86_64), 2 threads") == (
        "training time (minutes): wall time of the training stages on CPU (x86_64), 2 threads")
    assert figures.time_label("training CPU time (seconds)", None, "train_cpu_seconds") == (
        "training CPU time (seconds): process CPU time of the training stages")
    assert figures.metric_words("acc_strict") == "accuracy (strict verifier)"
    assert figures.metric_words("pass@8_default") == "pass@8 (default verifier)"


def test_figures_mark_undefined_readings_and_a_read_at_the_bases_updates():
    from matplotlib.figure import Figure

    from mcgrpo.analysis.figures import _mark_readings
    ax = Figure().add_subplot()
    _mark_readings(ax, pd.Series({"mean": np.nan, "basis": "tokens", "read": "", "ci_high": np.nan}), 0)
    _mark_readings(ax, pd.Series({"mean": 0.1, "basis": "updates", "read": "A at the base's position",
                                  "ci_high": 0.2}), 1)
    _mark_readings(ax, pd.Series({"mean": 0.1, "basis": "updates", "read": "base at A's position",
                                  "ci_high": 0.2}), 2)
    assert [t.get_text() for t in ax.texts] == ["not defined", "A at base's\nupdates"]


def test_stage_colours_are_not_arm_colours():
    """The stage chart's bars never take an arm's colour: each stage colour is far (in RGB) from all ten."""
    from matplotlib.colors import to_rgb
    arms = np.array([to_rgb(c) for c in figures.PALETTE]) * 255
    for stage, colour in figures.STAGE_COLOURS.items():
        assert np.linalg.norm(arms - np.array(to_rgb(colour)) * 255, axis=1).min() > 60, stage
    assert len(set(figures.STAGE_COLOURS.values())) == len(figures.STAGES)


def test_prediction_table_differences_are_in_points():
    """The prediction table's training differences and observed-minus-extrapolated accuracy are accuracy
    differences: points, like every other table (not fractions such as -0.00263); efficiencies stay ratios."""
    df = pd.DataFrame({"arm": ["mc_k4"], "per_token": [0.0412], "diff_tokens": [-0.00263], "diff_tokens_low": [-0.0512],
                       "diff_updates_high": [0.0301], "observed_minus_extrapolated": [0.012], "ome_low": [-0.004],
                       "acc_default": [0.4219]})
    cells = readable(df).iloc[0].to_dict()
    assert cells == {"arm": "mc_k4", "per_token": "0.0412", "diff_tokens": "-0.3", "diff_tokens_low": "-5.1",
                     "diff_updates_high": "+3.0", "observed_minus_extrapolated": "+1.2", "ome_low": "-0.4",
                     "acc_default": "42.2%"}


def test_long_titles_are_wrapped_inside_the_figure(tmp_path):
    """A title wider than its axes (or a suptitle wider than the figure) is wrapped, never clipped at the edges."""
    fig, axes = figures._figure(7, 4.5, ncols=2)
    long = "Accuracy (default verifier) on heldout against training time, each arm up to its shortest run " * 2
    for ax in axes:
        ax.set_title(long)
    fig.suptitle(long)
    figures._save(fig, tmp_path / "long.png")
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    for text in [ax.title for ax in axes] + [fig._suptitle]:
        extent = text.get_window_extent(renderer)
        assert "\n" in text.get_text()
        assert box.x0 <= extent.x0 and extent.x1 <= box.x1 and extent.y1 <= box.y1


def test_figures_number_the_tables_warnings_beside_their_bars_and_spell_them_out_below(tmp_path, monkeypatch):
    """A bar (per seed) or panel (difference from the base) whose contrast the tables warn about, or call
    uninformative, is numbered, and the figure says why beneath: never a plain bar where the headline qualifies it."""
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, path, bottom=0.0: drawn.append((fig, bottom)) or path)
    warned = CONTRASTS.assign(warning=["arms apart", "", "runs stale: c/seed1", "runs stale: c/seed1"],
                              uninformative=["", "", "", "every reading of both arms scored 0"])
    figures.per_seed(PAIRED, warned, 0.02, tmp_path / "p.png")
    figures.difference_from_base(pd.DataFrame({
        "contrast": ["a-vs-b"] * 2 + ["c-vs-b"] * 2, "metric": "acc_default", "eval_set": "test",
        "eval_index": [0, 1] * 2, "tokens": [0, 100] * 2, "n": 3, "mean": 0.01, "ci_low": 0.0, "ci_high": 0.02}),
        100, 0.02, tmp_path / "d.png", warnings={"a-vs-b": "", "c-vs-b": "runs stale: c/seed1"})
    figures.per_seed(PAIRED, CONTRASTS, 0.02, tmp_path / "plain.png")
    (bars, bars_room), (panels, panels_room), (plain, plain_room) = drawn
    assert sorted(t.get_text() for t in bars.axes[0].texts) == ["[1]", "[2]", "[3]"]
    assert [t.get_text() for t in bars.texts] == ["[1] warning: arms apart\n[2] warning: runs stale: c/seed1\n"
                                                  "[3] warning: runs stale: c/seed1; uninformative: every reading of "
                                                  "both arms scored 0"]
    assert [ax.get_title().split("\n")[0] for ax in panels.axes] == ["a minus b", "c minus b [1]"]
    assert panels.texts[-1].get_text() == "[1] warning: runs stale: c/seed1"  # beneath the suptitle
    assert bars_room > 0 and panels_room > 0
    assert list(plain.texts) == list(plain.axes[0].texts) == [] and plain_room == 0  # no warning: the figure as before
