"""The one reader of a study's runs: which runs a study has, and each one checked to be the run it is read as.

A study's runs are the rows of its index, runs/store.parquet, which `link_study` writes from the plan (arms x
seeds, each with its stored run's key), never what a folder happens to hold: a leftover seed5 link, or the
seed4 of a plan since cut to three seeds, is no run of the study. Every row is checked against the three other
records of the same run before any file of it is read:

- the link runs/<arm>/seed<N> points at the stored run the row names;
- that run's manifest is its own (mcgrpo.core.manifest.read: well-formed, sealed for that folder);
- its run.json, which the manifest vouches for, was trained with the row's seed and with the same arm config as
  the arm's other runs (and, given the plan, as that arm's config rather than another arm's): an index whose
  `run` values were swapped between two arms is named, though every link and manifest agrees with it.

Any disagreement is named in one line with its repair, a command that does it (`check-store --repair` moves a
wrong index aside, so that the workflow's `link_study` relinks the study from its plan; a stale link is
removed). A link whose run never finished (no manifest: its job failed, or it is still training) is named as
such, with the run's log, not as a wrong link.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from mcgrpo.core import manifest, store
from mcgrpo.core.budget import Budget, from_table, unit
from mcgrpo.core.errors import DataError, IntegrityError, MissingFile
from mcgrpo.core import layout, run_data
from mcgrpo.core.layout import study_run

RELINK = ("python -m mcgrpo check-store --repair (it moves the index aside), then rerun the workflow: link_study "
          "relinks the study from its plan")


def index_path(study: str | Path) -> Path:
    return Path(study) / "runs" / "store.parquet"


def budget_path(study: str | Path) -> Path:
    return Path(study) / "calibration" / "budget.parquet"


def budget(study: str | Path) -> Budget:
    """B, as the study's calibration/budget.parquet records it: generated tokens, or iterations (an equal-iteration
    study). Every run that records the B it trained to is held to it (`problems`): read the runs through `folders`."""
    path = budget_path(study)
    if not path.exists():
        raise MissingFile(f"{path}: not found, so the study's B is unknown; allowed: the file its calibration "
                          f"writes (rerun the workflow: snakemake --configfile STUDY {path})")
    return read_budget(path)


def read_budget(path: str | Path) -> Budget:
    """B of a budget.parquet, once one filed in the store's calibrations/<key>/ is known to be that calibration's
    (layout.filed): another calibration's copied there would have every run train to, and record, another B than
    its config calibrates, which holding the runs to it could not tell."""
    return from_table(store.read_contract(layout.filed(path), "budget"))


def index(study: str | Path) -> dict[tuple[str, int], str]:
    """{(arm, seed): stored run key} of the study's runs/store.parquet, each row checked for its types."""
    path = index_path(study)
    if not path.exists():
        raise MissingFile(f"{path}: not found, so the study's runs are unknown; allowed: the index link_study "
                          f"writes (rerun the workflow)")
    s = store.regular(path).stat()
    return _index(path, s.st_ino, s.st_mtime_ns, s.st_size)


@lru_cache(maxsize=64)
def _index(path: Path, *stamp: int) -> dict[tuple[str, int], str]:
    table = store.read_arrow(path, store.COLUMNS["store"], ["arm", "seed", "run"]).to_pydict()
    rows: dict[tuple[str, int], str] = {}
    for i, (arm, seed, run) in enumerate(zip(table["arm"], table["seed"], table["run"])):
        if not (isinstance(arm, str) and type(seed) is int and isinstance(run, str) and run
                and "/" not in run and not run.startswith(".")):
            raise IntegrityError(f"{path}: row {i} ({arm!r}, {seed!r}, {run!r}) is not (arm, seed, stored run) as "
                                 f"link_study writes it; allowed: the index it wrote: {RELINK}")
        if (arm, seed) in rows:
            raise IntegrityError(f"{path}: {arm}/seed{seed} is listed twice; allowed: each run once: {RELINK}")
        rows[arm, seed] = run
    return rows


def folders(study: str | Path, arms: list[str] | None = None, seeds: list[int] | None = None,
            plan: dict | None = None) -> dict[tuple[str, int], Path]:
    """The run folder (the study's link) of every (arm, seed) of `arms` x `seeds` (default: every row of the
    index), once every run of the index agrees with its link, manifest and run.json; else an error naming the
    first disagreement. `plan`: the study's arms ({arm: its config}), which a run's arm config is held to."""
    rows = index(study)
    wanted = list(rows) if arms is None else [(arm, seed) for arm in arms for seed in seeds]
    missing = [f"{arm}/seed{seed}" for arm, seed in wanted if (arm, seed) not in rows]
    if missing:
        raise DataError(f"{index_path(study)}: lists no run for {', '.join(missing)}, which the study's plan names; "
                        f"allowed: the index of the current plan: {RELINK}")
    found, pending = problems(study, plan), unfinished(study)
    names = [f"{arm}/seed{seed}" for arm, seed in wanted]
    named = [why for run in names for why in found.get(run, [])] + [pending[run] for run in names if run in pending]
    if named:
        more = f" (and {len(named) - 1} more: python -m mcgrpo check-store --results " \
               f"{Path(study).parent})" if len(named) > 1 else ""
        raise IntegrityError(named[0] + more)
    return {(arm, seed): study_run(study, arm, seed) for arm, seed in wanted}


def records(study: str | Path, arms: list[str] | None = None, seeds: list[int] | None = None,
            plan: dict | None = None) -> dict[tuple[str, int], dict]:
    """{(arm, seed): run.json} of the runs `folders` returns, each checked against its manifest; a run written
    without a run.json (a test's) is left out."""
    out = {}
    for run, folder in folders(study, arms, seeds, plan).items():
        path = folder / "run.json"
        if path.exists():
            out[run] = store.read_json(manifest.checked(path))
    return out


def accepted_differences(study: str | Path, arms: list[str] | None = None, seeds: list[int] | None = None,
                         plan: dict | None = None) -> dict[str, dict[int, list[str]]]:
    """{arm: {seed: the recipe keys that differ}} of the runs stored with their recipe differences accepted (an
    ingested arm's accept_differences, or `ingest --accept-differences`: run.json's `ingested` block), so that every
    table and summary that uses them says so; arms without such a run are absent."""
    out: dict[str, dict[int, list[str]]] = {}
    for (arm, seed), run in records(study, arms, seeds, plan).items():
        block = run.get("ingested") if isinstance(run, dict) else None
        if isinstance(block, dict) and block.get("accepted_differences"):
            # differing_keys since it was recorded; the lines themselves in a run.json from before it
            keys = block.get("differing_keys") or block.get("differences") or ["(not recorded)"]
            out.setdefault(arm, {})[seed] = [str(k) for k in keys]
    return out


def problems(study: str | Path, plan: dict | None = None) -> dict[str, list[str]]:
    """{arm/seed: what disagrees} over every row of the study's index (none raised); unfinished runs are
    `unfinished`'s, not here."""
    rows, out, recorded = index(study), {}, {}
    B = budget(study) if budget_path(study).exists() else None  # a test's study may have none: nothing to hold to
    for (arm, seed), key in rows.items():
        why, run = _row(study, arm, seed, key, B)
        if why:
            out.setdefault(f"{arm}/seed{seed}", []).append(why)
        elif run is not None:
            recorded[arm, seed] = run
    configs = {row: run["config"].get("arm_config") for row, run in recorded.items()
               if run["config"].get("arm_config") is not None}
    for (arm, seed), why in [*_arm_disagreements(study, configs, plan).items(),
                             *_input_disagreements(study, recorded).items()]:
        out.setdefault(f"{arm}/seed{seed}", []).append(why)
    return out


def unfinished(study: str | Path) -> dict[str, str]:
    """{arm/seed: why} of the index's runs not in the store (never trained, or set aside to retrain) or that never
    finished (no manifest): a failed job or one still running."""
    out = {}
    for (arm, seed), key in index(study).items():
        link = study_run(study, arm, seed)
        if not (link.is_symlink() and link.resolve().name == key):
            continue
        if not link.exists():
            out[f"{arm}/seed{seed}"] = (f"{link}: its run {key} is not in the store (never trained, or set aside to "
                                        f"retrain): rerun the workflow to train it")
        elif link.is_dir() and manifest.unfinished(link):
            out[f"{arm}/seed{seed}"] = (f"{link}: its run {key} never finished (no {manifest.MANIFEST}): still "
                                        f"training, or its job failed: see {link / 'train.log'}, fix what it names "
                                        f"(the study's config, or a script it runs), then rerun the workflow")
    return out


def _row(study, arm: str, seed: int, key: str, B: Budget | None = None) -> tuple[str | None, dict | None]:
    """(what disagrees, None) or (None, the run's run.json, None without one)."""
    link, index_file = study_run(study, arm, seed), index_path(study)
    if not link.is_symlink():
        what = store.not_regular(link) or ("a file" if link.exists() else "missing")
        return f"{link}: {what}, where a link to stored run {key} belongs: {RELINK}", None
    target = Path(link.resolve()).name
    if target != key:
        return f"{link}: links to stored run {target}, but {index_file} says {key}: {RELINK}", None
    if not link.exists() or manifest.unfinished(link):
        return None, None  # not trained, or not finished: named by `unfinished`
    try:
        sealed = manifest.read(link)
        if manifest.unlisted(link, sealed):
            return manifest.unlisted(link, sealed), None
        if "run.json" not in sealed["files"]:
            return None, None  # a run written without one (a test's): nothing more to hold it to
        run = store.read_json(manifest.checked(link / "run.json"))
    except (IntegrityError, MissingFile) as e:
        return str(e), None
    config = run.get("config") if isinstance(run, dict) else None
    if not isinstance(config, dict):
        return f"{link / 'run.json'}: holds no run config: {manifest.RETRAIN}", None
    if config.get("seed") != seed:
        return (f"{link / 'run.json'}: trained with seed {config.get('seed')!r}, but {index_file} reads it as "
                f"{arm}/seed{seed}: {RELINK}"), None
    if run.get("identity") not in (None, sealed["identity"]):
        return (f"{link / 'run.json'}: identity {str(run['identity'])[:12]}, but its {manifest.MANIFEST} seals "
                f"{sealed['identity'][:12]}: {manifest.RETRAIN}"), None
    why = _trained_to(study, link / "run.json", run, B) or run_data.problem(link, run, manifest.RETRAIN)
    return why, None if why else run


def _trained_to(study, path: Path, run: dict, B: Budget | None) -> str | None:
    """Where run.json `run` records another B than the study's calibration/budget.parquet (edited, recalibrated
    since, or the study linked to another calibration), what disagrees: every reading at B would sit elsewhere."""
    trained = run.get("B")
    if B is None or trained is None:
        return None  # a run.json written without B (a test's): nothing to hold it to
    trained_unit = unit(run["config"].get("budget") or {})
    if (trained, trained_unit) == (int(B), B.unit):
        return None
    return (f"{budget_path(study)}: B = {int(B)} {B.unit}, but {path} was trained to B = {trained} {trained_unit}: "
            f"B changed after the run trained, or the study links another calibration; allowed: the B its runs "
            f"trained to (restore the file; a wrong link: {RELINK}), or runs trained to this B (rerun the workflow "
            f"without analysis_only: it retrains them)")


def _canonical(config) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _arm_disagreements(study, configs: dict[tuple[str, int], dict], plan: dict | None) -> dict[tuple[str, int], str]:
    """Runs whose arm config is not their arm's: another arm's config in the plan, or unlike most of the arm's
    other runs (all of them where no config has a majority)."""
    out, index_file = {}, index_path(study)
    planned = {arm: _canonical({k: v for k, v in spec.items() if k != "description"})
               for arm, spec in (plan or {}).items()}
    for arm in sorted({a for a, _ in configs}):
        mine = {seed: _canonical(c) for (a, seed), c in configs.items() if a == arm}
        ranked = sorted(((list(mine.values()).count(c), c) for c in set(mine.values())), reverse=True)
        usual = ranked[0][1] if len(ranked) == 1 or ranked[0][0] > ranked[1][0] else None
        for seed, config in sorted(mine.items()):
            other = next((a for a, c in planned.items() if c == config and a != arm), None)
            if other and planned.get(arm) != config:
                out[arm, seed] = (f"{study_run(study, arm, seed) / 'run.json'}: trained as arm {other} of the plan, "
                                  f"but {index_file} reads it as {arm}/seed{seed}: {RELINK}")
            elif config != usual:
                seeds = ", ".join(str(s) for s, c in sorted(mine.items()) if c != config)
                out[arm, seed] = (f"{study_run(study, arm, seed) / 'run.json'}: trained with arm config {config}, "
                                  f"unlike {arm}/seed {seeds} ({usual or 'no config shared by most'}): {index_file} "
                                  f"reads another arm's run as {arm}: {RELINK}")
    return out


def _input_disagreements(study, runs: dict[tuple[str, int], dict]) -> dict[tuple[str, int], str]:
    """Runs that recorded other data or another model than most of the study's runs recording them (the first
    such run where none has a majority): seeds or arms of one study trained or evaluated on different problems, or
    from different weights. Each run is held to its data folder as it is now where that holds the file
    (run_data.problem); this also tells runs apart where it does not (the folder deleted, or the runs moved without
    it), and for the model, whose files are outside the store."""
    out = {}
    recorded = {run: run_data.inputs(record) for run, record in sorted(runs.items())}
    for name in sorted({name for values in recorded.values() for name in values}):
        having = {run: values[name] for run, values in recorded.items() if name in values}
        values = list(having.values())
        usual = max(values, key=lambda v: (values.count(v), -values.index(v)))
        example = next(run for run, value in having.items() if value == usual)
        alike = f" (as {values.count(usual)} of its {len(values)} runs)" if values.count(usual) > 1 else ""
        for (arm, seed), value in having.items():
            if value != usual and (arm, seed) not in out:
                link = study_run(study, arm, seed)
                out[arm, seed] = (f"{link / 'run.json'}: trained with {run_data.describe(name)} hashing to "
                                  f"{value[:12]}, but {study_run(study, *example) / 'run.json'} with {usual[:12]}"
                                  f"{alike}: the study's runs trained or were evaluated on different inputs; "
                                  f"allowed: {run_data.advice(name, link, runs[arm, seed])}")
    return out


def stale_links(study: str | Path) -> list[Path]:
    """The links under the study's runs/<arm>/ that its index does not list (an arm or seed an earlier plan had):
    never read; `link_study` removes them and `check-store` names them."""
    return layout.stale_links(Path(study), set(index(study)))
