"""Inverse-CDF sampling on each request's own uniforms: the one sampler of the hf engine's decode paths (not named
sampling: the engines package's `sampling` is its context manager of sampling settings).

A token is the first whose cumulative probability reaches u x the total, u the request's uniform for that step
(drawn from its own seed), so a request's tokens depend on its logits and its seed alone, never on its batch
(common random numbers). Written as fixed-shape tensor operations with no host synchronisation, so that a decode
step that calls it can be captured as a CUDA graph.
"""

from __future__ import annotations

import torch


def inverse_cdf(logits: torch.Tensor, u: torch.Tensor, temperature: float,
                top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens ([rows]) and their log-probs (float64) at `temperature` and `top_p`, from logits [rows, vocab] and
    uniforms [rows]. Temperature 0 is greedy decoding: the most likely token (the first of ties), with its
    log-prob at temperature 1."""
    if temperature == 0:
        index = logits.argmax(dim=-1)
        return index, torch.log_softmax(logits.double(), dim=-1).gather(-1, index[:, None]).squeeze(-1)
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p * keep)
        probs = probs / probs.sum(-1, keepdim=True)
    cdf = probs.cumsum(-1)
    index = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).squeeze(-1).clamp(max=probs.shape[-1] - 1)
    return index, probs.gather(-1, index[:, None]).squeeze(-1).log()
