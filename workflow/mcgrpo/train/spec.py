"""The training blocks' rules that the JSON Schema cannot express: model shape, selectors, credit rules and
update options against the recipe, checked before any job runs (one line per problem, naming the key)."""

from __future__ import annotations

from mcgrpo.train.credit import problems as credit_problems


def problems(cfg: dict) -> list[str]:
    recipe, tiny = cfg["recipe"], cfg["model"]["tiny"]
    found = []
    if tiny["hidden_size"] % tiny["num_heads"]:
        found.append(f"config key model.tiny.hidden_size: {tiny['hidden_size']} is not divisible by "
                     f"model.tiny.num_heads ({tiny['num_heads']})")
    pool = cfg["task"]["pool"]["size"]  # None: every qualifying problem of a file, counted by prepare-data
    for arm, spec in cfg["arms"].items():
        for name, rule in (spec.get("selection") or {}).items():
            if "candidates" in rule and not rule["keep"] <= recipe["prompts_per_iteration"] <= rule["candidates"]:
                found.append(f"config key arms.{arm}.selection.{name}: needs keep ({rule['keep']}) <= "
                             f"recipe.prompts_per_iteration ({recipe['prompts_per_iteration']}) <= "
                             f"candidates ({rule['candidates']})")
            elif pool is not None and rule.get("candidates", 0) > pool:
                found.append(f"config key arms.{arm}.selection.{name}.candidates: {rule['candidates']} candidates "
                             f"cannot be drawn from a pool of {pool} (task.pool.size); allowed: at most {pool}")
    credits = {f"arms.{arm}.credit": spec.get("credit", {}) for arm, spec in cfg["arms"].items()}
    credits["budget.calibration_credit"] = cfg["budget"]["calibration_credit"]
    found += [p for key, credit in credits.items() for p in credit_problems(key, credit, recipe, cfg["task"])]
    batch = recipe["prompts_per_iteration"] * recipe["group_size"]
    for arm, spec in cfg["arms"].items():
        if (spec.get("update") or {}).get("minibatches", 1) > batch:
            found.append(f"config key arms.{arm}.update.minibatches: {spec['update']['minibatches']} minibatches "
                         f"cannot be cut from {batch} completions; allowed: at most {batch}")
    return found
