"""Warm start of the tiny model: a short supervised pass on worked solutions.

GRPO needs a partly competent policy to learn from (groups with mixed outcomes). Two kinds of imperfect
targets shape that policy on purpose:
- unboxed: the solution states the answer without boxing it, so the default and the strict verifier can
  disagree and drift is observable in the tiny world;
- misboxed: the box copies an intermediate result instead of the final one, a habit that only the outcome
  reward can tell apart from the worked steps, as real models learn to stop early or to copy the wrong line.
  Supervised learning alone reaches a policy that makes this mistake at about the given rate; GRPO can remove
  it within a few hundred updates, which makes learning visible at the tiny world's budgets.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import torch

from mcgrpo.core import progress
from mcgrpo.train.models.tiny import build_model, build_tokenizer
from mcgrpo.train.rollout import Prompter

BOXED_TAIL = re.compile(r" \\boxed\{[^{}]*\}$")


def unboxed(solution: str) -> str:
    """The worked solution without its final boxed answer (its last step still states the result)."""
    return BOXED_TAIL.sub("", solution)


def misboxed(solution: str, steps: list[str], rng: np.random.Generator) -> str:
    """The worked solution with an intermediate result boxed (unchanged when there is only one step)."""
    if len(steps) < 2:
        return solution
    return f"{unboxed(solution)} \\boxed{{{steps[rng.integers(len(steps) - 1)]}}}"


def training_pairs(corpus: pd.DataFrame, unboxed_share: float, misboxed_share: float,
                   rng: np.random.Generator) -> list[tuple[str, str]]:
    """(question, target) pairs: shares of the targets left unboxed and misboxed, the rest as solved."""
    u = rng.random(len(corpus))
    targets = [unboxed(s) if x < unboxed_share else
               misboxed(s, list(steps), rng) if x < unboxed_share + misboxed_share else s
               for s, steps, x in zip(corpus["solution"], corpus["steps"], u)]
    return list(zip(corpus["question"], targets))


def packed(batch: list[tuple[tuple[int, ...], tuple[int, ...]]], pad_id: int) -> dict[str, torch.Tensor]:
    """The (prompt, target) pairs laid end to end in as few rows as the longest pair fills (first fit, longest
    first): input ids, position ids that restart at every pair, and labels on the targets only.

    Given position ids that restart and no attention mask, transformers' masks let a token attend within its
    own pair only, so the loss and its gradient are those of the pairs padded one to a row, without computing
    the padding (about 45% of a padded warm-start batch: lengths 20 to 67, mean 36). A pair's last target token
    is followed by the next pair's first prompt token, whose label is ignored, so nothing is learnt across pairs.
    """
    lengths = [len(p) + len(t) for p, t in batch]
    width, rows, room = max(lengths), [], []
    for r in sorted(range(len(batch)), key=lambda r: -lengths[r]):
        j = next((j for j, free in enumerate(room) if free >= lengths[r]), len(rows))
        if j == len(rows):
            rows.append([])
            room.append(width)
        rows[j].append(r)
        room[j] -= lengths[r]
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels, positions = torch.full_like(ids, -100), torch.zeros_like(ids)  # padding: its own one-token pairs
    for i, row in enumerate(rows):
        at = 0
        for r in row:
            prompt, target = batch[r]
            ids[i, at:at + lengths[r]] = torch.tensor(prompt + target)
            labels[i, at + len(prompt):at + lengths[r]] = torch.tensor(target)
            positions[i, at:at + lengths[r]] = torch.arange(lengths[r])
            at += lengths[r]
    return {"input_ids": ids, "position_ids": positions, "labels": labels}


def sft_step(model, batch: list[tuple[tuple[int, ...], tuple[int, ...]]], pad_id: int) -> torch.Tensor:
    """Mean cross-entropy of the target tokens (end-of-turn included) given the prompt, over the batch's
    target tokens: the pairs packed (no attention mask, no cache, so the position ids mark the pairs)."""
    inputs = {k: v.to(model.device) for k, v in packed(batch, pad_id).items()}
    return model(**inputs, attention_mask=None, use_cache=False).loss


def warm_start(corpus: pd.DataFrame, tiny: dict, steps: int, batch_size: int, lr: float,
               unboxed_share: float, misboxed_share: float, seed: int):
    """Build the tiny model and train it for `steps` AdamW steps (cosine decay); return (model, tokenizer)."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=seed, **tiny)
    rng = np.random.default_rng(seed)
    prompter = Prompter(tokenizer)
    eos = (tokenizer.eos_token_id,)
    data = [(prompter(q), tuple(tokenizer(t, add_special_tokens=False).input_ids) + eos)
            for q, t in training_pairs(corpus, unboxed_share, misboxed_share, rng)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=max(steps, 1),
                                                   pct_start=0.05)
    model.train()
    with progress.bar("warm start", total=steps, unit="step") as shown:
        for _ in range(steps):
            batch = [data[j] for j in rng.integers(len(data), size=batch_size)]
            loss = sft_step(model, batch, tokenizer.pad_token_id)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            shown.set_postfix_str(f"loss {loss.item():.3f}", refresh=False)
            shown.update()
    return model, tokenizer
