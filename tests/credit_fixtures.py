"""Hand-made rollouts and a scripted engine, so credit rules can be checked against hand-worked numbers."""

from __future__ import annotations

from mcgrpo.train.engines import Completion
from mcgrpo.train.rollout import Prompter, Rollouts, score


def tokens(tokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer(text, add_special_tokens=False).input_ids)


def rollouts(tokenizer, problems: list[dict], texts: list[str], group_size: int) -> Rollouts:
    """Groups whose completions are exactly `texts` (character tokens), scored by the default verifier."""
    prompter = Prompter(tokenizer)
    prompts = [prompter(p["question"]) for p in problems for _ in range(group_size)]
    completions = [Completion(tokens(tokenizer, t), True) for t in texts]
    decoded = [prompter.decode(c.tokens) for c in completions]
    scores = score(decoded, [p["answer"] for p in problems for _ in range(group_size)])
    return Rollouts(problems, group_size, prompts, completions, decoded, scores, scores.reward("default"))


class ScriptedEngine:
    """Answers requests with scripted texts in the order asked, and records every request."""

    def __init__(self, tokenizer, replies: list[str]):
        self.tokenizer, self.replies, self.requests = tokenizer, list(replies), []

    def generate(self, prompts, max_new_tokens, seeds):
        self.requests += list(zip(map(tuple, prompts), max_new_tokens))
        replies, self.replies = self.replies[:len(prompts)], self.replies[len(prompts):]
        return [Completion(tokens(self.tokenizer, text), True) for text in replies]

    def sync(self, model):
        pass


class CountingEngine:
    """A real engine that counts every token it generates."""

    def __init__(self, engine):
        self.engine, self.generated = engine, 0

    def generate(self, prompts, max_new_tokens, seeds):
        out = self.engine.generate(prompts, max_new_tokens, seeds)
        self.generated += sum(len(c) for c in out)
        return out

    def sync(self, model):
        self.engine.sync(model)
