"""A study's stored runs, read for analysis: where each evaluation sits and how each problem scored.

Contrasts read a run at a position on a basis (tokens, updates, training seconds), so they need
each evaluation's coordinates from evals.parquet; the crossed bootstrap resamples test problems
and pass@k counts correct samples per problem, so they need samples.parquet reduced to
per-problem counts. Nothing else of a run is read, so analysis stays fast at the paper's scale.

A run's files can be whole and sealed (its manifest matches) and still disagree with each other: rewritten by a
tool and sealed again, or written by an older version. Every file is held here to what the trainer writes before
any number of it is read (docs/store-integrity.md): one row per evaluation and set, accuracies in [0, 1] and, where
samples are read, the ones the samples give; k samples of every problem at every evaluation, each once; counts that
never fall, known at every evaluation, and, where iterations.parquet is there, the counts its iterations reached.
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

from mcgrpo.analysis.stats import pass_at_k
from mcgrpo.core.manifest import checked
from mcgrpo.core.store import COLUMNS, not_regular, parquet_columns, read_arrow, read_contract
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


def _each_sample_once(n: np.ndarray, cell: np.ndarray, sample: np.ndarray, evals: np.ndarray, problems: np.ndarray,
                      eval_set: str, path: Path) -> None:
    """Refuse samples that are not k draws of every problem at every evaluation, numbered 0..k-1, each once (as the
    evaluator writes them: evaluation.samples): a sample recorded twice or dropped moves its problem's share of
    correct samples, and a file whose every row is there twice moves pass@k, without a word."""
    k = int(np.bincount(n.ravel()).argmax())  # the run's draws per problem: what most (evaluation, problem) hold
    uneven = np.argwhere(n != k)
    if len(uneven):
        i, j = map(int, uneven[0])
        raise DataError(f"{path}: evaluation {evals[i]} of {eval_set} holds {int(n[i, j])} sample(s) of problem "
                        f"{problems[j]!r}, where the run holds {k} of most problems; allowed: the same number of "
                        f"samples of every problem at every evaluation (evaluation.samples): {REWRITTEN}")
    outside = (sample < 0) | (sample >= k)
    seen = np.bincount(cell * k + np.where(outside, 0, sample).astype(np.int64), minlength=n.size * k)
    if outside.any() or seen.max() > 1:
        at = int(cell[np.flatnonzero(outside)[0]]) if outside.any() else int(np.flatnonzero(seen > 1)[0]) // k
        i, j = divmod(at, n.shape[1])
        raise DataError(f"{path}: evaluation {evals[i]} of {eval_set} numbers its samples of problem "
                        f"{problems[j]!r} other than 0..{k - 1}, each once (one recorded twice); allowed: each sample "
                        f"of a problem once: {REWRITTEN}")


def _counts(samples: pa.Table, verifiers: list[str], path: Path):
    """Per eval set: (eval indices, problem ids, samples and correct counts as evaluations x problems)."""
    set_code, sets = _codes(samples.column("eval_set"))
    problem_code, problem_ids = _codes(samples.column("problem_id"))
    eval_index, sample = samples.column("eval_index").to_numpy(), samples.column("sample").to_numpy()
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
        _each_sample_once(n, cell, sample[rows], evals, problem_ids[present], eval_set, path)
        correct = {v: np.bincount(cell, weights=f[rows], minlength=size).reshape(n.shape) for v, f in flags.items()}
        out[eval_set] = (evals, problem_ids[present], n, correct)
    return out


@lru_cache(maxsize=4096)
def _evals(path: Path, stamp: tuple[int, int]) -> pd.DataFrame:
    """evals.parquet in evaluation order; cached per (path, mtime, size), as every step reads it."""
    evals = read_contract(path, "evals")
    _one_row_each(evals, path)
    _shares(evals, path)
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
COUNTS = ("tokens_total", "iteration", "updates")  # known at every evaluation: only a clock may be unknown (NaN)
# What a stored run whose files are sealed but disagree with each other needs: written wrong by the tool that
# rewrote it (and sealed it again) or an older version; no analysis can tell which of its numbers is right.
REWRITTEN = ("its files were rewritten after the run (and sealed again), or an older version wrote them; retrain it "
             "(move its stored run folder, the link's target, into results/_shared/quarantine/ and rerun the "
             "workflow), or ingest it again")


def _one_row_each(evals: pd.DataFrame, path: Path) -> None:
    """Refuse an evaluation recorded twice on one set: the reader would pair both rows with the same samples, and
    the readers of evals.parquet alone (curves, drift, the strict check) would read whichever row sorts first; and
    an evaluation that is not one, its index no whole number >= 0 (the trainer writes 0, 1, ...)."""
    index = evals["eval_index"]
    if index.dtype.kind not in "iu" or (index < 0).any():
        values = pd.to_numeric(index, errors="coerce").to_numpy(float)
        wrong = np.flatnonzero(~((values >= 0) & (values == np.floor(values))))
        row = int(wrong[0]) if len(wrong) else 0  # else every value whole, but stored as another type
        raise DataError(f"{path}: eval_index is {index.iloc[row]!r} in row {row} (of {index.dtype} values); allowed: "
                        f"a whole number >= 0, as the trainer writes it: {REWRITTEN}")
    points = list(zip(evals["eval_set"].tolist(), index.tolist()))
    if len(set(points)) < len(points):  # a set of a few dozen tuples: cheaper than a frame's duplicated()
        twice = evals.duplicated(["eval_set", "eval_index"], keep=False).to_numpy()
        row = evals[twice].iloc[0]
        raise DataError(f"{path}: evaluation {row['eval_index']} of {row['eval_set']} is recorded in "
                        f"{int(twice.sum())} rows; allowed: one row per evaluation and eval set: {REWRITTEN}")


def _shares(evals: pd.DataFrame, path: Path) -> None:
    """Refuse an accuracy column (acc_*) with a value outside [0, 1], or unknown in the contract's (acc_default,
    acc_strict: every evaluation scores every problem on both): the readers of evals.parquet alone read it as it
    stands (a NaN acc_strict reads as no drift). Another accuracy unknown (acc_greedy) is a reading not defined,
    which every contrast and table says (analysis/informative.py), as it does a curve read past its end."""
    for column in (c for c in evals.columns if c.startswith("acc_")):
        values = evals[column].to_numpy()
        values = values.astype(float) if values.dtype.kind in "fiub" else pd.to_numeric(values, errors="coerce")
        allowed = (values >= 0) & (values <= 1) | (np.isnan(values) & (column not in COLUMNS["evals"]))
        wrong = np.flatnonzero(~allowed)
        if len(wrong):
            row = evals.iloc[wrong[0]]
            known = "" if column not in COLUMNS["evals"] else ", at every evaluation"
            raise DataError(f"{path}: {column} is {values[wrong[0]].item()!r} at evaluation {row['eval_index']} of "
                            f"{row['eval_set']}; allowed: a share of correct samples, in [0, 1]{known}: {REWRITTEN}")


def _never_falling(evals: pd.DataFrame, path: Path, eval_set: str) -> None:
    """Refuse a run whose coordinates fall from one evaluation to the next or start below 0 (an unknown clock, NaN,
    is skipped), or whose counts (tokens, iterations, updates: every trainer counts them) are unknown: every basis
    reads a run by interpolating between its evaluations in this order, so a clock or count recorded wrong (an
    ingested run's trainer_state.json logging a negative step_time or completion length) would read it at another
    evaluation than the one it names, and the first evaluation known to reach B would be taken for B's, without a
    word."""
    index = evals["eval_index"].to_numpy()
    for column in (c for c in COORDINATES if c in evals.columns):
        values = evals[column].to_numpy()
        known = np.flatnonzero(~pd.isna(values))
        falls = np.flatnonzero(np.diff(values[known].astype(float)) < 0)
        if column in COUNTS and len(known) < len(values):  # B's evaluation would be the next one known
            unknown = np.flatnonzero(pd.isna(values))[0]
            what = f"{column} is unknown (NaN) at evaluation {index[unknown]} of {eval_set}"
        elif len(known) and values[known[0]] < 0:
            what = f"{column} is {values[known[0]].item()!r} at evaluation {index[known[0]]} of {eval_set}"
        elif len(falls):
            before, after = known[falls[0]], known[falls[0] + 1]
            what = (f"{column} falls from {values[before].item()!r} to {values[after].item()!r} at evaluation "
                    f"{index[after]} of {eval_set}")
        else:
            continue
        raise DataError(f"{path}: {what}; allowed: coordinates that never fall (tokens, iterations, updates and "
                        f"seconds counted up from 0 along the run, the counts known at every evaluation): its writer "
                        f"recorded them wrong (an ingested run: its trainer_state.json's step_time or "
                        f"completions/mean_length at that step); retrain it, or ingest it again from a log that "
                        f"records them")


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


def _scored_as_recorded(evals: pd.DataFrame, n: np.ndarray, correct: dict[str, np.ndarray], run_dir: Path,
                        eval_set: str) -> None:
    """Refuse a run whose evals.parquet records another accuracy (acc_<verifier>) than its samples.parquet gives
    (the mean over problems of each one's share of correct samples, as the evaluator computes it): contrasts read
    the samples, but the curves, drift and the strict check of a study whose metrics are acc_* read evals.parquet
    alone, so the tables would disagree with the verdict without a word. Checked wherever samples are read (the
    contrasts step, which every verdict and table waits for, reads them)."""
    for verifier, hits in correct.items():
        column = f"acc_{verifier}"
        if column not in evals.columns:
            continue
        scored, recorded = (hits / n).mean(axis=1), evals[column].to_numpy(dtype=float)
        off = np.flatnonzero(~np.isclose(recorded, scored, rtol=0, atol=1e-9))
        if len(off):
            i = off[0]
            raise DataError(f"{run_dir / 'evals.parquet'}: {column} is {recorded[i].item()!r} at evaluation "
                            f"{evals['eval_index'].iloc[i]} of {eval_set}, but {run_dir / 'samples.parquet'} scores "
                            f"it {scored[i].item()!r}; allowed: the accuracy its samples give: {REWRITTEN}")


# evals.parquet's counts and clock at an evaluation after `iteration` iterations: iterations.parquet's after the
# last of them (its row `iteration` - 1), as the trainer (and ingest) record both from the same state; the CPU clock
# too, where both files have it.
AT_ITERATION = ("tokens_total", "updates", "train_seconds")


def _as_iterations(evals: pd.DataFrame, run_dir: Path) -> None:
    """Refuse a run whose evaluations sit elsewhere than its iterations put them: an evaluation after k iterations
    records the tokens, updates and seconds iterations.parquet has after iteration k - 1 (0 before any). Every basis
    reads a run at the counts evals.parquet records, so a count rewritten there, still in order, would read the run
    at another point than the one it names; iterations.parquet, the record of each iteration, must itself count up.
    A run written without one (a test's) has nothing to hold it to."""
    path = run_dir / "iterations.parquet"
    if not path.exists() and not not_regular(path):
        return
    path = checked(path)
    counted = [*AT_ITERATION, *(c for c in ("train_cpu_seconds",) if c in evals and c in parquet_columns(path))]
    table = read_arrow(path, COLUMNS["iterations"], ["iteration", *counted])
    order = np.argsort(table.column("iteration").to_numpy(zero_copy_only=False), kind="stable")
    its = {c: table.column(c).to_numpy(zero_copy_only=False).astype(float)[order] for c in ["iteration", *counted]}
    for column, values in its.items():
        unknown = np.flatnonzero(np.isnan(values)) if column not in CLOCKS.values() else []  # only a clock may be
        known = np.flatnonzero(~np.isnan(values))
        step = np.diff(values[known])
        falls = np.flatnonzero(step <= 0 if column == "iteration" else step < 0)
        if len(unknown) or len(falls):
            what = (f"{column} unknown (NaN) at row {int(order[unknown[0]])}" if len(unknown) else
                    f"{column} {'repeats' if column == 'iteration' else 'falls'} from "
                    f"{values[known[falls[0]]].item()!r} to {values[known[falls[0] + 1]].item()!r} at row "
                    f"{int(order[known[falls[0] + 1]])}")
            raise DataError(f"{path}: {what}; allowed: each iteration once, its tokens, updates and seconds counted "
                            f"up along the run: {REWRITTEN}")
    done = evals["iteration"].to_numpy(dtype=float)
    its = {c: np.append(v, np.nan) for c, v in its.items()}  # a last row that no evaluation can be after
    at = np.searchsorted(its["iteration"][:-1], done - 1)
    there = (done == 0) | (its["iteration"][at] == done - 1)
    for column in counted:
        then, recorded = np.where(done == 0, 0.0, its[column][at]), evals[column].to_numpy(dtype=float)
        # an unknown clock (NaN: an ingested run's CPU clock) is read by no basis (contrasts._clocked refuses it)
        agree = (recorded == then) | np.isnan(recorded) & (np.isnan(then) | (column in CLOCKS.values()))
        off = np.flatnonzero(~there | ~agree)
        if len(off):
            e, name = off[0], f"evaluation {evals['eval_index'].iloc[off[0]]} of {evals['eval_set'].iloc[off[0]]}"
            said = (f"but {path} holds no iteration {done[e] - 1:g}" if not there[e] else
                    f"records {column} {recorded[e].item()!r}, but {path} records {then[e].item()!r} after them")
            raise DataError(f"{run_dir / 'evals.parquet'}: {name}, after {done[e]:g} iterations, {said}; allowed: "
                            f"each evaluation at the counts of the iterations before it (0 before any): {REWRITTEN}")


def read_runs(run_dir: str | Path, arm: str, seed: int, eval_sets: list[str],
              samples: bool = True, clock: str = "wall") -> list[Run]:
    """One stored run as a Run per evaluation set, timed by `clock`; a missing file or evaluation is an error."""
    run_dir = Path(run_dir)
    evals = read_evals(run_dir / "evals.parquet")
    time = _clock_column(evals, clock, run_dir / "evals.parquet")
    _as_iterations(evals, run_dir)
    by_set = {}
    if samples:
        path = checked(run_dir / "samples.parquet")
        verifiers = [c[len("correct_"):] for c in parquet_columns(path) if c.startswith("correct_")] \
            if path.exists() else []
        table = read_arrow(path, COLUMNS["samples"], ["eval_set", "eval_index", "problem_id", "sample",
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
        _scored_as_recorded(ev, n[rows], {v: c[rows] for v, c in correct.items()}, run_dir, eval_set)
        out.append(Run(arm, seed, eval_set, ev, problems, n[rows], {v: c[rows] for v, c in correct.items()}, time,
                       str(run_dir / "evals.parquet")))
    return out


def read_samples(path: str | Path) -> pd.DataFrame:
    """A run's samples.parquet less its texts, verified against its manifest and held, as `read_runs` holds it, to
    k samples of every problem at every evaluation, each once: for the steps that read its rows (tables/verifiers),
    where a sample recorded twice would count twice."""
    path = checked(path)
    columns = [c for c in parquet_columns(path) if c != "text"] if path.exists() else None
    table = read_arrow(path, COLUMNS["samples"], columns, dictionary=["eval_set", "problem_id"])
    _counts(table, [], path)
    return table.to_pandas().astype({"eval_set": object, "problem_id": object})


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
