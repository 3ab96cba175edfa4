"""The seeds planner against the exact noncentral t and a simulation of the study's own tests."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mcgrpo.analysis import power


def exact_power(d: float, n: int, alpha: float = 0.05) -> float:
    """Two-sided one-sample t test power at standardized effect d, from the noncentral t."""
    crit, nc = stats.t.ppf(1 - alpha / 2, n - 1), d * np.sqrt(n)
    return stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc)


def simulate(n: int, mean: float, sd: float, test, draws: int = 20_000) -> float:
    """How often `test` passes on `draws` studies of n seeds drawn from the pilot's distribution."""
    diffs = np.random.default_rng(0).normal(mean, sd, (draws, n))
    return float(np.mean(test(diffs)))


def _t(diffs, at):
    n = diffs.shape[1]
    return (diffs.mean(axis=1) - at) / (diffs.std(axis=1, ddof=1) / np.sqrt(n)), n - 1


def excludes_zero(diffs):
    """The study's test: the two-sided paired t test at 0.05 (as scipy.stats.ttest_1samp)."""
    t, df = _t(diffs, 0.0)
    return 2 * stats.t.sf(np.abs(t), df) < 0.05


def tost(diffs, margin=0.02):
    """Both one-sided t tests at the margins reject at 0.05."""
    low, df = _t(diffs, -margin)
    high, _ = _t(diffs, margin)
    return np.maximum(stats.t.sf(low, df), stats.t.cdf(high, df)) < 0.05


def test_seeds_to_exclude_zero_is_the_fewest_with_80_percent_power():
    mean, sd = -0.03, 0.04  # a pilot: -3 points, SD 4 points
    n = int(power.seeds_to_exclude_zero(mean, sd))
    assert exact_power(abs(mean) / sd, n) >= 0.8 > exact_power(abs(mean) / sd, n - 1)
    assert n > 11  # the normal approximation, (1.96 + 0.84)^2 / d^2 = 13.9 -> 14, undercounts small studies
    assert simulate(n, mean, sd, excludes_zero) == pytest.approx(exact_power(abs(mean) / sd, n), abs=0.01)
    assert simulate(n, mean, sd, excludes_zero) >= 0.78



@pytest.mark.filterwarnings("error")  # statsmodels' solver: "Failed to converge ... returning nan instead"
@pytest.mark.parametrize("mean, sd", [(0.08, 0.01), (-0.10, 0.01), (0.149, 0.0145), (0.30, 0.01)])
def test_a_large_effect_plans_the_fewest_seeds_the_studys_test_needs(mean, sd):
    """A tight pilot (the paper's -14.9 [-15.8, -14.0] over 12 seeds: SD 1.45 points, effect 10): statsmodels' power
    is NaN at 3 seeds there, its solver stopped at 2 (or returned NaN, read as 2), and 2 seeds have 63% to 73% power
    at effects 8 to 10. The count is the fewest with 80% power on a simulation of the study's own test."""
    n = int(power.seeds_to_exclude_zero(mean, sd))
    assert simulate(n, mean, sd, excludes_zero) >= 0.78
    assert n == 2 or simulate(n - 1, mean, sd, excludes_zero) < 0.8
    assert power.t_power(abs(mean) / sd, n, 0.05) >= 0.8
    m = power.seeds_for_equivalence(0.0, sd, 0.02)  # both one-sided tests, through the same power
    assert simulate(int(m), 0.0, sd, tost) >= 0.78 and (m == 2 or simulate(int(m) - 1, 0.0, sd, tost) < 0.8)

def test_seeds_for_equivalence_match_a_simulation_of_tost():
    mean, sd, margin = 0.005, 0.02, 0.02
    n = int(power.seeds_for_equivalence(mean, sd, margin))
    assert simulate(n, mean, sd, tost) >= 0.78
    assert simulate(n - 2, mean, sd, tost) < 0.8


def test_never_where_no_seed_count_can_do_it():
    assert power.seeds_to_exclude_zero(0.0, 0.02) == np.inf
    assert power.seeds_for_equivalence(0.03, 0.02, 0.02) == np.inf
    # no SD (every seed alike): the study's t test makes no test there (stats.spread), so no count reaches it
    assert power.seeds_to_exclude_zero(0.01, 0.0) == power.seeds_for_equivalence(0.0, 0.0, 0.02) == np.inf
    assert power.seeds_to_exclude_zero(0.01, np.nan) == power.seeds_for_equivalence(0.0, np.nan, 0.02) == np.inf
    assert power.seeds_to_exclude_zero(1e-3, 0.25) == 490_556  # a count, however large, as statsmodels' solver gave


def test_plan_per_contrast_and_basis():
    diff = np.array([-0.02, -0.05, -0.01, -0.04, 0.0, 0.01, -0.01, 0.005])
    paired = pd.DataFrame({"contrast": "a-vs-b", "basis": np.repeat(["tokens", "time"], 4), "metric": "acc_default",
                           "eval_set": "test", "seed": np.tile(range(4), 2), "value_a": 0.5 + diff, "value_b": 0.5,
                           "diff": diff})
    table = power.plan(paired, margin=0.02)
    assert table["basis"].tolist() == ["tokens", "time"] and table["seeds"].tolist() == [4, 4]
    row = table.iloc[0]
    assert row["mean"] == pytest.approx(-0.03)
    assert row["seeds_to_exclude_0"] == power.seeds_to_exclude_zero(-0.03, np.std([-0.02, -0.05, -0.01, -0.04], ddof=1))
    assert row["seeds_for_equivalence"] == np.inf


def test_the_power_verb_holds_paired_to_the_studys_config_or_names_the_config(tmp_path, capsys):
    """With --config, a paired.parquet left from another config is refused by name (before, read unchecked: the
    plan of another study's or an earlier config's differences); without it, the output names its config."""
    import copy

    import yaml
    from conftest import SMALL_STUDY
    from test_bases import analysed_study, per_base
    from mcgrpo import studies
    from mcgrpo.analysis import steps
    from mcgrpo.cli import main
    from mcgrpo.core import config as study_config, layout, sealed
    from mcgrpo.core.store import read_parquet, write_parquet
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({**copy.deepcopy(SMALL_STUDY), "results_dir": str(tmp_path / "results")}))
    cfg = studies.load(study)
    results, own = layout.study_dir(cfg), study_config.config_hash(steps.analysed(cfg))
    analysed_study(cfg, *per_base([-0.05])[0], own)
    paired = read_parquet(results / "analysis" / "paired.parquet")
    assert main(["power", "--results", str(results), "--config", str(study)]) == 0
    assert "| a-vs-o | tokens | acc_default |" in capsys.readouterr().out
    write_parquet(paired, results / "analysis" / "paired.parquet", "f" * 64)  # another study's, or an earlier one
    assert main(["power", "--results", str(results), "--config", str(study)]) == 2
    assert f"paired.parquet: written for config ffffffffffff, but this study's config hashes to {own[:12]}" in \
        capsys.readouterr().err
    assert main(["power", "--results", str(results)]) == 2  # and unsealed: written by hand, or before seals
    assert "paired.parquet: records no seal of its content" in capsys.readouterr().err
    write_parquet(paired, results / "analysis" / "paired.parquet", "f" * 64, {sealed.KEY: sealed.of_frame(paired)})
    assert main(["power", "--results", str(results)]) == 0
    assert "paired.parquet: written for config ffffffffffff, not checked against a study" in capsys.readouterr().out
    edited = paired.assign(value_a=paired["value_a"] + 0.5)  # its rows edited, its metadata kept: a plan of other
    write_parquet(edited, results / "analysis" / "paired.parquet", "f" * 64, {sealed.KEY: sealed.of_frame(paired)})
    assert main(["power", "--results", str(results)]) == 2  # seeds, printed as the study's without a word
    assert "paired.parquet: its content hashes to " in capsys.readouterr().err


def test_the_power_verb_plans_with_the_locks_alpha_and_margin_unless_given(tmp_path, capsys):
    """The study's tables plan seeds at its analysis.alpha; the verb planned at 0.05 whatever the lock said, so a
    study tested at 0.1 was told it needs more seeds than its own power table says. Now the lock's, unless given."""
    import copy
    from datetime import datetime, timezone

    from conftest import SMALL_STUDY
    from test_bases import analysed_study, per_base
    from mcgrpo import studies
    from mcgrpo.analysis import prereg, steps
    from mcgrpo.cli import main
    from mcgrpo.core import config as study_config, layout
    from mcgrpo.core.store import write_json
    cfg = studies.validate({**copy.deepcopy(SMALL_STUDY), "results_dir": str(tmp_path / "results"), "seeds": [1, 2, 3],
                            "analysis": {"alpha": 0.1, "margin": 0.05}})
    results = layout.study_dir(cfg)
    analysed_study(cfg, *per_base([-0.05, -0.02, -0.04])[0], study_config.config_hash(steps.analysed(cfg)))
    write_json(prereg.make_lock(cfg, datetime(2025, 1, 1, tzinfo=timezone.utc)), results / "prereg.lock.json")

    def planned(*given: str) -> str:
        assert main(["power", "--results", str(results), *given]) == 0
        return capsys.readouterr().out
    mine, given = planned(), planned("--alpha", "0.05", "--margin", "0.02")
    assert "planned with: margin 0.05 (the lock's), alpha 0.1 (the lock's)" in mine
    assert "planned with: margin 0.02 (given), alpha 0.05 (given)" in given
    assert "at alpha 0.1;" in mine and "within ±5 points" in mine and "at alpha 0.05;" in given


def test_a_pilot_with_an_undefined_reading_plans_nothing_and_says_why():
    """A seed whose reading is not defined (NaN) leaves no mean or SD to plan from: never, with the reason."""
    diff = np.array([-0.02, np.nan, -0.01, -0.04])
    paired = pd.DataFrame({"contrast": "a-vs-b", "basis": "tokens", "metric": "acc_default", "eval_set": "test",
                           "seed": range(4), "value_a": 0.5 + diff, "value_b": 0.5, "diff": diff,
                           "clamped": [False, True, False, False]})
    row = power.plan(paired, margin=0.02).iloc[0]
    assert row["seeds_to_exclude_0"] == row["seeds_for_equivalence"] == np.inf
    assert row["note"] == ("no SD to plan from: the reading of seed 1 is not defined (it would need a curve beyond "
                           "its end): no statistic")
