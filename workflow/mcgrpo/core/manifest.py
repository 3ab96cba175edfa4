"""Stored runs that verify themselves: each run folder's manifest.json, written last, lists every result file
the run wrote with its sha256, under the run's identity; every reader checks the file it reads against it.

Its own file rather than a key of run.json: run.json is one of the files it vouches for (a file cannot hold its
own hash), and a manifest written last, atomically, is also the mark that the run finished writing: a folder
without one never finished, or predates manifests (runs written before them are refused: `mcgrpo check-store
--repair` sets them aside for retraining).

A file is checked to be listed in the manifest and to have the sha256 sealed; where it has not, its Parquet
`config_hash` metadata tells another run's file (config_hash differs) from one changed after the run finished
(sha256 differs). The manifest itself is checked against the run it is read as: a study's runs/<arm>/seed<N>
links to the store's runs/<key>, and runs/store.parquet names that key.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import pyarrow.parquet as pq

from mcgrpo.core.errors import IntegrityError, MissingFile
from mcgrpo.core.store import write_json

MANIFEST = "manifest.json"
RETRAIN = "set it aside to retrain it: python -m mcgrpo check-store --repair, then rerun the workflow"


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


def _expected_run(folder: Path) -> tuple[str, str] | None:
    """(what names it, the stored run key) that a study's runs/<arm>/seed<N> must be, from runs/store.parquet;
    None for a folder that is no study's link (the store's own, or one written by hand)."""
    index = folder.parent.parent / "store.parquet"
    if not (folder.is_symlink() and folder.name.startswith("seed") and folder.name[4:].isdigit() and index.exists()):
        return None
    s = index.stat()
    key = _index(index, s.st_mtime_ns, s.st_size).get((folder.parent.name, int(folder.name[4:])))
    return (str(index), key) if key else None


@lru_cache(maxsize=64)
def _index(path: Path, mtime: int, size: int) -> dict[tuple[str, int], str]:
    table = pq.read_table(path, columns=["arm", "seed", "run"]).to_pydict()
    return {(a, int(s)): r for a, s, r in zip(table["arm"], table["seed"], table["run"])}


def read(folder: str | Path) -> dict:
    """The run folder's manifest, checked to be the run the folder is read as."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.exists():
        if not folder.exists():
            raise MissingFile(f"{folder}: run folder not found")
        raise IntegrityError(f"{path}: missing: the run never finished writing, or was trained before runs were "
                             f"sealed; its files cannot be verified: {RETRAIN}")
    s = path.stat()
    manifest = _manifest(path, s.st_ino, s.st_mtime_ns, s.st_ctime_ns)
    expected = _expected_run(folder)
    if expected:
        index, key = expected
        target = folder.resolve().name
        if target != key:
            raise IntegrityError(f"{folder}: links to stored run {target}, but {index} says {key}: relink it "
                                 f"(rerun the workflow)")
        if manifest["run"] != key:
            raise IntegrityError(f"{path}: belongs to run {manifest['run']}, not {key} (a run's folder copied over "
                                 f"another's): {RETRAIN}")
    return manifest


@lru_cache(maxsize=4096)
def _manifest(path: Path, *stamp: int) -> dict:
    try:
        manifest = json.loads(path.read_text())
        if not isinstance(manifest.get("files"), dict) or "identity" not in manifest:
            raise ValueError("no 'files' or 'identity'")
    except (ValueError, AttributeError) as e:
        raise IntegrityError(f"{path}: not a run manifest ({e}): {RETRAIN}") from None
    return manifest


def problem(path: Path, manifest: dict, by_stamp: bool = True) -> str | None:
    """What is wrong with run file `path` against `manifest` (None when it is what the run wrote); `by_stamp`: a file
    whose stamp is the sealed one is taken as sealed, unread."""
    entry = manifest["files"].get(path.name)
    if entry is None:
        return f"{path}: not listed in {path.parent / MANIFEST}, so not written by this run"
    if not path.exists():
        return f"{path}: missing, though {MANIFEST} lists it: {RETRAIN}"
    if by_stamp and _stamp(path) == entry.get("stamp"):
        return None  # untouched since sealed: the hash it had then
    found = _hash(path, *_stamp(path))
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
    if not path.exists():
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
            sealed = {name: entry["sha256"] for name, entry in manifest["files"].items()}
            digest.update(json.dumps([str(folder), manifest["run"], sealed, state]).encode())
        except (IntegrityError, MissingFile) as e:
            digest.update(str(e).encode())
    return digest.hexdigest()


def check_store(runs: str | Path) -> tuple[dict[str, list[str]], list[str]]:
    """Every run of a run store (results/_shared/runs) verified in full: ({run: what is wrong} of the runs to
    retrain, the runs not finished, which are left alone: a run still training, or one its retry resumes)."""
    bad, unfinished = {}, []
    for folder in sorted(p for p in Path(runs).iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not (folder / MANIFEST).exists() and not any(p.suffix in (".parquet", ".json") for p in folder.iterdir()):
            unfinished.append(folder.name)
            continue
        found = problems(folder)
        if found:
            bad[folder.name] = found
    return bad, unfinished


def check_links(study: str | Path) -> dict[str, list[str]]:
    """A study's runs/<arm>/seed<N> checked against runs/store.parquet: {arm/seed: what is wrong}."""
    index = Path(study) / "runs" / "store.parquet"
    if not index.exists():
        return {}
    out = {}
    for (arm, seed), key in _index(index, index.stat().st_mtime_ns, index.stat().st_size).items():
        link = Path(study) / "runs" / arm / f"seed{seed}"
        try:
            if link.exists():
                read(link)
        except IntegrityError as e:
            out[f"{arm}/seed{seed}"] = [str(e)]
    return out


def quarantine(folder: str | Path, into: str | Path) -> Path:
    """Move a run's folder aside, into `into`/<run>-<UTC time> (never deleted), so that the workflow retrains it."""
    folder = Path(folder)
    target = Path(into) / f"{folder.name}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%fZ')}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder, target)
    return target
