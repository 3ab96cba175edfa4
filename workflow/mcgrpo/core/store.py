"""Atomic writes (the one helper every output goes through), Parquet/JSON carrying schema metadata, and
readers that check it.

Every intermediate of a study is a Parquet file so that any contrast can be recomputed
without retraining; a killed job must never leave a half-written file behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mcgrpo import __version__
from mcgrpo.core.clock import STAGES
from mcgrpo.core.errors import DataError, IntegrityError, MissingFile, SchemaError

SCHEMA_VERSION = "1"
log = logging.getLogger("mcgrpo")


@lru_cache(maxsize=1)
def git_sha() -> str:
    """The repository's commit; outside a git checkout, MCGRPO_GIT_SHA (the images set it from their GIT_SHA
    build argument: there is neither .git nor git in them), else '' (asked once per process)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, timeout=5)
        if out.returncode == 0:
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("MCGRPO_GIT_SHA", "")


@lru_cache(maxsize=1)
def code_sha256() -> str:
    """mcgrpo's own code as a run's job runs it (asked once per process): see package_sha256."""
    return package_sha256(Path(__file__).parents[1])


def package_sha256(package: Path) -> str:
    """The first 12 hex digits of the sha256 of a package's .py files, by their paths and bytes, but its analysis/
    (which reads stored runs and trains none): what each run's versions record as mcgrpo_code, so that two runs
    made by different code are told apart (mcgrpo.analysis.alike) where git_sha cannot: an installed copy has
    none, and a commit that changes only the docs or the analysis moves it."""
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*.py") if "analysis" not in p.relative_to(package).parts[:1]):
        digest.update(f"{path.relative_to(package).as_posix()}\0{len(data := path.read_bytes())}\0".encode() + data)
    return digest.hexdigest()[:12]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic(path: str | Path, directory: bool = False) -> Iterator[Path]:
    """A temporary file (or folder) beside `path` to write into; renamed onto `path` when the block
    succeeds and removed in any case, so a killed job never leaves a half-written output behind (one
    killed with SIGKILL leaves a `.<name>.*.tmp` that `remove_orphans` clears). The output gets the
    permissions the umask gives a new file (0644 under 022), not the temporary file's private 0600."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if directory:
            tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        else:
            fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            os.close(fd)
            tmp = Path(name)
    except OSError as e:  # read-only, a file in the folder's place, a full disk: the user's to fix
        raise DataError(f"{path.parent}: cannot write {path.name} here ({e.strerror}); allowed: a folder "
                        f"this user can write") from None
    if not directory and path.is_dir():  # os.replace cannot put a file over a folder: say so before writing
        raise DataError(f"{path}: a folder, where a file is to be written; allowed: a file path (another name, or "
                        f"move the folder away)")
    try:
        yield tmp
        os.chmod(tmp, (0o777 if directory else 0o666) & ~_umask())
        if directory and path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if directory:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def remove_orphans(directory: str | Path) -> list[Path]:
    """Remove the temporary files and folders `atomic` left in `directory` when its writer was killed."""
    directory, removed = Path(directory), []
    for tmp in sorted(directory.glob(".*.tmp")) if directory.is_dir() else []:
        shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        removed.append(tmp)
        log.info(f"removed {tmp}, left by a writer that was killed")
    return removed


def write_text(text: str, path: str | Path) -> Path:
    """Write `text` to `path` atomically."""
    with atomic(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_parquet(df: pd.DataFrame, path: str | Path, config_hash: str = "",
                  metadata: dict[str, str] | None = None) -> Path:
    """Write `df` to `path` via a temporary file and rename, with the contract's metadata (and `metadata`, more
    key-value pairs that parquet_metadata reads back)."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta.update({k.encode(): v.encode() for k, v in (metadata or {}).items()})
    meta.update({b"schema_version": SCHEMA_VERSION.encode(),
                 b"mcgrpo_version": __version__.encode(),
                 b"git_sha": git_sha().encode(),
                 b"config_hash": config_hash.encode()})
    with atomic(path) as tmp:
        pq.write_table(table.replace_schema_metadata(meta), tmp)
    return Path(path)


_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def not_regular(path: str | Path) -> str | None:
    """What `path` is when it is there but no regular file (a folder, a FIFO, a device, a socket), else None.
    Asked before any file is opened: opening a FIFO for reading blocks until someone writes to it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:  # a link loop, a path through a file
        return f"not reachable ({e.strerror})"
    return None if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "no regular file")


def regular(path: str | Path, advice: str = "the file its writer left") -> Path:
    """`path`, once it is a regular file this user can read: else one line naming it, what it is, and `advice`.
    `MissingFile` where it is not there."""
    path = Path(path)
    kind = not_regular(path)
    if kind:
        raise IntegrityError(f"{path}: {kind}, not a file; allowed: {advice}")
    if not path.exists():
        raise MissingFile(f"{path}: file not found")
    if not os.access(path, os.R_OK):
        raise IntegrityError(f"{path}: cannot be read by this user (permission denied); allowed: a readable file "
                             f"(chmod u+r {path})")
    return path


@contextmanager
def _readable(path: Path, *also: type[Exception]) -> Iterator[None]:
    """Arrow's error on a truncated or corrupt file (ArrowInvalid: 'Parquet magic bytes not found in footer', an
    OSError, and `also`: what the caller's step raises on a corrupt file) as one that names the file."""
    try:
        yield
    except (pa.ArrowException, OSError, *also) as e:
        if isinstance(e, FileNotFoundError):
            raise MissingFile(f"{path}: file not found") from None
        raise IntegrityError(f"{path}: not a readable Parquet file, truncated or corrupt ({type(e).__name__}: "
                             f"{e}); allowed: the file as its writer left it (a stored run's: retrain it, "
                             f"python -m mcgrpo check-store --repair)") from None


def _checked(path: Path, required: Iterable[str], dictionary: Iterable[str] = ()) -> pq.ParquetFile:
    """The file opened once (its footer parsed once, for the checks and the read), after its existence, schema
    version and required columns are checked."""
    regular(path)
    with _readable(path):
        opened = pq.ParquetFile(path, read_dictionary=list(dictionary) or None)
        schema = opened.schema_arrow
    version = (schema.metadata or {}).get(b"schema_version", b"").decode()
    if version != SCHEMA_VERSION:
        raise SchemaError(f"{path}: schema_version {version or 'missing'!r}, expected {SCHEMA_VERSION!r}")
    missing = [c for c in required if c not in schema.names]
    if missing:
        raise SchemaError(f"{path}: missing required column(s) {', '.join(missing)}")
    return opened


def _table(path: Path, required: Iterable[str], columns: Iterable[str] | None, dictionary: Iterable[str] = (),
           pandas: bool = False) -> pa.Table:
    """The checked file's `columns` (all where None) as Arrow, read in this thread: the analysis reads thousands
    of small files in rules of one thread each, where a reader's thread pool costs more than it decodes."""
    with _checked(path, required, dictionary) as opened, _readable(path):
        return opened.read(columns=None if columns is None else list(columns), use_threads=False,
                           use_pandas_metadata=pandas)


def read_parquet(path: str | Path, required: Iterable[str] = (),
                 columns: Iterable[str] | None = None) -> pd.DataFrame:
    """Read a Parquet file written by `write_parquet`, checking version and required columns.

    `columns` reads only those (a large file's other columns are never decoded). The frame is pandas.read_parquet's.
    """
    table = _table(Path(path), required, columns, pandas=True)
    with _readable(Path(path), KeyError, ValueError):  # pandas' metadata in the footer, changed: not a bug of ours
        frame = table.to_pandas(use_threads=False)
    indexed = [c for c in required if c in table.column_names and c not in frame.columns]  # read, but as the index
    if indexed:
        raise IntegrityError(f"{path}: pandas' metadata in the file makes required column(s) {', '.join(indexed)} the "
                             f"frame's index, which write_parquet never writes (edited); allowed: the file as its "
                             f"writer left it")
    return frame


def read_arrow(path: str | Path, required: Iterable[str] = (), columns: Iterable[str] | None = None,
               dictionary: Iterable[str] = ()) -> pa.Table:
    """As read_parquet, as an Arrow table (no pandas conversion); `dictionary` columns come dictionary-encoded."""
    return _table(Path(path), required, columns, dictionary)


def parquet_columns(path: str | Path) -> list[str]:
    """The column names of a Parquet file, from its footer alone."""
    with _readable(regular(path)):
        return pq.read_schema(path).names


def parquet_metadata(path: str | Path) -> dict[str, str]:
    """The key-value metadata of a Parquet file, decoded (pandas' own entry left out)."""
    with _readable(regular(path)):
        meta = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if k != b"pandas"}


def write_json(obj: Any, path: str | Path) -> Path:
    """Write `obj` as indented JSON, atomically."""
    return write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", path)


# The largest JSON file read (a run.json, a manifest, a lock are kilobytes): a larger one is refused unread.
JSON_LIMIT = 64 << 20


def read_json(path: str | Path, limit: int = JSON_LIMIT) -> Any:
    """A JSON file written by `write_json`; one line naming the file where it is missing, no regular file,
    unreadable, larger than `limit` bytes or no JSON."""
    path = regular(path)
    if path.stat().st_size > limit:
        raise IntegrityError(f"{path}: {path.stat().st_size:,} bytes, more than the {limit:,} such a file can hold; "
                             f"allowed: the file as its writer left it")
    try:
        return json.loads(path.read_bytes())
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, nested past Python's stack
        raise IntegrityError(f"{path}: not valid JSON ({type(e).__name__}: {str(e)[:200]}); allowed: the file as "
                             f"its writer left it") from None


# The Parquet contracts (docs/outputs.md says what each file holds): the minimum columns of each stored file kind.
COLUMNS: dict[str, tuple[str, ...]] = {
    "problems": ("problem_id", "question", "answer", "level", "subject", "source", "steps"),
    "budget": ("model", "iteration", "tokens_generated", "B"),
    "store": ("arm", "seed", "run", "calibration"),  # a study's runs/store.parquet: the stored run of each
    "iterations": (
        "iteration", "tokens_total", "tokens_rollout", "tokens_continuation", "tokens_discarded",
        "updates", "lr", "loss", "grad_norm", "reward_default", "reward_strict",
        "groups_all_wrong", "groups_all_correct", "groups_mixed", "truncated_share", "mean_length",
        "cand_pred_mean", "chosen_pred_mean", "prompts_distinct", *(f"t_{s}" for s in STAGES), "train_seconds",
    ),
    "evals": (
        "eval_index", "tokens_total", "iteration", "updates", "train_seconds", "eval_set",
        "acc_default", "acc_strict", "boxed_share", "truncated_share", "mean_length", "eval_seconds",
    ),
    "samples": (
        "eval_index", "eval_set", "problem_id", "sample", "correct_default", "correct_strict",
        "boxed", "truncated", "length",
    ),
    "prompts": ("iteration", "problem_id", "chosen", "predicted_success", "group_mean_reward"),
    "alignment": ("iteration", "arm", "batch", "measure", "value"),  # empty where the run is not measured
    "drift": ("arm", "seed", "eval_index", "acc_default", "acc_strict", "gap", "drifted"),
    "contrasts": (
        "contrast", "family", "label", "basis", "metric", "n", "mean", "ci_low", "ci_high", "p",
        "p_holm", "tost_p", "margin", "crossed_low", "crossed_high", "seeds_higher",
    ),
    "paired": ("contrast", "basis", "seed", "value_a", "value_b", "diff", "at"),
}


def read_contract(path: str | Path, kind: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
    """Read a stored file and check it holds the columns of contract `kind` (reading only `columns`)."""
    return read_parquet(path, COLUMNS[kind], columns)
