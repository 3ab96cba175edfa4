"""Token rows as one model call: padding, prompts shared by a group, the KV cache keyword, precision.

The engine (generating) and the update (scoring) batch the same way: each distinct prompt runs once and
its KV cache serves every row that continues it (a group's G completions), in bf16 on a GPU.
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch


def padded(rows: Sequence[Sequence[int]], pad_id: int, device, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows as one [n, longest] tensor and its boolean mask, padded on the right (left: each row's
    last token in the last column)."""
    lengths = torch.tensor([len(r) for r in rows])
    width = int(lengths.max()) if len(rows) else 0
    column = torch.arange(width)[None, :]
    mask = column >= width - lengths[:, None] if left else column < lengths[:, None]
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    ids[mask] = torch.tensor([t for r in rows for t in r], dtype=torch.long)
    return ids.to(device), mask.to(device)


def distinct(rows: Sequence[Sequence[int]], device) -> tuple[list[tuple[int, ...]], torch.Tensor]:
    """The distinct rows in first-seen order, and each row's index among them."""
    index = {row: i for i, row in enumerate(dict.fromkeys(map(tuple, rows)))}
    return list(index), torch.tensor([index[tuple(row)] for row in rows], dtype=torch.long, device=device)


def autocast(device: torch.device):
    """bf16 autocast on a GPU, full precision elsewhere."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def cache_argument(model) -> str:
    """The KV cache's keyword: `cache` in transformers >= 5.24, `past_key_values` before (vLLM images pin older)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
