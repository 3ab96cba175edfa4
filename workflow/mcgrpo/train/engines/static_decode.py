"""The hf engine's decode on a static KV cache: one step of fixed shapes, which a GPU can replay as a CUDA graph.

The dynamic decode (`hf.HFEngine`, the CPU's path) grows its cache by a column per step and shrinks the batch as
rows finish: every step's shapes differ, the host launches each kernel itself and reads each token back. At the
paper's shape on an H200 that cost 31 ms per step against a bandwidth floor under 1 ms (issue 45). Here, after
the same prefill, the batch's cache is one `StaticCache` of the prompts' width plus the horizon, finished rows stay
in place (their tokens after their end are never read), and a step (the model's forward on the last tokens, the
inverse-CDF sample on each row's own uniform, the bookkeeping) reads and writes only tensors that live for the
whole batch: the step index, the positions, the tokens and log-probs so far. Nothing in a step waits on the host;
the loop asks whether any row is still alive every CHECK_EVERY steps only.

Modes (the engine's `decode`): `static` runs the step eagerly (the CPU's test of the path: in fp32 it gives the
dynamic decode's tokens); `graph` captures it once per batch as a `torch.cuda.CUDAGraph` after WARMUP real
steps, inside the batch's autocast region (so the autocast cache's bf16 weights are cast once per batch, not
captured as casts) and replays it; `compile` runs it through `torch.compile(mode="reduce-overhead")`, which
captures CUDA graphs of its own (compiled once per process and shape: on a CPU, the tiny test model's step took
100 s to compile on two shared cores).
"""

from __future__ import annotations

import functools

import torch

from mcgrpo.train.engines.sampler import inverse_cdf

MODES = ("static", "graph", "compile")
CHECK_EVERY = 16  # steps between the loop's only host synchronisations (is any row still alive?)
WARMUP = 2        # real steps run eagerly on a side stream before a CUDA graph is captured


def supported(model) -> str | None:
    """Why `model` cannot decode on a static cache here (None: it can): the step hands the model a prepared 4D
    boolean mask, which only sdpa attention takes as it is, and every layer must be a full-attention one."""
    if model.config._attn_implementation != "sdpa":
        return f"attention {model.config._attn_implementation!r} (the static decode needs 'sdpa')"
    from transformers.cache_utils import StaticCache, StaticLayer
    kinds = {type(layer).__name__ for layer in StaticCache(config=model.config, max_cache_len=1).layers}
    return None if kinds == {StaticLayer.__name__} else f"cache layers {sorted(kinds)} (only full attention)"


def static_cache(model, dynamic, length: int):
    """A StaticCache of `length` columns holding the prefilled `dynamic` cache's keys and values in its first
    columns, its write position just after them (transformers' StaticLayer writes every row at one position)."""
    from transformers.cache_utils import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=length)
    for static, layer in zip(cache.layers, dynamic.layers):
        static.lazy_initialization(layer.keys, layer.values)
        width = layer.keys.shape[2]
        static.keys[:, :, :width].copy_(layer.keys)
        static.values[:, :, :width].copy_(layer.values)
        static.cumulative_length.fill_(width)
    return cache


class StaticDecode:
    """One batch's decode state on the device, and the step that advances it in place.

    `step` is the index of the token fed to the model next (token `step` + 1 is sampled from its logits);
    `tokens` / `logprobs` hold every row's draws ([rows, horizon]), `alive` the rows not yet ended."""

    def __init__(self, model, cache_arg: str, cache, logits, mask, uniforms, limit, horizon: int, eos_id: int,
                 temperature: float, top_p: float):
        self.model, self.cache_kwargs, self.eos_id = model, {cache_arg: cache}, eos_id
        self.temperature, self.top_p, self.horizon = temperature, top_p, horizon
        device, (n, width) = logits.device, mask.shape
        self.width, self.uniforms, self.limit = width, uniforms, limit
        columns = torch.arange(width + horizon, device=device)
        self.columns = columns
        self.prompt = torch.cat([mask.bool(), mask.new_zeros((n, horizon), dtype=torch.bool)], dim=1)
        self.tokens = torch.zeros((n, horizon), dtype=torch.long, device=device)
        self.logprobs = torch.zeros((n, horizon), dtype=torch.float64, device=device)
        self.step_index = torch.zeros(1, dtype=torch.long, device=device)
        self.position = mask.long().sum(-1, keepdim=True)  # of the token fed next
        token, logprob = inverse_cdf(logits.float(), uniforms[:, 0], temperature, top_p)
        self.token = token
        self.tokens[:, 0], self.logprobs[:, 0] = token, logprob
        self.alive = (token != eos_id) & (1 < limit)

    def mutated(self) -> tuple[torch.Tensor, ...]:
        """The tensors a step updates in place (besides the cache's, which transformers marks itself)."""
        return self.tokens, self.logprobs, self.step_index, self.position, self.token, self.alive

    def step(self) -> None:
        """Feed the last tokens, sample the next ones, record them: fixed shapes, in-place writes, no host sync."""
        s = self.step_index
        attend = self.prompt | ((self.columns >= self.width) & (self.columns <= self.width + s))
        logits = self.model(input_ids=self.token[:, None], attention_mask=attend[:, None, None, :],
                            position_ids=self.position, use_cache=True, logits_to_keep=1,
                            **self.cache_kwargs).logits[:, -1]
        following = s + 1
        u = self.uniforms.index_select(1, following).squeeze(1)
        token, logprob = inverse_cdf(logits.float(), u, self.temperature, self.top_p)
        self.tokens.index_copy_(1, following, token[:, None])
        self.logprobs.index_copy_(1, following, logprob[:, None])
        self.alive &= (token != self.eos_id) & (following + 1 < self.limit)
        self.token.copy_(token)
        self.position.add_(1)
        s.add_(1)


def decode(state: StaticDecode, mode: str) -> int:
    """Run `state` to its horizon, or until no row is alive (checked every CHECK_EVERY steps), in `mode`: the
    number of steps run."""
    steps = state.horizon - 1  # token 0 came from the prefill's logits
    run, ran = state.step, 0
    if mode == "graph" and steps > WARMUP:
        run, ran = _graphed(state), WARMUP
    elif mode == "compile":
        for t in state.mutated():  # in-place updates of static addresses keep compile's CUDA graphs
            torch._dynamo.mark_static_address(t)
        run = functools.partial(_compiled_step(), state)
    while ran < steps:
        if ran % CHECK_EVERY == 0 and not bool(state.alive.any()):
            break
        run()
        ran += 1
    return ran


def _graphed(state: StaticDecode):
    """WARMUP real steps on a side stream (CUDA's recipe before a capture), then the step captured once: the
    graph's replay, which advances `state` as `state.step` does."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            state.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        state.step()  # recorded, not run: the state is where the warm-up left it
    return graph.replay


@functools.cache
def _compiled_step():
    """StaticDecode.step through torch.compile (reduce-overhead: CUDA graphs of its own), compiled at its first
    call and again only for new shapes or settings."""
    return torch.compile(StaticDecode.step, mode="reduce-overhead")
