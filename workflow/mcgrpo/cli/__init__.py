"""`python -m mcgrpo <verb>`: what every Snakemake rule calls, one verb per stage, and the verbs a user runs by hand.

A verb is a function of the parsed arguments, listed in VERBS. Its docstring is its help: the first line, one
sentence, is its summary in `python -m mcgrpo --help`; the paragraphs after it explain it in `python -m mcgrpo VERB
--help`, and the last, `Example:` and an indented command, shows it in use (tests/test_cli.py checks each).

Each verb lives beside the function adding its options (COMMANDS) in the module named for the package's folder it
drives: cli/core.py, data.py, train.py, integrations.py and analysis.py; cli/common.py holds what they share. A
verb imports what it runs inside itself: Snakemake starts `python -m mcgrpo` once per job.
"""

from __future__ import annotations

import argparse
import inspect
import logging
import sys
import time
import traceback

from mcgrpo import __version__
from mcgrpo.cli import analysis, core, data, integrations, train
from mcgrpo.core.errors import Interrupted, McgrpoError, PluginError

# Every verb: name -> (verb, the function adding its options); VERBS lists them in the order of `--help`.
COMMANDS = {**data.COMMANDS, **core.COMMANDS, **train.COMMANDS, **integrations.COMMANDS, **analysis.COMMANDS}
VERBS = {name: COMMANDS[name][0] for name in (
    "data", "verify", "prepare-data", "resolve-model", "warm-start", "calibrate", "train", "ingest", "gradient-tests",
    "screen", "prereg-lock", "link-study", "contrast", "check", "power", "check-store", "pool-bases", *analysis.STEPS)}


def help_of(verb) -> tuple[str, str, str]:
    """(summary, description, example) of a verb, from its docstring: the first line, everything before
    `Example:`, and that paragraph."""
    doc = inspect.cleandoc(verb.__doc__ or "")
    description, _, example = doc.partition("\nExample:")
    return doc.partition("\n")[0], description.strip(), "Example:" + example.rstrip() if example else ""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mcgrpo", description=__doc__.partition("\n")[0],
                                epilog="`python -m mcgrpo VERB --help` explains a verb's options, with an example.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"mcgrpo {__version__}")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name, verb in VERBS.items():
        summary, description, example = help_of(verb)
        # argparse %-formats help (not descriptions): a docstring's "80%" must reach it as "80%%".
        v = sub.add_parser(name, help=summary.replace("%", "%%"), description=description, epilog=example,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        COMMANDS[name][1](v)
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit 0, 2 on a user error (a message naming the key, file or line; the train rule does not retry it),
    75 on a preemption (the job, requeued, or the retry resumes); anything else is a bug and keeps its traceback
    (exit 1)."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"mcgrpo {args.verb}: %(message)s", stream=sys.stderr)
    start = time.perf_counter()
    try:
        VERBS[args.verb](args)
    except Interrupted as e:
        print(f"mcgrpo {args.verb}: {e}; checkpoint written, rerun to resume", file=sys.stderr)
        return 75  # EX_TEMPFAIL: the requeued job or Snakemake's retry resumes from the checkpoint
    except McgrpoError as e:
        if isinstance(e, PluginError) and e.__cause__ is not None:  # a plugin that raised: its bug's traceback first
            traceback.print_exception(e.__cause__, file=sys.stderr)
        print(f"mcgrpo {args.verb}: error: {e}", file=sys.stderr)
        return 2
    # On stderr, so that what a verb prints (`data --json`) can be piped as it is.
    print(f"mcgrpo {args.verb}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0
