"""The default study's warm-started tiny model, shipped in the repository: the miniature's "pretrained checkpoint".

The paper trains released models; the miniature's counterpart is the tiny Llama after its supervised warm start,
which takes minutes of CPU. The one built from the default study's model and task blocks ships beside this module
(FOLDER, a Hugging Face folder) with BUILT_FROM: the warm-start spec it was built from (layout.warm_start_spec),
that spec's hash (the one the run store names the model folder by) and each file's sha256. The warm_start rule
copies it, byte for byte, when a study's spec hashes the same, and warm-starts as before otherwise.

`make tiny-model` (`python -m mcgrpo.train.models.shipped`) rebuilds it with the pipeline's own code and says
which files differ: the warm start is deterministic on one machine, but another CPU (or thread count, or torch
build) rounds differently, so differing bytes there are expected, not a bug.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
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


def rebuild(config_path: str | Path, out: Path, threads: int = THREADS) -> dict:
    """The warm start of the study at `config_path`, built in `out` by the pipeline's own steps (prepare-data,
    then warm-start ignoring any shipped checkpoint); return its BUILT_FROM record (also written there)."""
    from mcgrpo import cli, studies
    from mcgrpo.core import layout
    cfg = studies.load(config_path)
    spec = layout.warm_start_spec(cfg)
    data, model = out / "data", out / "model"
    for argv in (["prepare-data", "--task-json", json.dumps(cfg["task"]), "--out", str(data)],
                 ["warm-start", "--model-json", json.dumps(spec), "--data", str(data), "--out", str(model),
                  "--threads", str(threads), "--rebuild"]):
        if cli.main(argv) != 0:
            raise SystemExit(f"make tiny-model: `mcgrpo {argv[0]}` failed")
    built = describe(model, spec, threads)
    (model / BUILT_FROM).write_text(json.dumps(built, indent=1, sort_keys=True) + "\n")
    return built


def main(argv: list[str] | None = None) -> int:
    """Rebuild the shipped checkpoint into a temporary folder and report whether its bytes match (exit 0 either
    way); --write replaces the shipped one with the rebuild (after a change to the default study's model)."""
    p = argparse.ArgumentParser(prog="make tiny-model", description=main.__doc__)
    p.add_argument("--config", default="config/config.yaml", help="the study (default: the default study)")
    p.add_argument("--write", action="store_true", help="replace the shipped checkpoint with the rebuild")
    p.add_argument("--threads", type=int, default=THREADS, help=f"torch threads (default {THREADS}, as shipped)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tiny-model.") as tmp:
        built = rebuild(args.config, Path(tmp), args.threads)
        shipped = record()
        if shipped is None or shipped["hash"] != built["hash"]:
            print(f"make tiny-model: the shipped checkpoint is not the warm start of {args.config} "
                  f"(its spec hash differs); --write replaces it")
        else:
            differ = differences(built, shipped)
            print("make tiny-model: the rebuild matches the shipped checkpoint byte for byte" if not differ else
                  f"make tiny-model: these files differ from the shipped ones: {', '.join(differ)}\n"
                  f"  (built on {shipped['built_with']['cpu']} with {shipped['built_with']['threads']} threads; "
                  f"here on {built['built_with']['cpu']} with {args.threads}: another CPU, thread count or torch "
                  f"build rounds differently, which is expected)")
        if args.write:
            if FOLDER.exists():
                shutil.rmtree(FOLDER)
            shutil.copytree(Path(tmp) / "model", FOLDER)
            print(f"make tiny-model: written to {FOLDER}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
