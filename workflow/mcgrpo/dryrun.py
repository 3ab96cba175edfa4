"""Dry-run many studies in a few processes: Snakemake and the interpreter start once per process, not per study.

Used by tests/test_paper_studies.py and bench/dry_run_studies.py; the `snakemake -n --configfile`
command line does the same for one study. Where the time goes (54 paper studies, 2 cores): building each DAG and
parsing the Snakefile, all CPU. So each workflow file is parsed once (Snakemake parses every file again for every
workflow it builds), and the studies are split over one interpreter per core (`python -m mcgrpo.dryrun`, results
back as JSON on stdout), each taking the next study no other has taken: a multiprocessing pool, forked or spawned,
hung now and then inside Snakemake, a plain child process cannot share its state.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
from contextlib import ExitStack, contextmanager, redirect_stdout
from dataclasses import asdict, dataclass, field
from functools import wraps
from pathlib import Path
from tempfile import TemporaryDirectory, TemporaryFile

ROOT = Path(__file__).resolve().parents[2]
RUN_JSON = re.compile(r"_shared/runs/(?P<run>[0-9a-f]+)/run\.json$")


@dataclass
class DryRun:
    """One study's dry-run: the stored runs its train jobs would train (by their names in the run store), the
    (arm, seed) runs of the study these are, or the error that stopped it."""
    trains: list[str] = field(default_factory=list)
    runs: list[tuple[str, int]] = field(default_factory=list)
    error: str | None = None


def dry_run(studies: list[Path], root: Path = ROOT, workdir: Path | None = None,
            workers: int | None = None) -> dict[Path, DryRun]:
    """Build each study's DAG and dry-run it against the files under `workdir` (default `root`), split over
    `workers` child processes (default: one per core this process may use; 1: in this process)."""
    workers = worker_count(len(studies), workers)
    if workers > 1:
        return _in_workers(studies, root, workdir, workers)
    with _parsed_once():
        return {study: _dry_run_one(study, root, workdir) for study in studies}


def worker_count(studies: int, workers: int | None = None) -> int:
    """The child processes `dry_run` starts for that many studies: `workers` (default one per core this process
    may use), no more than the studies."""
    return min(len(os.sched_getaffinity(0)) if workers is None else workers, studies)


def _in_workers(studies: list[Path], root: Path, workdir: Path | None, workers: int) -> dict[Path, DryRun]:
    """Every child is given every study and dry-runs those it claims first (`_claimed`), so that one that drew
    the large studies does not keep the others waiting; a child that fails raises with its own traceback."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")])}
    results: dict[int, DryRun] = {}
    with TemporaryDirectory() as claims, ExitStack() as files:
        cmd = [sys.executable, "-m", "mcgrpo.dryrun", "--root", str(root), "--claims", claims,
               *(["--workdir", str(workdir)] if workdir else []), *map(str, studies)]
        outs = [(files.enter_context(TemporaryFile("w+")), files.enter_context(TemporaryFile("w+")))
                for _ in range(workers)]
        children = [subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True) for out, err in outs]
        files.callback(lambda: [child.kill() for child in children if child.poll() is None])  # after a failure
        for child, (out, err) in zip(children, outs):
            if child.wait():
                err.seek(0)
                raise RuntimeError(f"dry-run worker exited {child.returncode}:\n{err.read()[-5000:]}")
            out.seek(0)
            for index, one in json.loads(out.read()):
                results[index] = DryRun(one["trains"], [tuple(run) for run in one["runs"]], one["error"])
    return {study: results[index] for index, study in enumerate(studies)}


def _claimed(studies: list[Path], claims: str):
    """(index, study) of each study this process claims first: a folder per study made under `claims`, which
    only one process can make."""
    for index, study in enumerate(studies):
        try:
            os.mkdir(os.path.join(claims, str(index)))
        except FileExistsError:
            continue
        yield index, study


def _dry_run_one(study: Path, root: Path, workdir: Path | None) -> DryRun:
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    from mcgrpo.core import templating
    from mcgrpo.core.errors import UserExit

    templating.install([])  # as the workflow profile does for `snakemake`: no template renders, none opted in
    updated: list[str] = []
    path_before = list(sys.path)
    try:
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            workflow = api.workflow(resource_settings=ResourceSettings(cores=1),
                                    config_settings=ConfigSettings(configfiles=[Path(study)]),
                                    snakefile=root / "Snakefile", workdir=workdir or root)
            workflow.dag().execute_workflow(executor="dryrun", updated_files=updated)
    except UserExit as e:  # a user error, printed alone (mcgrpo.core.errors.stopping)
        return DryRun(error=f"{type(e.error).__name__}: {e.error}")
    except Exception as e:  # one study's error does not stop the others
        return DryRun(error=f"{type(e).__name__}: {e}")
    finally:
        sys.path[:] = path_before  # the Snakefile puts workflow/ on it once per study
    trains = sorted({m["run"] for f in updated if (m := RUN_JSON.search(str(f)))})
    return DryRun(trains, _named(study, set(trains)))


@contextmanager
def _parsed_once():
    """Within the block, Snakemake's parser translates each workflow file once (per content: a file is keyed by its
    path, size and modification time) and replays the translation for every later workflow."""
    import snakemake.api  # noqa: F401 (snakemake.workflow cannot be imported first)
    import snakemake.workflow as module
    original, cache = module.parse, {}

    @wraps(original)
    def parse(path, workflow, linemap, overwrite_shellcmd=None, rulecount=0):
        name = str(path.get_path_or_uri(secret_free=True))
        stat = os.stat(name)
        key = (name, stat.st_size, stat.st_mtime_ns, overwrite_shellcmd, rulecount)
        if key not in cache:
            lines: dict[int, int] = {}
            cache[key] = (*original(path, workflow, lines, overwrite_shellcmd, rulecount), lines)
        code, count, lines = cache[key]
        linemap.update(lines)
        return code, count

    module.parse = parse
    try:
        yield
    finally:
        module.parse = original


def _named(study: Path, trains: set[str]) -> list[tuple[str, int]]:
    """The study's (arm, seed) runs among the stored runs `trains`."""
    from mcgrpo import studies
    from mcgrpo.core import layout
    return sorted(run for run, key in layout.run_keys(studies.load(study)).items() if key in trains)


def main(argv: list[str]) -> None:
    """A worker of `dry_run(..., workers=N)`: [index, dry-run] of each study it claims, as JSON on stdout."""
    parser = argparse.ArgumentParser(prog="python -m mcgrpo.dryrun", description=main.__doc__)
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--claims", required=True, help="the folder the workers claim studies in")
    parser.add_argument("studies", nargs="+", type=Path)
    args = parser.parse_args(argv)
    # A worker lives for one batch: the collector's passes over Snakemake's many objects cost about a tenth of its
    # CPU (27 studies: 7.6 s against 8.6, medians of 5), and the memory they hold goes when it exits.
    gc.disable()
    with redirect_stdout(sys.stderr), _parsed_once():  # stdout carries the JSON alone
        done = [(index, asdict(_dry_run_one(study, args.root, args.workdir)))
                for index, study in _claimed(args.studies, args.claims)]
    print(json.dumps(done))


if __name__ == "__main__":
    main(sys.argv[1:])
