"""Rollout engines behind one interface: generate from token prompts with per-request seeds, sync weights."""

from __future__ import annotations

import contextlib

from mcgrpo.train.engines.base import Completion, Engine


VLLM_OPTIONS = ("gpu_memory_utilization", "kv_cache_gib")  # engine options of the config that only vllm reads


def build(name: str, model, tokenizer, **options) -> Engine:
    """The engine named in the config's `engine.name`, given the engine options it reads."""
    if name == "hf":
        from mcgrpo.train.engines.hf import HFEngine
        return HFEngine(model, tokenizer, **{k: v for k, v in options.items() if k not in VLLM_OPTIONS})
    if name == "vllm":
        from mcgrpo.train.engines.vllm import VLLMEngine  # raises, saying how to install vllm, where it is missing
        return VLLMEngine(model, tokenizer, **options)
    raise ValueError(f"engine.name: unknown engine {name!r}; allowed: hf, vllm")


@contextlib.contextmanager
def greedy(engine: Engine):
    """The engine at temperature 0 inside the block: greedy decoding, one argmax completion per request (the hf
    engine takes the first of tied tokens; vLLM's SamplingParams treat temperature 0 as greedy)."""
    saved, engine.temperature = engine.temperature, 0.0
    try:
        yield engine
    finally:
        engine.temperature = saved


__all__ = ["Completion", "Engine", "build", "greedy"]
