"""Prompt selection: which problems an iteration trains on.

Every selector (the `Selector` protocol) reads candidates from the prompt stream and returns a Selection,
generates its groups (`generate`: usually the chosen prompts once; dynamic sampling draws until enough are
mixed), and is told each trained group's mean reward afterwards (`observe`). It sees the policy only through
a `PolicyView`. What a selector saw and did is logged to prompts.parquet. Outcome-only GRPO trains on the
candidates as they come; filters score more candidates and keep some.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from mcgrpo.core import plugins
from mcgrpo.core.seeds import stable_seed
from mcgrpo.train import contract
from mcgrpo.train.rollout import Rollouts
from mcgrpo.train.selection.predictors import PREDICTORS
from mcgrpo.train.selection.stream import PromptStream


@dataclass
class Selection:
    candidates: np.ndarray                       # pool indices drawn from the stream this iteration
    chosen: np.ndarray                           # the subset trained on, in training order
    predicted: np.ndarray = field(default=None)  # predicted success per candidate (NaN if none)
    features: np.ndarray | None = None           # per candidate, when a predictor needed a prefill pass

    def __post_init__(self):
        self.candidates, self.chosen = np.asarray(self.candidates), np.asarray(self.chosen)  # lists of ints welcome
        if self.predicted is None:
            self.predicted = np.full(len(self.candidates), np.nan)


class PoolView(Protocol):
    """What a selector may ask about pool problems (train.policy.PolicyView): prefill features and levels."""
    def features(self, indices: np.ndarray) -> np.ndarray: ...
    def levels(self, indices: np.ndarray) -> np.ndarray: ...


# sample(pool indices, chunk) -> their scored groups (a Rollouts); chunk numbers the draws of one iteration
Sampler = Callable[[np.ndarray, int], Rollouts]


class Selector(Protocol):
    def select(self, iteration: int, view: PoolView) -> Selection: ...

    def generate(self, iteration: int, selection: Selection, sample: Sampler) -> tuple[Rollouts, int, Selection]:
        """(the groups to train on, tokens of groups generated and discarded, the final Selection)."""

    def observe(self, iteration: int, selection: Selection, group_means: np.ndarray, view: PoolView) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class TakeAll:
    """Train on the next prompts of the stream, in order."""

    def __init__(self, stream: PromptStream, per_iteration: int):
        self.stream, self.per_iteration = stream, per_iteration

    def select(self, iteration: int, view: PoolView) -> Selection:
        candidates = self.stream.candidates(iteration, self.per_iteration)
        return Selection(candidates, candidates)

    def generate(self, iteration: int, selection: Selection, sample: Sampler):
        return sample(selection.chosen, 0), 0, selection

    def observe(self, iteration: int, selection: Selection, group_means: np.ndarray, view: PoolView) -> None:
        pass

    def state_dict(self) -> dict:
        return {}
    state_dict.saves_nothing = True  # a subclass that keeps state overrides it (mcgrpo.train.contract.resumable)

    def load_state_dict(self, state: dict) -> None:
        pass


def nearest_with_extras(predicted: np.ndarray, target: float, keep: int, extras: int,
                        rng: np.random.Generator) -> np.ndarray:
    """Positions of the `keep` candidates predicted nearest `target`, then `extras` others at random."""
    order = np.argsort(np.abs(predicted - target), kind="stable")
    rest = order[keep:]
    return np.concatenate([order[:keep], rng.choice(rest, size=min(extras, len(rest)), replace=False)])


class Filter(TakeAll):
    """Score `candidates` prompts per iteration with a predictor and keep `per_iteration` of them.

    Until `warmup_prompts` prompts have been trained the predictor has nothing to learn from, so the first
    candidates are taken as they come. `random_choice` is the control: same candidates, same fitted
    predictor (logged), but the kept prompts are drawn uniformly.
    """

    def __init__(self, stream: PromptStream, predictor, per_iteration: int, seed: int, candidates: int = 24,
                 keep: int = 6, target: float = 0.5, warmup_prompts: int = 32, random_choice: bool = False):
        super().__init__(stream, per_iteration)
        self.predictor, self.seed = predictor, seed
        self.candidates, self.keep, self.target, self.warmup = candidates, keep, target, warmup_prompts
        self.random_choice, self.trained = random_choice, 0

    def select(self, iteration: int, view: PoolView) -> Selection:
        candidates = self.stream.candidates(iteration, self.candidates)
        features = view.features(candidates) if self.predictor.needs_features else None
        predicted = self.predictor.predict(candidates, features, view.levels(candidates))
        rng = np.random.default_rng(stable_seed(self.seed, "select", iteration))
        if self.trained < self.warmup:
            positions = np.arange(self.per_iteration)
        elif self.random_choice:
            positions = rng.choice(len(candidates), size=self.per_iteration, replace=False)
        else:
            positions = nearest_with_extras(predicted, self.target, self.keep, self.per_iteration - self.keep, rng)
        return Selection(candidates, candidates[positions], predicted, features)

    def observe(self, iteration: int, selection: Selection, group_means: np.ndarray, view: PoolView) -> None:
        chosen = selection.chosen
        features = None
        if selection.features is not None:
            where = {j: k for k, j in enumerate(selection.candidates.tolist())}
            features = [selection.features[where[j]] for j in chosen.tolist()]
        self.predictor.observe(iteration, chosen.tolist(), features, list(group_means), view.levels(chosen))
        self.trained += len(chosen)

    def state_dict(self) -> dict:
        return {"trained": self.trained, "predictor": self.predictor.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.trained = state["trained"]
        self.predictor.load_state_dict(state["predictor"])


class DynamicSampling(TakeAll):
    """DAPO's dynamic sampling: generate groups in stream order and keep mixed-outcome ones until the batch
    is full (or `max_groups` were generated); every discarded group's tokens count toward the budget."""

    def __init__(self, stream: PromptStream, per_iteration: int, max_groups: int = 64):
        super().__init__(stream, per_iteration)
        self.max_groups, self.cursor = max_groups, 0

    def select(self, iteration: int, view: PoolView) -> Selection:
        return Selection(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))

    def generate(self, iteration: int, selection: Selection, sample: Sampler):
        """(kept rollouts, discarded tokens, Selection) from chunks of the stream."""
        kept, chosen, tried, generated, chunk = [], [], [], 0, 0
        while len(chosen) < self.per_iteration and len(tried) < self.max_groups:
            indices = self.stream.slice(self.cursor, self.per_iteration)
            self.cursor += self.per_iteration
            batch = sample(indices, chunk)
            chunk, generated = chunk + 1, generated + batch.n_tokens
            means = batch.grouped(batch.rewards).mean(axis=1)
            mixed = [g for g, m in enumerate(means) if 0 < m < 1][:self.per_iteration - len(chosen)]
            kept.append(batch.take(mixed))
            chosen += indices[mixed].tolist()
            tried += indices.tolist()
        if not chosen:  # nothing mixed within the cap: train on the last groups (zero advantage)
            kept, chosen = [batch], indices.tolist()
        batch = Rollouts.join(kept)
        return batch, generated - batch.n_tokens, Selection(np.array(tried, dtype=np.int64),
                                                             np.array(chosen, dtype=np.int64))

    def state_dict(self) -> dict:
        return {"cursor": self.cursor}

    def load_state_dict(self, state: dict) -> None:
        self.cursor = state["cursor"]


@dataclass(kw_only=True)
class StreamSelector(TakeAll):
    """The base of a selector plugin: the prompt stream, the prompts per iteration and the run's seed come from the
    workflow (not options); a subclass's own fields are its options, and it overrides what it changes (select,
    generate, observe, state_dict / load_state_dict for what must survive a resume)."""
    stream: PromptStream
    per_iteration: int
    seed: int


def dynamic_sampling(stream: PromptStream, per_iteration: int, seed: int, **options) -> Selector:
    return DynamicSampling(stream, per_iteration, **options)


def _filter(kind: str, random_choice: bool = False):
    def make(stream: PromptStream, per_iteration: int, seed: int, window: int = 32, **options) -> Selector:
        return Filter(stream, PREDICTORS[kind](window=window), per_iteration, seed, random_choice=random_choice,
                      **options)
    return make


critic_filter, history_filter, level_filter = _filter("critic"), _filter("history"), _filter("level")
random_choice = _filter("critic", random_choice=True)


def build(arm: dict, pool_size: int, seed: int, per_iteration: int, key: str = "arm.selection") -> Selector:
    """The selector of an arm's `selection:` block (outcome-only's stream order when empty): a built-in or a
    plugin (mcgrpo.core.plugins), built with the stream, the prompts per iteration, the seed and its own deep copy of
    the options (what it does to them never reaches the run's config), leaving the process's global state as it was
    (`key`: the config key that names it)."""
    stream = PromptStream(pool_size, seed)
    spec = arm.get("selection") or {}
    if not spec:
        return TakeAll(stream, per_iteration)
    (name, options), = spec.items()
    plugin = plugins.load("selection", name, key)
    return contract.Subject.of("selection", name, key).built(plugin.factory, stream=stream, per_iteration=per_iteration,
                                                            seed=seed, **copy.deepcopy(options or {}))
