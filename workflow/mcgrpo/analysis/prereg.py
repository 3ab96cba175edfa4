"""Preregistration: lock the study's plan before training, and hold the analysis to it.

A study's `plan:` names its primary contrasts (with Holm families and predicted directions) and
its secondary ones. `lock` hashes the plan with what it depends on before the first training run: the margin,
arms, seeds and budget rule, and the experiment the claims are about (task, model, recipe, evaluation, analysis
bases); the analysis compares the current config with the lock. A planned contrast keeps its label only if
nothing it depends on changed since, or a dated amendment added after the lock names it; otherwise it is
reported as exploratory, with the reason ("recipe.lr changed after the lock (2026-03-01)").

The engine (hf or vllm) is left out: it samples from the same policy, and a study may move to a faster one.
Locks written before the experiment was covered still read: the summary says what they cannot tell.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

from mcgrpo import __version__
from mcgrpo.core import config as study_config
from mcgrpo.core.layout import study_run
from mcgrpo.analysis.plan import entries, key
from mcgrpo.analysis.contrasts import label_key
from mcgrpo.core.errors import IntegrityError
from mcgrpo.core.manifest import checked
from mcgrpo.core.store import git_sha, read_json

GLOBAL = ("margin", "eval_sets", "arms", "seeds", "budget")  # a change here touches every planned contrast
EXPERIMENT = ("task", "model", "recipe", "evaluation", "bases")  # so does one here, named by its key path
UNCOVERED = ("its lock predates locks covering the task, model, recipe, evaluation and analysis bases: changes to "
             "them since cannot be told")
# the analysis settings that move a verdict or its interval (the significance level, the clock of equal time, the
# bootstrap), besides the margin and bases
READING = ("alpha", "clock", "resamples", "bootstrap_seed")
# the drift check's threshold, which moves a verdict's robustness label: a key of its own, so that a lock written
# before it was covered (whose `analysis` lacks it) reads as not covering it rather than as changed
DRIFT_GAP = "analysis.drift_gap"
LATER = ("verifier", "analysis", "ingested", DRIFT_GAP)  # experiment keys added since its first locks: compared where locked


def material(cfg: dict) -> dict:
    """What the lock fixes: the plan, and the margin, eval sets, arms, seeds and budget it is read with.

    Arms without their free-text descriptions and seeds as a set: editing a description or reordering the
    seeds changes no contrast, so it must not demote one."""
    return {"study": cfg["study"], "plan": cfg["plan"], "margin": cfg["analysis"]["margin"],
            "eval_sets": cfg["evaluation"]["sets"], "arms": _arms(cfg["arms"]), "seeds": sorted(cfg["seeds"]),
            "budget": cfg["budget"], "experiment": experiment(cfg)}


def experiment(cfg: dict) -> dict:
    """What the claims are about besides the arms: every key a run trains or is evaluated with (the eval sets
    are `eval_sets` already), and the bases the contrasts are read on."""
    return {"task": cfg.get("task"), "model": cfg.get("model"), "recipe": cfg.get("recipe"),
            "evaluation": {k: v for k, v in cfg["evaluation"].items() if k != "sets"},
            "bases": cfg["analysis"].get("bases"),  # .get: a config rebuilt from an older lock (locked_config)
            "verifier": cfg.get("verifier"), "analysis": {k: cfg["analysis"].get(k) for k in READING},
            "ingested": ingested_runs(cfg), DRIFT_GAP: cfg["analysis"].get("drift_gap")}


def ingested_runs(cfg: dict) -> dict:
    """{arm: {seed: what its folder says it did}} of the ingested arms (mcgrpo.core.trl_config.ingested_identity):
    another TRL run in a folder after the lock is another experiment, though its path is the same."""
    from mcgrpo.core.trl_config import arms, ingested_identity
    return {arm: {str(seed): ingested_identity(block, seed) for seed in sorted(cfg.get("seeds") or [])}
            for arm, block in arms(cfg, "ingested").items()} if isinstance(cfg.get("arms"), dict) else {}


def differences(now, then, prefix: str = "") -> list[str]:
    """The key paths (recipe.lr, task.pool.size) where `now` and `then` differ; lists compare whole."""
    if not (isinstance(now, dict) and isinstance(then, dict)):
        return [] if now == then else [prefix]
    return [path for k in sorted(set(now) | set(then), key=str)
            for path in differences(now.get(k), then.get(k), f"{prefix}.{k}" if prefix else str(k))]


def _arms(arms: dict) -> dict:
    return {name: {k: v for k, v in spec.items() if k != "description"} for name, spec in arms.items()}


def _comparable(m: dict) -> dict:
    """A lock's material as material() writes it now (locks written before descriptions were left out)."""
    return {**m, "arms": _arms(m["arms"]), "seeds": sorted(m["seeds"])}


def locked_config(lock: dict) -> dict:
    """The part of a study config a lock holds, shaped as a config (for a results folder alone)."""
    m = lock["material"]
    e = m.get("experiment", {})  # none in locks from before they covered the experiment
    return {"study": m["study"], "plan": m["plan"],
            "analysis": {**e.get("analysis", {}), "margin": m["margin"], "bases": e.get("bases"),
                         **({"drift_gap": e[DRIFT_GAP]} if DRIFT_GAP in e else {})},
            "evaluation": {**e.get("evaluation", {}), "sets": m["eval_sets"]}, "arms": m["arms"], "seeds": m["seeds"],
            "budget": m["budget"], **{k: e[k] for k in ("task", "model", "recipe", "verifier") if k in e}}


def make_lock(cfg: dict, now: datetime | None = None) -> dict:
    """The lock file's content: the material, its sha256 and the UTC time of locking."""
    m = material(cfg)
    return {"sha256": study_config.config_hash(m),
            "locked_at": (now or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
            "material": m, "mcgrpo_version": __version__, "git_sha": git_sha()}


LOCK = "prereg.lock.json"
RELOCK = ("allowed: the lock as prereg_lock wrote it (restore it); a plan changed since is a dated amendment in the "
          "study's config (plan.amendments), never an edit of the lock")


def read_lock(results_dir: str | Path) -> dict | None:
    """The study's lock (None where it has none), checked to be as `make_lock` wrote it: its material hashes to its
    sha256, and it says when it was locked. The plan, margin and directions every label comes from are the lock's
    own, so an edited lock would change verdicts without a word: it is refused, naming the file."""
    path = Path(results_dir) / LOCK
    if not path.exists() and not path.is_symlink():
        return None
    lock = read_json(path)
    if not (isinstance(lock, dict) and isinstance(lock.get("material"), dict) and isinstance(lock.get("sha256"), str)
            and isinstance(lock.get("locked_at"), str)):
        raise IntegrityError(f"{path}: not a preregistration lock (an object with material, sha256 and locked_at); "
                             f"{RELOCK}")
    found = study_config.config_hash(lock["material"])
    if found != lock["sha256"]:
        raise IntegrityError(f"{path}: its material hashes to {found[:12]}, but it records sha256 "
                             f"{lock['sha256'][:12]}: the lock was edited after it was written; {RELOCK}")
    try:
        datetime.fromisoformat(lock["locked_at"])
    except ValueError:
        raise IntegrityError(f"{path}: locked_at {lock['locked_at']!r} is no ISO time; {RELOCK}") from None
    return lock


def first_start(results_dir: Path, cfg: dict) -> str | None:
    """The earliest start time recorded in the study's run.json files (None if none recorded); an ingested run's
    training, made before mcgrpo stored it, started by its earliest checkpoint's time (`ingested.saved_by`) at the
    latest."""
    records = [read_json(checked(p)) for arm, seed in study_config.runs(cfg)
               if (p := study_run(results_dir, arm, seed) / "run.json").exists()]
    starts = [s for r in records for s in (r.get("started"), (r.get("ingested") or {}).get("saved_by")) if s]
    return min(starts, key=datetime.fromisoformat) if starts else None


def stale_runs(results_dir: Path, cfg: dict) -> list[str]:
    """Runs whose stored config differs from what the current config would train."""
    out = []
    for arm, seed in study_config.runs(cfg):
        path = study_run(results_dir, arm, seed) / "run.json"
        stored = read_json(checked(path)).get("config") if path.exists() else None
        if stored is not None and study_config.config_hash(stored) != study_config.config_hash(
                study_config.run_config(cfg, arm, seed)):
            out.append(f"{arm}/seed{seed}")
    return out


def _unlocked(lock: dict | None, started: str | None) -> str:
    """Why no planned contrast can keep its label ('' if the lock predates training)."""
    if lock is None:
        return "no preregistration lock (prereg.lock.json)"
    if started and datetime.fromisoformat(lock["locked_at"]) > datetime.fromisoformat(started):
        return f"locked at {lock['locked_at']}, after training started at {started}"
    return ""


def _changes(now: dict, then: dict, locked_at: str) -> tuple[dict[str, str], list[str]]:
    """(planned id -> what changed for it, changes to the rest of the plan) from lock `then` to `now`."""
    day = datetime.fromisoformat(locked_at).date().isoformat()
    locked = then.get("experiment", {})  # older locks: only what they cover
    covered = differences(_as_locked({k: v for k, v in now["experiment"].items() if k in locked}, locked), locked)
    shared = [f"{k} changed" for k in GLOBAL if now[k] != then[k]] + [
        f"{path} changed after the lock ({day})" for path in covered]
    plan_now, plan_then = entries(now["plan"]), entries(then["plan"])
    touched = {i: "; ".join(shared) if shared else "added after the lock" if i not in plan_then
               else "changed after the lock"
               for i, e in plan_now.items() if shared or plan_then.get(i) != e}
    rest = shared + (["hypotheses changed"] if now["plan"]["hypotheses"] != then["plan"]["hypotheses"] else [])
    return touched, rest + [f"{i} removed from the plan" for i in sorted(set(plan_then) - set(plan_now))]


def _as_locked(experiment: dict, locked: dict) -> dict:
    """`experiment` with each ingested run's identity cut to the keys its lock holds: a key identities gained since
    (checkpoint_files) was not covered, and `uncovered` says so, rather than a change to every such run."""
    if "ingested" not in experiment:
        return experiment
    then = locked.get("ingested") or {}
    return {**experiment, "ingested": {
        arm: {seed: {k: v for k, v in ident.items() if k in then[arm][seed]}
              if isinstance(ident, dict) and isinstance((then.get(arm) or {}).get(seed), dict) else ident
              for seed, ident in seeds.items()} for arm, seeds in experiment["ingested"].items()}}


def _new_amendments(current: list[dict], locked: list[dict], locked_at: str) -> list[dict]:
    """Amendments added since the lock and dated no earlier than it (a backdated one covers nothing)."""
    day = datetime.fromisoformat(locked_at).date()
    return [a for a in current if a not in locked and date.fromisoformat(a["date"]) >= day]


def uncovered(lock: dict | None) -> str:
    """What a lock written before it covered them cannot tell ('' for a lock that covers everything)."""
    if not lock:
        return ""
    if "experiment" not in lock["material"]:
        return UNCOVERED
    missing = [k for k in LATER if k not in lock["material"]["experiment"]]
    held = [i for seeds in (lock["material"]["experiment"].get("ingested") or {}).values() for i in seeds.values()]
    if any(isinstance(i, dict) and "checkpoint_files" not in i for i in held):
        missing.append("checkpoint_files")
    names = {"verifier": "verifier", "analysis": f"analysis.{', analysis.'.join(READING)}",
             "ingested": "the ingested arms' folders", DRIFT_GAP: DRIFT_GAP,
             "checkpoint_files": "the ingested arms' checkpoint files (weights, arguments, earlier logs)"}
    return (f"its lock predates locks covering {', '.join(names[k] for k in missing)}: changes to them since "
            f"cannot be told") if missing else ""


def compare(cfg: dict, lock: dict | None, started: str | None = None) -> dict:
    """How the current plan stands against the lock: its state, what changed, each planned contrast's label.

    States: missing (no lock), late (locked after training started), matches, amended (every change
    covered by a dated amendment), changed (a change without one; its contrasts become exploratory).
    """
    now = entries(cfg["plan"])
    why = _unlocked(lock, started)
    if why:
        touched, rest, amendments = dict.fromkeys(now, why), [why], []
    else:
        touched, rest = _changes(material(cfg), _comparable(lock["material"]), lock["locked_at"])
        amendments = _new_amendments(cfg["plan"]["amendments"], lock["material"]["plan"]["amendments"],
                                     lock["locked_at"])
    status = {"sha256_now": study_config.config_hash(material(cfg)), "sha256_lock": lock and lock["sha256"],
              "locked_at": lock and lock["locked_at"], "first_run_started": started,
              "changes": rest + [f"{i}: {w}" for i, w in touched.items() if not why],
              "amended": [], "demoted": [], "labels": {},
              "uncovered": uncovered(lock)}
    for i, e in now.items():
        cover = [a for a in amendments if not a["ids"] or i in a["ids"]]
        if i not in touched:
            status["labels"][i] = {**e, "reported": e["label"], "note": ""}
        elif cover:
            status["amended"].append(i)
            notes = "; ".join(f"amended {a['date']}: {a['note']}" for a in cover)
            status["labels"][i] = {**e, "reported": e["label"], "note": notes}
        else:
            status["demoted"].append(i)
            note = f"demoted: {touched[i]}" + ("" if why else " without a dated amendment")
            status["labels"][i] = {**e, "reported": "exploratory", "note": note}
    status["state"] = (("missing" if lock is None else "late") if why else
                       "changed" if status["demoted"] or (rest and not amendments) else
                       "amended" if status["changes"] else "matches")
    return status


def labels(cfg: dict, status: dict) -> dict[tuple, dict]:
    """(contrast, basis, metric, eval_set) -> id, label, family, direction, note, for apply_plan."""
    return {label_key(key(e, cfg)): {"id": i, "label": e["reported"], "direction": e["direction"],
                                     "family": e["family"],
                                     "note": e["note"]}
            for i, e in status["labels"].items()}


def status(results_dir: str | Path, cfg: dict) -> dict:
    """compare() against the study's lock file (if any), with the runs' start times and staleness."""
    results_dir = Path(results_dir)
    out = compare(cfg, read_lock(results_dir), first_start(results_dir, cfg))
    out["stale_runs"] = stale_runs(results_dir, cfg)
    return out
