"""The verbs of mcgrpo/data: a data file checked, and the study's pool and evaluation sets written."""

from __future__ import annotations

import argparse
import json

from mcgrpo.cli.common import _json, _stage
from mcgrpo.core import config as study_config
from mcgrpo.core.errors import DataError


def data_summary(args) -> None:
    """Check a data file before spending GPU time on it.

    Counts, levels, answers and fields of a pool or evaluation file, and with --against the problems that
    deduplication would remove against an evaluation file.

    Example:
      python -m mcgrpo data data/MATH/train --against data/MATH/test
    """
    from mcgrpo.data import summary
    try:
        s = summary.summarize(args.path, args.format, args.against or [], args.math_verify)
    except ImportError as e:
        raise DataError(str(e)) from None
    print(json.dumps(s, sort_keys=True) if args.json else summary.render(s))


def _data_arguments(v: argparse.ArgumentParser) -> None:
    from mcgrpo.data.summary import FORMATS
    v.add_argument("path", help="a .jsonl, .parquet or .json file, or a folder of per-problem .json files")
    v.add_argument("--format", choices=FORMATS, help="the record fields (default: detected)")
    v.add_argument("--against", action="append", metavar="EVAL_FILE",
                   help="count the problems that deduplication would remove against this evaluation file (repeatable)")
    v.add_argument("--math-verify", action="store_true", help="also check gold solutions with math-verify")
    v.add_argument("--json", action="store_true", help="print one JSON object")


def prepare_data(args) -> None:
    """Write the pool and evaluation sets, and the log of what filtering and deduplication removed.

    The task block's data, filtered and deduplicated against the evaluation sets (the prepare_data rule's step).

    Example:
      python -m mcgrpo prepare-data --out data-arith \\
        --task-json '{"name": "arith", "seed": 0, "pool": {"size": 200, "levels": [2]}, "eval_sets": {"test": {"size": 8}}}'
    """
    from mcgrpo import data
    task = _json(args.task_json, "--task-json", ("name", "seed", "pool", "eval_sets"))
    study_config.validate_blocks({"task": task}, ("task",), "--task-json")
    prepared = data.prepare(task)
    data.write(prepared.pool, prepared.evals, args.out, study_config.config_hash(task), prepared.removed)
    print("\n".join(prepared.lines()))
    print(f"pool: {len(prepared.pool)} problems; " + ", ".join(f"eval_{k}: {len(v)}" for k, v in prepared.evals.items()))


def _prepare_data_arguments(v: argparse.ArgumentParser) -> None:
    _stage(v, "--task-json", "the study's task: block as JSON", {"--out": "the data folder to write"})


COMMANDS = {"data": (data_summary, _data_arguments), "prepare-data": (prepare_data, _prepare_data_arguments)}
