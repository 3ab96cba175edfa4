"""Held-out evaluation with common random numbers, and greedy evaluation beside it where asked.

Sample j of problem i at evaluation e of eval set s draws from randomness seeded by
(run seed, s, e, i, j) alone, never by the arm, so the arms of one seed are paired draw by draw.
With `greedy` (evaluation.greedy), each problem is also decoded once at temperature 0, the equal-iteration
study's validation (paper G, H.1: "Validation uses greedy decoding"): acc_greedy and acc_greedy_strict,
the share of problems whose greedy completion is correct, in the evaluation's summary row. Its time is
evaluation time. The sampled columns and samples.parquet are unchanged by it.

correct_default and correct_strict are the study's verifiers (`verifier.rule`, whole_box by default);
samples.parquet also records every rule's verdict (correct_whole_box, correct_paper, correct_math_verify), and
math_verify_overran: whether math-verify's check overran its CPU budget (counted wrong; null without the package).
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pandas as pd

from mcgrpo.core.budget import eval_points  # noqa: F401  (where the trainer and its tests read it)
from mcgrpo.core.clock import stopwatch
from mcgrpo.train.engines import Engine, greedy
from mcgrpo.core.seeds import stable_seed
from mcgrpo.core.verify import RULES, math_verify_backend, rule_verdicts
from mcgrpo.train.rollout import Prompter, score


class Evaluator:
    def __init__(self, engine: Engine, prompter: Prompter, eval_sets: dict[str, pd.DataFrame],
                 samples: int, limit: int, run_seed: int, greedy: bool = False, rule: str = "whole_box"):
        self.engine, self.prompter, self.eval_sets = engine, prompter, eval_sets
        self.samples, self.limit, self.run_seed, self.greedy, self.rule = samples, limit, run_seed, greedy, rule

    def __call__(self, eval_index: int) -> tuple[list[dict], pd.DataFrame]:
        """Summary rows (one per eval set) and the per-sample table of evaluation `eval_index`."""
        summaries, tables = [], []
        for name, problems in self.eval_sets.items():
            with stopwatch() as seconds:
                table = self._samples(name, problems, eval_index)
                extra = self._greedy(problems) if self.greedy else {}
            summaries.append({**_summary(table, name, eval_index, seconds[0]), **extra})
            tables.append(table)
        return summaries, pd.concat(tables, ignore_index=True)

    def _greedy(self, problems: pd.DataFrame) -> dict:
        """acc_greedy (default verifier) and acc_greedy_strict: one temperature-0 completion per problem."""
        prompts = [self.prompter(q) for q in problems["question"]]
        with greedy(self.engine):  # deterministic: the seeds draw nothing
            completions = self.engine.generate(prompts, [self.limit] * len(prompts), [0] * len(prompts))
        scores = score([self.prompter.decode(c.tokens) for c in completions], problems["answer"].to_numpy(), self.rule)
        return {"acc_greedy": float(scores.default.mean()), "acc_greedy_strict": float(scores.strict.mean())}

    def _samples(self, name: str, problems: pd.DataFrame, eval_index: int) -> pd.DataFrame:
        n, k = len(problems), self.samples
        prompts = [self.prompter(q) for q in problems["question"] for _ in range(k)]
        seeds = [stable_seed(self.run_seed, name, eval_index, i, j) for i in range(n) for j in range(k)]
        completions = self.engine.generate(prompts, [self.limit] * len(prompts), seeds)
        texts = [self.prompter.decode(c.tokens) for c in completions]
        answers = np.repeat(problems["answer"].to_numpy(), k)
        backend = math_verify_backend()
        with backend.remembering() if backend else nullcontext():
            scores, columns = score(texts, answers, self.rule), rule_columns(texts, answers)
        return pd.DataFrame({
            "eval_index": eval_index, "eval_set": name,
            "problem_id": np.repeat(problems["problem_id"].to_numpy(), k),
            "sample": np.tile(np.arange(k), n),
            "correct_default": scores.default, "correct_strict": scores.strict, "boxed": scores.boxed,
            "truncated": [not c.finished for c in completions],
            "length": [len(c) for c in completions], "text": texts, **columns,
        })


def rule_columns(texts, answers) -> dict[str, pd.Series]:
    """Every rule's default-mode verdict per sample (correct_whole_box, correct_paper, correct_math_verify;
    the last null where math-verify is not installed), whatever rule the study trains on: the verifiers side
    by side on the same text, so that an analysis can say where they disagree. math_verify_overran says which
    math-verify checks overran their CPU budget and were counted wrong (null without the package)."""
    backend = math_verify_backend()
    verdicts, overran = [], []
    for text, answer in zip(texts, answers):
        before = backend.overruns if backend else 0
        verdicts.append(rule_verdicts(text, answer, backend))
        overran.append(backend.overruns > before if backend else None)
    return {**{f"correct_{rule}": pd.Series([v[rule] for v in verdicts], dtype="boolean") for rule in RULES},
            "math_verify_overran": pd.Series(overran, dtype="boolean")}


def _summary(table: pd.DataFrame, name: str, eval_index: int, seconds: float) -> dict:
    per_problem = table.groupby("problem_id")[["correct_default", "correct_strict"]].mean()
    return {"eval_index": eval_index, "eval_set": name,
            "acc_default": per_problem["correct_default"].mean(),
            "acc_strict": per_problem["correct_strict"].mean(),
            "boxed_share": table["boxed"].mean(), "truncated_share": table["truncated"].mean(),
            "mean_length": table["length"].mean(), "eval_seconds": seconds}
