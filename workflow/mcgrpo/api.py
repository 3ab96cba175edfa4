"""The public surface for plugins: everything a credit rule, selector or verifier of another package may import.

A plugin imports `mcgrpo.api` and nothing else of mcgrpo; what is here keeps its meaning across versions,
the rest (`mcgrpo.train.*`, `mcgrpo.core.*`) may change. Importing it is light (no torch), so that a study
naming a plugin validates in a second. docs/plugins.md shows a whole plugin; examples/my-intervention/ is one.

Credit rule (entry point group `mcgrpo.credit`): a class whose fields are its options (a dataclass; each field
typed, checked before any job) and whose instances are called once per iteration:
`rule(rollouts: Rollouts, ctx: CreditContext) -> Credit`, one credit value per generated token of every
completion. Tokens it samples itself (`ctx.engine`) go in `Credit.tokens_generated`: they count toward B, and the
engine counts them too: a rule that reports fewer than `ctx.engine` generated stops the run, naming itself;
`ctx.engine` exposes only its counted `generate` and the sampling settings (temperature, top_p), and the completions
of `Credit.sequences` (extra sequences trained on, each a `TrainingSequence`) must be ones it returned during the
call. A rule that keeps state across iterations saves all of it with `state_dict` / `load_state_dict` (a fresh rule
loaded with it must equal the live one), or the run stops at its first checkpoint. It gets its own copy of its
options. What a rule returns is checked where it enters the trainer (finite, one value per token and completion). A
rule that samples continuations gets what it needs here: the problems' fields (`Problem`), decoding
(`ctx.prompter.decode`), and the study's reward of any text (`rewards(texts, answers, ctx)`).

Selector (group `mcgrpo.selection`): a `StreamSelector` subclass (a dataclass; its own fields are its options)
overriding `select` (which candidates to draw and train on), and `observe` / `state_dict` / `load_state_dict`
when it learns from what it trained. It sees the policy only through a `PolicyView`: `features(indices)` and
`levels(indices)`.

Reward of a TRL run (mcgrpo.integrations.trl): a reward function that samples tokens itself (a Monte-Carlo or
process reward's continuations) calls `charge(n)` with the number it generated, each time it generates; they count
toward B, as a credit rule's `Credit.tokens_generated` does in mcgrpo's trainer. Called with no run training,
it raises: a token that nothing counts would break the matched-compute comparison silently.

Verifier (group `mcgrpo.verifier`): a function `(text, reference) -> bool`, the training reward when a study's
`recipe.reward_verifier` (or an arm's own, `arms.<arm>.recipe.reward_verifier`) names it, the same each time for the
same pair (a sample is judged twice). Evaluation always reports the built-in default and strict verifiers (read by
the study's `verifier.rule`).
"""

from __future__ import annotations

from typing import Callable, Sequence, TypedDict

import numpy as np

from mcgrpo.core import plugins
from mcgrpo.core.claims import claims
from mcgrpo.core.ledger import charge
from mcgrpo.core.seeds import stable_seed
from mcgrpo.core.verify import boxed_content, extract_answer, is_correct
from mcgrpo.train.credit import (Credit, CreditContext, CreditRule, TrainingSequence, group_advantages,
                                  leave_one_out_mean, per_token)
from mcgrpo.train.engines import Completion, Engine
from mcgrpo.train.rollout import Prompter, Rollouts, Scores, reward, score
from mcgrpo.train.selection import PoolView, Selection, Selector, StreamSelector
from mcgrpo.train.selection.stream import PromptStream

PolicyView = PoolView  # what a selector may ask of the current policy about pool problems: features, levels
Verifier = Callable[[str, str], bool]  # (completion text, reference answer) -> correct


class Problem(TypedDict, total=False):
    """A pool problem as selectors and credit rules see it (`Rollouts.problems`, one per group): plain Python values,
    in a run as in `rollouts_of`. Every task has the first six; `steps` (the reference intermediate results, GSM8K's
    `<<a*b=c>>` and arith's) may be empty; `solution` is arith's worked solution."""
    problem_id: str
    question: str
    answer: str
    level: int
    subject: str
    source: str
    steps: list[str]
    solution: str

__all__ = [
    # credit rules
    "CreditRule", "Credit", "CreditContext", "TrainingSequence", "Rollouts", "group_advantages", "leave_one_out_mean",
    "per_token",
    # selectors
    "Selector", "StreamSelector", "Selection", "PolicyView", "PromptStream",
    # verifiers and what completions say
    "Verifier", "is_correct", "extract_answer", "boxed_content", "claims",
    # the problems, sampling more (a rule's own continuations: ctx.engine), decoding (ctx.prompter) and scoring it
    "Problem", "Engine", "Completion", "Prompter", "rewards", "score", "reward", "Scores",
    # hand-made rollouts, and a prompter of their one-token-per-character world, for a plugin's tests
    "rollouts_of", "CharacterPrompter",
    # tokens a TRL reward function generated itself
    "charge",
    # reproducible draws
    "stable_seed",
    # what a study's options for a plugin would be told, before any job
    "check_options",
]


def check_options(kind: str, name: str, options: dict) -> list[str]:
    """The problems a study would report for `options` given to the plugin `name` of `kind` ('credit',
    'selection', 'verifier'; name as a study writes it: an entry point or 'module:Name'): one line each, naming
    the option, the plugin and what is allowed. Empty: the options are fine."""
    return plugins.check(kind, name, options, "plugin")


def rewards(texts: Sequence[str], answers: Sequence[str], ctx: CreditContext) -> np.ndarray:
    """The training reward (1.0 or 0.0) of each text against its reference answer, exactly as the study rewards a
    rollout: its verifier (`ctx.verifier`: default, strict or a verifier plugin) read by its `verifier.rule`
    (`ctx.rule`). What a rule that samples continuations scores them with; a prefix plus its continuation is
    `ctx.prompter.decode(prefix + continuation)`."""
    return reward(score(texts, answers, ctx.rule), texts, answers, ctx.verifier, ctx.verifier_key)


class CharacterPrompter:
    """The prompter of `rollouts_of`'s world, one token per character: prompts are the questions' code points, and
    `decode` turns tokens back into text. With an engine of one's own, enough to test a rule that samples."""

    def __call__(self, question: str) -> tuple[int, ...]:
        return tuple(map(ord, question))

    def decode(self, tokens: Sequence[int]) -> str:
        return "".join(map(chr, tokens))


def rollouts_of(problems: Sequence[dict], texts: Sequence[str], group_size: int,
                verifier: str = "default", rule: str = "whole_box") -> Rollouts:
    """Groups whose completions are exactly `texts` (one token per character; no model needed), rewarded by
    `verifier` (a built-in one read by `rule`, a study's `verifier.rule`; or a verifier plugin): what a plugin's
    tests compute credit on by hand. Problem p owns texts p*G .. p*G+G-1; each problem needs 'question' and
    'answer'."""
    problems = list(problems)
    if len(texts) != len(problems) * group_size:
        raise ValueError(f"{len(texts)} texts for {len(problems)} problems x group_size {group_size}")
    answers = [str(p["answer"]) for p in problems for _ in range(group_size)]
    prompts = [tuple(map(ord, p["question"])) for p in problems for _ in range(group_size)]
    completions = [Completion(tuple(map(ord, t)), True) for t in texts]
    scores = score(texts, answers, rule)
    return Rollouts(problems, group_size, prompts, completions, list(texts), scores,
                    reward(scores, texts, answers, verifier))
