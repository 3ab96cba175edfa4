"""Which problems a run trained and was evaluated on, recorded in its run.json and held to its data folder.

A run's key and identity hash its config, not the files of its data folder (results/_shared/data/<task hash>:
pool.parquet, eval_<set>.parquet): a folder regenerated from an edited data file (`task.pool.path`), edited, or
swapped after some runs trained would have the study's later runs train or be evaluated on other problems than
its earlier ones, and every contrast would compare them without a word. So the trainer records a fingerprint of
each data file it read (`fingerprint`) in run.json's `data` and in its checkpoints' identity (an interrupted run
never resumes onto other data; `mcgrpo ingest` records it too, for the sets it evaluated a TRL folder's
checkpoints on), and every reader of a stored run holds that record to the data folder as it is
now (`problem`: mcgrpo.core.study_runs, and check-store, whose --repair sets such a run aside to be retrained).

The fingerprint is of the problems, not of the file's bytes: the table's columns and values in Arrow's IPC form,
its metadata (the pyarrow and pandas versions that wrote it) left out, so that a folder regenerated to the same
problems by a newer pyarrow is the same data.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import pyarrow as pa

from mcgrpo.core import layout, store
from mcgrpo.core.errors import McgrpoError

DATA = "data"  # run.json's key: {file name: fingerprint} of each data file the run read
MODEL = "model_sha256"  # run.json's key: the fingerprint of the weights and tokenizer it started from (an ingested
# run's: the study's initial model, which evaluated its point 0 and whose tokenizer read every checkpoint's samples)


def files(eval_names) -> list[str]:
    """The data files a run reads: the pool and its evaluation sets."""
    return ["pool.parquet", *(f"eval_{name}.parquet" for name in eval_names)]


def fingerprint(folder: str | Path, eval_names) -> dict[str, str]:
    """{file name: sha256 of its problems} of the data files in `folder` that a run with `eval_names` reads."""
    return {name: _problems_hash(Path(folder) / name) for name in files(eval_names)}


def _problems_hash(path: Path) -> str:
    s = store.regular(layout.filed(path)).stat()
    return _hashed(path, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)


@lru_cache(maxsize=256)
def _hashed(path: Path, *stamp: int) -> str:
    """Hashed once per process and file state: every analysis step checks each run against the same files."""
    table = store.read_arrow(path, store.COLUMNS["problems"]).replace_schema_metadata(None).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue()).hexdigest()


def inputs(run: dict) -> dict[str, str]:
    """{what: fingerprint} of what run.json `run` recorded it started from: each data file, and the model."""
    data = run.get(DATA)
    out = {name: str(value) for name, value in sorted(data.items())} if isinstance(data, dict) else {}
    return {**out, MODEL: str(run[MODEL])} if run.get(MODEL) is not None else out


def describe(name: str) -> str:
    """What an entry of `inputs` is, in a message."""
    return "the model's weights and tokenizer" if name == MODEL else f"the problems of {name}"


def advice(name: str, run_folder: Path, run: dict) -> str:
    """What makes runs that disagree on `name` agree: the data folder restored or prepared again (then every run
    is held to it, and check-store sets the others aside), or the runs from another model retrained."""
    if name == MODEL:
        return ("runs trained from one model: set aside those trained from the model no longer there (mv their "
                "stored run folders into results/_shared/quarantine/) and rerun the workflow, which retrains them; "
                "pin the model (model.source.revision, or a folder nothing writes to)")
    return (f"runs of one preparation of the data: restore {data_folder(run_folder, run)} (or prepare it again: "
            f"rerun the workflow), then python -m mcgrpo check-store --repair sets aside the runs trained on other "
            f"data, and the workflow retrains them")


def data_folder(run_folder: Path, run: dict) -> Path:
    """The data folder of the run stored in `run_folder` (links followed): its store's, for the run's task."""
    shared = Path(run_folder).resolve().parent.parent
    return layout.data_dir({"results_dir": str(shared.parent), "task": run["config"]["task"]})


def problem(run_folder: Path, run: dict, retrain: str) -> str | None:
    """Where stored run `run_folder` (its run.json `run`) recorded other problems than its data folder holds now,
    what differs; None where they agree, where the run recorded none (trained, or ingested from another trainer,
    before runs recorded their data) or where the folder's file is gone (nothing to hold it to)."""
    recorded = run.get(DATA)
    if not isinstance(recorded, dict) or not isinstance(run.get("config"), dict):
        return None
    folder = data_folder(run_folder, run)
    for name, then in sorted(recorded.items()):
        path = folder / name
        if not path.exists() and not store.not_regular(path):
            continue
        try:
            now = _problems_hash(path)
        except (McgrpoError, OSError) as e:  # damaged, of another schema, or another key's (layout.filed)
            return f"{e}: the data {run_folder / 'run.json'} trained on cannot be verified"
        if now != then:
            return (f"{path}: its problems hash to {now[:12]}, but {run_folder / 'run.json'} trained and was "
                    f"evaluated on {str(then)[:12]}: the prepared data changed after the run trained (prepared "
                    f"again from an edited data file, edited or swapped), so the study's runs would compare other "
                    f"problems; allowed: the data its runs trained on (restore the file), or runs trained on this "
                    f"data: {retrain}")
    return None
