"""The `hf` engine: sampling with a transformers causal LM and its KV cache, on CPU or GPU.

It shares the training model object, so syncing weights costs nothing. Sampling is by inverse CDF
on per-request uniforms drawn from the request's own seed, which makes every request's tokens
independent of the batch it was generated in (common random numbers). A batch decodes all its requests
together: each distinct prompt is prefilled once, and finished requests leave the batch together, once they
are an eighth of it (`LEAVE_SHARE`). On a GPU the decode after the prefill runs by default on a static KV cache,
its step replayed as a CUDA graph (`static_decode`, the engine's `decode` option).
"""

from __future__ import annotations

from typing import Sequence

import torch

from mcgrpo.train.batching import autocast, cache_argument, distinct, padded
from mcgrpo.train.engines import static_decode
from mcgrpo.train.engines.base import Completion
from mcgrpo.train.engines.sampler import inverse_cdf

# Finished rows leave the decode batch once they are this share of it. Every departure copies the whole KV cache
# (the cache's rows are selected), which cost more than decoding a few finished rows a few steps longer: on the
# default study's model, one evaluation (64 problems x 8 samples) took 0.86-0.90x the time of leaving at every
# finish (with the decode mask built once, `_decode_mask`), with identical tokens.
LEAVE_SHARE = 1 / 8
# engine.decode: `dynamic` (the cache grows, finished rows leave: the CPU's path), a static_decode mode, or `auto`
# (`graph` on a GPU where the model allows it, else `dynamic`)
DECODES = ("auto", "dynamic", *static_decode.MODES)


class HFEngine:
    def __init__(self, model, tokenizer, temperature: float = 1.0, top_p: float = 1.0,
                 batch_size: int = 256, decode: str = "auto"):
        if decode not in DECODES:
            raise ValueError(f"engine.decode: unknown decode {decode!r}; allowed: {', '.join(DECODES)}")
        self.model, self.temperature, self.top_p, self.batch_size = model, temperature, top_p, batch_size
        self.eos_id, self.pad_id, self.decode = tokenizer.eos_token_id, tokenizer.pad_token_id, decode

    def sync(self, model) -> None:
        """The engine samples from the training model itself: nothing to copy."""
        self.model = model

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: Sequence[int],
                 seeds: Sequence[int]) -> list[Completion]:
        if not len(prompts) == len(max_new_tokens) == len(seeds):
            raise ValueError("prompts, max_new_tokens and seeds must have one entry per request")
        out: list[Completion] = []
        for start in range(0, len(prompts), self.batch_size):
            stop = start + self.batch_size
            out += self._generate_batch(prompts[start:stop], max_new_tokens[start:stop], seeds[start:stop])
        return out

    @torch.inference_mode()  # no autograd bookkeeping at all (no_grad still counts versions and views)
    def _generate_batch(self, prompts, limits, seeds) -> list[Completion]:
        model = self.model
        was_training = model.training
        model.eval()
        n, horizon = len(prompts), max(max(limits), 0)
        generated = torch.full((n, horizon), self.pad_id, dtype=torch.long)
        logprobs = torch.zeros((n, horizon), dtype=torch.float64)  # behaviour log-probs, for clipped reuse
        lengths = torch.zeros(n, dtype=torch.long)
        rows = torch.tensor([r for r in range(n) if limits[r] > 0], dtype=torch.long)
        if len(rows):
            self._decode(prompts, limits, seeds, rows, generated, logprobs, lengths)
        model.train(was_training)
        out = generated.tolist()
        return [Completion(tuple(row[:k]), bool(k and row[k - 1] == self.eos_id), tuple(lp[:k]))
                for row, lp, k in zip(out, logprobs.tolist(), lengths.tolist())]

    def _decode(self, prompts, limits, seeds, rows, generated, logprobs, lengths) -> None:
        """Sample into `generated` / `lengths`. Each distinct prompt is prefilled once, its KV cache copied to
        the requests that repeat it (a group's G completions); then the decode of the engine's mode."""
        device, horizon = self.model.device, generated.shape[1]
        unique, copies = distinct([prompts[r] for r in rows.tolist()], device)
        ids, mask = padded(unique, self.pad_id, device, left=True)
        mask = mask.long()
        uniforms = torch.stack([torch.rand(horizon, generator=torch.Generator().manual_seed(seeds[r]),
                                           dtype=torch.float64) for r in rows.tolist()]).to(device)
        limit = torch.tensor(limits, device=device)[rows.to(device)]
        cache_arg = cache_argument(self.model)
        with autocast(device):  # one region: the prefill and every step share the autocast cache's bf16 weights
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                             use_cache=True, logits_to_keep=1)
            cache = getattr(out, cache_arg)
            cache.batch_select_indices(copies)
            logits, mask = out.logits[copies, -1], mask[copies]
            mode = self._mode()
            if mode == "dynamic":
                self._dynamic(cache_arg, cache, logits, mask, uniforms, limit, rows, generated, logprobs)
            else:
                width = mask.shape[1]
                state = static_decode.StaticDecode(
                    self.model, cache_arg, static_decode.static_cache(self.model, cache, width + horizon), logits,
                    mask, uniforms, limit, horizon, self.eos_id, self.temperature, self.top_p)
                static_decode.decode(state, mode)
                generated[rows], logprobs[rows] = state.tokens.cpu(), state.logprobs.cpu()  # one copy per batch
        limit = torch.tensor(limits)[rows].clamp(max=horizon)
        # a row ends at its first end token within its limit; what follows it (tokens sampled after it had
        # finished, or padding, which may be the end token) is never read
        ended = (generated[rows] == self.eos_id) & (torch.arange(horizon) < limit[:, None])
        lengths[rows] = torch.where(ended.any(-1), ended.int().argmax(-1) + 1, limit)

    def _dynamic(self, cache_arg, cache, logits, mask, uniforms, limit, where, generated, logprobs) -> None:
        """The dynamic decode: finished rows stay in the batch, their tokens unrecorded, until they are LEAVE_SHARE
        of it, then leave it and its cache together (`where`: the batch rows' places in `generated`)."""
        horizon, device = generated.shape[1], logits.device
        position = mask.sum(-1, keepdim=True)  # of the next token
        width, attend = mask.shape[1], self._decode_mask(mask, horizon)
        alive = torch.ones(len(mask), dtype=torch.bool, device=device)
        for t in range(horizon):
            token, logprob = self._sample(logits.float(), uniforms[:, t])
            # every row in the batch is recorded: a finished row's tokens after its end are never read
            generated[where, t], logprobs[where, t] = token.cpu(), logprob.cpu()
            alive &= (token != self.eos_id) & (t + 1 < limit)
            done = len(alive) - int(alive.sum())  # finished rows still in the batch
            if done == len(alive):
                break
            if done and done >= LEAVE_SHARE * len(alive):  # LEAVE_SHARE 0: at every finish
                keep = alive.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                where = where[keep.cpu()]
                uniforms, limit, token, position, attend, alive = (
                    x[keep] for x in (uniforms, limit, token, position, attend, alive))
            logits = self.model(input_ids=token[:, None], attention_mask=attend[..., :width + t + 1],
                                position_ids=position, use_cache=True, logits_to_keep=1,
                                **{cache_arg: cache}).logits[:, -1]
            position = position + 1

    def _mode(self) -> str:
        """The decode this batch runs: `auto` is `graph` on a GPU where the model allows a static cache, else
        `dynamic`; a static mode asked for where it cannot run is refused, saying why."""
        cuda = self.model.device.type == "cuda"
        if self.decode == "dynamic" or self.decode == "auto" and not cuda:
            return "dynamic"
        why = static_decode.supported(self.model)
        if self.decode == "auto":
            return "graph" if why is None else "dynamic"
        if why is not None:
            raise ValueError(f"engine.decode: {self.decode} cannot decode this model: {why}; allowed: dynamic")
        if self.decode == "graph" and not cuda:
            raise ValueError(f"engine.decode: graph needs a CUDA device, not {self.model.device}; allowed here: "
                             "dynamic, static, compile")
        return self.decode

    def _decode_mask(self, mask: torch.Tensor, horizon: int) -> torch.Tensor:
        """Every decode step's attention mask at once: the prompts' padding, then `horizon` generated tokens
        (step t reads its first width + t + 1 columns). Under sdpa it is the model's own 4D form ([rows, 1, 1,
        keys], True: attend), which the model takes as it is instead of building it again at every step."""
        full = torch.cat([mask, mask.new_ones((len(mask), horizon))], dim=1)
        return full.bool()[:, None, None, :] if self.model.config._attn_implementation == "sdpa" else full

    def _sample(self, logits: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse-CDF sampling at the engine's temperature and top-p: tokens and their log-probs
        (`sampler.inverse_cdf`)."""
        return inverse_cdf(logits, u, self.temperature, self.top_p)

