"""The prediction step and the extrapolation reading measured efficiency, on the synthetic results of test_steps."""

import copy
import json

import numpy as np
import pandas as pd
import pytest

from mcgrpo import studies
from mcgrpo.cli import main
from mcgrpo.cli.common import _as_planned
from mcgrpo.core import config as study_config, sealed
from mcgrpo.core.store import read_parquet, write_parquet
from test_runs import copy_study
from test_steps import results  # noqa: F401  (the module-scoped fixture)


def gradient_table(per_update: float, token_ratio: float, batches: int = 6) -> pd.DataFrame:
    """outcome and mc_k2 rows whose efficiency ratio is `per_update` on every batch, mc_k2 using
    `token_ratio` times outcome's tokens."""
    rng = np.random.default_rng(0)
    rows = []
    for b in range(batches):
        inner, sq = 1 + rng.random(), 1 + rng.random()
        for arm, scale_inner, scale_sq, tokens in (("outcome", 1, 1, 100), ("mc_k2", 2, 4 / per_update, 100 * token_ratio)):
            values = {"inner": inner * scale_inner, "sq_norm": sq * scale_sq, "tokens": tokens, "alignment": 0.5,
                      "share_outside_v": 0.9, "projection_residual": 1e-14, "cos_full": 0.4, "tokens_continuation": 0}
            rows += [{"arm": arm, "batch": b, "measure": m, "value": v} for m, v in values.items()]
    return pd.DataFrame(rows)


@pytest.fixture
def measured(results, tmp_path):  # noqa: F811
    cfg, root = results
    folder = tmp_path / "results"
    copy_study(root, folder)
    cfg = copy.deepcopy(cfg)
    cfg["analysis"]["efficiency"] = {}
    cfg["gradient_tests"] = {"batches": 6, "arms": ["mc_k2"]}
    cfg = studies.validate(cfg)
    write_measured(gradient_table(per_update=1.5, token_ratio=6.0), folder / "analysis" / "gradient_tests.parquet",
                   measured_hash(cfg))
    return cfg, folder


def write_measured(tests: pd.DataFrame, path, config_hash: str) -> None:
    """gradient_tests.parquet as the stage writes it: stamped with `config_hash`, its rows sealed."""
    write_parquet(tests, path, config_hash, {sealed.KEY: sealed.of_frame(tests)})


def measured_hash(cfg: dict) -> str:
    """The config_hash the gradient_tests stage stamps its file with: its --run-json's, as the rule passes it."""
    return study_config.config_hash(study_config.gradient_tests_config(cfg))


def run(step, cfg, folder):
    assert main([step, "--config-json", json.dumps(cfg), "--results", str(folder)]) == 0


def test_extrapolation_reads_the_measured_per_token_efficiency_unless_the_config_overrides_it(measured):
    cfg, folder = measured
    run("curves", cfg, folder)
    x = read_parquet(folder / "analysis" / "extrapolation.parquet")
    np.testing.assert_allclose(x["efficiency"], 1.5 / 6.0)
    cfg["analysis"]["efficiency"] = {"mc_k2": 0.5}
    run("curves", cfg, folder)
    np.testing.assert_allclose(read_parquet(folder / "analysis" / "extrapolation.parquet")["efficiency"], 0.5)


def test_prediction_step_writes_the_table_and_figure(measured):
    cfg, folder = measured
    for step in ("contrasts", "curves", "prediction"):  # contrasts too: the workflow reruns them for a new config
        run(step, cfg, folder)
    eff = read_parquet(folder / "analysis" / "efficiency.parquet").set_index("arm")
    assert eff.loc["mc_k2", "per_update"] == pytest.approx(1.5)
    assert eff.loc["mc_k2", "per_token"] == pytest.approx(0.25)
    table = read_parquet(folder / "analysis" / "prediction.parquet")
    contrasts = read_parquet(folder / "analysis" / "contrasts.parquet")
    wanted = contrasts[(contrasts["a"] == "mc_k2") & (contrasts["basis"] == "tokens")
                       & (contrasts["metric"] == "acc_default")]["mean"].iloc[0]
    assert table["diff_tokens"].iloc[0] == pytest.approx(wanted)
    assert np.isfinite(table["observed_minus_extrapolated"].iloc[0])
    assert np.isnan(table["spearman_per_token"].iloc[0])  # one trained arm: no rank agreement to report
    assert (folder / "figures" / "prediction.png").stat().st_size > 1000
    assert "Spearman" in (folder / "tables" / "prediction.md").read_text()
    for name in ("efficiency", "prediction"):
        assert (folder / "tables" / f"{name}.csv").stat().st_size > 0


@pytest.mark.parametrize("study", ["measured", "default"])
def test_the_stage_and_its_readers_hash_the_gradient_tests_alike(measured, study):
    """The stage hashes its --run-json, the rule's gradient_tests_config passed as JSON and validated again; the
    readers hash the gradient_tests_config of the analysis job's config (the study less its switches, passed as JSON
    and validated again): the two must agree, or every study's file would be refused."""
    import yaml
    from conftest import ROOT
    cfg = measured[0] if study == "measured" else studies.validate(yaml.safe_load((ROOT / "config" / "config.yaml")
                                                                                  .read_text()))
    passed = json.loads(json.dumps(study_config.gradient_tests_config(cfg), sort_keys=True))
    run = _as_planned(study_config.validate_blocks(passed, ("task", "model", "engine", "recipe", "gradient_tests",
                                                             "arms"), "--run-json"), "--run-json")
    job = studies.validate(json.loads(json.dumps({k: v for k, v in cfg.items() if k not in study_config.SWITCHES},
                                                 sort_keys=True)))
    assert study_config.config_hash(run) == measured_hash(job)


@pytest.mark.parametrize("step", ["curves", "prediction"])
@pytest.mark.parametrize("stamp", ["earlier config", "none"])
def test_gradient_tests_of_another_config_are_refused(measured, step, stamp, capsys):
    """A gradient_tests.parquet measured under an earlier config (here other batches: analysis_only never reruns
    the stage) or written without the stage's hash was read as this study's efficiencies, prediction and
    extrapolation without a word; now it is named."""
    cfg, folder = measured
    for before in ("contrasts", "curves"):  # what the prediction step reads besides, from the study's own file
        run(before, cfg, folder)
    earlier = copy.deepcopy(cfg)
    earlier["gradient_tests"]["batches"] = 3
    path = folder / "analysis" / "gradient_tests.parquet"
    write_parquet(gradient_table(per_update=1.5, token_ratio=6.0), path,
                  measured_hash(studies.validate(earlier)) if stamp == "earlier config" else "")
    assert main([step, "--config-json", json.dumps(cfg), "--results", str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: measured for gradient tests" in err and "this study's gradient tests' config hashes to" in err
    assert "snakemake --configfile STUDY without analysis_only, which runs it" in err  # a --forcerun cannot, there


@pytest.mark.parametrize("step", ["curves", "prediction"])
def test_gradient_tests_edited_with_their_metadata_kept_are_refused(measured, step, capsys):
    """gradient_tests.parquet edited and written back with its metadata copied (its config_hash still the stage's):
    the default study's mc_k4 per-update efficiency read 10.3 rather than 1.14 in the efficiency and prediction tables,
    without a word (Snakemake reruns the prediction for the file's new sha256). Its seal of its rows is held."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    cfg, folder = measured
    for before in ("contrasts", "curves"):  # what the prediction step reads besides
        run(before, cfg, folder)
    path = folder / "analysis" / "gradient_tests.parquet"
    table = pq.read_table(path)
    tests = table.to_pandas()
    tripled = tests.assign(value=tests["value"].where(tests["measure"] != "inner", 3 * tests["value"]))
    pq.write_table(pa.Table.from_pandas(tripled, preserve_index=False).replace_schema_metadata(table.schema.metadata),
                   path)
    assert main([step, "--config-json", json.dumps(cfg), "--results", str(folder)]) == 2
    assert (f"{path}: its content hashes to " in (err := capsys.readouterr().err)
            and "as written: edited since it was written; allowed: the file the study's gradient_tests stage "
                "writes: snakemake --configfile STUDY --forcerun gradient_tests (without analysis_only), which "
                "measures it again" in err)
    write_parquet(tests, path, measured_hash(cfg))  # the stage's hash, but no seal: written before files were sealed
    assert main([step, "--config-json", json.dumps(cfg), "--results", str(folder)]) == 2
    assert f"{path}: records no seal of its content" in capsys.readouterr().err
    pq.write_table(table, path)
    assert main([step, "--config-json", json.dumps(cfg), "--results", str(folder)]) == 0


@pytest.mark.parametrize("step", ["curves", "prediction"])
def test_gradient_tests_planned_but_absent_are_named_not_read_as_none(measured, step, capsys):
    """A step run by hand with the study's gradient tests removed wrote the extrapolation from the config's
    efficiencies alone (none measured), without a word; the workflow names the file before any job."""
    cfg, folder = measured
    run("contrasts", cfg, folder)
    (folder / "analysis" / "gradient_tests.parquet").unlink()
    assert main([step, "--config-json", json.dumps(cfg), "--results", str(folder)]) == 2
    assert "gradient_tests.parquet: not found, but the study plans gradient tests" in capsys.readouterr().err


def test_an_arm_whose_update_falls_against_the_reference_gets_no_measured_extrapolation(measured):
    """Efficiency squares E<u, h>: mc_k2's update lowering expected accuracy in every batch was extrapolated as an
    arm learning 0.25 times as much per token as outcome-only, and observed minus extrapolated read against a curve
    it does not climb. Its efficiency row still shows the sign (inner_se); a value the config gives still applies."""
    cfg, folder = measured
    path = folder / "analysis" / "gradient_tests.parquet"
    tests = read_parquet(path)
    falling = (tests["arm"] == "mc_k2") & (tests["measure"] == "inner")
    write_measured(tests.assign(value=tests["value"].where(~falling, -tests["value"])), path, measured_hash(cfg))
    run("curves", cfg, folder)
    assert len(read_parquet(folder / "analysis" / "extrapolation.parquet")) == 0  # mc_k2, its one arm: no line
    cfg["analysis"]["efficiency"] = {"mc_k2": 0.5}
    run("curves", cfg, folder)
    np.testing.assert_allclose(read_parquet(folder / "analysis" / "extrapolation.parquet")["efficiency"], 0.5)


def test_an_undefined_inner_se_keeps_the_arms_measured_efficiency():
    """One batch (or no spread) leaves inner_se undefined: nothing says the update falls, so it is extrapolated."""
    from mcgrpo.analysis.efficiency import measured_per_token
    table = pd.DataFrame({"arm": ["outcome", "mc_k2", "mc_k4"], "per_token": [1.0, 0.25, 0.5],
                          "inner_se": [np.nan, np.nan, -2.0]})
    assert measured_per_token(table) == {"mc_k2": 0.25}
