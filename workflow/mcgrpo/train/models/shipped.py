"""The default study's warm-started tiny model, shipped in the repository: the miniature's "pretrained checkpoint".

The paper trains released models; the miniature's counterpart is the tiny Llama after its supervised warm start,
which takes minutes of CPU. The one built from the default study's model and task blocks ships beside this module
(FOLDER, a Hugging Face folder) with BUILT_FROM: the warm-start spec it was built from (layout.warm_start_spec),
that spec's hash (the one the run store names the model folder by) and each file's sha256. The warm_start rule
copies it, byte for byte, when a study's spec hashes the same, and warm-starts as before otherwise.

`make tiny-model` (`python -m mcgrpo.tiny_model`, above the CLI it drives) rebuilds it with the pipeline's own
code and says which files differ (`differences`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from mcgrpo.core import layout, store
from mcgrpo.core.errors import IntegrityError
from mcgrpo.core.config import config_hash
from mcgrpo.core.machine import cpu_model

FOLDER = Path(__file__).with_name("tiny-default")
BUILT_FROM = "built_from.json"
THREADS = 2  # the warm_start rule's threads on the machine it was built on (2 cores)


def record(folder: Path = FOLDER) -> dict | None:
    """What the shipped checkpoint was built from, or None where none is shipped."""
    path = Path(folder) / BUILT_FROM
    return json.loads(path.read_text()) if path.exists() else None


def matches(spec: dict, folder: Path = FOLDER) -> bool:
    """Whether the shipped checkpoint is the warm start of `spec` (its hash, as the run store computes it)."""
    built = record(folder)
    return built is not None and built["hash"] == config_hash(spec)


def copy_to(out: str | Path, folder: Path = FOLDER) -> Path:
    """The shipped model files and their BUILT_FROM (what `held` holds the folder to) copied into `out`, written
    aside and renamed into place."""
    with store.atomic(out, directory=True) as tmp:
        for name in [*record(folder)["files"], BUILT_FROM]:
            shutil.copyfile(Path(folder) / name, tmp / name)
    return Path(out)


def held(folder: str | Path) -> None:
    """Refuse a warm-started model folder whose files are not those its warm start recorded in BUILT_FROM: a file
    replaced since (another checkpoint's weights renamed into it), or, in the store (_shared/models/<name>-<key>),
    another warm start's folder copied over it. Every run would start from other weights than its config's warm
    start, all alike, which holding the runs to each other (model_sha256) cannot tell. A folder without BUILT_FROM
    (warm-started before it was written, or saved by hand) is held to nothing."""
    folder = Path(folder)
    built = record(folder)
    if built is None:
        return
    again = (f"allowed: the warm start's own files: move {folder} away and rerun the workflow, which warm-starts it "
             f"again (runs trained from other weights are named by the model check: docs/store-integrity.md)")
    filed = _filed_as(folder)
    if filed is not None and built.get("model_folder") != filed:
        raise IntegrityError(f"{folder / BUILT_FROM}: written by the warm start of {built.get('model_folder')}, "
                             f"but filed as {filed}: copied from another warm start's folder; {again}")
    for name, digest in sorted(built["files"].items()):
        now = _sha256(folder / name) if (folder / name).is_file() else "(missing)"
        if now != digest:
            raise IntegrityError(f"{folder / name}: its sha256 is {now[:12]}, but {folder / BUILT_FROM} records "
                                 f"{digest[:12]}, as the warm start wrote it: replaced since (another model's file "
                                 f"copied in or renamed, or edited); {again}")


def _filed_as(folder: Path) -> str | None:
    """The name a model folder of the store (_shared/models/<name>-<key>, links followed) is filed under; None
    elsewhere (a test's or a hand-run's own folder, or the shipped one), where no name says what it must be."""
    resolved = folder.resolve()
    in_store = resolved.parent.name == "models" and resolved.parent.parent.name == layout.SHARED
    return resolved.name if in_store else None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def describe(model_folder: Path, spec: dict, threads: int) -> dict:
    """BUILT_FROM for a freshly built model folder: the spec, its hash, each file's sha256, and where it was built."""
    import torch
    import transformers
    files = {p.name: _sha256(p) for p in sorted(Path(model_folder).iterdir())
             if p.name != BUILT_FROM and not p.name.startswith(".")}  # not Snakemake's .snakemake_timestamp
    return {"spec": spec, "hash": config_hash(spec), "model_folder": f"{spec['model']['name']}-{config_hash(spec)[:12]}",
            "files": files, "built_with": {"threads": threads, "cpu": cpu_model(), "torch": torch.__version__,
                                           "transformers": transformers.__version__}}


def differences(built: dict, shipped: dict) -> list[str]:
    """The files whose bytes differ between two BUILT_FROM records (or that only one of them has)."""
    names = sorted(set(built["files"]) | set(shipped["files"]))
    return [n for n in names if built["files"].get(n) != shipped["files"].get(n)]
