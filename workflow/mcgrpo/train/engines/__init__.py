"""Rollout engines behind one interface: generate from token prompts with per-request seeds, sync weights."""

from __future__ import annotations

import contextlib

from mcgrpo.train.engines.base import Completion, Counting, Engine


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
def sampling(engine: Engine, **settings):
    """The engine with other sampling settings (temperature, top_p: attributes every engine reads at each
    generate call) inside the block, restored after it."""
    saved = {k: getattr(engine, k) for k in settings}
    for k, v in settings.items():
        setattr(engine, k, v)
    try:
        yield engine
    finally:
        for k, v in saved.items():
            setattr(engine, k, v)


def greedy(engine: Engine):
    """The engine at temperature 0 inside the block: greedy decoding, one argmax completion per request (the hf
    engine takes the first of tied tokens; vLLM's SamplingParams treat temperature 0 as greedy)."""
    return sampling(engine, temperature=0.0)


__all__ = ["Completion", "Counting", "Engine", "build", "greedy", "sampling"]
