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

from mcgrpo.core import store
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
    """The shipped model files (not BUILT_FROM) copied into `out`, written aside and renamed into place."""
    with store.atomic(out, directory=True) as tmp:
        for name in record(folder)["files"]:
            shutil.copyfile(Path(folder) / name, tmp / name)
    return Path(out)


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
