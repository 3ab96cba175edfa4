"""The `hf` engine: sampling with a transformers causal LM and its KV cache, on CPU or GPU.

It shares the training model object, so syncing weights costs nothing. Sampling is by inverse CDF
on per-request uniforms drawn from the request's own seed, which makes every request's tokens
independent of the batch it was generated in (common random numbers). A batch decodes all its requests
together: each distinct prompt is prefilled once, and finished requests leave the batch together, once they
are an eighth of it (`LEAVE_SHARE`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from mcgrpo.train.batching import autocast, cache_argument, distinct, padded
from mcgrpo.train.engines.base import Completion

# Finished rows leave the decode batch once they are this share of it. Every departure copies the whole KV cache
# (the cache's rows are selected), which cost more than decoding a few finished rows a few steps longer: on the
# default study's model, one evaluation (64 problems x 8 samples) took 0.86-0.90x the time of leaving at every
# finish (with the decode mask built once, `_decode_mask`), with identical tokens.
LEAVE_SHARE = 1 / 8


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
        the requests that repeat it (a group's G completions); finished rows stay in the batch, their tokens
        unrecorded, until they are LEAVE_SHARE of it, then leave it and its cache together."""
        device, horizon = self.model.device, generated.shape[1]
        unique, copies = distinct([prompts[r] for r in rows.tolist()], device)
        ids, mask = padded(unique, self.pad_id, device, left=True)
        mask = mask.long()
        uniforms = torch.stack([torch.rand(horizon, generator=torch.Generator().manual_seed(seeds[r]),
                                           dtype=torch.float64) for r in rows.tolist()]).to(device)
        limit = torch.tensor(limits, device=device)[rows.to(device)]
        cache_arg, where = cache_argument(self.model), rows  # where: the batch rows' places in `generated`
        with autocast(device):
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                             use_cache=True, logits_to_keep=1)
            cache = getattr(out, cache_arg)
            cache.batch_select_indices(copies)
            logits, mask = out.logits[copies, -1], mask[copies]
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
        limit = torch.tensor(limits)[rows].clamp(max=horizon)
        # a row ends at its first end token within its limit; what follows it (tokens sampled after it had
        # finished, or padding, which may be the end token) is never read
        ended = (generated[rows] == self.eos_id) & (torch.arange(horizon) < limit[:, None])
        lengths[rows] = torch.where(ended.any(-1), ended.int().argmax(-1) + 1, limit)

    def _decode_mask(self, mask: torch.Tensor, horizon: int) -> torch.Tensor:
        """Every decode step's attention mask at once: the prompts' padding, then `horizon` generated tokens
        (step t reads its first width + t + 1 columns). Under sdpa it is the model's own 4D form ([rows, 1, 1,
        keys], True: attend), which the model takes as it is instead of building it again at every step."""
        full = torch.cat([mask, mask.new_ones((len(mask), horizon))], dim=1)
        return full.bool()[:, None, None, :] if self.model.config._attn_implementation == "sdpa" else full

    def _sample(self, logits: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inverse-CDF sampling at the engine's temperature and top-p: tokens and their log-probs. Temperature 0
        is greedy decoding: the most likely token (the first of ties), with its log-prob at temperature 1."""
        if self.temperature == 0:
            index = logits.argmax(dim=-1)
            return index, torch.log_softmax(logits.double(), dim=-1).gather(-1, index[:, None]).squeeze(-1)
        probs = torch.softmax(logits.double() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            keep = sorted_p.cumsum(-1) - sorted_p < self.top_p
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_p * keep)
            probs = probs / probs.sum(-1, keepdim=True)
        cdf = probs.cumsum(-1)
        index = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).squeeze(-1).clamp(max=probs.shape[-1] - 1)
        return index, probs.gather(-1, index[:, None]).squeeze(-1).log()

