"""The policy-gradient loss of the recipe, accumulated over microbatches.

loss = -(1/N) sum over completions and their tokens of credit x log-prob, N the number of completions
in the step. Each microbatch contributes its share divided by the full N, so the gradient (and the
loss) is the same whatever the microbatch size. Reuse steps (several per batch) take the clipped
objective instead: credit x log-prob becomes min(r x credit, clip(r, 1 - e, 1 + e) x credit), r the ratio
of the token's probability now to its behaviour probability at generation.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def token_logprobs(model, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                   pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of each completion token under `model` (right-padded [n, T]) and the token mask."""
    device = model.device
    seqs = [list(p) + list(c) for p, c in zip(prompts, completions)]
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    target_mask = torch.zeros((len(seqs), width - 1), dtype=torch.bool)
    for r, (p, s) in enumerate(zip(prompts, seqs)):
        ids[r, :len(s)] = torch.tensor(s)
        attn[r, :len(s)] = 1
        target_mask[r, len(p) - 1:len(s) - 1] = True  # position t predicts token t + 1
    ids, attn, target_mask = ids.to(device), attn.to(device), target_mask.to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return logp, target_mask


def _on_tokens(values: Sequence[Sequence[float]], mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Per-completion values laid onto their token positions of a [n, T] tensor (zero elsewhere)."""
    out = torch.zeros_like(like)
    for r, v in enumerate(values):
        out[r, mask[r].nonzero().squeeze(-1)] = torch.as_tensor(v, dtype=out.dtype, device=out.device)
    return out


def backward_policy_loss(model, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                         credit: Sequence[np.ndarray], pad_id: int, microbatch_size: int,
                         behaviour: Sequence[Sequence[float]] | None = None, clip: float | None = None) -> float:
    """Accumulate the gradient of the loss into `model` and return the loss value.

    With `behaviour` (each token's log-prob at generation) the objective is the clipped one, at `clip`.
    """
    n, total = len(completions), 0.0
    for start in range(0, n, microbatch_size):
        stop = min(start + microbatch_size, n)
        logp, mask = token_logprobs(model, prompts[start:stop], completions[start:stop], pad_id)
        weights = _on_tokens(credit[start:stop], mask, logp)
        if behaviour is None:
            objective = weights * logp
        else:
            ratio = torch.exp(logp - _on_tokens(behaviour[start:stop], mask, logp)) * mask
            objective = torch.minimum(ratio * weights, ratio.clamp(1 - clip, 1 + clip) * weights)
        loss = -objective.sum() / n
        loss.backward()
        total += loss.item()
    return total


@torch.no_grad()
def prefix_features(model, sequences: Sequence[Sequence[int]], ends: Sequence[Sequence[int]], pad_id: int,
                    microbatch_size: int | None = None) -> list[np.ndarray]:
    """The last layer's hidden state at the final token of prefixes of each sequence (`ends[r]`: their
    lengths), as one [prefixes, hidden] array per sequence: what critics regress on."""
    device, step = model.device, microbatch_size or len(sequences)
    out: list[np.ndarray] = []
    for start in range(0, len(sequences), step):
        chunk = sequences[start:start + step]
        ids = torch.full((len(chunk), max(map(len, chunk))), pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for r, s in enumerate(chunk):
            ids[r, :len(s)], attn[r, :len(s)] = torch.tensor(s), 1
        hidden = model(input_ids=ids.to(device), attention_mask=attn.to(device),
                       output_hidden_states=True).hidden_states[-1]
        out += [hidden[r, [e - 1 for e in ends[start + r]]].float().cpu().numpy() for r in range(len(chunk))]
    return out


def prompt_features(model, prompts: Sequence[Sequence[int]], pad_id: int) -> np.ndarray:
    """The last layer's hidden state at each prompt's final token (one prefill pass)."""
    return np.stack([f[0] for f in prefix_features(model, prompts, [[len(p)] for p in prompts], pad_id)])
