"""Turn problems into prompts, sample groups of completions, and score them with both verifiers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mcgrpo.train import contract
from mcgrpo.train.engines import Completion, Engine
from mcgrpo.core import plugins
from mcgrpo.core.verify import VERIFIERS, math_verify_backend, verify


class Prompter:
    """Chat-formatted prompt token ids per question, tokenized once; decoding of completions.

    The one place a prompt is rendered: rollouts, continuations, evaluation and critic features all
    take their prompt ids from here, so `chat_template` (the model's `model.chat_template` keyword
    arguments, e.g. Qwen3's `enable_thinking: false`, Llama-3.2's `date_string`) reaches every one.
    """

    def __init__(self, tokenizer, template: str = "{question}", chat_template: dict | None = None):
        self.tokenizer, self.template = tokenizer, template
        self.chat_template = dict(chat_template or {})
        self._cache: dict[str, tuple[int, ...]] = {}

    def __call__(self, question: str) -> tuple[int, ...]:
        if question not in self._cache:
            content = self.template.replace("{question}", question)
            text = self.tokenizer.apply_chat_template([{"role": "user", "content": content}],
                                                      add_generation_prompt=True, tokenize=False,
                                                      **self.chat_template)
            self._cache[question] = tuple(self.tokenizer(text, add_special_tokens=False).input_ids)
        return self._cache[question]

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)


class PrompterView:
    """What a plugin is handed as ctx.prompter (mcgrpo.api.Prompter): a question's prompt ids and decoding, nothing
    else of the run's Prompter, which renders every rollout's and evaluation's prompt (a rule that set its template,
    chat template or tokenizer would change them for the rest of the run, this arm's evaluation included)."""

    __slots__ = ("_prompter",)
    ALLOWED = "prompter(question), prompter.decode(tokens)"

    def __init__(self, prompter: Prompter):
        object.__setattr__(self, "_prompter", prompter)

    def __call__(self, question: str) -> tuple[int, ...]:
        return self._prompter(question)

    def decode(self, tokens: Sequence[int]) -> str:
        return self._prompter.decode(tokens)

    def __getattr__(self, name: str):
        raise AttributeError(f"ctx.prompter has no attribute {name!r}; allowed: {self.ALLOWED} (docs/plugins.md)")

    def __setattr__(self, name: str, value) -> None:
        self.__getattr__(name)


def problem_records(pool) -> list[dict]:
    """The pool's problems as plain records (mcgrpo.api.Problem), what selectors and credit rules see: a list-valued
    field (`steps`) as a list, as mcgrpo.api.rollouts_of gives it, not the numpy array a Parquet column reads as."""
    return [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in record.items()}
            for record in pool.to_dict("records")]


def study_prompter(tokenizer, cfg: dict) -> Prompter:
    """The study's Prompter: its `task.prompt` and `model.chat_template`. The package builds every Prompter
    here (tests/test_chat_template.py checks), so no stage renders a prompt the others do not."""
    return Prompter(tokenizer, cfg.get("task", {}).get("prompt", "{question}"),
                    cfg.get("model", {}).get("chat_template"))


def rule_backend(rule: str):
    """The math-verify backend where `rule` needs it (an ImportError saying how to install it where it is
    missing), else None."""
    if rule != "math_verify":
        return None
    backend = math_verify_backend()
    if backend is None:
        raise ImportError("verifier.rule math_verify needs the math-verify package: pip install 'mcgrpo[math]'")
    return backend


def study_rule(cfg: dict) -> str:
    """The study's `verifier.rule` (whole_box where the config has no verifier block)."""
    return (cfg.get("verifier") or {}).get("rule", "whole_box")


@dataclass
class Scores:
    default: np.ndarray  # bool per completion
    strict: np.ndarray
    boxed: np.ndarray

    def reward(self, verifier: str) -> np.ndarray:
        """The training reward under the named verifier, as floats."""
        if verifier not in ("default", "strict"):
            raise ValueError(f"unknown verifier {verifier!r}; allowed: default, strict")
        return getattr(self, verifier).astype(np.float64)


def score(texts: Sequence[str], answers: Sequence[str], rule: str = "whole_box") -> Scores:
    """Both verdicts of `rule` (`verifier.rule`) per completion."""
    backend = rule_backend(rule)
    verdicts = [verify(t, a, rule, backend) for t, a in zip(texts, answers)]
    return Scores(*(np.array([getattr(v, f) for v in verdicts], dtype=bool)
                    for f in ("default", "strict", "boxed")))


@dataclass
class Rollouts:
    """One iteration's groups: problem p owns completions p*G .. p*G+G-1."""
    problems: list[dict]
    group_size: int
    prompts: list[tuple[int, ...]]
    completions: list[Completion]
    texts: list[str]
    scores: Scores
    rewards: np.ndarray

    @property
    def n_tokens(self) -> int:
        return sum(len(c) for c in self.completions)

    def grouped(self, values: np.ndarray) -> np.ndarray:
        return np.asarray(values).reshape(len(self.problems), self.group_size)

    def take(self, groups: Sequence[int]) -> "Rollouts":
        """The rollouts of the given groups only."""
        rows = [g * self.group_size + k for g in groups for k in range(self.group_size)]
        return Rollouts([self.problems[g] for g in groups], self.group_size, [self.prompts[r] for r in rows],
                        [self.completions[r] for r in rows], [self.texts[r] for r in rows],
                        Scores(*(getattr(self.scores, f)[rows] for f in ("default", "strict", "boxed"))),
                        self.rewards[rows])

    @staticmethod
    def join(parts: Sequence["Rollouts"]) -> "Rollouts":
        """One batch of several batches' groups, in order."""
        cat = lambda f: [x for p in parts for x in getattr(p, f)]  # noqa: E731
        return Rollouts(cat("problems"), parts[0].group_size, cat("prompts"), cat("completions"), cat("texts"),
                        Scores(*(np.concatenate([getattr(p.scores, f) for p in parts]).astype(bool)
                                 for f in ("default", "strict", "boxed"))),
                        np.concatenate([p.rewards for p in parts]))


def sample_groups(engine: Engine, prompter: Prompter, problems: list[dict], group_size: int,
                  limit: int, seeds: Sequence[int], verifier: str, rule: str = "whole_box",
                  verifier_key: str = plugins.STUDY_VERIFIER) -> Rollouts:
    """G completions per problem, seeds[r] driving completion r, rewarded by `verifier` of `rule` (named by the config
    key `verifier_key`)."""
    prompts = [prompter(p["question"]) for p in problems for _ in range(group_size)]
    completions = engine.generate(prompts, [limit] * len(prompts), seeds)
    texts = [prompter.decode(c.tokens) for c in completions]
    answers = [p["answer"] for p in problems for _ in range(group_size)]
    scores = score(texts, answers, rule)
    return Rollouts(problems, group_size, prompts, completions, texts, scores,
                    reward(scores, texts, answers, verifier, verifier_key))


def reward(scores: Scores, texts: Sequence[str], answers: Sequence[str], verifier: str,
           key: str = plugins.STUDY_VERIFIER) -> np.ndarray:
    """The training reward under the named verifier: a built-in's from the scores, a plugin's (an installed verifier,
    mcgrpo.core.plugins) from its verdict on each text, whatever `verifier.rule`. `key`: the config key that names it
    in the run (an arm's own, arms.<arm>.recipe.reward_verifier, else the recipe's: plugins.reward_verifier), which
    its messages name. Evaluation always reports the built-in verifiers (of the study's rule): the yardstick stays
    the same whatever an arm trains on. A plugin's verdicts are checked to be bools (mcgrpo.train.contract)."""
    if verifier in VERIFIERS:
        return scores.reward(verifier)
    judge = plugins.load("verifier", verifier, key).factory
    return contract.verdicts(contract.Subject.of("verifier", verifier, key), judge, texts, answers)
