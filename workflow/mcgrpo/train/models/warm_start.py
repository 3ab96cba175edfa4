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
from mcgrpo.train.rollout import study_prompter

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


def warm_start(corpus: pd.DataFrame, tiny: dict, steps: int, batch_size: int, lr: float,
               unboxed_share: float, misboxed_share: float, seed: int, study: dict | None = None):
    """Build the tiny model and train it for `steps` AdamW steps (cosine decay); return (model, tokenizer).
    Its prompts are rendered as the study's (`study`: its task and model blocks) will be in training."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=seed, **tiny)
    rng = np.random.default_rng(seed)
    prompter = study_prompter(tokenizer, study or {})
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
