import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mcgrpo.figures import accuracy_curves, mean_curve
from mcgrpo.tables import write_table

PNG = b"\x89PNG\r\n\x1a\n"


def curves(eval_set="test"):
    """Two arms: 'a' with seeds 0 and 1, 'b' with one seed."""
    rows = [("a", 0, [0, 10], [0, 50], [0.0, 1.0]),
            ("a", 1, [0, 5, 12], [0, 30, 60], [0.2, 0.2, 0.6]),
            ("b", 0, [0, 6, 11], [0, 40, 80], [0.1, 0.3, 0.4])]
    return pd.concat([pd.DataFrame({"arm": arm, "seed": seed, "tokens_total": tok,
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
    csv, md = write_table(df, tmp_path / "out" / "contrasts.v1")
    assert (csv.name, md.name) == ("contrasts.v1.csv", "contrasts.v1.md")
    assert md.read_text() == ("| contrast | n | mean | drifted |\n"
                              "| --- | ---: | ---: | --- |\n"
                              "| a-vs-b | 5 | 0.01235 | True |\n"
                              "| c\\|d | 1 | NaN | False |\n")
    pd.testing.assert_frame_equal(pd.read_csv(csv), df)
    assert sorted(p.name for p in csv.parent.iterdir()) == ["contrasts.v1.csv", "contrasts.v1.md"]


def test_write_table_selects_columns(tmp_path):
    df = pd.DataFrame({"a": [1.23456789], "b": ["x"], "c": [3]})
    csv, md = write_table(df, tmp_path / "t", columns=["c", "a"])
    assert list(pd.read_csv(csv).columns) == ["c", "a"]
    assert md.read_text().splitlines()[2] == "| 3 | 1.235 |"
