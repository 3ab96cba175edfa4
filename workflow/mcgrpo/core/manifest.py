"""Stored runs that verify themselves: each run folder's manifest.json, written last, lists every result file
the run wrote with its sha256, under the run's identity; every reader checks the file it reads against it.

Its own file rather than a key of run.json: run.json is one of the files it vouches for (a file cannot hold its
own hash), and a manifest written last, atomically, is also the mark that the run finished writing: a folder
without one never finished, or predates manifests (runs written before them are refused: `mcgrpo check-store
--repair` sets them aside for retraining).

A file is checked to be listed in the manifest and to have the sha256 sealed; where it has not, its Parquet
`config_hash` metadata tells another run's file (config_hash differs) from one changed after the run finished
(sha256 differs). The manifest itself is checked to be the folder's (its `run` is the folder's name: a folder copied
over another's is named) and well-formed (every field of the type written, evals and samples listed); a study's
links and index are checked against it by mcgrpo.core.study_runs, the one reader of a study's runs. No file is
opened before it is known to be a regular file: a FIFO in a run's place never blocks a reader.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import pyarrow.parquet as pq

from mcgrpo.core.errors import IntegrityError, MissingFile
from mcgrpo.core.store import not_regular, read_json, write_json

MANIFEST = "manifest.json"
RETRAIN = "set it aside to retrain it: python -m mcgrpo check-store --repair, then rerun the workflow"
REQUIRED = ("evals.parquet", "samples.parquet")  # what every analysis reads: a run without them cannot be analysed
_SHA256 = re.compile(r"[0-9a-f]{64}")
_LIMIT = 1 << 20  # a manifest lists a run's few files: kilobytes; a larger one is refused unread


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _stamp(path: Path) -> list[int]:
    """What changes whenever the file's content can have: inode, size, mtime and ctime (`cp -p` and `touch -r`
    restore the mtime, never the ctime). A copied store has other stamps: its files are hashed instead."""
    s = path.stat()
    return [s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns]


def seal(folder: str | Path, files: list[str], identity: str, config_hash: str = "") -> Path:
    """Write `folder`'s manifest: `files` (names in it) with their sha256, under the run's `identity` (what its
    Parquet files carry as config_hash) and `config_hash` (its effective config's). Call it last."""
    folder = Path(folder)
    listed = {name: {"sha256": sha256(folder / name), "stamp": _stamp(folder / name)} for name in sorted(files)}
    return write_json({"run": folder.resolve().name, "identity": identity, "config_hash": config_hash,
                       "sealed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "files": listed},
                      folder / MANIFEST)


def read(folder: str | Path) -> dict:
    """The run folder's manifest, checked to be well-formed and the folder's own (its `run` is the name of the
    folder it is in, links followed)."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.exists():
        raise MissingFile(f"{folder}: run folder not found")
    if not folder.is_dir():
        raise IntegrityError(f"{folder}: {not_regular(folder) or 'a file'}, where a run's folder belongs: {RETRAIN}")
    if not path.exists() and not path.is_symlink():
        raise IntegrityError(f"{path}: missing: the run never finished writing, or was trained before runs were "
                             f"sealed; its files cannot be verified: {RETRAIN}")
    s = path.stat() if not not_regular(path) else None
    manifest = _manifest(path, *((s.st_ino, s.st_mtime_ns, s.st_ctime_ns) if s else ()))
    name = folder.resolve().name
    if manifest["run"] != name:
        raise IntegrityError(f"{path}: belongs to run {manifest['run']}, not {name} (a run's folder copied over "
                             f"another's, or its manifest edited): {RETRAIN}")
    return manifest


@lru_cache(maxsize=4096)
def _manifest(path: Path, *stamp: int) -> dict:
    try:
        manifest = read_json(path, _LIMIT)
    except (IntegrityError, MissingFile) as e:
        raise IntegrityError(f"{e}: {RETRAIN}") from None
    wrong = _malformed(manifest)
    if wrong:
        raise IntegrityError(f"{path}: not a run manifest ({wrong}): {RETRAIN}")
    return manifest


def _malformed(manifest) -> str | None:
    """What is not as `seal` writes it (None when all is): strings `run` and `identity`, `files` an object of
    file names, each with a 64-hex `sha256` (and a `stamp` of four integers)."""
    if not isinstance(manifest, dict):
        return f"a JSON {type(manifest).__name__}, not an object"
    for key in ("run", "identity"):
        if not isinstance(manifest.get(key), str):
            return f"'{key}' is {type(manifest.get(key)).__name__}, not a string"
    files = manifest.get("files")
    if not isinstance(files, dict):
        return f"'files' is {type(files).__name__}, not an object"
    for name, entry in files.items():
        if "/" in name or name in ("", ".", ".."):
            return f"file {name!r} is no name of a file in the folder"
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and _SHA256.fullmatch(entry["sha256"])):
            return f"files.{name}.sha256 is not 64 hexadecimal digits"
        stamp = entry.get("stamp")
        if stamp is not None and not (isinstance(stamp, list) and len(stamp) == 4
                                      and all(type(v) is int for v in stamp)):
            return f"files.{name}.stamp is not four integers"
    return None


def unlisted(folder: Path, manifest: dict) -> str | None:
    """What a finished run must have sealed and `manifest` does not list (evals, samples: every analysis reads
    them), else None."""
    missing = [name for name in REQUIRED if name not in manifest["files"]]
    return (f"{folder / MANIFEST}: lists no {', '.join(missing)}, which every analysis reads: {RETRAIN}"
            if missing else None)


def problem(path: Path, manifest: dict, by_stamp: bool = True) -> str | None:
    """What is wrong with run file `path` against `manifest` (None when it is what the run wrote); `by_stamp`: a file
    whose stamp is the sealed one is taken as sealed, unread."""
    entry = manifest["files"].get(path.name)
    if entry is None:
        return f"{path}: not listed in {path.parent / MANIFEST}, so not written by this run"
    kind = not_regular(path)
    if kind:
        return f"{path}: {kind}, where {MANIFEST} lists a file: {RETRAIN}"
    if not path.exists():
        return f"{path}: missing, though {MANIFEST} lists it: {RETRAIN}"
    if by_stamp and _stamp(path) == entry.get("stamp"):
        return None  # untouched since sealed: the hash it had then
    try:
        found = _hash(path, *_stamp(path))
    except OSError as e:  # permission denied, an I/O error of the disk
        return f"{path}: cannot be read ({e.strerror}); allowed: a file this user can read (chmod u+r {path})"
    if found == entry["sha256"]:
        return None
    differs = f"{path}: sha256 differs from {MANIFEST} ({found[:12]}, sealed {entry['sha256'][:12]})"
    other = _config_hash(path)
    if other is not None and other != manifest["identity"]:
        # Another run's file, or this one's with a byte changed inside its metadata (a flipped bit in config_hash
        # reads as another hash): Parquet holds no checksum that tells the two apart, so both are said.
        return (f"{differs} and config_hash differs: the file belongs to another run (config_hash {other[:12]}, "
                f"this run's {manifest['identity'][:12]}), or changed after the run finished: {RETRAIN}")
    return f"{differs}: the file changed after the run finished: {RETRAIN}"


@lru_cache(maxsize=4096)
def _hash(path: Path, *stamp: int) -> str:
    return sha256(path)


def _config_hash(path: Path) -> str | None:
    """A Parquet file's config_hash metadata; None where it has none or cannot be read."""
    if path.suffix != ".parquet":
        return None
    try:
        return ((pq.read_schema(path).metadata or {}).get(b"config_hash") or b"").decode() or None
    except Exception:  # noqa: BLE001 - unreadable: the sha256 says it changed
        return None


def checked(path: str | Path) -> Path:
    """`path`, a run's file, once it is verified against its folder's manifest (IntegrityError naming it)."""
    path = Path(path)
    if not path.exists() and not not_regular(path):
        raise MissingFile(f"{path}: file not found")
    why = problem(path, read(path.parent))
    if why:
        raise IntegrityError(why)
    return path


def problems(folder: str | Path) -> list[str]:
    """Everything wrong with a run folder: its manifest, each listed file (all hashed), none of it raised."""
    folder = Path(folder)
    try:
        manifest = read(folder)
    except IntegrityError as e:
        return [str(e)]
    return [why for name in manifest["files"] if (why := problem(folder / name, manifest, by_stamp=False))]


def fingerprint(folders: list[str | Path]) -> str:
    """One value that changes whenever any of `folders`' sealed files does (a Snakemake param: a file replaced,
    or restored with `cp -p`, after its manifest reruns the analysis, which then names it). Files untouched
    since sealed are not read; a copied store's are hashed."""
    digest = hashlib.sha256()
    for folder in map(Path, folders):
        try:
            manifest = read(folder)
            state = [problem(folder / name, manifest) or name for name in sorted(manifest["files"])]
            digest.update(json.dumps([str(folder), manifest["run"], _sealed(manifest), state]).encode())
        except (IntegrityError, MissingFile) as e:
            digest.update(str(e).encode())
    return digest.hexdigest()


def digest(folder: str | Path) -> str:
    """The run in `folder` as one value: its name and the sha256 its manifest sealed for each file. What an analysis
    file records of each run it was computed from (mcgrpo.analysis.steps), so that a run retrained, set aside or
    replaced since is told from the one it read: the files themselves are checked against the manifest by every
    reader, so the manifest's word stands for them."""
    manifest = read(folder)
    return hashlib.sha256(json.dumps([manifest["run"], _sealed(manifest)], sort_keys=True).encode()).hexdigest()


def _sealed(manifest: dict) -> dict[str, str]:
    return {name: entry["sha256"] for name, entry in manifest["files"].items()}


def check_store(runs: str | Path) -> tuple[dict[str, list[str]], list[str]]:
    """Every run of a run store (results/_shared/runs) verified in full: ({run: what is wrong} of the runs to
    retrain, the runs not finished, which are left alone: a run still training, or one its retry resumes)."""
    bad, pending = {}, []
    for folder in sorted(p for p in Path(runs).iterdir() if p.is_dir() and not p.name.startswith(".")):
        if unfinished(folder):
            pending.append(folder.name)
            continue
        found = problems(folder)
        if not found and (why := unlisted(folder, read(folder)) or _data_problem(folder)):  # the analysis refuses it
            found = [why]
        if found:
            bad[folder.name] = found
    return bad, pending


def _data_problem(folder: Path) -> str | None:
    """Where a verified run recorded other problems than its data folder holds now (mcgrpo.core.run_data)."""
    from mcgrpo.core import run_data  # it reads the store's layout, which reads configs: not for every reader
    if "run.json" not in read(folder)["files"]:
        return None
    run = read_json(folder / "run.json")
    return run_data.problem(folder, run, RETRAIN) if isinstance(run, dict) else None


def unfinished(folder: Path) -> bool:
    """Whether run folder `folder` holds no result yet (no manifest, no Parquet or JSON file): a run training, one
    its retry resumes, or one whose job failed (its train.log and checkpoints/ only)."""
    return not (folder / MANIFEST).exists() and not not_regular(folder / MANIFEST) and not any(
        p.suffix in (".parquet", ".json") for p in folder.iterdir())


def quarantine(folder: str | Path, into: str | Path) -> Path:
    """Move a run's folder aside, into `into`/<run>-<UTC time> (never deleted), so that the workflow retrains it."""
    folder = Path(folder)
    target = Path(into) / f"{folder.name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder, target)
    return target
