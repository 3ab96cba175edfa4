"""A study over several warm-start bases: each base its own model and runs, the default study untouched, and the
pooled stratified analysis (statsmodels OLS with base fixed effects)."""

import copy
import json
import re

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from mcgrpo import studies
from mcgrpo.analysis import bases, prereg, robustness, steps
from mcgrpo.analysis.contrasts import KEY
from mcgrpo.cli import main
from mcgrpo.core import config as study_config
from mcgrpo.core import layout, sealed
from mcgrpo.core.errors import ConfigError
from mcgrpo.core.store import read_parquet, write_json, write_parquet

# The default study's stored names before bases existed (computed from config/config.yaml at that commit): adding
# the option must leave every one of them, and so the default study's DAG, as it was.
DEFAULT_MODEL = "tiny-9b7e1f2967ae"
# Recorded after budget.calibration_credit took V(prompt) = 0.5 by default (paper Table 16), which changed B's
# calibration and so every run's identity; the model is unchanged.
DEFAULT_CALIBRATION = "5ba9756fdb81"
DEFAULT_RUNS = {"08a0138bb9d5", "0dd89f62d0ec", "25169499600a", "2d0eefdbeb01", "4163c172ba08", "44d36ba05039",
                "473c6dd3c8a4", "79c6ab82ce51", "7d7070f9423a", "88a3315dfb12", "9a958b3a2b46", "c8653d0f8e67",
                "d2271241de2e", "d343915fd5d0", "e4b765707c8a", "f3bedebd53b0"}


def test_the_default_study_keeps_its_model_calibration_and_run_hashes():
    cfg = studies.load("config/config.yaml")
    assert "bases" not in cfg and "base" not in cfg  # no default is filled in: the config hashes stay too
    assert study_config.select_base(copy.deepcopy(cfg)) == cfg
    assert layout.model_path(cfg).name == DEFAULT_MODEL and layout.calibration_key(cfg) == DEFAULT_CALIBRATION
    assert set(layout.run_keys(cfg).values()) == DEFAULT_RUNS


def test_each_base_warm_starts_its_own_model_and_base_0_shares_the_default_runs():
    cfg = studies.load("config/studies/bases.yaml")
    assert cfg["bases"] == [0, 1, 2]
    one = {b: study_config.base_study(cfg, b) for b in cfg["bases"]}
    assert [c["study"] for c in one.values()] == ["bases-base0", "bases-base1", "bases-base2"]
    models = {layout.model_path(c) for c in one.values()}
    runs = [set(layout.run_keys(c).values()) for c in one.values()]
    assert len(models) == 3 and not (runs[0] & runs[1]) and not (runs[1] & runs[2]) and len(runs[1]) == 16
    # base 0 is the default study's warm start: the same model and runs, trained once (the run store)
    assert layout.model_path(one[0]).name == DEFAULT_MODEL and runs[0] == DEFAULT_RUNS
    chosen = study_config.select_base(studies.validate({**copy.deepcopy(cfg), "base": 2}))
    assert chosen["study"] == "bases-base2" and chosen["model"]["warm_start"]["seed"] == 2 and "bases" not in chosen


@pytest.mark.parametrize("change, message", [
    ({"base": 1}, "config key base: 1 given without bases"),
    ({"bases": [0, 1], "base": 5}, "config key base: 5 is not one of bases; allowed: 0, 1"),
    ({"bases": [0], "model": {"source": {"hub": "HuggingFaceTB/SmolLM2-135M-Instruct"}, "name": "smol"}},
     "config key bases: repeats the warm start of the embedded tiny model"),
])
def test_bases_refuse_what_they_cannot_mean(change, message):
    from conftest import SMALL_STUDY
    cfg = {**copy.deepcopy(SMALL_STUDY), **change}
    with pytest.raises(ConfigError, match=message):
        studies.validate(cfg)


def diffs(means, seeds, sd=0.01, seed=0):
    """Paired differences: base b's seeds around means[b]."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"base": b, "seed": s, "diff": m + sd * rng.standard_normal()}
                         for b, (m, n) in enumerate(zip(means, seeds)) for s in range(n)])


def test_pooled_is_statsmodels_ols_on_sum_coded_base_effects():
    data = diffs([-0.04, -0.01, -0.03], [4, 2, 3])
    fit = smf.ols("diff ~ C(base, Sum)", data.astype({"base": str})).fit()
    out = bases.pooled_fit(data, 0.02)
    assert out["mean"] == pytest.approx(fit.params["Intercept"])
    assert [out["ci_low"], out["ci_high"]] == pytest.approx(list(fit.conf_int().loc["Intercept"]))
    assert out["p"] == pytest.approx(fit.pvalues["Intercept"]) and out["n"] == 9
    # stratified: the unweighted mean of the bases' means, not the mean of all 9 differences (base 0 has 4 seeds)
    by_base = data.groupby("base")["diff"].mean()
    assert out["mean"] == pytest.approx(by_base.mean()) and out["mean"] != pytest.approx(data["diff"].mean())
    # its interval uses the within-base residuals only (6 df), so the bases' spread of means is not noise
    within = ((data["diff"] - data.groupby("base")["diff"].transform("mean")) ** 2).sum() / (9 - 3)
    assert fit.bse["Intercept"] == pytest.approx(np.sqrt(within * (1 / data.groupby("base").size()).sum() / 3 ** 2))
    assert out["heterogeneity_p"] < 0.05  # the bases differ by up to 3 points with 1-point noise


def per_base(means, direction="less"):
    """(contrasts, paired) of each base's study: one planned contrast T1 on 4 seeds."""
    out = {}
    for b, m in enumerate(means):
        paired = diffs([m], [4], seed=b).assign(contrast="a-vs-o", basis="tokens", metric="acc_default",
                                                eval_set="heldout", seed=range(4))
        d = paired["diff"]
        half = 3.182 * d.std(ddof=1) / 2
        contrasts = pd.DataFrame([{"contrast": "a-vs-o", "a": "a", "b": "o", "basis": "tokens", "metric": "acc_default",
                                   "eval_set": "heldout", "id": "T1", "label": "primary", "family": "H",
                                   "direction": direction, "note": "", "n": 4, "mean": d.mean(),
                                   "ci_low": d.mean() - half, "ci_high": d.mean() + half, "p": 0.01, "p_holm": 0.01,
                                   "tost_p": 0.5, "margin": 0.02, "crossed_low": np.nan, "crossed_high": np.nan,
                                   "seeds_higher": 0, "confirmed": bool(d.mean() + half < 0)}])
        out[b] = (contrasts, paired.drop(columns="base"))
    return out


def test_the_verdict_holds_across_bases_only_where_every_base_reaches_it():
    table = bases.table(per_base([-0.05, -0.04, -0.06]), 0.02)
    assert table["base"].tolist() == ["0", "1", "2", "pooled"]
    pooled = table.iloc[-1]
    assert bool(pooled["confirmed"]) and bool(pooled["holds_across_bases"]) and pooled["mean"] == pytest.approx(
        table.iloc[:3]["mean"].mean())
    one_off = bases.table(per_base([-0.05, 0.0, -0.06]), 0.02).iloc[-1]
    assert not bool(one_off["holds_across_bases"])



def test_an_equivalence_verdict_shows_the_planned_tests_p_per_base_and_pooled():
    """The bases table gave the two-sided t test's p beside verdicts decided by TOST (each base's headline gives
    the TOST p): now each row's p is the test that decided it."""
    split = per_base([0.001, 0.002, -0.001], direction="equivalent")
    table = bases.table(split, 0.02).set_index("base")
    assert table.loc[["0", "1", "2"], "p"].tolist() == [0.5] * 3  # each base's tost_p, not its p (0.01)
    pairs = pd.concat([paired.assign(base=b) for b, (_, paired) in split.items()], ignore_index=True)
    assert table.loc["pooled", "p"] == pytest.approx(bases.pooled_fit(pairs, 0.02)["tost_p"])


def test_a_base_whose_contrast_is_exploratory_leaves_the_pooled_one_exploratory_and_says_which():
    """Each base is a study with its own lock: one whose plan changed since (or was locked late) reports the contrast
    exploratory (confirmed NA). Before, pooling crashed on the NA (TypeError: boolean value of NA is ambiguous); a
    pooled verdict under the first base's label would claim a preregistration one base does not have. Now the pooled
    row is exploratory, confirms nothing, holds nothing, and its note names the base and why."""
    why = "demoted: recipe.lr changed after the lock (2026-03-01) without a dated amendment"
    for demoted in (1, 0):
        split = per_base([-0.05, -0.04, -0.06])
        contrasts, paired = split[demoted]
        split[demoted] = (contrasts.assign(label="exploratory", note=why,
                                           confirmed=pd.array([pd.NA], dtype="boolean")), paired)
        table = bases.table(split, 0.02)
        pooled = table.iloc[-1]
        assert pooled["label"] == "exploratory" and pd.isna(pooled["confirmed"])
        assert pd.isna(pooled["holds_across_bases"]) and np.isnan(pooled["p_holm"])
        assert pooled["note"] == f"base {demoted} reports T1 as exploratory ({why})"
        assert table["label"].tolist()[:3] == ["exploratory" if b == demoted else "primary" for b in range(3)]
    alike = bases.table(per_base([-0.05, -0.04, -0.06]), 0.02)
    assert alike["label"].eq("primary").all() and alike["note"].eq("").all()


@pytest.mark.filterwarnings("error::RuntimeWarning")  # statsmodels divided by a residual variance of 0 here
def test_a_pooled_fit_with_no_residual_variance_is_uninformative_not_confirmed():
    """Every seed of a base alike (each base's own contrast uninformative): the within-base residuals are 0 or
    rounding noise, so the pooled t test divides by ~0. Before, pooled read p = 8.5e-96 with two bases (p = 0 with
    one) and 'confirmed', holding across bases. One seed per base leaves no residual degrees of freedom: before,
    p NaN and silently 'not confirmed'. Now both are uninformative, with the reason, and hold nothing."""
    alike = per_base([-0.05, -0.03])
    for b, (_, paired) in alike.items():
        paired["diff"] = -0.05 if b == 0 else -0.03
    pooled = bases.table(alike, 0.02).iloc[-1]
    assert pooled["mean"] == pytest.approx(-0.04) and np.isnan(pooled["p"]) and np.isnan(pooled["p_holm"])
    assert not pooled["confirmed"] and pd.isna(pooled["holds_across_bases"])
    assert pooled["uninformative"] == ("within every base every seed gave the same difference: no variance is left "
                                       "to test the pooled mean against")
    assert steps.bases_verdicts(bases.table(alike, 0.02))["verdict"].iloc[-1] == "uninformative"  # never a bare False
    single = {b: (c, p.iloc[:1]) for b, (c, p) in per_base([-0.05, -0.03, -0.04]).items()}
    pooled = bases.table(single, 0.02).iloc[-1]
    assert np.isnan(pooled["p"]) and not pooled["confirmed"] and pd.isna(pooled["holds_across_bases"])
    assert pooled["uninformative"] == ("3 paired seeds over 3 bases leave no residual degrees of freedom: the pooled "
                                       "t test needs a base with two seeds")
    assert bases.table(per_base([-0.05, -0.04]), 0.02)["uninformative"].eq("").all()  # seeds that differ: tested

def _job_config(cfg: dict, base: int) -> dict:
    """The config an analysis job of base `base` gets: Snakemake's config made the base's (--config base=N), less
    the switches rules/common.smk leaves out, validated again by the job (mcgrpo.cli.common._config)."""
    from argparse import Namespace
    from mcgrpo.cli import common
    chosen = study_config.select_base({**copy.deepcopy(cfg), "base": base, "analysis_only": True})
    return common._config(Namespace(config_json=json.dumps({k: v for k, v in chosen.items()
                                                             if k not in study_config.SWITCHES})))


def _analysed(cfg: dict, means: list[float], labels: dict[int, str] | None = None) -> None:
    """Each base of `cfg` as its own analysis leaves it (analysed_study), its files written for the config its
    analysis jobs ran with, its verdict's robustness label `labels`' (default robust)."""
    for b, (contrasts, paired) in per_base(means).items():
        analysed_study(study_config.base_study(cfg, b), contrasts, paired, study_config.config_hash(_job_config(cfg, b)),
                       (labels or {}).get(b, "robust"))


def analysed_study(own: dict, contrasts: pd.DataFrame, paired: pd.DataFrame, written_for: str,
                   label: str = "robust") -> None:
    """Study `own` as its analysis leaves it: its runs stored and linked (synthetic, B = 100) and its
    contrasts.parquet, paired.parquet and robustness.parquet (every check unread, the verdict's label `label`),
    written for config hash `written_for` from those runs."""
    from test_store_reader import relink, write_budget
    from test_runs import seal_run, write_run
    for arm, seed in study_config.runs(own):
        folder = layout.run_dir(own, arm, seed)
        write_run(folder, np.random.default_rng(seed).random((4, 6, 2)) < 0.5, eval_sets=("heldout",))
        (folder / "run.json").write_text(json.dumps({"config": study_config.run_config(own, arm, seed), "B": 100}))
        seal_run(folder)
    write_budget(own, 100)
    relink(own)
    analysis, runs = layout.study_dir(own) / "analysis", {steps.COMPUTED_FROM: json.dumps(
        steps.computed_from(own, layout.study_dir(own)))}
    paired = paired.assign(value_a=0.5, value_b=0.5, at=100.0)
    write_parquet(contrasts, analysis / "contrasts.parquet", written_for, {**runs, **_seal(contrasts)})
    write_parquet(paired, analysis / "paired.parquet", written_for, {**runs, **_seal(paired)})
    checks = pd.DataFrame([{c: np.nan for c in robustness.COLUMNS} | {**contrasts.iloc[0][["id", *KEY]].to_dict(),
                            "a": "a", "b": "o", "drifted_a": 0, "evaluations_a": 4, "drifted_b": 0,
                            "evaluations_b": 4, "strict_metric": "", "other_clock": False, "alike_compared": 0,
                            "alike_unlike": "", "robust": label == "robust", "robustness": label}])
    write_parquet(checks, analysis / "robustness.parquet", written_for, {**runs, **_seal(checks)})
    write_json(sealed.with_seal(prereg.status(layout.study_dir(own), own)), analysis / "prereg.json")  # as the
    # contrasts step writes it


def _seal(frame: pd.DataFrame) -> dict[str, str]:
    """The seal of its rows that an analysis step writes `frame` with."""
    return {sealed.KEY: sealed.of_frame(frame)}


def test_pool_bases_verb_reads_every_base_and_writes_the_table(tmp_path, capsys):
    """Each base's files are held to the config its own analysis jobs ran with (before, read unchecked: a file left
    from an earlier config of a base, or copied from another study, was pooled)."""
    cfg = studies.validate({**copy.deepcopy(studies.load("config/studies/bases.yaml")),
                            "results_dir": str(tmp_path)})
    _analysed(cfg, [-0.05, -0.04, -0.06])
    assert main(["pool-bases", "--config-json", json.dumps(cfg)]) == 0
    assert "| T1 | a-vs-o | tokens | acc_default | heldout | less | pooled |" in capsys.readouterr().out
    assert len(read_parquet(tmp_path / "bases" / "analysis" / "bases.parquet")) == 4
    missing = studies.validate({**copy.deepcopy(cfg), "bases": [0, 7]})
    assert main(["pool-bases", "--config-json", json.dumps(missing)]) == 2
    assert "base 7 not analysed yet; run snakemake --configfile <this study> --config base=7" in capsys.readouterr().err
    stale = layout.study_dir(study_config.base_study(cfg, 1)) / "analysis" / "paired.parquet"
    write_parquet(read_parquet(stale), stale, study_config.config_hash(_job_config({**cfg, "seeds": [1, 2]}, 1)))
    assert main(["pool-bases", "--config-json", json.dumps(cfg)]) == 2
    assert re.search(r"bases-base1/analysis/paired.parquet: written for config \w{12}, but this study's config "
                     r"hashes to \w{12}", capsys.readouterr().err)


def test_every_base_and_pooled_verdict_states_its_fragility(tmp_path):
    """The bases table gave each base's verdict and the pooled one bare: a base its own study calls fragile (an arm
    drifting, a crossed interval across 0) read as plainly confirmed there. Now each base row carries its study's
    robustness, and the pooled row is fragile where a base is, or where the bases disagree, naming which."""
    cfg = studies.validate({**copy.deepcopy(studies.load("config/studies/bases.yaml")), "results_dir": str(tmp_path)})
    drifted = "fragile: o drifted in 3 of 4 evaluations"
    _analysed(cfg, [-0.05, -0.04, -0.06], {1: drifted})
    assert main(["pool-bases", "--config-json", json.dumps(cfg)]) == 0
    table = read_parquet(tmp_path / "bases" / "analysis" / "bases.parquet").set_index("base")
    assert table["robustness"].tolist() == ["robust", drifted, "robust", f"fragile: base 1: {drifted}"]
    assert table.loc["pooled", "confirmed"]  # the verdict is the plan's; its fragility is beside it
    shown = pd.read_csv(tmp_path / "bases" / "tables" / "bases.csv", keep_default_na=False)
    assert shown.columns[shown.columns.get_loc("confirmed") + 1] == "verdict"  # in words, beside the raw flag
    assert shown["verdict"].tolist() == ["confirmed"] * 4
    _analysed(cfg, [-0.05, -0.04, -0.06])
    steps.pool_bases(cfg)
    assert read_parquet(tmp_path / "bases" / "analysis" / "bases.parquet")["robustness"].iloc[-1] == "robust"
    _analysed(cfg, [-0.05, 0.0, -0.06])  # base 1 not confirmed: the bases disagree
    steps.pool_bases(cfg)
    assert read_parquet(tmp_path / "bases" / "analysis" / "bases.parquet")["robustness"].iloc[-1] == (
        "fragile: the bases reach different verdicts")


def test_by_hand_verbs_read_the_first_base_as_snakemake_does_and_pool_bases_reads_every_one():
    from argparse import Namespace
    from mcgrpo.cli import common
    args = Namespace(config="config/studies/bases.yaml", config_json=None)
    assert common._config(args)["study"] == "bases-base0"
    assert common._config(args, every_base=True)["bases"] == [0, 1, 2]


def test_pool_bases_refuses_a_base_whose_runs_are_no_longer_the_ones_it_analysed(tmp_path, capsys):
    """pool-bases reads each base's analysis files, not its runs. Before, a run set aside since (check-store
    --repair, to retrain it) or a B changed since left the base's paired.parquet pooled without a word, though the
    base's own analysis would now refuse its runs; now every base's runs are read through the one reader of a
    study's runs first, which names the run and its repair; and a base retrained since its analysis (its runs valid,
    sealed, another training's) is named by the runs its analysis files record they were computed from."""
    import shutil
    from conftest import SMALL_STUDY
    from test_store_reader import write_budget
    from test_runs import seal_run, write_run
    cfg = studies.validate({**copy.deepcopy(SMALL_STUDY), "seeds": [1, 2], "bases": [0, 1],
                            "results_dir": str(tmp_path)})
    _analysed(cfg, [-0.05, -0.04])
    assert main(["pool-bases", "--config-json", json.dumps(cfg)]) == 0
    capsys.readouterr()
    own = study_config.base_study(cfg, 1)
    shutil.move(layout.run_dir(own, "outcome", 2), tmp_path / "set-aside")
    assert main(["pool-bases", "--config-json", json.dumps(cfg)]) == 2
    assert re.search(r"mini-base1/runs/outcome/seed2: its run \w+ is not in the store \(never trained, or set aside "
                     r"to retrain\)", capsys.readouterr().err)
    shutil.move(tmp_path / "set-aside", layout.run_dir(own, "outcome", 2))
    write_budget(study_config.base_study(cfg, 0), 50)
    assert main(["pool-bases", "--config-json", json.dumps(cfg)]) == 2
    assert "mini-base0/calibration/budget.parquet: B = 50 tokens, but" in capsys.readouterr().err
    write_budget(study_config.base_study(cfg, 0), 100)
    assert main(["pool-bases", "--config-json", json.dumps(cfg)]) == 0
    retrained = layout.run_dir(own, "outcome", 2)  # base 1's run trained again, the base not analysed again
    write_run(retrained, np.random.default_rng(9).random((4, 6, 2)) < 0.9, eval_sets=("heldout",))
    seal_run(retrained)
    assert main(["pool-bases", "--config-json", json.dumps(cfg)]) == 2
    assert re.search(r"mini-base1/analysis/contrasts.parquet: computed from runs that have changed since: "
                     r"outcome/seed2 \(retrained", capsys.readouterr().err)
