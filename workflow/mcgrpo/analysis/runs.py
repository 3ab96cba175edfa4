"""A study's stored runs, read for analysis: where each evaluation sits and how each problem scored.

Contrasts read a run at a position on a basis (tokens, updates, training seconds), so they need
each evaluation's coordinates from evals.parquet; the crossed bootstrap resamples test problems
and pass@k counts correct samples per problem, so they need samples.parquet reduced to
per-problem counts. Nothing else of a run is read, so analysis stays fast at the paper's scale.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mcgrpo.analysis.stats import pass_at_k
from mcgrpo.core.manifest import checked
from mcgrpo.core.store import COLUMNS, read_arrow, read_contract
from mcgrpo.core.errors import ConfigError, DataError
from mcgrpo.core.study_runs import folders

EVAL_METRICS = {c for c in COLUMNS["evals"] if c.startswith("acc_")}  # readable without samples.parquet
# analysis.clock -> the evals.parquet column that times training (the stages' wall or process CPU seconds)
CLOCKS = {"wall": "train_seconds", "cpu": "train_cpu_seconds"}
_METRIC = re.compile(r"^(?:acc|pass@(?P<k>[1-9][0-9]*))_(?P<verifier>[A-Za-z0-9]+)$")


def parse_metric(metric: str) -> tuple[str, int]:
    """(verifier, k) of `acc_<verifier>` (k = 1) or `pass@<k>_<verifier>`."""
    m = _METRIC.match(metric)
    if not m:
        raise ConfigError(f"metric {metric!r}: expected acc_<verifier> or pass@<k>_<verifier>, "
                         f"e.g. acc_default, acc_strict, pass@8_default")
    return m["verifier"], int(m["k"] or 1)


@dataclass(frozen=True)
class Run:
    """One run on one evaluation set: its evaluations in order and per-problem sample counts."""

    arm: str
    seed: int
    eval_set: str
    evals: pd.DataFrame
    problems: np.ndarray | None = None  # columns of `samples` and `correct`; None without samples
    samples: np.ndarray | None = None  # evaluations x problems: samples drawn
    correct: dict[str, np.ndarray] = field(default_factory=dict)  # verifier -> correct samples
    time: str = CLOCKS["wall"]  # the column the time bases read (analysis.clock)
    source: str = ""  # the evals.parquet it was read from, for messages
    _cache: dict = field(default_factory=dict, repr=False, compare=False)  # contrasts read each many times

    @property
    def name(self) -> str:
        return f"{self.arm}/seed{self.seed}"

    def coords(self, column: str) -> np.ndarray:
        if column not in self._cache:
            self._cache[column] = self.evals[column].to_numpy(dtype=float)
        return self._cache[column]

    def metrics(self) -> list[str]:
        """The metrics this run can give: per verifier, accuracy and pass@k up to its samples."""
        most = int(self.samples.min()) if self.samples is not None and self.samples.size else 0
        scored = [f"acc_{v}" for v in self.correct] + [f"pass@<k>_{v} (k <= {most})" for v in self.correct]
        extra = [c for c in self.evals.columns if c.startswith("acc_") and c not in scored]
        return scored + extra

    def scores(self, metric: str) -> tuple[np.ndarray, bool]:
        """(evaluations x problems table of `metric`, whether its columns are problems).

        A metric with no per-sample verdicts but an `acc_*` column in evals.parquet is read from
        there as a single column: usable for paired tests, not for the crossed bootstrap.
        """
        if metric not in self._cache:
            self._cache[metric] = self._scores(metric)
        return self._cache[metric]

    def _scores(self, metric: str) -> tuple[np.ndarray, bool]:
        verifier, k = parse_metric(metric)
        if verifier in self.correct:
            if k > self.samples.min():
                raise DataError(f"metric {metric!r}: {self.name} has only {int(self.samples.min())} "
                                 f"samples per problem; allowed: {', '.join(self.metrics())}")
            return pass_at_k(self.samples, self.correct[verifier], k), True
        if k == 1 and metric in self.evals.columns:
            return self.evals[metric].to_numpy(dtype=float)[:, None], False
        raise DataError(f"metric {metric!r} is not recorded for {self.name} ({self.eval_set}); "
                         f"allowed: {', '.join(self.metrics())}")


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Of a dictionary-encoded column: per row, the rank of its value among the sorted values; those values."""
    encoded = column.unify_dictionaries().combine_chunks()
    order = pc.array_sort_indices(encoded.dictionary).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    values = np.asarray(encoded.dictionary.take(order).to_pylist(), dtype=object)
    return rank[encoded.indices.to_numpy(zero_copy_only=False)], values


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True), by counting rather than sorting where `values` are integers in a
    short range (evaluation indices, problem codes: a run's thousands of samples fall on a few hundred values)."""
    if not values.size or values.dtype.kind not in "iu" or np.ptp(values) > 4 * values.size:
        return np.unique(values, return_inverse=True)
    low = values.min()
    seen = np.bincount(values - low) > 0
    return np.flatnonzero(seen).astype(values.dtype) + low, (np.cumsum(seen) - 1)[values - low]


def _counts(samples: pa.Table, verifiers: list[str], path: Path):
    """Per eval set: (eval indices, problem ids, samples and correct counts as evaluations x problems)."""
    set_code, sets = _codes(samples.column("eval_set"))
    problem_code, problem_ids = _codes(samples.column("problem_id"))
    eval_index = samples.column("eval_index").to_numpy()
    flags = {v: samples.column(f"correct_{v}").to_numpy(zero_copy_only=False) for v in verifiers}
    out = {}
    for code, eval_set in enumerate(sets):
        rows = np.flatnonzero(set_code == code) if len(sets) > 1 else slice(None)  # one set: every row, uncopied
        evals, e = _distinct(eval_index[rows])
        present, p = _distinct(problem_code[rows])
        cell = e * len(present) + p
        size = len(evals) * len(present)
        n = np.bincount(cell, minlength=size).reshape(len(evals), len(present))
        if (n == 0).any():
            i, j = map(int, np.argwhere(n == 0)[0])
            raise DataError(f"{path}: evaluation {evals[i]} of {eval_set} has no sample of problem "
                             f"{problem_ids[present[j]]!r}; every evaluation must score every problem")
        correct = {v: np.bincount(cell, weights=f[rows], minlength=size).reshape(n.shape) for v, f in flags.items()}
        out[eval_set] = (evals, problem_ids[present], n, correct)
    return out


@lru_cache(maxsize=4096)
def _evals(path: Path, stamp: tuple[int, int]) -> pd.DataFrame:
    """evals.parquet in evaluation order; cached per (path, mtime, size), as every step reads it."""
    evals = read_contract(path, "evals")
    # a stable sort of indices already in order (as the trainer writes them) is the frame itself: no copy
    return evals if evals["eval_index"].is_monotonic_increasing else evals.sort_values("eval_index", kind="stable")


def read_evals(path: str | Path) -> pd.DataFrame:
    """A run's evals.parquet, verified against its manifest (do not modify the frame: it is shared by every
    reader in this process)."""
    path = checked(path)
    stat = path.stat() if path.exists() else None
    return _evals(path, (stat.st_mtime_ns, stat.st_size)) if stat else read_contract(path, "evals")


# The columns a basis reads a run along (contrasts.positions): each counted up from 0 along the run.
COORDINATES = ("tokens_total", "iteration", "updates", *CLOCKS.values())


def _never_falling(evals: pd.DataFrame, path: Path, eval_set: str) -> None:
    """Refuse a run whose coordinates fall from one evaluation to the next or start below 0 (unknown values, NaN,
    skipped): every basis reads a run by interpolating between its evaluations in this order, so a clock or count
    recorded wrong (an ingested run's trainer_state.json logging a negative step_time or completion length) would
    read it at another evaluation than the one it names, without a word."""
    index = evals["eval_index"].to_numpy()
    for column in (c for c in COORDINATES if c in evals.columns):
        values = evals[column].to_numpy()
        known = np.flatnonzero(~pd.isna(values))
        falls = np.flatnonzero(np.diff(values[known].astype(float)) < 0)
        if len(known) and values[known[0]] < 0:
            what = f"{column} is {values[known[0]].item()!r} at evaluation {index[known[0]]} of {eval_set}"
        elif len(falls):
            before, after = known[falls[0]], known[falls[0] + 1]
            what = (f"{column} falls from {values[before].item()!r} to {values[after].item()!r} at evaluation "
                    f"{index[after]} of {eval_set}")
        else:
            continue
        raise DataError(f"{path}: {what}; allowed: coordinates that never fall (tokens, iterations, updates and "
                        f"seconds counted up from 0 along the run): its writer recorded them wrong (an ingested "
                        f"run: its trainer_state.json's step_time or completions/mean_length at that step); retrain "
                        f"it, or ingest it again from a log that records them")


def _clock_column(evals: pd.DataFrame, clock: str, path: Path) -> str:
    """The column of `clock`, which `path` must hold (runs trained before the CPU clock reached evals.parquet
    have only the wall clock)."""
    if clock not in CLOCKS:
        raise ConfigError(f"clock {clock!r}: expected one of {', '.join(CLOCKS)}")
    column = CLOCKS[clock]
    if column not in evals.columns:
        raise DataError(f"{path}: no column {column} (the run was trained before evaluations recorded the "
                        f"{clock} clock); allowed: retrain it, or analysis.clock: wall")
    return column


def read_runs(run_dir: str | Path, arm: str, seed: int, eval_sets: list[str],
              samples: bool = True, clock: str = "wall") -> list[Run]:
    """One stored run as a Run per evaluation set, timed by `clock`; a missing file or evaluation is an error."""
    run_dir = Path(run_dir)
    evals = read_evals(run_dir / "evals.parquet")
    time = _clock_column(evals, clock, run_dir / "evals.parquet")
    by_set = {}
    if samples:
        path = checked(run_dir / "samples.parquet")
        verifiers = [c[len("correct_"):] for c in pq.read_schema(path).names if c.startswith("correct_")] \
            if path.exists() else []
        table = read_arrow(path, COLUMNS["samples"], ["eval_set", "eval_index", "problem_id",
                                                      *(f"correct_{v}" for v in verifiers)],
                           dictionary=["eval_set", "problem_id"])
        # a rule whose package was not installed at evaluation left its column null: unknown, not wrong
        verifiers = [v for v in verifiers if table.column(f"correct_{v}").null_count == 0]
        by_set = _counts(table, verifiers, path)
    out = []
    for eval_set in eval_sets:
        on_set = evals["eval_set"].to_numpy() == eval_set
        ev = evals if on_set.all() else evals[on_set].reset_index(drop=True)
        if ev.empty:
            raise DataError(f"{run_dir / 'evals.parquet'}: no evaluation on set {eval_set!r}; "
                             f"it holds {', '.join(sorted(evals['eval_set'].unique()))}")
        _never_falling(ev, run_dir / "evals.parquet", eval_set)
        if not samples:
            out.append(Run(arm, seed, eval_set, ev, time=time, source=str(run_dir / "evals.parquet")))
            continue
        if eval_set not in by_set:
            raise DataError(f"{run_dir / 'samples.parquet'}: no sample on set {eval_set!r}")
        indices, problems, n, correct = by_set[eval_set]
        position = {int(e): i for i, e in enumerate(indices)}
        missing = [int(e) for e in ev["eval_index"] if e not in position]
        if missing:
            raise DataError(f"{run_dir / 'samples.parquet'}: evaluation(s) {missing} of {eval_set} "
                             f"in evals.parquet have no samples")
        rows = [position[int(e)] for e in ev["eval_index"]]
        out.append(Run(arm, seed, eval_set, ev, problems, n[rows], {v: c[rows] for v, c in correct.items()}, time,
                       str(run_dir / "evals.parquet")))
    return out


def load(results_dir: str | Path, arms: list[str], seeds: list[int], eval_sets: list[str],
         samples: bool = True, clock: str = "wall", plan: dict | None = None) -> dict[tuple[str, int, str], Run]:
    """Every (arm, seed) run of a study's results folder, keyed by (arm, seed, eval set), timed by `clock`: read
    through the study's index, each run checked against its link, manifest and run.json first
    (mcgrpo.core.study_runs; `plan`: the study's arms, that each run's arm config is held to)."""
    runs = {}
    for (arm, seed), folder in folders(results_dir, arms, seeds, plan).items():
        for run in read_runs(folder, arm, seed, eval_sets, samples, clock):
            runs[arm, seed, run.eval_set] = run
    return runs


def evals_frame(runs: dict[tuple[str, int, str], Run]) -> pd.DataFrame:
    """All evaluations of `runs` in one frame, tagged with arm and seed."""
    frames = list(runs.values())
    out = pd.concat([r.evals for r in frames], ignore_index=True)
    sizes = [len(r.evals) for r in frames]
    return out.assign(arm=np.repeat([r.arm for r in frames], sizes), seed=np.repeat([r.seed for r in frames], sizes))


def read_iterations(run_dir: str | Path, columns: list[str]) -> dict[str, np.ndarray]:
    """Columns of a run's iterations.parquet as arrays (no DataFrame: a study has thousands of them)."""
    table = read_arrow(checked(Path(run_dir) / "iterations.parquet"), COLUMNS["iterations"], columns)
    return {c: table.column(c).to_numpy() for c in columns}
