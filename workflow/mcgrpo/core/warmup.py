"""A prompt filter's warm-up: the iterations before it chooses a prompt, read from the study config.

A built-in filter (FILTERS: mcgrpo.train.selection.Filter) takes the stream's first prompts as they come until
`warmup_prompts` prompts have been trained (`trained < warmup` when it selects; `trained` grows by the prompts of each
iteration). Iteration i (0-based) has trained i x prompts_per_iteration prompts before it selects, so the first
iteration that chooses is number ceil(warmup_prompts / prompts_per_iteration) (0-based), `iterations` below: that many
iterations take the stream as it comes. An evaluation records `iteration` = the iterations done before it, so one
after `iterations` iterations or fewer trained on no chosen prompt; the first that did is after `iterations` + 1.
Plugin selectors are not read: their warm-up, if any, is theirs. The validation refuses an equal-iteration study
whose filter never chooses before B (mcgrpo.train.spec); the analysis calls a contrast read before any choice
uninformative (mcgrpo.analysis.informative).
"""

from __future__ import annotations

from dataclasses import dataclass

from mcgrpo.core.config import schema

FILTERS = ("critic_filter", "history_filter", "level_filter", "random_choice")  # Filter: candidates, keep, target


@dataclass(frozen=True)
class Warmup:
    arm: str
    rule: str           # its built-in filter (FILTERS)
    prompts: int        # warmup_prompts
    per_iteration: int  # recipe.prompts_per_iteration

    @property
    def iterations(self) -> int:
        """The iterations that take the stream as it comes (the 0-based number of the first that chooses)."""
        return -(-self.prompts // self.per_iteration)

    def acted(self, iteration: float) -> bool:
        """Whether an evaluation after `iteration` iterations (the evals' `iteration`) trained on a chosen prompt."""
        return iteration > self.iterations

    @property
    def key(self) -> str:
        return f"arms.{self.arm}.selection.{self.rule}.warmup_prompts"

    def words(self) -> str:
        """'selection.critic_filter.warmup_prompts 512, 64 iterations of 8 prompts'."""
        return (f"selection.{self.rule}.warmup_prompts {self.prompts}, {self.iterations} iteration"
                f"{'' if self.iterations == 1 else 's'} of {self.per_iteration} prompts")


def _default(key: str) -> int:
    s = schema()
    return (s["$defs"]["filter"] if key == "warmup_prompts" else s["properties"]["recipe"])["properties"][key]["default"]


def of(cfg: dict, arm: str) -> Warmup | None:
    """The warm-up of `arm`'s built-in filter in study config `cfg` (options the config leaves out at the schema's
    defaults, which validation writes in); None where the arm has none, or `cfg` holds no recipe (an old lock's)."""
    (rule, options), = ((cfg["arms"][arm].get("selection") or {"": None}).items())
    if rule not in FILTERS or "recipe" not in cfg:
        return None
    per_iteration = (cfg["recipe"] or {}).get("prompts_per_iteration", _default("prompts_per_iteration"))
    return Warmup(arm, rule, int((options or {}).get("warmup_prompts", _default("warmup_prompts"))), int(per_iteration))


def study(cfg: dict | None) -> dict[str, Warmup]:
    """{arm: its filter's Warmup} of every arm of `cfg` with a built-in filter ({} without a config)."""
    if not cfg or not isinstance(cfg.get("arms"), dict):
        return {}
    return {arm: w for arm in cfg["arms"] if (w := of(cfg, arm)) is not None}
