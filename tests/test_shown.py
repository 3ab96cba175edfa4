"""Every table and figure a study shows (mcgrpo.analysis.shown) is held by its summary to the analysis it was made
from: the tables of the prediction, alignment and verifiers steps as the tables step's are, the figures by their
stamp and seal. On the synthetic results of test_steps, with gradient tests and alignment measured."""

import copy
import shutil
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest

from conftest import painted_over
from mcgrpo import studies
from mcgrpo.analysis import prereg, shown, steps
from mcgrpo.core import config as study_config
from mcgrpo.core.errors import IntegrityError
from mcgrpo.core.store import write_json, write_parquet
from test_prediction_step import gradient_table, measured_hash, write_measured
from test_runs import copy_study, seal_run
from test_steps import ANALYSIS, rerun, results  # noqa: F401  (the module-scoped fixture)

EVERY = (*ANALYSIS[:-1], "prediction", "alignment", "verifiers", "summary")
DRAWN = ("drift", "contrasts", "curves", "breakdown", "figures")  # the figures and the steps they read


def _alignment(iterations: int = 4) -> pd.DataFrame:
    """A run's alignment.parquet: each rule's measures on two batches at every iteration."""
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"iteration": i, "arm": rule, "batch": b, "measure": m, "value": rng.random()}
                         for i in range(iterations) for rule in ("mc_k2", "outcome") for b in range(2)
                         for m in ("alignment", "share_outside_v", "cos_full", "projection_residual")])


@pytest.fixture(scope="module")
def study(results, tmp_path_factory):  # noqa: F811
    """(config, folder) of test_steps' study with gradient tests and alignment measured, every step run."""
    cfg, root = results
    folder = tmp_path_factory.mktemp("shown") / root.name  # its links name the store beside it by this name
    copy_study(root, folder)
    cfg = copy.deepcopy(cfg)
    cfg["gradient_tests"] = {"batches": 6, "arms": ["mc_k2"]}
    cfg["evaluation"]["alignment"] = {"arms": ["mc_k2", "outcome"], "every": 2, "batches": 2}
    cfg = studies.validate(cfg)
    write_measured(gradient_table(per_update=1.5, token_ratio=6.0), folder / "analysis" / "gradient_tests.parquet",
                   measured_hash(cfg))
    write_json(prereg.make_lock(cfg, datetime(2025, 1, 1, tzinfo=timezone.utc)), folder / "prereg.lock.json")
    for arm, seed in study_config.runs(cfg):
        run = folder / "runs" / arm / f"seed{seed}"
        write_parquet(_alignment(), run / "alignment.parquet")
        write_json({"started": "2025-01-02T00:00:00+00:00", "config": study_config.run_config(cfg, arm, seed)},
                   run / "run.json")
        seal_run(run)
    rerun(EVERY, cfg, folder)
    return cfg, folder


@pytest.fixture
def copied(study, tmp_path):
    """A copy of `study` to put files back into."""
    cfg, folder = study
    copy_study(folder, tmp_path / folder.name)
    return cfg, tmp_path / folder.name


def test_every_table_and_figure_a_study_writes_is_one_the_summary_holds(study):
    """A table or figure written but not listed in shown would reach a reader unheld: every file under tables/ and
    every PNG under figures/ is listed, and each rule writes the tables it is listed with."""
    cfg, folder = study
    written = {str(p.relative_to(folder)) for p in (*folder.glob("tables/*"), *folder.glob("figures/*.png"))}
    assert written == set(shown.files(cfg))
    assert all((folder / path).is_file() for path in shown.sources(cfg))  # what the summary waits for
    read = steps.analysis_reader(cfg, folder)
    for rule, maker in steps._MAKERS.items():
        assert set(maker(cfg, folder, read, steps.flags(cfg, folder))) == set(shown.TABLES[rule])


def _edit_first_row(path):
    """`path` with its first line of numbers changed by hand (a CSV's first row, a copy's first table row)."""
    lines = path.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith(("| mc_k2", "| outcome", "mc_k2,", "outcome,",
                                                                     "      <td>")))
    lines[at] = lines[at].replace("0.", "9.", 1) if "0." in lines[at] else lines[at].replace("mc_k2", "mc_k4", 1)
    path.write_text("\n".join(lines))
    return at + 1


@pytest.mark.parametrize("name, ext, rule", [("efficiency", "md", "prediction"), ("prediction", "html", "prediction"),
                                             ("alignment", "md", "alignment"), ("verifiers", "html", "verifiers"),
                                             ("verifiers", "csv", "verifiers")])
def test_a_table_of_another_step_edited_by_hand_is_named_never_shown_beside_the_summary(copied, name, ext, rule):
    """The summary held the tables step's tables to their analysis, but not the prediction, alignment and verifiers
    steps' tables: one edited by hand was shown, and the summary written beside it, without a word. Each is now held
    as the tables step's are, naming its first differing line and the rule that writes it again."""
    cfg, folder = copied
    path = folder / "tables" / f"{name}.{ext}"
    line = _edit_first_row(path)
    what = (rf"line {line}" + (r"(?: \(.*\))?, column \w+: '.*', but the study's analysis gives '.*'" if ext == "csv" else
                               r": '.*', but the study's analysis gives '.*'"))
    with pytest.raises(IntegrityError, match=rf"{path}: {what}: edited by hand, or left from an earlier run of the "
                                             rf"study; allowed: .*\(snakemake --configfile STUDY --forcerun {rule}; "):
        steps.summary_step(cfg, folder)
    getattr(steps, f"{rule}_step")(cfg, folder)  # what the message allows
    steps.summary_step(cfg, folder)


def test_an_older_efficiency_table_put_back_with_its_mtime_is_named(copied):
    """An efficiency.md of earlier gradient tests put back with `cp -p` (an mtime older than the analysis, so
    Snakemake reruns nothing for it) was shown beside a summary and Parquet that say otherwise."""
    cfg, folder = copied
    older = folder.parent / "older.md"
    tests = folder / "analysis" / "gradient_tests.parquet"
    kept = tests.read_bytes()
    write_measured(gradient_table(per_update=0.5, token_ratio=2.0), tests, measured_hash(cfg))
    steps.prediction_step(cfg, folder)
    shutil.copy2(folder / "tables" / "efficiency.md", older)
    tests.write_bytes(kept)
    steps.prediction_step(cfg, folder)
    path = folder / "tables" / "efficiency.md"
    shutil.copy2(older, path)
    with pytest.raises(IntegrityError, match=rf"{path}: line \d+: '\| mc_k2 \|.*', but the study's analysis gives "
                                             rf"'\| mc_k2 \|.*'.*--forcerun prediction; "):
        steps.summary_step(cfg, folder)


def _unstamped(path):
    """`path` as a figure drawn without a stamp (by hand, or before figures were stamped)."""
    from PIL import Image
    with Image.open(path) as image:
        image.copy().save(path)


@pytest.mark.parametrize("figure, rule", [("per_seed", "figures"), ("prediction", "prediction")])
@pytest.mark.parametrize("change, said", [
    (painted_over, "its pixels are not the ones drawn \\(edited after it was drawn\\)"),
    (_unstamped, "records no analysis it was drawn from \\(drawn before figures were stamped, or by hand\\)")])
def test_a_figure_edited_or_unstamped_is_named(copied, figure, rule, change, said):
    """The report shows each PNG beside the summary: one painted over, or drawn without the stamp of what it was
    drawn from, is named, and what draws it again."""
    cfg, folder = copied
    path = folder / "figures" / f"{figure}.png"
    change(path)
    with pytest.raises(IntegrityError, match=rf"{path}: {said}; allowed: the figure its analysis draws now "
                                             rf"\(snakemake --configfile STUDY --forcerun {rule}; "):
        steps.summary_step(cfg, folder)
    getattr(steps, f"{rule}_step")(cfg, folder)
    steps.summary_step(cfg, folder)


def test_an_older_figure_put_back_is_named_by_its_stamp(copied):
    """A per_seed.png drawn from another analysis (here: the study's at another margin) put back with `cp -p` kept
    its pixels and seal, but its stamp is not what the study's analysis files give now."""
    cfg, folder = copied
    path, older = folder / "figures" / "per_seed.png", folder.parent / "older.png"
    margin = {**cfg, "analysis": {**cfg["analysis"], "margin": 0.05}}
    rerun(DRAWN, margin, folder)
    shutil.copy2(path, older)
    rerun(DRAWN, cfg, folder)
    shutil.copy2(older, path)
    with pytest.raises(IntegrityError, match=rf"{path}: drawn from analysis files, runs or a config other than the "
                                             rf"study's now \(its stamp \w+, the study's \w+\): left from an earlier "
                                             rf"run of the study, or put back; allowed: .*--forcerun figures; "):
        steps.summary_step(cfg, folder)
    steps.figures_step(cfg, folder)
    steps.summary_step(cfg, folder)
