"""Raw records from the files researchers have: a folder of per-problem JSON files, JSONL, Parquet,
or a Hugging Face data set already in the local cache. Each record says where it came from, so
that a malformed one is reported by file and line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pandas as pd

from mcgrpo.core.errors import DataError, MissingFile

SUFFIXES = (".jsonl", ".parquet", ".json")
NO_LEVEL = 0  # "Level ?", GSM8K, and records without a level


@dataclass(frozen=True)
class Record:
    fields: dict
    where: str      # "file:line", "file row n", or "hf:name[split] row n", for error messages
    key: str        # stable identity within its source: unique_id, relative path or index

    def get(self, name: str, default=None):
        value = self.fields.get(name, default)
        return default if value is None else value

    def require(self, name: str, needs: str) -> str:
        """The field as text; a missing or empty one is an error naming the file, line and field."""
        value = self.fields.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise DataError(f"{self.where}: missing field {name!r}; {needs}")
        return str(value)


def describe(source: dict) -> str:
    """How a source is named in messages and problem ids."""
    if source.get("hf"):
        hf = source["hf"]
        return f"hf:{hf['name']}[{hf.get('split', 'train')}]"
    return str(source["path"])


def read(source: dict) -> list[Record]:
    """Every record of a source (`{path: ...}` or `{hf: {name, config, split}}`), in file order."""
    if source.get("hf"):
        return list(_hf(source["hf"]))
    path = Path(source["path"])
    if path.is_dir():
        return list(_tree(path))
    if not path.exists():
        raise MissingFile(f"{path}: data file not found")
    readers = {".jsonl": _jsonl, ".parquet": _parquet, ".json": _json_file}
    if path.suffix not in readers:
        raise DataError(f"{path}: unknown data format {path.suffix or '(no suffix)'!r}; allowed: a folder "
                         f"of per-problem .json files, {', '.join(SUFFIXES)}, or hf: a cached data set")
    return list(readers[path.suffix](path))


def _object(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise DataError(f"{where}: expected a JSON object with named fields, got {type(value).__name__}")
    return value


def _loads(text: str, where: str) -> dict:
    try:
        return _object(json.loads(text), where)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None


def _decode(raw: bytes, path: Path, line: int | None = None) -> str:
    """UTF-8 text; otherwise an error naming the file, line and column of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = line or raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(f"{path}:{line}: byte 0x{raw[e.start]:02x} at column {column} is not UTF-8 text; "
                        f"allowed: files saved as UTF-8") from None


def _jsonl(path: Path) -> Iterator[Record]:
    with path.open("rb") as lines:
        for n, raw in enumerate(lines, 1):
            line = _decode(raw, path, n)
            if line.strip():
                fields = _loads(line, f"{path}:{n}")
                yield Record(fields, f"{path}:{n}", str(fields.get("unique_id") or f"{path.stem}/{n}"))


def _json_file(path: Path) -> Iterator[Record]:
    """One problem per file (the original MATH layout), keyed by `<split>/<subject>/<n>.json`."""
    fields = _loads(_decode(path.read_bytes(), path), str(path))
    yield Record(fields, str(path), str(fields.get("unique_id") or path.name))


def _tree(root: Path) -> Iterator[Record]:
    files = sorted(root.rglob("*.json"))
    if not files:
        raise MissingFile(f"{root}: no .json problem files in this folder (expected <subject>/<n>.json)")
    for file in files:
        fields = _loads(_decode(file.read_bytes(), file), str(file))
        key = file.relative_to(root.parent).as_posix()  # train/algebra/0.json, as MATH's unique_id
        yield Record({"subject_dir": file.parent.name, **fields}, str(file), key)


def _parquet(path: Path) -> Iterator[Record]:
    for n, fields in enumerate(pd.read_parquet(path).to_dict("records")):
        yield Record(fields, f"{path} row {n}", str(fields.get("unique_id") or f"{path.stem}/{n}"))


def _hf(hf: dict) -> Iterator[Record]:
    """A data set from the local Hugging Face cache; nothing is downloaded during a study."""
    name, split = hf["name"], hf.get("split", "train")
    where = f"hf:{name}[{split}]"
    try:
        import datasets
    except ImportError:
        raise DataError(f"{where}: reading a Hugging Face data set needs the datasets package "
                         f"(pip install datasets)") from None
    try:
        rows = datasets.load_dataset(name, hf.get("config"), split=split)
    except Exception as e:  # noqa: BLE001 - any failure here means the data set is not usable
        raise DataError(f"{where}: cannot load this data set from the local cache: {e}") from None
    for n, fields in enumerate(rows):
        yield Record(dict(fields), f"{where} row {n}", str(fields.get("unique_id") or f"{split}/{n}"))


def frame(rows: list[dict], source: dict) -> pd.DataFrame:
    """The problems contract's columns, with a clear error for an empty source or repeated ids."""
    if not rows:
        raise DataError(f"{describe(source)}: no problems in this source")
    out = pd.DataFrame(rows).astype({"level": "int64"})
    repeated = out["problem_id"][out["problem_id"].duplicated()]
    if len(repeated):
        raise DataError(f"{describe(source)}: problem id {repeated.iloc[0]!r} occurs more than once")
    return out
