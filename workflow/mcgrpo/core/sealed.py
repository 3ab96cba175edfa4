"""What an analysis file records of its own content, so that an edit that keeps the rest of the file is told.

An analysis file (analysis/<name>.parquet, analysis/prereg.json, and the gradient tests'
analysis/gradient_tests.parquet) is held to the study's config, runs and lock by what it records of them
(mcgrpo.analysis.steps), and no manifest vouches for it: rows edited and written back with the file's metadata copied
(pandas or pyarrow), or a key of prereg.json edited, changed nothing those checks read, and the tables, figures and
summary worded their verdicts from the edited numbers. So each file records `sealed`, a sha256 of its content (a Parquet
file's columns, their types and rows as Arrow reads them back, and pandas' metadata, the rest of its metadata left out;
a JSON file's other keys), and every reader refuses one whose content hashes otherwise. A checksum, not a signature: it
tells a file edited by hand or by mistake, not one sealed again with this code.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from mcgrpo.core import store
from mcgrpo.core.errors import IntegrityError

KEY = "sealed"


def of_rows(table: pa.Table) -> str:
    """The sha256 of `table`'s columns, their types and its rows, and of pandas' metadata, which says how a reader's
    frame is made of them (a column named as its index leaves the frame); the rest of its metadata left out."""
    pandas = (table.schema.metadata or {}).get(b"pandas", b"").decode()
    return _sha256([[[field.name, str(field.type)] for field in table.schema], table.to_pydict(), pandas])


def of_frame(df: pd.DataFrame) -> str:
    """of_rows of `df` as a Parquet file of it reads back (store.write_parquet's conversion), so that the reader's
    hash of the file is the writer's."""
    buffer = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), buffer)
    return of_rows(pq.read_table(pa.BufferReader(buffer.getvalue())))


def of_json(obj: dict) -> str:
    """The sha256 of a JSON object's keys but KEY, as the object reads back from its file (store.write_json's)."""
    return _sha256(json.loads(json.dumps({key: value for key, value in obj.items() if key != KEY}, default=str)))


def with_seal(obj: dict) -> dict:
    """JSON object `obj` with its seal, as an analysis step writes it."""
    return {**obj, KEY: of_json(obj)}


def _sha256(body) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def held(path: Path, remedy: str | None = None) -> None:
    """Refuse analysis Parquet file `path` where its rows are not the ones it sealed; `remedy`: what writes it again,
    where the analysis's --forcerun does not."""
    if why := problem(path, store.parquet_metadata(path).get(KEY), of_rows(store.read_arrow(path)), remedy):
        raise IntegrityError(why)


def json_problem(path: Path, obj: dict) -> str | None:
    """problem() of analysis JSON file `path`, read as `obj`: None where its keys are the ones it sealed."""
    return problem(path, obj.get(KEY), of_json(obj))


def problem(path: Path, recorded: str | None, found: str, remedy: str | None = None) -> str | None:
    """What is wrong with analysis file `path`, which records `recorded` of its content and hashes to `found`
    (None where they agree); `remedy`: what writes it again, where the analysis's --forcerun does not."""
    if recorded == found:
        return None
    why = (f"its content hashes to {found[:12]}, but it records {str(recorded)[:12]} as written: edited since it "
           f"was written" if recorded else
           "records no seal of its content (written before analysis files sealed theirs, or by hand)")
    return f"{path}: {why}; allowed: " + (remedy or f"the file this study's analysis writes (snakemake --configfile "
                                                    f"STUDY --forcerun {path})")
