"""Retake the manual's screenshots from a real `make run`: its terminal, mid-run and at the end, and the report.

    make run 2>&1 | tee run.log
    .venv/bin/snakemake --report results/default/report.html
    python docs/screenshots/take.py run.log results/default/report.html

The terminal is the captured text as it was printed, shown in a terminal-like page; the report is Snakemake's
own HTML. Both are photographed by headless Chromium (Debian: `apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PAGE = """<!doctype html><meta charset="utf-8"><body style="margin:0;background:#1e1e1e">
<pre style="margin:0;padding:12px;color:#dcdcdc;font:13px/1.35 'DejaVu Sans Mono',monospace;white-space:pre-wrap">{}</pre>"""


def browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    sys.exit("take.py: no Chromium on PATH (Debian: apt-get install chromium)")


def photograph(url: str, out: Path, width: int, height: int) -> None:
    """A headless Chromium screenshot of `url`, after its scripts had 5 s to draw."""
    subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--window-size={width},{height}", "--virtual-time-budget=5000", f"--screenshot={out}", url],
                   check=True, capture_output=True)
    print(f"wrote {out}")


def terminal(lines: list[str], out: Path, rows: int = 44) -> None:
    """The last `rows` lines of `lines`, as a 110-column terminal shows them."""
    with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as page:
        page.write(PAGE.format(html.escape("\n".join(lines[-rows:]))))
    photograph(Path(page.name).as_uri(), out, 1000, 20 * rows + 24)
    Path(page.name).unlink()


def midway(lines: list[str]) -> int:
    """The line after which Snakemake reported about half of its steps done (the whole log if it never did)."""
    for i, line in enumerate(lines):
        m = re.search(r"(\d+) of (\d+) steps", line)
        if m and 2 * int(m[1]) >= int(m[2]):
            return i + 1
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", type=Path, help="the terminal output of make run (make run 2>&1 | tee run.log)")
    parser.add_argument("report", type=Path, help="the study's report (snakemake --report ...html)")
    args = parser.parse_args()
    for path in (args.log, args.report):
        if not path.is_file():
            sys.exit(f"take.py: {path}: no such file")
    lines = ANSI.sub("", args.log.read_text(errors="replace")).splitlines()
    terminal(lines[:midway(lines)], HERE / "terminal-during-run.png")
    terminal(lines, HERE / "terminal-end-of-run.png")
    photograph(args.report.resolve().as_uri(), HERE / "report-first-page.png", 1280, 900)


if __name__ == "__main__":
    main()
