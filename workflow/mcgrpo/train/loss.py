"""The policy-gradient loss of the recipe, accumulated over microbatches.

loss = -(1/N) sum over completions and their tokens of credit x log-prob, N the number of completions
in the step. Each microbatch contributes its share divided by the full N, so the gradient (and the
loss) is the same whatever the microbatches. Reuse steps (several per batch) take the clipped
objective instead: credit x log-prob becomes min(r x credit, clip(r, 1 - e, 1 + e) x credit), r the ratio
of the token's probability now to its behaviour probability at generation.

How it is computed, fast and to the same numbers (tests/test_update_exactness.py): the sequences are sorted
by length and cut into microbatches of similar lengths (on the CPU also small enough for the activations to
stay in cache); each distinct context (a group's prompt) runs once per step and its KV cache serves every
completion that continues it, in every microbatch; a completion repeated under the same context (a group's
identical answers) runs once, its log-probs shared by every row that repeats it, each with its own credit;
the vocabulary projection runs on completion positions only; completions whose every token has zero
credit (groups of equal rewards), which add exactly zero, are not run at all; and on a GPU the chosen token's
log-prob is its logit less the logsumexp, in float32 a chunk of positions at a time (`chosen_logprobs`), never a
float32 log-softmax over the whole vocabulary and its gradient (a CPU keeps log_softmax + gather, bit for bit).
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np
import torch

from mcgrpo.train.batching import autocast, cache_argument, distinct, padded

CPU_MICROBATCH_TOKENS = 768  # padded completion tokens per microbatch on the CPU: activations stay in cache
SKIP_ZERO_CREDIT = True  # completions whose every token has zero credit add exactly zero: not run (False: run all)
VOCAB_CHUNK = 1 << 28  # float32 elements of logits that chosen_logprobs holds at once (1 GiB)
CHOSEN_ON = frozenset({"cuda"})  # devices whose update scores with chosen_logprobs (a CPU: log_softmax, as it always did)


def microbatches(lengths: Sequence[int], max_rows: int, max_tokens: float = float("inf")) -> list[list[int]]:
    """Rows longest first, cut into runs of at most `max_rows` rows and `max_tokens` padded tokens; rows of
    length 0 (nothing to score) are left out."""
    order = sorted((r for r in range(len(lengths)) if lengths[r]), key=lambda r: -lengths[r])
    runs: list[list[int]] = []
    for r in order:
        if not runs or len(runs[-1]) == max_rows or (len(runs[-1]) + 1) * lengths[runs[-1][0]] > max_tokens:
            runs.append([])
        runs[-1].append(r)
    return runs


def token_logprobs(model, contexts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                   pad_id: int, prefix: "Prefix | None" = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token under `model` ([n, longest completion], right-padded) and the mask."""
    logits, targets, mask = completion_logits(model, contexts, completions, pad_id, prefix)
    if model.device.type in CHOSEN_ON:
        return chosen_logprobs(logits, targets), mask
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[..., None]).squeeze(-1), mask


class _ChosenLogprob(torch.autograd.Function):
    """log p(target) = logit[target] - logsumexp(logits), in float32 from logits of a narrower dtype, a chunk of positions
    at a time; the backward rebuilds each chunk's softmax from the logits and the logsumexp it kept. What it holds
    is the logits as given (bf16 under autocast) and one float per position, where log_softmax of the float32
    logits holds [positions, vocabulary] float32 values for its backward (3.7 GB per 16 x 380 tokens of a
    151,936-wide vocabulary) and makes as much again for its gradient."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        flat, step, wide = _chunked(logits)
        lse = torch.cat([torch.logsumexp(part.to(wide), dim=-1) for part in flat.split(step)])
        chosen = flat.gather(-1, targets.reshape(-1, 1)).squeeze(-1).to(wide)
        ctx.save_for_backward(logits, targets, lse)
        return (chosen - lse).view(targets.shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, targets, lse = ctx.saved_tensors
        flat, step, wide = _chunked(logits)
        g, t, out = grad.reshape(-1, 1).to(wide), targets.reshape(-1, 1), torch.empty_like(flat)
        for s in range(0, len(flat), step):
            part = torch.exp(flat[s:s + step].to(wide) - lse[s:s + step, None]).mul_(-g[s:s + step])
            out[s:s + step] = part.scatter_add_(-1, t[s:s + step], g[s:s + step])
        return out.view(logits.shape), None


def _chunked(logits: torch.Tensor) -> tuple[torch.Tensor, int, torch.dtype]:
    """The logits as [positions, vocabulary], how many positions make a chunk of at most VOCAB_CHUNK values, and
    the dtype to compute in (float32, or float64 for float64 logits)."""
    flat = logits.reshape(-1, logits.shape[-1])
    return flat, max(1, VOCAB_CHUNK // flat.shape[1]), torch.promote_types(logits.dtype, torch.float32)


def chosen_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each target token's log-prob (float32, targets' shape) from `logits` ([..., vocabulary]), differentiable,
    without a float32 log-softmax over the vocabulary (_ChosenLogprob)."""
    return _ChosenLogprob.apply(logits, targets)


class Prefix:
    """Each distinct context but its last token, run once: its KV cache serves every row that continues it
    (a group's G completions), in any microbatch.

    `shared`: the rows read leaf copies of its keys and values (float32, so that gradients gathered over
    every microbatch under bf16 autocast keep their precision); `backward` then runs the prefix's own
    backward once, not once per microbatch.
    """

    def __init__(self, model, contexts: Sequence[Sequence[int]], pad_id: int, shared: bool = False):
        unique, _ = distinct(contexts, model.device)
        self.index = {c: i for i, c in enumerate(unique)}
        heads, self.mask = padded([c[:-1] for c in unique], pad_id, model.device)
        self.keyword, self.cache, self.kv, self.leaves = cache_argument(model), None, [], []
        if heads.shape[1]:
            with autocast(model.device):
                out = model(input_ids=heads, attention_mask=self.mask, use_cache=True, logits_to_keep=1)
            self.cache = getattr(out, self.keyword)
            self.kv = [t for layer in self.cache.layers for t in (layer.keys, layer.values)]
            self.leaves = [t.detach().float().requires_grad_(t.requires_grad) for t in self.kv] if shared else self.kv

    def rows(self, contexts: Sequence[Sequence[int]]) -> tuple[dict, torch.Tensor]:
        """The cache keyword for rows that continue `contexts` (a copy of the cache with their rows), and
        their context mask."""
        rows = torch.tensor([self.index[tuple(c)] for c in contexts], dtype=torch.long, device=self.mask.device)
        if self.cache is None:
            return {}, self.mask[rows]
        cache = copy.copy(self.cache)
        cache.layers = [copy.copy(layer) for layer in self.cache.layers]
        for layer, keys, values, like in zip(cache.layers, self.leaves[::2], self.leaves[1::2], self.kv[::2]):
            layer.keys, layer.values = keys[rows].to(like.dtype), values[rows].to(like.dtype)
        return {self.keyword: cache}, self.mask[rows]

    def backward(self) -> None:
        """The prefix's share of the gradient, from what the rows' backward passes gathered in its leaves."""
        pairs = [(t, leaf.grad.to(t.dtype)) for t, leaf in zip(self.kv, self.leaves) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward(*zip(*pairs))


def completion_logprobs(model, contexts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                        pad_id: int, prefix: Prefix | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The policy's log-distribution over the vocabulary at each completion position ([n, longest completion,
    vocabulary], float32), the completion tokens ([n, longest], right-padded) and the mask."""
    logits, targets, mask = completion_logits(model, contexts, completions, pad_id, prefix)
    return torch.log_softmax(logits.float(), dim=-1), targets, mask


def completion_logits(model, contexts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                      pad_id: int, prefix: Prefix | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The policy's logits at each completion position ([n, longest completion, vocabulary], the model's dtype:
    bf16 under a GPU's autocast), the completion tokens ([n, longest], right-padded) and the mask.

    Two passes: the contexts' `prefix` (run here if not given), then each row's last context token and its
    completion, scored at those positions.
    """
    device = model.device
    prefix = prefix or Prefix(model, contexts, pad_id)
    cache, context_mask = prefix.rows(contexts)
    inputs, mask = padded([(c[-1], *t)[:len(t)] for c, t in zip(contexts, completions)], pad_id, device)
    targets, _ = padded(completions, pad_id, device)
    positions = torch.tensor([len(c) - 1 for c in contexts], device=device)[:, None] + torch.arange(
        inputs.shape[1], device=device)
    attention = torch.cat([context_mask, mask], dim=1).long()
    with autocast(device):
        logits = model(input_ids=inputs, attention_mask=attention, position_ids=positions, **cache).logits
    return logits, targets, mask


def _flat(values: Sequence[Sequence[float]], like: torch.Tensor) -> torch.Tensor:
    """Per-row values concatenated in row order, as a tensor of `like`'s dtype and device."""
    flat = np.concatenate([np.asarray(v, dtype=np.float64) for v in values])
    return torch.as_tensor(flat, dtype=like.dtype, device=like.device)


def distinct_sequences(contexts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                       rows: Sequence[int]) -> list[list[int]]:
    """`rows` grouped by their (context, completion) pair, in first-seen order: identical sequences have
    identical log-probs, so each is scored once and its log-probs serve every row that repeats it."""
    groups: dict[tuple, list[int]] = {}
    for r in rows:
        groups.setdefault((tuple(contexts[r]), tuple(completions[r])), []).append(r)
    return list(groups.values())


def _repeats(lengths: Sequence[int], copies: Sequence[int]) -> torch.Tensor:
    """Indices into sequences of `lengths` laid end to end that repeat the j-th `copies[j]` times."""
    starts = np.cumsum([0, *lengths[:-1]])
    return torch.as_tensor(np.concatenate([np.arange(s, s + k) for s, k, c in zip(starts, lengths, copies)
                                           for _ in range(c)]))


def backward_policy_loss(model, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                         credit: Sequence[np.ndarray], pad_id: int, microbatch_size: int,
                         behaviour: Sequence[Sequence[float]] | None = None, clip: float | None = None) -> float:
    """Accumulate the gradient of the loss into `model` and return the loss value.

    With `behaviour` (each token's log-prob at generation) the objective is the clipped one, at `clip`.
    A completion whose every token has zero credit (a group of equal rewards) adds exactly nothing to
    the loss or the gradient, and is not scored; every parameter still gets its (zero) gradient.
    Completions repeated under the same context are scored once, each row keeping its own credit.
    """
    n, total = len(completions), 0.0
    max_tokens = CPU_MICROBATCH_TOKENS if model.device.type == "cpu" else float("inf")
    groups = distinct_sequences(prompts, completions,
                                [r for r in range(n) if np.any(credit[r]) or not SKIP_ZERO_CREDIT])
    runs = [[groups[g] for g in run] for run in microbatches([len(completions[g[0]]) for g in groups],
                                                              microbatch_size, max_tokens)]
    prefix = Prefix(model, [prompts[g[0]] for run in runs for g in run], pad_id, shared=True) if runs else None
    for run in runs:
        rows = [r for g in run for r in g]
        pick = lambda values: [values[r] for r in rows]  # noqa: E731
        logp, mask = token_logprobs(model, [prompts[g[0]] for g in run], [completions[g[0]] for g in run], pad_id,
                                    prefix)
        logp = logp[mask]
        if len(rows) > len(run):
            logp = logp[_repeats([len(completions[g[0]]) for g in run], [len(g) for g in run]).to(logp.device)]
        weights = _flat(pick(credit), logp)
        if behaviour is None:
            objective = weights * logp
        else:
            ratio = torch.exp(logp - _flat(pick(behaviour), logp))
            objective = torch.minimum(ratio * weights, ratio.clamp(1 - clip, 1 + clip) * weights)
        loss = -objective.sum() / n
        loss.backward()
        total += loss.item()
    if prefix is not None:
        prefix.backward()
    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    return total
