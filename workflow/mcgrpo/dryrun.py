"""Dry-run many studies in one process: Snakemake and the interpreter start once, not once per study.

Used by tests/test_paper_studies.py and bench/dry_run_studies.py; the `snakemake -n --configfile`
command line does the same for one study.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_JSON = re.compile(r"_shared/runs/(?P<run>[0-9a-f]+)/run\.json$")


@dataclass
class DryRun:
    """One study's dry-run: the stored runs its train jobs would train (by their names in the run store), the
    (arm, seed) runs of the study these are, or the error that stopped it."""
    trains: list[str] = field(default_factory=list)
    runs: list[tuple[str, int]] = field(default_factory=list)
    error: str | None = None


def dry_run(studies: list[Path], root: Path = ROOT, workdir: Path | None = None) -> dict[Path, DryRun]:
    """Build each study's DAG and dry-run it against the files under `workdir` (default `root`)."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    results, path_before = {}, list(sys.path)
    try:
        for study in studies:
            updated: list[str] = []
            try:
                with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
                    workflow = api.workflow(resource_settings=ResourceSettings(cores=1),
                                            config_settings=ConfigSettings(configfiles=[Path(study)]),
                                            snakefile=root / "Snakefile", workdir=workdir or root)
                    workflow.dag().execute_workflow(executor="dryrun", updated_files=updated)
            except Exception as e:  # one study's error does not stop the others
                results[study] = DryRun(error=f"{type(e).__name__}: {e}")
                continue
            trains = sorted({m["run"] for f in updated if (m := RUN_JSON.search(str(f)))})
            results[study] = DryRun(trains, _named(study, set(trains)))
    finally:
        sys.path[:] = path_before  # the Snakefile puts workflow/ on it once per study
    return results


def _named(study: Path, trains: set[str]) -> list[tuple[str, int]]:
    """The study's (arm, seed) runs among the stored runs `trains`."""
    from mcgrpo import studies
    from mcgrpo.core import config, layout
    cfg = studies.load(study)
    return sorted((arm, seed) for arm, seed in config.runs(cfg) if layout.run_key(cfg, arm, seed) in trains)
