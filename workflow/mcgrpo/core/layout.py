"""Where a study's files live: one answer for the workflow's rules and for `mcgrpo train --config` by hand.

What a study alone decides (its plan, lock, analysis, figures, tables) lives under <results_dir>/<study>/.
Everything computed from less than the study lives under <results_dir>/_shared/, named by a hash of exactly what
it is computed from, so that every study naming the same thing computes it once and a study that changes it gets
files of its own instead of overwriting another study's:

- data/<hash>: the pool and evaluation sets (the task block);
- models/<name>-<hash>: the warm-started tiny model (the model and task blocks);
- calibrations/<hash>: budget.parquet, B (the calibration run's effective config);
- runs/<hash>: one training run (the run's effective config, mcgrpo.core.config.run_config, with its B's
  calibration): the run store. The same run in two studies, whatever either calls its arm, trains once.

The study's own runs/<arm>/seed<N> and calibration/ are links into the store (`link_study`), so that a study's
folder still holds, or points at, every file its analysis reads. No study can be named `_shared`: study names
start with a letter or digit (the schema's `name` format).

A task that reads files (`task.pool.path`) is hashed by its config, not by the files' contents: editing a data
file in place is not noticed here. Each run records the problems it read instead (mcgrpo.core.run_data), and a data
folder prepared again to other problems after it trained is refused by name.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from mcgrpo.core import store
from mcgrpo.core.config import calibration_config, config_hash, run_config, runs
from mcgrpo.core.errors import DataError, IntegrityError

SHARED = "_shared"


def _short_hash(obj) -> str:
    return config_hash(obj)[:12]


def _shared(cfg: dict) -> Path:
    return Path(cfg["results_dir"]) / SHARED


def study_dir(cfg: dict) -> Path:
    return Path(cfg["results_dir"]) / cfg["study"]


def data_dir(cfg: dict) -> Path:
    """The pool, evaluation sets and removal log of the study's task."""
    return _shared(cfg) / "data" / _short_hash(cfg["task"])


def warm_start_spec(cfg: dict) -> dict:
    """What the warm-started tiny model is built from."""
    return {"model": cfg["model"], "task": cfg["task"]}


def model_path(cfg: dict) -> Path:
    """The tiny model's folder (shared, built by warm_start), or the study's reference to a model with a source
    (written by resolve_model: cheap, and it records where the weights were found for this study)."""
    name = cfg["model"]["name"]
    if cfg["model"]["source"] is None:
        return _shared(cfg) / "models" / f"{name}-{_short_hash(warm_start_spec(cfg))}"
    return study_dir(cfg) / "models" / f"{name}.json"


# What a file filed under _shared/<kind>/<key>/ is, and what replaces one written for another key.
FILED = {"data": ("prepared data", "the files prepare_data writes there (move the folder away and rerun the "
                                   "workflow: it prepares them again)"),
         "calibrations": ("calibration", "the file the calibrate rule writes there (move it away and rerun the "
                                         "workflow: it calibrates again; a B of your own is budget.tokens in the "
                                         "config)")}


def filed(path: str | Path) -> Path:
    """`path`, once a file filed in the store's _shared/data/<key>/ or calibrations/<key>/ (links followed) is known
    to be that key's: its writer stamps it with the hash of what it is computed from (the task block, the
    calibration's config), whose first 12 characters name the folder. Another key's file copied there would have
    every run train on other problems or to another B than its config says, all alike, which nothing else tells."""
    path = Path(path)
    folder = path.resolve().parent
    if folder.parent.name not in FILED or folder.parent.parent.name != SHARED:
        return path  # not in a store (a test's or a hand-run's own folder): nothing names what it must be
    found = store.parquet_metadata(path).get("config_hash", "")[:12]
    if found != folder.name:
        what, allowed = FILED[folder.parent.name]
        raise IntegrityError(f"{path}: written for {what} {found or '(none)'}, but filed as {what} {folder.name}: "
                             f"copied from another {what} folder, or written by hand; allowed: {allowed}")
    return path


def shared_log(path: Path) -> Path:
    """The log of the job that writes shared `path`: beside the other shared logs, named after the file."""
    shared = next(p for p in path.parents if p.name == SHARED)
    return shared / "logs" / f"{path.relative_to(shared).parts[0]}-{path.name}.log"


def calibration_key(cfg: dict) -> str:
    """The calibration's name in the store: a hash of the calibration run's effective config."""
    return _short_hash(calibration_config(cfg))


def calibration_dir(cfg: dict) -> Path:
    return _shared(cfg) / "calibrations" / calibration_key(cfg)


def budget_path(cfg: dict) -> Path:
    return calibration_dir(cfg) / "budget.parquet"


def run_key(cfg: dict, arm: str, seed: int) -> str:
    """A run's name in the store: a hash of its effective config and of what its B is calibrated from (B is
    known only once calibrated, and runs differing only in B are different runs)."""
    return _run_key(cfg, arm, seed, calibration_config(cfg))


def _run_key(cfg: dict, arm: str, seed: int, calibration: dict) -> str:
    return _short_hash({"run": run_config(cfg, arm, seed), "calibration": calibration})


def run_keys(cfg: dict) -> dict[tuple[str, int], str]:
    """run_key of every (arm, seed) of the study (the calibration's config built once)."""
    calibration = calibration_config(cfg)
    return {(arm, seed): _run_key(cfg, arm, seed, calibration) for arm, seed in runs(cfg)}


def runs_dir(cfg: dict) -> Path:
    """The run store."""
    return _shared(cfg) / "runs"


def run_dir(cfg: dict, arm: str, seed: int) -> Path:
    """The run's folder in the store."""
    return runs_dir(cfg) / run_key(cfg, arm, seed)


def first_names(keys: dict[tuple[str, int], str]) -> dict[str, tuple[str, int]]:
    """Each stored run of run_keys' `keys`, with the first (arm, seed) naming it."""
    named: dict[str, tuple[str, int]] = {}
    for run, key in keys.items():
        named.setdefault(key, run)
    return named


def study_run(folder: Path | str, arm: str, seed: int) -> Path:
    """A run's place in a study's results folder, runs/<arm>/seed<N> (a link into the store): the one spelling of
    it for every reader of a study's runs."""
    return Path(folder) / "runs" / arm / f"seed{seed}"


def study_links(cfg: dict, folder: Path | None = None, keys: dict[tuple[str, int], str] | None = None
                ) -> dict[Path, Path]:
    """The links of the study's folder (default study_dir) into the store: runs/<arm>/seed<N> to each run (of
    run_keys' `keys`, computed when not given), calibration/ to its B."""
    folder = Path(folder or study_dir(cfg))
    links = {study_run(folder, arm, seed): runs_dir(cfg) / key for (arm, seed), key in (keys or run_keys(cfg)).items()}
    return {**links, folder / "calibration": calibration_dir(cfg)}


def link_study(cfg: dict, index: Path) -> list[Path]:
    """The study's links into the store (study_links), and `index` (its runs/store.parquet): the stored run of each
    (arm, seed), and the calibration. Links the new index does not list (a seed or arm the plan no longer has)
    are removed, never the runs they point at: returns them."""
    keys = run_keys(cfg)
    for path, target in study_links(cfg, index.parents[1], keys).items():
        link(path, target)
    write_index(index, {run: (key, calibration_key(cfg)) for run, key in keys.items()}, config_hash(cfg))
    stale = stale_links(index.parents[1], set(keys))
    for path in stale:
        path.unlink()
    return stale


def stale_links(folder: Path, listed: set[tuple[str, int]]) -> list[Path]:
    """The links under study folder `folder`'s runs/<arm>/ that are none of the `listed` (arm, seed) (its index's
    runs): an arm or seed an earlier plan had. Only links: a folder there is left for its owner (`link` refuses
    to replace one)."""
    root, found = Path(folder) / "runs", []
    for arm_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()) if root.is_dir() else []:
        for path in sorted(arm_dir.iterdir()):
            seed = path.name[4:]
            named = path.name.startswith("seed") and seed.isdigit() and (arm_dir.name, int(seed)) in listed
            if path.is_symlink() and not named:
                found.append(path)
    return found


def write_index(index: Path, rows: dict[tuple[str, int], tuple[str, str]], study_hash: str = "") -> Path:
    """A study's runs/store.parquet: {(arm, seed): (stored run, calibration)}."""
    table = [(arm, seed, run, calibration) for (arm, seed), (run, calibration) in rows.items()]
    return store.write_parquet(pd.DataFrame(table, columns=store.COLUMNS["store"]), index, study_hash)


def link(path: Path, target: Path) -> None:
    """`path` made a relative link to `target`, replacing an older link (never a file or folder: a study folder
    from before the run store keeps its runs, and this says what to do)."""
    if path.exists() and not path.is_symlink():
        raise DataError(f"{path}: a folder of its own, where the run store links to {target}; it predates the run "
                        f"store (results/_shared/runs): move it away to keep it, then rerun")
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name}.link")  # made aside, then renamed over the old link in one step
    fresh.unlink(missing_ok=True)
    os.symlink(link_text(path, target), fresh, target_is_directory=True)
    os.replace(fresh, path)


def link_text(path: Path, target: Path) -> str:
    """What a link at `path` to `target` says: relative (a results folder copied or moved whole keeps its links),
    from the folder the link really is in to the target's real folder. The system resolves a relative link from
    where it really is: where the study folder, or results/, is itself a link elsewhere, a text relative to the
    spelled path would point beside the real folder, at nothing."""
    return os.path.relpath(Path(target).parent.resolve() / Path(target).name, Path(path).parent.resolve())


def misresolved(links: dict[Path, Path]) -> list[Path]:
    """The links among `links` ({link: target}, study_links) that lead to their target from the path they are
    spelled under but not from where they really are: made relative to the spelled path (by an mcgrpo before
    link_text, or before a folder above them was moved elsewhere and linked back), under a folder that is now a link."""
    bad = []
    for path, target in links.items():
        if not path.is_symlink():
            continue
        spelled = os.path.realpath(os.path.normpath(path.parent / os.readlink(path)))
        if spelled == os.path.realpath(target) != os.path.realpath(path):
            bad.append(path)
    return bad


def check_links_resolve(cfg: dict, keys: dict[tuple[str, int], str] | None = None, relinking: bool = False) -> None:
    """Before any job: the study's links into the store (study_links) that do not resolve from where its folder
    really is (misresolved) stop the workflow with one message, unless `relinking` (link_study is forced: it links
    them again by link_text). Otherwise every reader would name the runs as not in the store, or Snakemake its
    files as missing inputs, and rerunning would not mend them (link_study reruns only when the plan changes)."""
    bad = [] if relinking else misresolved(study_links(cfg, keys=keys))
    if bad:
        folder = study_dir(cfg)
        raise DataError(f"{folder}: {len(bad)} links into the run store do not resolve from {folder.resolve()}, "
                        f"where the folder really is (a link, or under one), e.g. {bad[0]} -> {os.readlink(bad[0])}; "
                        f"they were made relative to {folder} as spelled; allowed: `snakemake --forcerun "
                        f"link_study` (without analysis_only), which links them again from where the folder is "
                        f"(the stored runs are kept), or the real folder put back at {folder} in place of the link")
