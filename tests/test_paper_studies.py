"""The paper's studies (config/studies/paper/, S1-S35) each build their DAG, with one train job per arm and seed.

All of them are dry-run in this one process through Snakemake's Python API (workflow -> dag ->
execute_workflow with the dry-run executor), so the interpreter and Snakemake start once, not once per
study. The study schema is parsed once for the whole batch, not twice per study (Snakemake's validate and
mcgrpo's); what is validated is unchanged.
"""

from __future__ import annotations

import copy
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

PAPER = ROOT / "config" / "studies" / "paper"
STUDIES = sorted(PAPER.glob("*.yaml"))
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
RUN_JSON = re.compile(r"runs/(?P<arm>[^/]+)/seed(?P<seed>\d+)/run\.json$")
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=LOADER)


def test_every_study_of_the_paper_has_a_config():
    assert {p.name[:3] for p in STUDIES} == {f"s{i:02d}" for i in range(1, 36)}
    names = [_load(p)["study"] for p in STUDIES]
    assert len(set(names)) == len(names), "two paper studies would share results/<study>/"


def _cached_schema(stack: pytest.MonkeyPatch) -> None:
    """Parse the schema once for every study of the batch (it is the same file for all of them)."""
    from mcgrpo import config as study_config
    import snakemake.utils as smk_utils

    parsed = yaml.load(SCHEMA.read_text(), Loader=LOADER)
    stack.setattr(study_config, "schema", lambda: copy.deepcopy(parsed))
    load = getattr(smk_utils, "_load_configfile", None)
    if load is None:  # another Snakemake: validate as it does, only slower
        return

    def load_once(source, filetype="Config"):
        if filetype == "Schema" and Path(getattr(source, "name", source)).resolve() == SCHEMA.resolve():
            getattr(source, "close", lambda: None)()
            return copy.deepcopy(parsed)
        return load(source, filetype)

    stack.setattr(smk_utils, "_load_configfile", load_once)


@pytest.fixture(scope="module")
def dry_runs() -> dict[str, dict]:
    """Per study file: the (arm, seed) of every train job of its dry-run, or the error that stopped it."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    results, path_before = {}, list(sys.path)
    start, cpu = time.perf_counter(), time.process_time()
    with pytest.MonkeyPatch.context() as stack:
        _cached_schema(stack)
        for study in STUDIES:
            updated: list[str] = []
            try:
                with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
                    workflow = api.workflow(resource_settings=ResourceSettings(cores=1),
                                            config_settings=ConfigSettings(configfiles=[study]),
                                            snakefile=ROOT / "Snakefile", workdir=ROOT)
                    workflow.dag().execute_workflow(executor="dryrun", updated_files=updated)
            except Exception as e:  # reported by the study's own test
                results[study.stem] = {"error": f"{type(e).__name__}: {e}"}
                continue
            runs = [m.group("arm", "seed") for f in updated if (m := RUN_JSON.search(str(f)))]
            results[study.stem] = {"runs": sorted((arm, int(seed)) for arm, seed in runs)}
    sys.path[:] = path_before
    print(f"\ndry-ran {len(STUDIES)} paper studies in {time.perf_counter() - start:.1f} s "
          f"({time.process_time() - cpu:.1f} s of CPU)")
    return results


@pytest.mark.parametrize("study", STUDIES, ids=[p.stem for p in STUDIES])
def test_study_dry_runs_with_one_train_job_per_arm_and_seed(dry_runs, study):
    result = dry_runs[study.stem]
    assert "error" not in result, f"{study.relative_to(ROOT)}: {result.get('error')}"
    cfg = _load(study)
    expected = sorted((arm, seed) for arm in cfg["arms"] for seed in cfg["seeds"])
    assert result["runs"] == expected
