"""Training checkpoints that survive preemption: written atomically, verified before use.

A checkpoint is a torch file plus a JSON manifest written after it (the manifest is the commit marker)
holding the file's sha256, the iteration and the run's identity (its config and B, and the problems it trains
and is evaluated on: mcgrpo.core.run_data). Loading takes the newest
checkpoint whose file matches its manifest, so a file damaged by a kill or a full disk falls back to the
previous one; every fallback, resume and restart is logged.
"""

from __future__ import annotations

import hashlib
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mcgrpo.core.errors import CheckpointMismatch
from mcgrpo.core.store import atomic, read_json, write_json

KEEP = 2  # the newest checkpoints kept; older ones are removed after each save
log = logging.getLogger("mcgrpo")


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save(state: dict[str, Any], directory: str | Path, iteration: int, config_hash: str) -> Path:
    """Write `state` as checkpoint `iteration` of `directory` and keep only the newest KEEP."""
    directory = Path(directory)
    path = directory / f"ckpt-{iteration:08d}.pt"
    with atomic(path) as tmp:
        torch.save(state, tmp)
    write_json({"file": path.name, "sha256": _sha256(path), "iteration": iteration,
                "config_hash": config_hash}, path.with_suffix(".json"))
    for old in _manifests(directory)[KEEP:]:  # each by its own name, never by what its manifest says
        old.with_suffix(".pt").unlink(missing_ok=True)
        old.unlink(missing_ok=True)
    return path


def _manifests(directory: Path) -> list[Path]:
    """Manifests, newest first."""
    return sorted(directory.glob("ckpt-*.json"), reverse=True)


def _damage(manifest_path: Path) -> tuple[dict | None, str]:
    """(the manifest, '') of an intact checkpoint, else (None, what is wrong with it)."""
    try:
        manifest = read_json(manifest_path)
        named, _, _ = manifest["file"], manifest["config_hash"], manifest["sha256"]
    except (ValueError, KeyError, TypeError, OSError) as e:
        return None, f"unreadable manifest ({type(e).__name__})"
    path = manifest_path.with_suffix(".pt")
    if named != path.name:  # edited, or copied beside another checkpoint: it vouches for another file
        return None, f"{manifest_path.name} names {named}, not its own checkpoint {path.name}"
    if not path.exists():
        return None, f"{path.name} is missing"
    if _sha256(path) != manifest["sha256"]:
        return None, f"{path.name} does not match its sha256 (truncated or damaged)"
    return manifest, ""


def latest(directory: str | Path, config_hash: str) -> dict[str, Any] | None:
    """The newest intact checkpoint's state, or None; refuse one written under another identity
    (config or B)."""
    directory = Path(directory)
    manifests = _manifests(directory) if directory.is_dir() else []
    for manifest_path in manifests:
        manifest, damage = _damage(manifest_path)
        if manifest is None:
            log.warning(f"checkpoint {manifest_path.with_suffix('.pt')} skipped: {damage}")
            continue
        path = directory / manifest["file"]
        if manifest["config_hash"] != config_hash:
            raise CheckpointMismatch(
                f"{path}: written by a run with identity {manifest['config_hash'][:12]}, this run's is "
                f"{config_hash[:12]} (its config or its budget B changed, the problems of its data folder "
                f"that it trains and is evaluated on, or the weights and tokenizer of the model it starts from: "
                f"its model folder replaced); resuming would mix two runs. "
                f"Delete {directory} to start this run over.")
        log.info(f"resuming from {path} (iteration {manifest['iteration']})")
        return torch.load(path, weights_only=False)
    if manifests:
        log.warning(f"every checkpoint in {directory} is damaged; restarting the run from scratch")
    return None

