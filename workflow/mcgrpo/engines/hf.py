"""The `hf` engine: sampling with a transformers causal LM and its KV cache, on CPU or GPU.

It shares the training model object, so syncing weights costs nothing. Sampling is by inverse CDF
on per-request uniforms drawn from the request's own seed, which makes every request's tokens
independent of the batch it was generated in (common random numbers).
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch

from mcgrpo.engines.base import Completion


class HFEngine:
    def __init__(self, model, tokenizer, temperature: float = 1.0, top_p: float = 1.0,
                 batch_size: int = 256):
        self.model, self.temperature, self.top_p, self.batch_size = model, temperature, top_p, batch_size
        self.eos_id, self.pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id

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

    @torch.no_grad()
    def _generate_batch(self, prompts, limits, seeds) -> list[Completion]:
        model, device = self.model, self.model.device
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
        """Sample into `generated` / `lengths`; finished rows leave the batch and its KV cache."""
        device = self.model.device
        width = max(len(prompts[r]) for r in rows.tolist())
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows.tolist()):  # left padding keeps each row's next token in the last column
            ids[i, width - len(prompts[r]):] = torch.tensor(prompts[r])
            mask[i, width - len(prompts[r]):] = 1
        horizon = generated.shape[1]
        uniforms = torch.stack([torch.rand(horizon, generator=torch.Generator().manual_seed(seeds[r]),
                                           dtype=torch.float64) for r in rows.tolist()]).to(device)
        limit = torch.tensor(limits, device=device)[rows.to(device)]
        ids, mask, active = ids.to(device), mask.to(device), torch.arange(len(rows), device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache, step_ids = None, ids
        cache_arg = _cache_argument(self.model)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            for t in range(horizon):
                out = self.model(input_ids=step_ids, attention_mask=mask, position_ids=positions,
                                 use_cache=True, logits_to_keep=1, **{cache_arg: cache})
                cache = getattr(out, cache_arg)
                token, logprob = self._sample(out.logits[:, -1].float(), uniforms[active, t])
                generated[rows[active.cpu()], t] = token.cpu()
                logprobs[rows[active.cpu()], t] = logprob.cpu()
                finished = (token == self.eos_id) | (t + 1 >= limit[active])
                if finished.all():
                    break
                if finished.any():
                    keep = (~finished).nonzero().squeeze(-1)
                    cache.batch_select_indices(keep)
                    active, token, mask, positions = active[keep], token[keep], mask[keep], positions[keep]
                step_ids = token[:, None]
                mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], dim=1)
                positions = positions[:, -1:] + 1
        ended = (generated[rows] == self.eos_id).int().argmax(-1)
        has_eos = (generated[rows] == self.eos_id).any(-1)
        lengths[rows] = torch.where(has_eos, ended + 1, limit.cpu().clamp(max=horizon))

    def _sample(self, logits: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse-CDF sampling at the engine's temperature and top-p: tokens and their log-probs."""
        probs = torch.softmax(logits.double() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p < self.top_p
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p * keep)
            probs = probs / probs.sum(-1, keepdim=True)
        cdf = probs.cumsum(-1)
        index = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).squeeze(-1).clamp(max=probs.shape[-1] - 1)
        return index, probs.gather(-1, index[:, None]).squeeze(-1).log()


def _cache_argument(model) -> str:
    """The KV cache's keyword: `cache` in transformers >= 5.24, `past_key_values` before (vLLM images pin older)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
