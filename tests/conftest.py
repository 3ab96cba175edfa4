"""Shared fixtures: a small random tiny model, a small arith world, a small validated study config."""

from __future__ import annotations

import copy
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import configuration

# `make test` leaves no files in the checkout: hypothesis keeps its caches in a temporary folder.
configuration.set_hypothesis_home_dir(tempfile.mkdtemp(prefix="mcgrpo-hypothesis-"))

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow"))

from mcgrpo import studies  # noqa: E402
from mcgrpo import data  # noqa: E402
from mcgrpo.train.models.tiny import build_model, build_tokenizer  # noqa: E402

SMALL_STUDY = {
    "study": "mini",
    "seeds": [1, 2],
    "task": {"seed": 7, "pool": {"size": 64, "levels": [1, 2]},
             "eval_sets": {"heldout": {"size": 6, "levels": [1, 2]}}},
    "model": {"tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
                       "max_positions": 96},
              "warm_start": {"steps": 30, "batch_size": 8, "problems": 200}},
    "recipe": {"prompts_per_iteration": 2, "group_size": 4, "completion_limit": 24, "microbatch_size": 3},
    "budget": {"tokens": 600},
    "evaluation": {"samples": 2, "per_budget": 4},
    "arms": {"outcome": {}, "mc_k2": {"credit": {"monte_carlo": {"k": 2}}}},
    "analysis": {"base": "outcome"},
}


def edited_study(**changes) -> dict:
    """A copy of SMALL_STUDY with `block__key=value` changes; a callable value maps the old value to the new."""
    cfg = copy.deepcopy(SMALL_STUDY)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node = cfg
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value(node.get(last)) if callable(value) else value
    return cfg


@pytest.fixture
def study() -> dict:
    return studies.validate(copy.deepcopy(SMALL_STUDY))


@pytest.fixture(scope="session")
def world():
    """(pool, eval sets) of the small study."""
    cfg = studies.validate(copy.deepcopy(SMALL_STUDY))
    return data.build(cfg["task"])


@pytest.fixture
def tiny():
    """A freshly initialized (untrained) tiny model and its tokenizer, identical on every call."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                        max_positions=96, seed=0)
    torch.set_num_threads(1)
    return model, tokenizer
