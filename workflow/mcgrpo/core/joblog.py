"""A failed job's reason on the terminal: the rule's name, where it is defined, its log's path and that log's last
lines, in place of Snakemake's report of the shell command that exited non-zero.

Every rule runs `python -m mcgrpo <verb> ... > {log} 2>&1`: the one line that says what went wrong (a McgrpoError
naming the key or file, or a bug's traceback) is in the job's own log. Snakemake 9 reports a failed job twice on
the terminal, both times without that line: a `RuleException` with the whole command (2-5 KB of the study's JSON)
located in the file of the shell directive (rules/drift.smk for every `use rule drift as ...` rule), then an
"Error in rule" block, which `--quiet=rules` (the Makefile's) leaves out altogether. `install` changes what the
terminal handler alone prints: the command-line error goes, the job error is always shown, as `reason` writes it.
Snakemake's own log file (.snakemake/log/, the "Complete log(s)" it names at the end) keeps both as they were, the
command included; logger plugins see the records unchanged.

Kept free of Snakemake imports at module level: it is imported by the Snakefile, and its text helpers are plain.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from pathlib import Path
from typing import Callable

TAIL_LINES = 12  # a bug's traceback: its last frames and the exception
TAIL_BYTES = 64 * 1024  # a training log can be long: only its end is read
LINE_CHARS = 500  # one runaway line (a repr of a tensor) must not flood the terminal again
# what mcgrpo.cli.main prints for a user error (and screen, which reports the same way)
ERROR_LINE = re.compile(r"^mcgrpo [\w-]+: error: ")
STREAM_HANDLER = "DefaultStreamHandler"  # the name Snakemake's LoggerManager gives its terminal handler


def tail(path: str | os.PathLike, lines: int = TAIL_LINES) -> list[str]:
    """The end of a job's log that says why it failed: from its last mcgrpo error line to the end where there is
    one (the user error alone, without the progress lines before it), else the last `lines` lines (a traceback's
    end). Never blocks and never raises: a log that is missing, empty, unreadable or no regular file (a FIFO) is
    described in one line instead."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return ["(the log is not a regular file)"]
        with open(path, "rb") as f:
            f.seek(max(0, info.st_size - TAIL_BYTES))
            text = f.read(TAIL_BYTES).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ["(no log was written: the job failed before its command started)"]
    except OSError as e:
        return [f"(the log cannot be read: {e.strerror or e})"]
    found = [line.rstrip() for line in text.splitlines()]
    while found and not found[-1].strip():
        found.pop()
    if not found:
        return ["(the log is empty)"]
    errors = [i for i, line in enumerate(found) if ERROR_LINE.match(line)]
    end = found[errors[-1]:] if errors else found[-lines:]
    return [line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " [...]" for line in end[-lines:]]


def headline(lines: list[str]) -> str:
    """The one line of a log's end that says most: its mcgrpo error line (a train retry's log goes on with "not
    retried: ..."), else its last line (a traceback's exception)."""
    return next((line for line in lines if ERROR_LINE.match(line)), lines[-1])


def reason(rule: str, logs: list[str], message: str | None = None, where: str | None = None) -> str:
    """The terminal's block for one failed job: the rule and where it is defined, what the executor says (a SLURM
    job's state), each log's path, and the end of the first log (the rule's own; a SLURM log follows it)."""
    head = f"Error in rule {rule}" + (f" ({where})" if where else "")
    lines = [head + (":" if logs or message else ".")]
    if message:
        lines.append(f"    {message}")
    if logs:
        lines.append(f"    log: {logs[0]}, which ends:")
        lines.extend(f"        {line}" for line in tail(logs[0]))
        lines.extend(f"    also: {path}" for path in logs[1:])
    return "\n".join(lines)


def _event(record: logging.LogRecord) -> str | None:
    """The Snakemake log event of a record, by its value ('job_error', 'error', ...), or None."""
    event = getattr(record, "event", None)
    return getattr(event, "value", event)


def is_job_error(record: logging.LogRecord) -> bool:
    return _event(record) == "job_error"


def is_command_error(record: logging.LogRecord) -> bool:
    """Snakemake's report that a job's shell command exited non-zero: the command with the file and line of the
    shell directive. The job error that always follows it says which rule failed and why."""
    return (_event(record) == "error" and getattr(record, "exception", None) == "RuleException"
            and "CalledProcessError" in record.getMessage())


class Failures:
    """The failed jobs shown on the terminal, in order, each (rule, its log, the reason's headline): the recap that
    a run with --keep-going prints at its end, when the blocks have scrolled away."""

    def __init__(self):
        self.jobs: dict[tuple[str, str], str] = {}

    def add(self, rule: str, logs: list[str]) -> None:
        log = logs[0] if logs else ""
        self.jobs.pop((rule, log), None)  # a retried job counts once, at its last failure
        self.jobs[(rule, log)] = headline(tail(log)) if log else ""

    def recap(self) -> str:
        if not self.jobs:
            return ""
        lines = [f"{len(self.jobs)} job(s) failed:"]
        for (rule, log), last in self.jobs.items():
            lines.append(f"    {rule}" + (f" ({log}): {last}" if log else ""))
        return "\n".join(lines)


class _Filter(logging.Filter):
    """Snakemake's filter of the terminal, less two of its choices: a job error shows wherever a plain error
    would (also under --quiet=rules), and the command-line error does not show."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def filter(self, record):
        if is_command_error(record):
            return False
        if is_job_error(record):
            plain = logging.makeLogRecord({**record.__dict__, "event": None})
            return _passes(self.inner, plain)
        return _passes(self.inner, record)


def _passes(inner, record) -> bool:
    return bool(inner.filter(record) if hasattr(inner, "filter") else inner(record))


class _Formatter(logging.Formatter):
    """Snakemake's formatter of the terminal, with a job error written by `reason`."""

    def __init__(self, inner: logging.Formatter, where: Callable[[str], str | None], failures: Failures):
        super().__init__()
        self.inner, self.where, self.failures = inner, where, failures

    def format(self, record):
        if not is_job_error(record):
            return self.inner.format(record)
        rule, logs = record.__dict__.get("rule_name", "?"), list(record.__dict__.get("log") or [])
        self.failures.add(rule, logs)
        block = reason(rule, logs, record.__dict__.get("rule_msg"), self.where(rule))
        indent = "    " if record.__dict__.get("indent") else ""  # a job inside a failed group
        stamped = [f"[{time.asctime(time.localtime(record.created))}]", *block.splitlines()]  # as Snakemake's blocks
        return "\n".join(indent + line for line in stamped)


def install(logger: logging.Logger, workflow=None) -> Failures | None:
    """Put failed jobs' reasons on Snakemake's terminal handler of `logger` (see the module's docstring), each rule
    named with its definition where `workflow` (Snakemake's) is given. Idempotent (mcgrpo.dryrun reads the
    Snakefile many times in one process); returns the failures it records, or None where Snakemake has no terminal
    handler (a logger plugin writes to the terminal instead, and is left alone)."""

    def where(name: str) -> str | None:
        rule = next((r for r in getattr(workflow, "rules", ()) if r.name == name), None)
        return rule_location(rule, workflow.linemaps, workflow.basedir) if rule is not None else None

    for handler in logger.handlers:
        if handler.name != STREAM_HANDLER:
            continue
        if not isinstance(handler.formatter, _Formatter):
            handler.filters = [_Filter(f) for f in handler.filters]
            handler.setFormatter(_Formatter(handler.formatter or logging.Formatter(), where, Failures()))
        handler.formatter.where = where
        return handler.formatter.failures
    return None


def rule_location(rule, linemaps: dict, basedir: str | os.PathLike) -> str | None:
    """'rules/contrasts.smk:2': where a Snakemake rule is defined (its `use rule` line for a rule derived from
    another), relative to the workflow's folder; None where Snakemake does not know."""
    path = str(getattr(rule, "snakefile", "") or "")
    line = linemaps.get(path, {}).get(getattr(rule, "lineno", None))
    if not path or line is None:
        return None
    try:
        path = str(Path(path).relative_to(basedir))
    except ValueError:
        pass
    return f"{path}:{line}"
