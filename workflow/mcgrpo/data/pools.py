"""Training pools and evaluation sets from MATH / GSM8K sources, as in the paper's setup.

Order matters, so it is fixed here:
1. every source is read once and filtered to plain numeric answers and to the set's levels;
2. evaluation sets are built in config order, each excluding near-duplicates of the earlier ones and keeping
   only the first of a problem repeated within itself;
   a set with a size is drawn with the task seed (its own stream, so resizing one set never
   changes another); a set without a size takes every remaining problem whose question has at
   most `max_question_chars` characters and that duplicates nothing in the training pool (the
   paper's "further test problems"), so such a set never shrinks the pool;
3. the pool loses every problem that duplicates an evaluation problem (normalized exact match or
   8-gram Jaccard >= 0.6), and is then drawn down to its size if it has one.
Every removal is logged with its reason and the problem it matched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mcgrpo.data import dedup, gsm8k, math, numeric
from mcgrpo.data.spec import source as source_of
from mcgrpo.core.seeds import stable_seed
from mcgrpo.core.errors import ConfigError

LOADERS = {"math": math.load, "gsm8k": gsm8k.load}
LEVELED = {"math"}


@dataclass
class Prepared:
    pool: pd.DataFrame
    evals: dict[str, pd.DataFrame]
    removed: pd.DataFrame                                  # dedup.REMOVED_COLUMNS
    report: dict[str, dict] = field(default_factory=dict)  # per set: loaded, numeric filter, levels, final

    def lines(self) -> list[str]:
        """The log: what each set kept and dropped, then every removal and why."""
        out = [f"{name}: {r['loaded']} loaded, {r['numeric_kept']} numeric "
               f"(dropped {_reasons(r['numeric_dropped'])}), {r['in_levels']} in levels, "
               f"{r['duplicates']} duplicates removed, {r['final']} kept"
               for name, r in self.report.items()]
        return out + [f"removed {row.problem_id} from {row.set}: {row.reason} match of {row.match_id} "
                      f"in {row.match_set} (similarity {row.similarity:.2f})" for row in self.removed.itertuples()]


def _reasons(dropped: dict) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in dropped.items() if n) or "none"


def _load(src: dict, cache: dict) -> pd.DataFrame:
    """All problems of a source with the numeric filter applied (not yet dropped), read once."""
    key = repr(sorted((k, str(v)) for k, v in src.items()))
    if key not in cache:
        cache[key] = numeric.apply(LOADERS[src["format"]]({k: v for k, v in src.items() if k != "format"}))
    return cache[key]


def _candidates(src: dict, levels: list[int] | None, cache: dict, report: dict) -> pd.DataFrame:
    loaded = _load(src, cache)
    report.update(loaded=len(loaded), **numeric.report(loaded))
    kept = loaded[loaded["numeric_reason"] == numeric.KEPT]
    if levels and src["format"] in LEVELED:
        kept = kept[kept["level"].isin(levels)]
    report["in_levels"] = len(kept)
    return kept.drop(columns=["numeric_reason", "several_answers"], errors="ignore").reset_index(drop=True)


def _draw(problems: pd.DataFrame, size: int, seed: int, name: str, key: str) -> pd.DataFrame:
    if size > len(problems):
        _too_few(size, len(problems), name, key)
    chosen = np.random.default_rng(stable_seed("draw", seed, name)).choice(len(problems), size, replace=False)
    return problems.iloc[np.sort(chosen)].reset_index(drop=True)


def _too_few(size: int, qualify: int, name: str, key: str) -> None:
    raise ConfigError(f"config key {key}.size: {size} problems asked for set '{name}', but only {qualify} qualify "
                      f"(numeric answer, levels, no duplicates)")


class _Builder:
    """The state of one preparation: sources read, the log, and the problems to protect."""

    def __init__(self, task: dict):
        self.task, self.cache, self.report, self.removed = task, {}, {}, []
        self.protected = dedup.Index()

    def candidates(self, name: str | None) -> pd.DataFrame:
        """A set's numeric problems of its levels (an evaluation set's levels default to the pool's)."""
        spec = self.task["pool"] if name is None else self.task["eval_sets"][name]
        levels = spec.get("levels") or self.task["pool"].get("levels")
        return _candidates(source_of(self.task, name), levels, self.cache,
                           self.report.setdefault(name or "pool", {}))

    def without(self, problems: pd.DataFrame, index: dedup.Index, name: str) -> pd.DataFrame:
        return self.logged(index.split(problems, name), name)

    def logged(self, split: tuple[pd.DataFrame, pd.DataFrame], name: str) -> pd.DataFrame:
        """The kept problems of a (kept, removed) split; the removed ones go to the log and the set's count."""
        kept, dropped = split
        self.removed.append(dropped)
        r = self.report[name]
        r["duplicates"] = r.get("duplicates", 0) + len(dropped)
        return kept

    def eval_set(self, name: str, pool_index: dedup.Index) -> pd.DataFrame:
        spec = self.task["eval_sets"][name]
        problems = self.without(self.candidates(name), self.protected, name)
        if spec.get("size") is None:
            limit = spec.get("max_question_chars")
            if limit is not None:
                problems = problems[problems["question"].str.len() <= limit].reset_index(drop=True)
            problems = self.without(problems, pool_index, name)
            # The paper is silent on a problem repeated within one evaluation set (two ids, one question); counted
            # twice it would weigh double in the set's accuracy, so the first is kept and each repeat logged. The
            # pool keeps its repeats: they weigh a problem in sampling, never in a verdict's accuracy.
            problems = self.logged(dedup.distinct(problems, name), name)
        else:
            problems = self.drawn(problems, spec["size"], name)
        if problems.empty:
            raise ConfigError(f"config key task.eval_sets.{name}: no problem qualifies for this set")
        self.report[name]["final"] = len(problems)
        self.protected.add(problems, name)
        return problems

    def drawn(self, problems: pd.DataFrame, size: int, name: str) -> pd.DataFrame:
        """`size` distinct problems. The first draw is the one the set always drew (one that drew no repeat is
        unchanged, and so are its runs' data fingerprints); each repeat it drew is logged and replaced by a draw,
        from the same seeded stream, among the problems not drawn yet."""
        rng = np.random.default_rng(stable_seed("draw", self.task["seed"], name))
        kept, index, free = [], dedup.Index(), np.arange(len(problems))
        while need := size - sum(map(len, kept)):
            if need > len(free):
                _too_few(size, len(dedup.distinct(problems, name)[0]), name, f"task.eval_sets.{name}")
            pick = np.sort(rng.choice(len(free), need, replace=False))
            kept.append(self.logged(index.take(problems.iloc[free[pick]], name), name))
            free = np.delete(free, pick)
        return pd.concat(kept, ignore_index=True)

    def pool(self, candidates: pd.DataFrame) -> pd.DataFrame:
        pool = self.without(candidates, self.protected, "pool")
        size = self.task["pool"].get("size")
        if size is not None:
            pool = _draw(pool, size, self.task["seed"], "pool", "task.pool")
        self.report["pool"]["final"] = len(pool)
        return pool


def prepare(task: dict) -> Prepared:
    """The pool and evaluation sets of a math or gsm8k task, with the log of what was removed."""
    build = _Builder(task)
    candidates = build.candidates(None)
    pool_index = dedup.Index().add(candidates, "pool")
    evals = {name: build.eval_set(name, pool_index) for name in task["eval_sets"]}
    pool = build.pool(candidates)
    dedup.check_disjoint({"pool": pool, **evals})
    return Prepared(pool, evals, pd.concat(build.removed, ignore_index=True), build.report)
