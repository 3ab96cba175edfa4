"""Warm start of the tiny model: a short supervised pass on the pool's worked solutions.

GRPO needs a partly competent policy to learn from (groups with mixed outcomes). A share of the targets
states the answer without boxing it, so the default and the strict verifier can disagree and drift is
observable in the tiny world.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import torch

from mcgrpo.models.tiny import build_model, build_tokenizer
from mcgrpo.rollout import Prompter

BOXED_TAIL = re.compile(r" \\boxed\{[^{}]*\}$")


def unboxed(solution: str) -> str:
    """The worked solution without its final boxed answer (its last step still states the result)."""
    return BOXED_TAIL.sub("", solution)


def training_pairs(pool: pd.DataFrame, unboxed_share: float, rng: np.random.Generator) -> list[tuple[str, str]]:
    """(question, target) pairs, a random `unboxed_share` of the targets left unboxed."""
    drop_box = rng.random(len(pool)) < unboxed_share
    return [(q, unboxed(s) if d else s) for q, s, d in zip(pool["question"], pool["solution"], drop_box)]


def sft_step(model, batch: list[tuple[tuple[int, ...], tuple[int, ...]]], pad_id: int) -> torch.Tensor:
    """Mean cross-entropy of the target tokens (end-of-turn included) given the prompt."""
    width = max(len(p) + len(t) for p, t in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    for r, (p, t) in enumerate(batch):
        ids[r, :len(p) + len(t)] = torch.tensor(p + t)
        labels[r, len(p):len(p) + len(t)] = torch.tensor(t)
    attn = (torch.arange(width)[None] < torch.tensor([len(p) + len(t) for p, t in batch])[:, None]).long()
    return model(input_ids=ids.to(model.device), attention_mask=attn.to(model.device),
                 labels=labels.to(model.device)).loss


def warm_start(pool: pd.DataFrame, tiny: dict, steps: int, batch_size: int, lr: float,
               unboxed_share: float, seed: int):
    """Build the tiny model and train it for `steps` AdamW steps (cosine decay); return (model, tokenizer)."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=seed, **tiny)
    rng = np.random.default_rng(seed)
    prompter = Prompter(tokenizer)
    eos = (tokenizer.eos_token_id,)
    data = [(prompter(q), tuple(tokenizer(t, add_special_tokens=False).input_ids) + eos)
            for q, t in training_pairs(pool, unboxed_share, rng)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=max(steps, 1),
                                                   pct_start=0.05)
    model.train()
    for _ in range(steps):
        batch = [data[j] for j in rng.integers(len(data), size=batch_size)]
        loss = sft_step(model, batch, tokenizer.pad_token_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    return model, tokenizer
