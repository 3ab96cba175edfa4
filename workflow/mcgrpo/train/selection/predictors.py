"""Predicted success of candidate prompts, from what earlier iterations trained.

Each predictor sees the group mean reward of every prompt trained (`observe`) and predicts a candidate's
success (`predict`). They keep only a window of recent iterations, as the paper's filters do.
"""

from __future__ import annotations

from collections import deque

import numpy as np


class _Window:
    """(iteration, pool index, features, group mean reward) of the last `window` iterations trained."""

    def __init__(self, window: int):
        self.window = window
        self.rows: deque = deque()

    def add(self, iteration: int, indices, features, rewards) -> None:
        feats = features if features is not None else [None] * len(indices)
        self.rows.extend(zip([iteration] * len(indices), indices, feats, rewards))
        while self.rows and self.rows[0][0] <= iteration - self.window:
            self.rows.popleft()

    def rewards(self) -> np.ndarray:
        return np.array([r for *_, r in self.rows], dtype=float)

    def state_dict(self) -> dict:
        return {"rows": list(self.rows)}

    def load_state_dict(self, state: dict) -> None:
        self.rows = deque(state["rows"])


class PromptCritic:
    """Ridge regression on the policy's hidden state at the end of each prompt (one prefill pass)."""

    needs_features = True

    def __init__(self, window: int = 32, alpha: float = 1.0):
        self.data, self.alpha = _Window(window), alpha
        # imported when built, outside the stage clock: imported at the first fit, its seconds (about 1-2 s) were
        # training time once in a run, and once more in every attempt that resumed it (docs/analysis.md)
        import sklearn.linear_model  # noqa: F401

    def observe(self, iteration, indices, features, rewards, levels) -> None:
        self.data.add(iteration, indices, features, rewards)

    def predict(self, indices, features, levels) -> np.ndarray:
        if len(self.data.rows) < 2:
            return np.full(len(indices), np.nan)
        from sklearn.linear_model import Ridge  # imported when built (above): 2 s no other train job need pay
        x = np.stack([f for _, _, f, _ in self.data.rows])
        model = Ridge(alpha=self.alpha).fit(x, self.data.rewards())
        return np.clip(model.predict(np.asarray(features)), 0.0, 1.0)

    def state_dict(self) -> dict:
        return self.data.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.data.load_state_dict(state)


class History:
    """A prompt's own group mean reward the last time it was trained, else the recent mean reward."""

    needs_features = False

    def __init__(self, window: int = 32):
        self.data, self.last = _Window(window), {}

    def observe(self, iteration, indices, features, rewards, levels) -> None:
        self.data.add(iteration, indices, None, rewards)
        self.last.update(zip(indices, rewards))

    def predict(self, indices, features, levels) -> np.ndarray:
        recent = self.data.rewards().mean() if self.data.rows else np.nan
        return np.array([self.last.get(j, recent) for j in indices], dtype=float)

    def state_dict(self) -> dict:
        return {**self.data.state_dict(), "last": dict(self.last)}

    def load_state_dict(self, state: dict) -> None:
        self.data.load_state_dict(state)
        self.last = dict(state["last"])


class Level:
    """The recent mean reward of the prompt's level (the recent mean over all levels if none)."""

    needs_features = False

    def __init__(self, window: int = 32):
        self.data = _Window(window)

    def observe(self, iteration, indices, features, rewards, levels) -> None:
        self.data.add(iteration, indices, levels, rewards)  # the feature slot holds the level

    def predict(self, indices, features, levels) -> np.ndarray:
        if not self.data.rows:
            return np.full(len(indices), np.nan)
        by_level: dict = {}
        for _, _, level, reward in self.data.rows:
            by_level.setdefault(level, []).append(reward)
        recent = self.data.rewards().mean()
        return np.array([np.mean(by_level[lv]) if lv in by_level else recent for lv in levels], dtype=float)

    def state_dict(self) -> dict:
        return self.data.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.data.load_state_dict(state)


PREDICTORS = {"critic": PromptCritic, "history": History, "level": Level}
