"""The task: block's rules that the JSON Schema cannot express, checked before any job runs.

The built-in `arith` task generates its problems; `math` and `gsm8k` read them from a file, a
folder or a cached Hugging Face data set, named once on the pool and inherited by every
evaluation set that names none (so that `heldout: {size: 200}` is drawn from the pool's source,
and the pool then loses those problems to deduplication).
"""

from __future__ import annotations

ARITH_POOL_SIZE = 3000
SOURCE_KEYS = ("path", "hf")
FILE_ONLY = ("path", "hf", "format", "max_question_chars")


def _sets(task: dict) -> dict[str, dict]:
    return {"task.pool": task["pool"], **{f"task.eval_sets.{n}": s for n, s in task["eval_sets"].items()}}


def problems(task: dict) -> list[str]:
    """Every problem with the task block, one line each naming the key; fills arith's pool size."""
    if task["name"] == "arith":
        return _arith_problems(task)
    found = []
    for key, spec in _sets(task).items():
        given = [k for k in SOURCE_KEYS if spec.get(k) is not None]
        if len(given) > 1:
            found.append(f"config key {key}: give path or hf, not both")
    if not any(task["pool"].get(k) for k in SOURCE_KEYS):
        found.append(f"config key task.pool: a {task['name']!r} task reads its problems from a source; give "
                     f"path (a .jsonl, .parquet or .json file, or a folder of per-problem .json files) "
                     f"or hf (a data set in the local Hugging Face cache)")
    return found


def _arith_problems(task: dict) -> list[str]:
    if task["pool"].get("size") is None:
        task["pool"]["size"] = ARITH_POOL_SIZE
    if task["pool"].get("levels") is None:  # the schema's levels default, which its $ref never fills in: every
        # level would ask level 1 for 600 of its 149 training questions (and prepare_data read a missing key)
        from mcgrpo.core.config import schema
        task["pool"]["levels"] = list(schema()["$defs"]["levels"]["default"])
    found = [f"config key {key}.{k}: the arith task generates its problems; {k} applies to math and gsm8k"
             for key, spec in _sets(task).items() for k in FILE_ONLY if spec.get(k) is not None]
    found += [f"config key task.eval_sets.{name}.size: the arith task needs a number of problems; allowed: "
              f"an integer of at least 1" for name, s in task["eval_sets"].items() if s.get("size") is None]
    return found or _arith_supply(task)


def _arith_supply(task: dict) -> list[str]:
    """Each level supplies a fixed number of distinct questions to each side of the evaluation partition: the
    evaluation sets share one side (each excludes the earlier ones), the pool has the other."""
    from mcgrpo.data import arith
    found = []
    for for_eval, named in ((True, task["eval_sets"]), (False, {"pool": task["pool"]})):
        taken: dict[int, int] = {}
        for name, spec in named.items():
            levels = spec.get("levels") or task["pool"]["levels"]
            for level, count in sorted(arith.wanted(spec["size"], levels).items()):
                taken[level] = taken.get(level, 0) + count
                most = arith.supply(level, for_eval)
                if taken[level] > most:
                    key = "task.pool.size" if name == "pool" else f"task.eval_sets.{name}.size"
                    side = "evaluation sets together" if for_eval else "training pool"
                    found.append(f"config key {key}: {spec['size']} problems over levels {levels} need "
                                 f"{taken[level]} distinct level-{level} questions, and level {level} has "
                                 f"{most} for the {side}; allowed: a smaller size, or more levels")
    return found


def source(task: dict, name: str | None = None) -> dict:
    """The source of the pool (name None) or of an evaluation set: {path | hf, format}."""
    spec = task["pool"] if name is None else task["eval_sets"][name]
    own = {k: spec[k] for k in SOURCE_KEYS if spec.get(k) is not None}
    base = own or {k: task["pool"][k] for k in SOURCE_KEYS if task["pool"].get(k) is not None}
    return {**base, "format": spec.get("format") or (None if own else task["pool"].get("format")) or task["name"]}
