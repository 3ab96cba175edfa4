"""One contrast recomputed from a results folder alone (`mcgrpo contrast`): the arms and seeds from the study's
index (runs/store.parquet, which link_study writes from the plan: never a glob of runs/; seeds other than the
lock's are said beside the verdict), B from calibration/, the margin and labels from the lock, the filter arms'
warm-ups from the lock or, where it holds no recipe, from the runs' own config, no study config needed (given one,
its seeds, labels and analysis block, as the workflow reads them); a planned contrast's robustness checks and its
warning as the study's tables give them, so that its verdict is never shown without them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mcgrpo.analysis import contrasts, drift, prereg, robustness, runs, summary
from mcgrpo.analysis.plan import planned_keys
from mcgrpo.analysis.steps import budget, flags
from mcgrpo.core import config as study_config
from mcgrpo.core import sealed, store, warmup
from mcgrpo.core.errors import ConfigError, DataError, McgrpoError, MissingFile
from mcgrpo.core.study_runs import accepted_differences, index, index_path, records


def _shared_seeds(results: Path, arms: set[str]) -> list[int]:
    """Seeds that the study's index lists for every arm in `arms`; an arm it does not list is an error."""
    rows = index(results)
    present = sorted({arm for arm, _ in rows})
    seeds = []
    for arm in sorted(arms):
        if arm not in present:
            raise DataError(f"arm {arm!r}: not in {index_path(results)}; allowed: {', '.join(present) or 'none'}")
        seeds.append({seed for a, seed in rows if a == arm})
    shared = sorted(set.intersection(*seeds))
    if not shared:
        raise DataError(f"arms {', '.join(sorted(arms))} share no seed in {index_path(results)}")
    return shared


def _seeds(results: Path, arms: set[str], study: dict | None) -> list[int]:
    """The seeds a contrast of `arms` is read on: the study's, as the workflow's contrasts step reads them (each must
    be in the index: study_runs.folders names one that is not), else those the index lists for every arm."""
    shared = _shared_seeds(results, arms)  # read with the study's seeds too: it names an arm the index lacks
    return sorted(study["seeds"]) if study is not None else shared


def unlocked_seeds(locked: dict | None, seeds: list[int]) -> str:
    """Where the verb reads the lock's plan (no study config) on seeds of the study's index other than the lock's:
    its config changed the seeds since the lock, which the workflow reads as a change of every planned contrast
    (exploratory without a dated amendment). A warning saying so; '' where they are the lock's."""
    if not locked or sorted(locked["seeds"]) == sorted(seeds):
        return ""
    return (f"read on seeds {', '.join(map(str, seeds))} (those runs/store.parquet lists), "
            f"but the lock fixes seeds {', '.join(map(str, sorted(locked['seeds'])))}: the study's config changed its "
            f"seeds since the lock, which the workflow reads as exploratory without a dated amendment; give --config "
            f"STUDY.yaml to label it as the workflow does")


def _family(wanted: tuple, plan: dict[tuple, dict], planned: list[tuple]) -> list[tuple]:
    """The other contrasts of `wanted`'s primary Holm family (none unless it is primary)."""
    mine = plan.get(contrasts.label_key(wanted), {})
    if mine.get("label") != "primary":
        return []
    return [k for k in planned if k != wanted and plan[contrasts.label_key(k)]["label"] == "primary"
            and plan[contrasts.label_key(k)]["family"] == mine["family"]]


def _locked_plan(results: Path) -> tuple[dict | None, dict[tuple, dict]]:
    """The lock's part of the config and the labels it gives (none without a lock, all exploratory if late)."""
    lock = prereg.read_lock(results)
    if lock is None:
        return None, {}
    locked = prereg.locked_config(lock)
    return locked, prereg.labels(locked, prereg.compare(locked, lock, prereg.first_start(results, locked)))


# What a contrast is read with, as the workflow's contrasts step reads it with the study's analysis block; the lock
# fixes each (prereg.READING and the margin), so a results folder alone gives the study's own.
READ_WITH = ("margin", *prereg.READING, "drift_gap")


def reading(locked: dict | None, given: dict, said: str = "the lock's") -> dict[str, tuple[object, str]]:
    """{key: (value, where from)} of READ_WITH: each `given` (not None), else `locked`'s (the lock's, or the study's
    config, as `said` names it), else the schema's default. A lock from before it fixed a key (no such key in its
    analysis) gives the default, saying so."""
    defaults = study_config.schema()["properties"]["analysis"]["properties"]
    out = {}
    for key in READ_WITH:
        ours = (locked or {}).get("analysis", {}).get(key)
        out[key] = ((given[key], "given") if given.get(key) is not None else (ours, said) if ours is not None
                    else (defaults[key]["default"], "the default: " + ("no lock" if locked is None else
                                                                         "the lock does not fix it")))
    return out


def departures(read: dict[str, tuple[object, str]], planned: dict[str, tuple[object, str]], said: str) -> list[str]:
    """'alpha 0.2 (given; the lock's: 0.05)' for each key of `read` given other than the plan reads it (`planned`:
    `reading` without anything given, where `said` fixes the value): a planned contrast read so is not the planned
    test, as the workflow reports a contrast whose reading changed after the lock without an amendment."""
    return [f"{key} {value} (given; {said}: {planned[key][0]})" for key, (value, where) in read.items()
            if where == "given" and planned[key][1] == said and value != planned[key][0]]


def demoted(plan: dict[tuple, dict], departed: list[str]) -> dict[tuple, dict]:
    """`plan` with every entry exploratory where the contrast is read other than planned (`departed`), its note
    saying why, as prereg.compare words a demotion; as it is where nothing departs."""
    if not departed:
        return plan
    options = ", ".join(sorted({"--" + d.split()[0].replace("_", "-") for d in departed}))
    note = f"demoted: read with {'; '.join(departed)}, not as planned; leave out {options} to read the planned test"
    return {k: {**e, "label": "exploratory", "note": note} for k, e in plan.items()}


def _plan(results: Path, study: dict | None) -> tuple[dict | None, dict[tuple, dict], str, list[str]]:
    """(the config a contrast is labelled and read by, its labels, how `reading` names it, the runs trained with a
    config other than it): the study's `study`, labelled against the lock as the workflow's contrasts step labels it
    (a plan changed since the lock without a dated amendment: exploratory); else the lock's own plan, which cannot
    tell a plan changed since, nor a run trained under another config than the study's now."""
    if study is None:
        return (*_locked_plan(results), "the lock's", [])
    status = prereg.status(results, study)
    return study, prereg.labels(study, status), "the study's", status["stale_runs"]


def warmups(results: Path, cfg: dict | None, arms: set[str]) -> dict[str, warmup.Warmup]:
    """The warm-ups of the filter arms among `arms` that a contrast read from `results` is held to, as the workflow
    holds it with the study's config: `cfg`'s (the study's, or the lock's) where it holds the recipe; else (a lock
    from before locks covered the recipe, or none) each arm's as its runs record they trained it (run.json's config:
    the arm's config and recipe). Read from the lock alone, an old lock gave none, and a filter that never chose a
    prompt before the readings read as a verdict or a plan of seeds."""
    if cfg and "recipe" in cfg:
        return {arm: w for arm, w in warmup.study(cfg).items() if arm in arms}
    if not index_path(results).exists():
        raise MissingFile(f"{index_path(results)}: not found, and {'the lock holds no recipe' if cfg else 'no lock'} "
                          f"says which arms filter their prompts, so no filter's warm-up can be checked; allowed: "
                          f"the results folder as the workflow wrote it, its runs' index included (rerun the "
                          f"workflow)")
    rows, out = index(results), {}
    for arm in sorted(arms):
        seeds = sorted(seed for a, seed in rows if a == arm)
        for run in (records(results, [arm], seeds) if seeds else {}).values():
            trained = run.get("config") if isinstance(run, dict) else None
            if isinstance(trained, dict) and isinstance(trained.get("arm_config"), dict) and \
                    (w := warmup.of({"arms": {arm: trained["arm_config"]}, "recipe": trained.get("recipe") or {}}, arm)):
                out[arm] = w
                break
    return out


NOT_PLANNED = {"reported": "exploratory", "note": "no longer in the study's plan"}  # an id prereg.json does not label


def analysed_label(results: Path, row) -> str:
    """Where the verb reads the lock's plan (no study config) and the study's last analysis (analysis/prereg.json,
    of the lock as it is) reported the contrast's plan id with another label, or amended (read with what the amendment
    changed): its config changed the plan since the lock. A warning saying so, since the verb cannot tell it; ''
    elsewhere."""
    path = Path(results) / "analysis" / "prereg.json"
    try:
        status = store.read_json(path)
        if why := sealed.json_problem(path, status):  # its labels cannot be read
            return (f"{why.partition('; allowed')[0]}: whether the study's config changed the plan since the lock "
                    f"cannot be told from it; give --config STUDY.yaml to label it as the workflow does")
        lock = prereg.read_lock(results)
        held = status.get("sha256_lock") == (lock or {}).get("sha256")  # labels of the lock as it is
        theirs = status["labels"].get(row["id"], NOT_PLANNED) if held else None
    except (McgrpoError, KeyError, TypeError, AttributeError):
        return ""
    if not isinstance(theirs, dict) or theirs.get("reported") is None:
        return ""
    note, other = str(theirs.get("note") or ""), theirs["reported"] != row["label"]
    if not (other or note.startswith("amended")):  # an amendment keeps the label but may change what is read
        return ""
    said = f" ({note})" if note else ""
    return (f"the study's last analysis ({path}) reports {row['id']} {theirs['reported']}{said}"
            + (f", not {row['label']}" if other else "") + ": its config changed the plan since the lock, which this "
            "reading of the lock alone cannot tell; give --config STUDY.yaml to label it as the workflow does")


def contrast(results: Path, a: str, b: str, basis: str, metric: str, eval_set: str | None = None,
             study: dict | None = None, **given) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """One contrast from a results folder alone: arms and seeds from runs/ (`study`'s seeds where given: _seeds), B
    from calibration/, the filter arms' warm-ups (warmups), the labels from
    `study` against the lock (else from prereg.lock.json's plan), and what it is read with (`reading`: margin, alpha,
    clock, resamples, bootstrap_seed) from `given`, else the study's or the lock's, as the workflow's contrasts step
    reads the study's. A primary contrast is Holm-adjusted with the rest of its family, which is recomputed with
    it. The table's `warning` is the study tables' (arms read far apart in tokens, runs stored with recipe
    differences accepted, and, given `study`, runs trained under another config and its arms' steps.flags; without
    it, a label the study's last analysis gives otherwise, analysed_label, and seeds other than the lock's,
    unlocked_seeds), its `robustness` the robustness step's
    label ('' for an exploratory contrast, and for a planned one read with a value given other than planned:
    departures, demoted). Returns (table, paired, reading)."""
    results = Path(results)
    seeds = _seeds(results, {a, b}, study)
    first = runs.folders(results, [a], seeds[:1])[a, seeds[0]]
    sets = sorted(runs.read_evals(first / "evals.parquet")["eval_set"].unique())
    if eval_set is None and len(sets) != 1:
        raise ConfigError(f"runs hold eval sets {', '.join(sets)}: choose one with --eval-set")
    eval_set = eval_set or sets[0]
    if eval_set not in sets:
        raise ConfigError(f"--eval-set {eval_set!r}: not evaluated; allowed: {', '.join(sets)}")
    locked, plan, said, stale = _plan(results, study)
    read = reading(locked, given, said)
    departed = departures(read, reading(locked, {}, said), said)
    plan = demoted(plan, departed)
    v = {key: value for key, (value, _) in read.items()}
    wanted = (a, b, basis, metric, eval_set)
    chosen = [wanted, *_family(wanted, plan, planned_keys(locked) if locked else [])]
    arms = {arm for k in chosen for arm in k[:2]}
    arms_plan, B, held = locked["arms"] if locked else None, budget(results), warmups(results, locked, arms)
    loaded = runs.load(results, sorted(arms), _seeds(results, arms, study), sorted({k[4] for k in chosen}),
                       clock=v["clock"], plan=arms_plan)
    table, paired = contrasts.build(loaded, chosen, B, v["margin"], plan, v["alpha"], v["resamples"],
                                    v["bootstrap_seed"], held)
    mine = (paired[contrasts.KEY] == [contrasts.name(a, b), basis, metric, eval_set]).all(axis=1)
    table = table.iloc[:1].reset_index(drop=True)
    warnings = [summary.warning(table.iloc[0], accepted_differences(results, [a, b], seeds), stale,
                                flags(study, results) if study else {}),
                *((analysed_label(results, table.iloc[0]),
                   unlocked_seeds(locked, seeds) if table.at[0, "label"] != "exploratory" else "")
                  if study is None and table.at[0, "id"] and not departed else ())]
    table["warning"] = ["; ".join(w for w in warnings if w)]
    checks = robustness.table(table, loaded, drift.drift_table(runs.evals_frame(loaded), v["drift_gap"]), B,
                              v["clock"], v["alpha"], records(results, [a, b], seeds, arms_plan), held)
    table["robustness"] = checks["robustness"].tolist() or [""]  # none: an exploratory contrast has no checks
    return table, paired[mine].reset_index(drop=True), read
