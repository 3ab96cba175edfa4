"""Progress of the stages a user waits for (warm start, calibration, training, evaluation), with tqdm.

On a terminal it is a live bar. A rule's log file (stderr redirected) instead gets one plain line at the
start, one every LOG_SECONDS and one at the end, so that `tail -f results/<study>/logs/...` shows a run
advancing without filling the file with carriage-return redraws. Where the rule hands on the terminal of the
Snakemake that started the job (a file descriptor named by CONSOLE_FD), those lines (not the notes between them)
go there too, timed: `make run` then shows each long job start, advance and finish, never silent for a minute.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from tqdm import tqdm

LOG_SECONDS = 30.0
# Without a terminal there is no bar to draw: the counts, the rate and the time left say it all.
LINE_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%) [{elapsed} elapsed, {remaining} left]{postfix}"
OPEN_FORMAT = "{desc}: {n_fmt} {unit} [{elapsed} elapsed, {rate_fmt}]{postfix}"
# The environment variable naming the descriptor of the starting Snakemake's terminal (the rules set it beside
# `3>&2`, before sending the job's own output to its log).
CONSOLE_FD = "MCGRPO_CONSOLE_FD"


def console() -> TextIO | None:
    """The terminal the rule handed on (CONSOLE_FD), else None."""
    fd = os.environ.get(CONSOLE_FD, "")
    if not fd.isdigit():
        return None
    try:
        os.fstat(int(fd))
        return os.fdopen(int(fd), "w", buffering=1, closefd=False)
    except OSError:
        return None


class Lines:
    """A stream for tqdm that writes each of its redraws as one line (tqdm starts them with '\\r')."""

    def __init__(self, stream: TextIO, echo: TextIO | None = None):
        self.stream = stream
        self.echo = echo  # the console: the same lines, timed

    def write(self, text: str) -> None:
        text = text.strip("\r\n")
        if text.strip():
            self.stream.write(text + "\n")
            if self.echo is not None:
                self.echo.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    def flush(self) -> None:
        self.stream.flush()
        if self.echo is not None:
            self.echo.flush()


def bar(desc: str, total: float | None = None, unit: str = "it", initial: float = 0,
        stream: TextIO | None = None) -> tqdm:
    """A progress bar on `stream` (stderr): drawn live on a terminal, plain lines every LOG_SECONDS otherwise."""
    stream = stream if stream is not None else sys.stderr
    if getattr(stream, "isatty", lambda: False)():
        options = dict(file=stream, mininterval=0.5, dynamic_ncols=True)
    else:
        # maxinterval: tqdm's monitor thread would otherwise redraw a slow bar every 10 s, repeating lines.
        options = dict(file=Lines(stream, console()), mininterval=LOG_SECONDS, maxinterval=1e9, ascii=True,
                       bar_format=LINE_FORMAT if total else OPEN_FORMAT)
    shown = tqdm(total=total, desc=desc, unit=unit, initial=initial, smoothing=0.1,
                 **options)
    shown.lines = isinstance(options["file"], Lines)
    return shown


def note(progress: tqdm | None, text: str) -> None:
    """A line above the bar (or between the log lines), or on stderr where no bar runs."""
    if progress is None or progress.lines:  # no bar to redraw below it; the log's lines only, not the console's
        print(text, file=progress.fp.stream if progress else sys.stderr)
    else:
        progress.write(text, file=progress.fp)
