"""`make tiny-model` (`python -m mcgrpo.tiny_model`): rebuild the shipped warm-started tiny model
(mcgrpo.train.models.shipped) with the pipeline's own verbs and say which files differ.

It drives the CLI (prepare-data, then warm-start --rebuild), so it sits above it: nothing in the package imports
this module. The warm start is deterministic on one machine, but another CPU (or thread count, or torch build)
rounds differently, so differing bytes there are expected, not a bug.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from mcgrpo import cli, studies
from mcgrpo.core import layout
from mcgrpo.train.models import shipped


def rebuild(config_path: str | Path, out: Path, threads: int = shipped.THREADS) -> dict:
    """The warm start of the study at `config_path`, built in `out` by the pipeline's own steps (prepare-data,
    then warm-start ignoring any shipped checkpoint); return its BUILT_FROM record (also written there)."""
    cfg = studies.load(config_path)
    spec = layout.warm_start_spec(cfg)
    data, model = out / "data", out / "model"
    for argv in (["prepare-data", "--task-json", json.dumps(cfg["task"]), "--out", str(data)],
                 ["warm-start", "--model-json", json.dumps(spec), "--data", str(data), "--out", str(model),
                  "--threads", str(threads), "--rebuild"]):
        if cli.main(argv) != 0:
            raise SystemExit(f"make tiny-model: `mcgrpo {argv[0]}` failed")
    built = shipped.describe(model, spec, threads)
    (model / shipped.BUILT_FROM).write_text(json.dumps(built, indent=1, sort_keys=True) + "\n")
    return built


def main(argv: list[str] | None = None) -> int:
    """Rebuild the shipped checkpoint into a temporary folder and report whether its bytes match (exit 0 either
    way); --write replaces the shipped one with the rebuild (after a change to the default study's model)."""
    p = argparse.ArgumentParser(prog="make tiny-model", description=main.__doc__)
    p.add_argument("--config", default="config/config.yaml", help="the study (default: the default study)")
    p.add_argument("--write", action="store_true", help="replace the shipped checkpoint with the rebuild")
    p.add_argument("--threads", type=int, default=shipped.THREADS,
                   help=f"torch threads (default {shipped.THREADS}, as shipped)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tiny-model.") as tmp:
        built = rebuild(args.config, Path(tmp), args.threads)
        before = shipped.record()
        if before is None or before["hash"] != built["hash"]:
            print(f"make tiny-model: the shipped checkpoint is not the warm start of {args.config} "
                  f"(its spec hash differs); --write replaces it")
        else:
            differ = shipped.differences(built, before)
            print("make tiny-model: the rebuild matches the shipped checkpoint byte for byte" if not differ else
                  f"make tiny-model: these files differ from the shipped ones: {', '.join(differ)}\n"
                  f"  (built on {before['built_with']['cpu']} with {before['built_with']['threads']} threads; "
                  f"here on {built['built_with']['cpu']} with {args.threads}: another CPU, thread count or torch "
                  f"build rounds differently, which is expected)")
        if args.write:
            if shipped.FOLDER.exists():
                shutil.rmtree(shipped.FOLDER)
            shutil.copytree(Path(tmp) / "model", shipped.FOLDER)
            print(f"make tiny-model: written to {shipped.FOLDER}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
