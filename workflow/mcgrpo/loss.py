"""The policy-gradient loss of the recipe, accumulated over microbatches.

loss = -(1/N) sum over completions and their tokens of credit x log-prob, N the number of completions
in the iteration. Each microbatch contributes its share divided by the full N, so the gradient (and the
loss) is the same whatever the microbatch size.
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


def backward_policy_loss(model, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                         credit: Sequence[np.ndarray], pad_id: int, microbatch_size: int) -> float:
    """Accumulate the gradient of the loss into `model` and return the loss value."""
    n, total = len(completions), 0.0
    for start in range(0, n, microbatch_size):
        stop = min(start + microbatch_size, n)
        logp, mask = token_logprobs(model, prompts[start:stop], completions[start:stop], pad_id)
        weights = torch.zeros_like(logp)
        for r, c in enumerate(credit[start:stop]):
            weights[r, mask[r].nonzero().squeeze(-1)] = torch.as_tensor(c, dtype=weights.dtype,
                                                                          device=weights.device)
        loss = -(weights * logp).sum() / n
        loss.backward()
        total += loss.item()
    return total
