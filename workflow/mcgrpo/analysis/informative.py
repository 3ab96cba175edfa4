"""Can a contrast's data tell its arms apart at all? If not, its verdict is "uninformative", with the reason.

A paired contrast reads one value per arm and seed (paired.parquet's value_a, value_b) and tests the seeds'
differences. Some data cannot distinguish the arms whatever the test says, and a verdict read from it ("not
confirmed", "matches", "robust") would be read as evidence. The contrast is uninformative, checked in this order:
- fewer than two seeds ran both arms: the paired t test needs two differences;
- a reading is not defined (NaN: it would need a curve beyond its end, or the score itself is undefined);
- warmup: an arm's built-in prompt filter had chosen no prompt that any seed's reading saw: in every seed, the latest
  evaluation the reading weighs (the one read, or the later of the two an interpolated reading is between, whose
  weight is above 0) came after no more iterations than the filter's warm-up takes (mcgrpo.core.warmup), so the
  arm trained on the stream's own prompts as the stream does, and a difference is the predictor's overhead at most;
  where only some seeds' readings came that early it is informative, the contrast's warning saying how many;
- floor: every reading of both arms is 0 (the model solved no held-out problem, or, on a strict metric, boxed no
  right answer: a model that answers unboxed scores 0 there whatever it solves);
- ceiling: every reading of both arms is 1 (it solved every one);
- zero variance: every seed gave the same difference (to stats.TOLERANCE, 1e-9), so the paired t test has no noise
  to test against (its interval has zero width; stats gives it no p).
Anything else is informative, however small its variance (docs/robustness.md: a filter's warm-up). Metrics are accuracies or pass@k, fractions in [0, 1].
The paper is silent on degenerate data; this rule is the workflow's (docs/robustness.md#uninformative-verdicts).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mcgrpo.analysis import formats
from mcgrpo.analysis.stats import spread
from mcgrpo.core.errors import DataError
from mcgrpo.core.warmup import Warmup

FLOOR = "the model solved no held-out problem"
FLOOR_STRICT = ("no held-out answer was both boxed and right (the strict verifier credits a boxed answer only; "
                "a model that answers unboxed scores 0 here whatever it solves)")
CEILING = "the model solved every held-out problem, so neither arm can do better"


def check(pairs: pd.DataFrame, warmups: dict[str, Warmup] | None = None) -> tuple[str, str]:
    """(kind, why) where the contrast's paired readings (paired.parquet rows of one contrast) cannot tell its arms
    apart, kind one of seeds, undefined, warmup, floor, ceiling, constant; ('', '') where they can. `warmups`: the
    study's filter arms' warm-ups (mcgrpo.core.warmup.study); without them no warm-up is checked."""
    n = len(pairs)
    if n < 2:
        return "seeds", f"only {n} seed{'' if n == 1 else 's'} ran both arms: the paired test needs at least two"
    values = pairs[["value_a", "value_b"]].to_numpy(dtype=float)
    undefined = np.isnan(values).any(axis=1)
    if undefined.any():
        seeds = ", ".join(map(str, pairs["seed"][undefined]))
        clamped = "clamped" in pairs and pairs["clamped"][undefined].astype(bool).all()
        return "undefined", (f"the reading of seed {seeds} is not defined ("
                             + ("it would need a curve beyond its end" if clamped else "its score is NaN")
                             + "): no statistic")
    if why := never_chose(pairs, warmups):
        return "warmup", why
    if (values == 0).all():
        strict = "metric" in pairs and len(pairs) and str(pairs["metric"].iloc[0]).endswith("_strict")
        return "floor", f"every reading of both arms scored 0: {FLOOR_STRICT if strict else FLOOR}"
    if (values == 1).all():
        return "ceiling", f"every reading of both arms scored 1: {CEILING}"
    diffs = pairs["diff"].to_numpy(dtype=float)
    if not spread(diffs):
        return "constant", (f"every seed gave the same difference ({formats.points(diffs[0])} points): with no "
                            f"variance across seeds the paired t test has nothing to test against")
    return "", ""


def reason(pairs: pd.DataFrame, warmups: dict[str, Warmup] | None = None) -> str:
    """Why the contrast's paired readings cannot tell its arms apart; '' where they can."""
    return check(pairs, warmups)[1]


def unrecorded(pairs: pd.DataFrame, warmups: dict[str, Warmup] | None) -> str:
    """Why the warm-up of a filter arm of `pairs`' contrasts cannot be checked: their readings record no iterations
    (paired.parquet written before it recorded iteration_a and iteration_b), so whether the filter had chosen a
    prompt by the reading cannot be told; '' where every such arm's column is there (or no arm has a filter)."""
    if not warmups or not len(pairs) or "contrast" not in pairs:
        return ""
    unread = {}
    for contrast in pairs["contrast"].astype(str).unique():
        for side, arm in zip("ab", contrast.split("-vs-")):
            if arm in warmups and f"iteration_{side}" not in pairs:
                unread.setdefault(f"iteration_{side}", []).append(f"{contrast} (arm {arm}: {warmups[arm].words()})")
    if not unread:
        return ""
    return (f"records no {' or '.join(sorted(unread))} (written before paired readings recorded the iterations they "
            f"weigh), so whether a filter had chosen a prompt by the reading cannot be told for "
            f"{'; '.join(c for cs in unread.values() for c in dict.fromkeys(cs))}")


def require_recorded(pairs: pd.DataFrame, warmups: dict[str, Warmup] | None,
                     path: str = "results/<study>/analysis/paired.parquet") -> None:
    """Refuse readings written before paired.parquet recorded the iterations read (unrecorded), naming `path`:
    read unchecked, a filter that never chose would pass for a verdict or a plan of seeds."""
    if why := unrecorded(pairs, warmups):
        raise DataError(f"{path}: {why}; allowed: the file the study's contrasts step writes now "
                        f"(snakemake --configfile STUDY --forcerun {path})")


def _filtered(pairs: pd.DataFrame, warmups: dict[str, Warmup] | None) -> list[tuple[np.ndarray, Warmup]]:
    """(per seed, the iterations done at the latest evaluation its reading weighs; the Warmup) of each arm of the
    contrast with a built-in filter. Its arms come from the contrast's name (a-vs-b: an arm's name holds no '-').
    Readings that record no iterations are refused (require_recorded)."""
    require_recorded(pairs, warmups)
    if not warmups or not len(pairs) or "contrast" not in pairs:
        return []
    arms = str(pairs["contrast"].iloc[0]).split("-vs-")
    return [(pairs[f"iteration_{side}"].to_numpy(dtype=float), warmups[arm])
            for side, arm in zip("ab", arms) if arm in warmups]


def never_chose(pairs: pd.DataFrame, warmups: dict[str, Warmup] | None) -> str:
    """Why the contrast cannot show its filter's effect where, in every seed, its reading came before the filter
    chose a prompt (the module's rule); '' elsewhere."""
    for read, w in _filtered(pairs, warmups):
        if not any(w.acted(i) for i in read):
            return (f"arm {w.arm}'s filter never chose a prompt before the readings: its warm-up ({w.words()}) "
                    f"lasted through every seed's reading (at most iteration {int(np.nanmax(read))}; its first "
                    f"chosen prompts are trained in iteration {w.iterations + 1})")
    return ""


def before_choosing(pairs: pd.DataFrame, warmups: dict[str, Warmup] | None) -> str:
    """A warning where some seeds' readings, not all, came before the filter chose a prompt: the contrast is read,
    its mean diluted by seeds that read the stream under the filter's name. '' elsewhere."""
    words = []
    for read, w in _filtered(pairs, warmups):
        early = np.array([np.isfinite(i) and not w.acted(i) for i in read], dtype=bool)
        if early.any() and not early.all():
            seeds = pairs["seed"].to_numpy()[early].tolist()
            words.append(f"arm {w.arm}'s filter had chosen no prompt by the reading of {int(early.sum())} of "
                         f"{len(early)} seeds ({formats.seeds_in_words(seeds)}: its warm-up is {w.words()})")
    return "; ".join(words)


def floor_at_start(evals: pd.DataFrame, arm: str, metric: str, eval_set: str) -> str:
    """A warning where every seed of `arm` scored 0 on `metric` at its first evaluation on `eval_set` (before any
    training): unless training lifts it, every contrast against it reads the floor. '' otherwise.

    `evals`: runs.evals_frame's rows (arm, seed, eval_index, eval_set and the metric)."""
    mine = evals[(evals["arm"] == arm) & (evals["eval_set"] == eval_set)]
    if mine.empty or metric not in mine:
        return ""
    first = mine[mine["eval_index"] == mine.groupby("seed")["eval_index"].transform("min")]
    if (first[metric].to_numpy(dtype=float) != 0).any():
        return ""
    return (f"the base arm {arm} scored 0 ({metric} on {eval_set}) at its first evaluation in every seed "
            f"({len(first)}): unless training lifts it, the contrasts against it read the floor and are "
            f"uninformative; no number of seeds helps (a larger model, a warm start or easier problems can)")


def floors_at_start(evals: pd.DataFrame, arms: list[str], metric: str, eval_sets: list[str]) -> list[str]:
    """floor_at_start's warnings for each base arm and eval set, where there are any."""
    return [w for arm in arms for eval_set in eval_sets if (w := floor_at_start(evals, arm, metric, eval_set))]


def floor_flags(evals: pd.DataFrame, arms: list[str], metric: str, eval_sets: list[str]) -> dict[tuple[str, str], str]:
    """{(arm, eval set): words} of floors_at_start's warnings, for the warning beside each verdict with the arm
    (summary.flag_cell): unless training lifted the arm, that verdict reads the floor."""
    return {(arm, eval_set): f"{arm} scored 0 ({metric} on {eval_set}) at its first evaluation in every seed"
            for arm in arms for eval_set in eval_sets if floor_at_start(evals, arm, metric, eval_set)}
