"""What a study shows a reader: every table and figure its analysis rules write (the report embeds them, the summary
points at them), by the rule that writes it, listed once. rules/targets.smk names the workflow's targets by these
lists, and the summary holds every one to the analysis files it was made from before it is written beside them
(steps.held_shown): a list kept twice would let a new table or figure reach the report unheld.
"""

from __future__ import annotations

from pathlib import Path

from mcgrpo.core import config as study_config

# rule -> the tables it writes, each as tables/<name>.csv, .md and .html (tables.write_table)
TABLES = {"tables": ("headline", "robustness", "prereg", "contrasts", "equal_bases", "pass_at_k", "budget_share",
                     "stage_seconds", "groups", "drift", "extrapolation", "power"),
          "prediction": ("efficiency", "prediction", "second_moment"),
          "alignment": ("alignment",),
          "verifiers": ("verifiers",)}
TABLE_FORMATS = ("csv", "md", "html")
# rule -> the analysis files (analysis/<name>.parquet) it writes its tables from, besides the tables step's (which the
# summary reads anyway): the summary reads them to hold the tables, so it waits for them
SOURCES = {"prediction": ("efficiency", "prediction", "second_moment"), "alignment": ("alignment",),
           "verifiers": ("verifiers",)}
# rule -> the figures it draws, each as figures/<name>.png (and a PDF beside it, for papers)
FIGURES = {"figures": ("accuracy_vs_tokens", "accuracy_vs_time", "difference_from_base", "per_seed",
                       "stage_seconds", "drift"),
           "prediction": ("prediction",)}


RULES = tuple(dict.fromkeys([*TABLES, *FIGURES]))  # every analysis rule that shows a table or figure, once


def planned(cfg: dict, rule: str) -> bool:
    """Whether study `cfg` runs analysis rule `rule`: the prediction where it has gradient tests, the alignment
    where evaluation.alignment measures it, the others always."""
    if rule == "prediction":
        return bool(study_config.gradient_tests_config(cfg))
    if rule == "alignment":
        return bool(cfg["evaluation"].get("alignment"))
    return True


def table_files(rule: str) -> list[str]:
    """Every file of rule `rule`'s tables, relative to the study's folder."""
    return [f"tables/{name}.{ext}" for name in TABLES.get(rule, ()) for ext in TABLE_FORMATS]


def figure_files(rule: str) -> list[str]:
    """Every figure (PNG) rule `rule` draws, relative to the study's folder."""
    return [f"figures/{name}.png" for name in FIGURES.get(rule, ())]


def rule_files(rule: str) -> list[str]:
    """Every table and figure rule `rule` shows, relative to the study's folder."""
    return [*table_files(rule), *figure_files(rule)]


def files(cfg: dict) -> list[str]:
    """Every table and figure study `cfg` shows, relative to its folder: the summary's inputs."""
    return [path for rule in RULES if planned(cfg, rule) for path in rule_files(rule)]


def sources(cfg: dict) -> list[str]:
    """Every analysis file study `cfg`'s tables other than the tables step's are written from (SOURCES), relative to
    its folder: inputs of the summary, which holds the tables to them."""
    return [f"analysis/{name}.parquet" for rule, names in SOURCES.items() if planned(cfg, rule) for name in names]


def any_there(folder: Path, rule: str) -> bool:
    """Whether any shown file of `rule` is in the study's `folder` (none: the rule has not run, nothing to hold)."""
    return any((Path(folder) / path).exists() for path in rule_files(rule))
