"""Rollout engines behind one interface: generate from token prompts with per-request seeds, sync weights."""

from __future__ import annotations

from mcgrpo.engines.base import Completion, Engine, stable_seed


def build(name: str, model, tokenizer, **options) -> Engine:
    """The engine named in the config's `engine.name`."""
    if name == "hf":
        from mcgrpo.engines.hf import HFEngine
        return HFEngine(model, tokenizer, **options)
    raise ValueError(f"engine.name: unknown engine {name!r}; allowed: hf")


__all__ = ["Completion", "Engine", "build", "stable_seed"]
