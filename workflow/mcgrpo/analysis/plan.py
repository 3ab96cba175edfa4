"""What a study's analysis computes, read from its config: contrasts, bases, metrics, the plan's entries.

Every arm pair of analysis.pairs (or every arm against analysis.base) is contrasted on every
basis, metric and evaluation set, and so is every contrast of the preregistered plan. This module
stays light (config validation imports it); the computing is in `steps`.
"""

from __future__ import annotations

from mcgrpo.core import config as study_config


# An equal-iteration study (budget.iterations) reads every arm at the same iteration count. It has no token
# budget B, so the tokens basis ("each run at its first evaluation at or after B tokens") and time_c (the base's
# time at B tokens) are not defined there, and are refused rather than computed: read at each run's end they
# would be the equal-iterations reading under the wrong name, and read at the cheaper arm's tokens they would
# interpolate a Monte-Carlo arm (about 10x the tokens per iteration) between its first evaluations. The
# equal-tokens question is the matched-compute studies' own. Equal updates and equal time stay defined
# (both are read up to each run's evaluation at B iterations) and may be asked for.
NO_TOKEN_BUDGET = ("tokens", "time_c")


def equal_iterations(cfg: dict) -> bool:
    """Whether the study stops every run after budget.iterations iterations instead of at a token budget."""
    return cfg["budget"].get("iterations") is not None


def bases(cfg: dict) -> list[str]:
    """The configured bases; by default tokens, updates and time, plus time_c for runs past B (an
    equal-iteration study: iterations)."""
    if cfg["analysis"]["bases"]:
        return list(cfg["analysis"]["bases"])
    if equal_iterations(cfg):
        return ["iterations"]
    return ["tokens", "updates", "time", *(["time_c"] if cfg["budget"]["horizon"] > 1 else [])]


def headline_basis(cfg: dict) -> str:
    """The basis pass@k is contrasted on: equal tokens (as the paper reports it), equal iterations in an
    equal-iteration study."""
    return "iterations" if equal_iterations(cfg) else "tokens"


def pass_metrics(cfg: dict) -> list[str]:
    """pass@k (default verifier) for each analysis.pass_k (validated: none beyond the samples per problem)."""
    return [f"pass@{k}_default" for k in sorted(pass_ks(cfg))]


def pass_ks(cfg: dict) -> list[int]:
    """analysis.pass_k; by default (null) those of 2, 4 and 8 that evaluation.samples allows (a k beyond the
    samples, given explicitly, is an error: `problems`)."""
    given = cfg["analysis"]["pass_k"]
    return list(given) if given is not None else [k for k in (2, 4, 8) if k <= cfg["evaluation"]["samples"]]


def keys(cfg: dict) -> list[tuple[str, str, str, str, str]]:
    """(a, b, basis, metric, eval_set) of every contrast: each pair on every basis and analysis metric,
    pass@k at equal tokens (as the paper reports it), then planned contrasts not among those."""
    grid = [(a, b, basis, metric, eval_set) for a, b in study_config.pairs(cfg) for eval_set in cfg["evaluation"]["sets"]
            for basis, metric in [*((x, m) for x in bases(cfg) for m in cfg["analysis"]["metrics"]),
                                  *((headline_basis(cfg), m) for m in pass_metrics(cfg))]]
    return list(dict.fromkeys([*grid, *planned_keys(cfg)]))


def entries(plan: dict) -> dict[str, dict]:
    """Planned contrasts by id, each with its label (primary or secondary). Families are Holm's
    and only primary contrasts are adjusted, so every secondary one is in family "secondary",
    whatever its entry says: one name in every table."""
    return {e["id"]: {**e, "label": label, "family": e["family"] if label == "primary" else "secondary"}
            for label in ("primary", "secondary") for e in plan[label]}


def key(entry: dict, cfg: dict) -> tuple[str, str, str, str, str]:
    """(a, b, basis, metric, eval_set) of a planned contrast; no eval set means the first evaluated."""
    return (entry["a"], entry["b"], entry["basis"], entry["metric"],
            entry["eval_set"] or cfg["evaluation"]["sets"][0])


def planned_keys(cfg: dict) -> list[tuple[str, str, str, str, str]]:
    """(a, b, basis, metric, eval_set) of every planned contrast."""
    return [key(e, cfg) for e in entries(cfg["plan"]).values()]


def _pass_k(metric: str) -> int:
    """k of pass@k (1 for accuracy); the schema checked the metric's form."""
    return int(metric.split("_")[0].removeprefix("pass@")) if metric.startswith("pass@") else 1


def problems(cfg: dict) -> list[str]:
    """The analysis block's and the plan's references: arms, eval sets, unique ids, amendments' ids."""
    arms, sets, plan = list(cfg["arms"]), cfg["evaluation"]["sets"], cfg["plan"]
    samples = cfg["evaluation"]["samples"]
    cfg["analysis"]["pass_k"] = pass_ks(cfg)  # the default filled in: what the analysis contrasts, named
    found = [f"config key analysis.efficiency.{arm}: not an arm; allowed: {', '.join(arms)}"
             for arm in cfg["analysis"]["efficiency"] if arm not in arms]
    seen = set()
    for label in ("primary", "secondary"):
        for i, e in enumerate(plan[label]):
            where = f"config key plan.{label}[{i}]"
            if e["id"] in seen:
                found.append(f"{where}.id: {e['id']!r} is used twice; ids must be unique")
            seen.add(e["id"])
            for side in ("a", "b"):
                if e[side] not in arms:
                    found.append(f"{where}.{side}: {e[side]!r} is not an arm; allowed: {', '.join(arms)}")
            if e["a"] == e["b"]:
                found.append(f"{where}: an arm cannot be contrasted with itself ({e['a']!r})")
            if e["eval_set"] is not None and e["eval_set"] not in sets:
                found.append(f"{where}.eval_set: {e['eval_set']!r} is not evaluated; allowed: {', '.join(sets)}")
    metrics = [(f"analysis.pass_k[{i}]", f"pass@{k}_default") for i, k in enumerate(cfg["analysis"]["pass_k"])]
    metrics += [(f"analysis.metrics[{i}]", m) for i, m in enumerate(cfg["analysis"]["metrics"])]
    metrics += [(f"plan.{label}[{i}].metric", e["metric"]) for label in ("primary", "secondary")
                for i, e in enumerate(plan[label])]
    found += [f"config key {where}: {m!r} needs {k} samples per problem, evaluation.samples is {samples}; "
              f"allowed: pass@k with k <= {samples}, or acc_<verifier>"
              for where, m in metrics if (k := _pass_k(m)) > samples]
    found += _basis_problems(cfg) + _greedy_problems(cfg, metrics) + _asked_twice(cfg)
    for i, amendment in enumerate(plan["amendments"]):
        unknown = sorted(set(amendment["ids"]) - seen)
        if unknown:
            found.append(f"config key plan.amendments[{i}].ids: {', '.join(map(repr, unknown))} not in the plan; "
                         f"allowed: {', '.join(sorted(seen)) or 'none'}")
    return found


def _asked_twice(cfg: dict) -> list[str]:
    """Two plan entries of one contrast (the same arms, basis, metric and eval set, an absent eval set being the first
    evaluated): the analysis labels each contrast by one entry, so the other's verdict, and its direction's test,
    would be reported nowhere, and the lock would hold a hypothesis no table answers."""
    first, found = {}, []
    for label in ("primary", "secondary"):
        for i, e in enumerate(cfg["plan"][label]):
            if e["a"] not in cfg["arms"] or e["b"] not in cfg["arms"] or e["a"] == e["b"]:
                continue  # named above
            eval_set = e["eval_set"] or cfg["evaluation"]["sets"][0]
            other = first.setdefault((e["a"], e["b"], e["basis"], e["metric"], eval_set), e["id"])
            if other != e["id"]:
                found.append(f"config key plan.{label}[{i}]: {e['id']!r} is the contrast of {other!r} again ({e['a']} "
                             f"minus {e['b']}, basis {e['basis']}, {e['metric']} on {eval_set}), and a contrast "
                             f"has one verdict, so one of the two would be reported nowhere; allowed: one entry per "
                             f"contrast, its direction the one test planned for it")
    return found


def _basis_problems(cfg: dict) -> list[str]:
    """An equal-iteration study has no token budget: no tokens or time_c basis (see NO_TOKEN_BUDGET)."""
    if not equal_iterations(cfg):
        return []
    why = (f"an equal-iteration study (budget.iterations = {cfg['budget']['iterations']}) has no token budget to "
           f"read it at; allowed: iterations, updates, time")
    given = [(f"analysis.bases[{i}]", b) for i, b in enumerate(cfg["analysis"]["bases"] or [])]
    given += [(f"plan.{label}[{i}].basis", e["basis"]) for label in ("primary", "secondary")
              for i, e in enumerate(cfg["plan"][label])]
    return [f"config key {where}: basis {b!r}: {why}"
            + (" (a plan entry's basis defaults to tokens: give one)" if where.startswith("plan") else "")
            for where, b in given if b in NO_TOKEN_BUDGET]


def _greedy_problems(cfg: dict, metrics: list[tuple[str, str]]) -> list[str]:
    """acc_greedy is recorded only where the study evaluates greedily."""
    if cfg["evaluation"].get("greedy"):
        return []
    return [f"config key {where}: {m!r} is recorded only with evaluation.greedy: true; allowed: set it, or "
            f"acc_<verifier> / pass@<k>_<verifier>" for where, m in metrics if m == "acc_greedy"]
