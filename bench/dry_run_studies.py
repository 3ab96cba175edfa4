"""Seconds to dry-run every paper study (config/studies/paper/, S1-S35), split over one process per core.

    python bench/dry_run_studies.py [--workdir DIR] [--workers N] [STUDY.yaml ...]

The target is under 10 s for all of them (54) on a 2-core machine. Prints per-study train jobs and the total: the jobs
the studies' DAGs hold, and the runs the run store trains once each (results/_shared/runs: a run named by several
studies is one job of each of their DAGs, and one training).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow"))

from mcgrpo.dryrun import dry_run, worker_count  # noqa: E402


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="dry-run against the files here (default: the repo root)")
    parser.add_argument("--workers", type=int,
                        help="child processes to split the studies over (default: one per core; 1: this process)")
    parser.add_argument("studies", nargs="*", type=Path)
    args = parser.parse_args(argv)
    studies = [a.resolve() for a in args.studies] or sorted((ROOT / "config" / "studies" / "paper").glob("*.yaml"))
    start, cpu = time.perf_counter(), _cpu()
    results = dry_run(studies, workdir=args.workdir, workers=args.workers)
    wall, cpu = time.perf_counter() - start, _cpu() - cpu
    for study, result in results.items():
        print(f"{study.stem:<40} " + (f"error: {result.error}" if result.error else f"{len(result.trains):>4} train jobs"))
    jobs = sum(len(r.trains) for r in results.values())
    print(f"\ntrain jobs: {jobs} in the studies' DAGs; {len({t for r in results.values() for t in r.trains})} "
          f"distinct stored runs (the run store trains each once)")
    print(f"dry-ran {len(studies)} studies in {wall:.1f} s ({cpu:.1f} s of CPU, "
          f"{worker_count(len(studies), args.workers)} worker(s), {wall / len(studies):.2f} s each)")
    return int(any(r.error for r in results.values()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
