"""Compare results written inside an image with the host's:
`python compare.py [--timing-aside] [--git-sha SHA] HOST OTHER` (two folders, or two files).

Both ways: a file on one side only differs (`missing` in OTHER, `extra` there). Each pair must be equal: Parquet
files by value and by their mcgrpo metadata (schema_version, mcgrpo_version, git_sha, config_hash), JSON files by
value, anything else byte for byte; a file that cannot be read (a corrupt Parquet file) differs, named with its
side and the reader's error. With --git-sha (the host's results may be cached from an earlier commit) OTHER's
git_sha must be SHA, the image's commit, and the host's is not compared. With --timing-aside (a run trained again:
the clock differs, nothing else may), Parquet columns that hold either clock of the training stages (`t_<stage>`,
`cpu_<stage>`, `*_seconds`) are left out, and so are run.json's start and end times, its attempts and clocks, and
the interpreter's patch version. Logs (*.log) and hidden files are left aside. A run's files are first checked
against its manifest.json (mcgrpo.core.manifest), on both sides: a file changed after its run finished, or another
run's, differs whatever the other side holds; the manifests themselves are compared by identity and the files they
list (their hashes move with the timing columns). Prints one line per file and exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "workflow"))
from mcgrpo.core import manifest  # noqa: E402
from mcgrpo.core.errors import McgrpoError  # noqa: E402

TIMING = re.compile(r"^(t|cpu)_|seconds$")  # both clocks of the training stages
META = ("schema_version", "mcgrpo_version", "git_sha", "config_hash")
RUN_TIMES = ("started", "ended", "attempts", "clock")  # when, and how long on which clock: not what it trained


def _commit(record: dict, git_sha: str | None) -> str | None:
    """Take git_sha out of `record` (metadata or run.json) when the image's commit is checked on its own."""
    if git_sha is None:
        return None
    found = record.pop("git_sha", None)
    found = found.decode() if isinstance(found, bytes) else found
    return None if found == git_sha else f"git_sha {found!r}, not the image's {git_sha!r}"


class Unreadable(Exception):
    """A file that could not be read: a difference, named with its side."""


def _read(side: str, path: Path, kind: str, read):
    try:
        return read(path)
    except Exception as e:  # whatever the reader raises (pyarrow's ArrowInvalid, OSError, JSONDecodeError...)
        raise Unreadable(f"{side}: unreadable {kind}{' ' if kind else ''}file ({type(e).__name__}: {_line(e)})") from e


def _both(host: Path, other: Path, kind: str, read) -> tuple:
    """`read` of each side's file, host first (an unreadable one raises Unreadable, named with its side)."""
    return _read("host", host, kind, read), _read("other", other, kind, read)


def _line(error: Exception) -> str:
    return " ".join(str(error).split())[:200]


def _parquet_file(path: Path) -> tuple[pd.DataFrame, dict]:
    return pd.read_parquet(path), {k: (pq.read_schema(path).metadata or {}).get(k.encode()) for k in META}


def _json_file(path: Path):
    return json.loads(path.read_text())


def _parquet(host: Path, other: Path, timing_aside: bool, git_sha: str | None) -> str | None:
    (a, meta_a), (b, meta_b) = _both(host, other, "Parquet", _parquet_file)
    if git_sha is not None:
        meta_a.pop("git_sha", None)
    if wrong := _commit(meta_b, git_sha):
        return wrong
    if meta_a != meta_b:
        return f"metadata {meta_a} != {meta_b}"
    if timing_aside:
        a, b = (df.drop(columns=[c for c in df.columns if TIMING.search(c)]) for df in (a, b))
    if list(a.columns) != list(b.columns):
        return f"columns {list(a.columns)} != {list(b.columns)}"
    try:
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    except AssertionError as e:
        return " ".join(str(e).split())[:300]
    return None


def _json(host: Path, other: Path, timing_aside: bool, git_sha: str | None) -> str | None:
    a, b = _both(host, other, "JSON", _json_file)
    if host.name == "run.json" and git_sha is not None:
        a.pop("git_sha", None)
        if wrong := _commit(b, git_sha):
            return wrong
    if timing_aside and host.name == "run.json":
        for run in (a, b):
            for key in RUN_TIMES:
                run.pop(key, None)
            run.get("versions", {}).pop("python", None)
    return None if a == b else f"{json.dumps(a, sort_keys=True)[:150]} != {json.dumps(b, sort_keys=True)[:150]}"


def _unsealed(path: Path) -> str | None:
    """What is wrong with a run's file against its folder's manifest (None outside a sealed run folder)."""
    if not (path.parent / manifest.MANIFEST).exists():
        return None
    if path.name == manifest.MANIFEST:
        return "; ".join(manifest.problems(path.parent)) or None
    try:
        return manifest.problem(path, manifest.read(path.parent))
    except McgrpoError as e:
        return str(e)


def _manifests(host: Path, other: Path) -> str | None:
    a, b = _both(host, other, "JSON", _json_file)
    a, b = ({"identity": m["identity"], "files": sorted(m["files"])} for m in (a, b))
    return None if a == b else f"{a} != {b}"


def difference(host: Path, other: Path, timing_aside: bool = False, git_sha: str | None = None) -> str | None:
    """Why file `other` differs from `host` (None when they are equal)."""
    if not other.is_file():
        return "missing"
    if not host.is_file():
        return "extra: not on the host"
    try:
        for side, path in (("host", host), ("other", other)):
            if why := _read(side, path, "run", _unsealed):
                return f"{side}: {why}"
        if host.name == manifest.MANIFEST:
            return _manifests(host, other)
        if host.suffix == ".parquet":
            return _parquet(host, other, timing_aside, git_sha)
        if host.suffix == ".json":
            return _json(host, other, timing_aside, git_sha)
        a, b = _both(host, other, "", Path.read_bytes)
    except Unreadable as e:
        return str(e)
    except Exception as e:  # a comparison that fails is a difference too, never a traceback
        return f"not comparable ({type(e).__name__}: {_line(e)})"
    return None if a == b else "bytes differ"


def _files(root: Path) -> set[Path]:
    """The files to compare under `root`, relative to it (a job's log, a run's train.log, is what it printed, with
    its times: no result; hidden files are Snakemake's and the store's bookkeeping)."""
    return {p.relative_to(root) for p in root.rglob("*")
            if p.is_file() and not p.name.startswith(".") and p.suffix != ".log"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("host", type=Path)
    ap.add_argument("other", type=Path)
    ap.add_argument("--timing-aside", action="store_true")
    ap.add_argument("--git-sha", help="the commit OTHER's files must carry (the host's may be older)")
    args = ap.parse_args(argv)
    if args.host.is_file() or args.other.is_file():  # two files (a study's summary)
        pairs = [(args.host.name, args.host, args.other)]
    else:
        names = sorted(_files(args.host) | _files(args.other))
        pairs = [(str(name), args.host / name, args.other / name) for name in names]
    if not pairs:
        print(f"{args.host}, {args.other}: no files to compare", file=sys.stderr)
        return 1
    failed = 0
    for name, host, other in pairs:
        why = difference(host, other, args.timing_aside, args.git_sha)
        failed += why is not None
        print(f"{'DIFFERS' if why else 'equal  '} {name}{': ' + why if why else ''}")
    aside = " (timing columns aside)" if args.timing_aside else ""
    print(f"{len(pairs) - failed} of {len(pairs)} files equal{aside}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
