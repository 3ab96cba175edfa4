"""The results summary: each preregistered contrast in one sentence (prediction, the result in words, difference in
points with its 95% interval, p, verdict and its robustness), and where the tables, figures and report are.

Snakemake prints it at the end of a run (the Snakefile's onsuccess) and the HTML report opens with it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mcgrpo.analysis import formats
from mcgrpo.analysis.contrasts import MOVED, TEST_P

PREDICTIONS = {"less": "{a} trails {b}", "greater": "{a} beats {b}", "two-sided": "{a} differs from {b}",
               "equivalent": "{a} matches {b} within ±{margin} points",
               "noninferior": "{a} is no worse than {b} by more than {margin} points"}
# The report's description of the study, which follows the summary on its first page.
DESCRIPTION = Path(__file__).resolve().parent / "report_intro.rst"  # package data: the images need it too


def uninformative(row) -> str:
    """Why the contrast's data cannot tell its arms apart ('' where they can; analysis/informative.py). Tables
    written before the check have no such column: '' there."""
    why = row.get("uninformative", "")
    return "" if pd.isna(why) else str(why)


def verdict(row) -> str:
    """'uninformative' where the data cannot tell the arms apart (whatever the plan's label); else 'confirmed'
    where the planned test passed in the predicted direction, else 'not confirmed'; a contrast the plan no longer
    covers (changed without amendment) is 'exploratory'."""
    if uninformative(row):
        return "uninformative"
    if pd.isna(row["confirmed"]):
        return "exploratory"
    return "confirmed" if bool(row["confirmed"]) else "not confirmed"


UNTESTED = "n/a (no test: the data cannot tell the arms apart)"


def p_words(p: float, row) -> str:
    """A p as the summary prints it; an uninformative contrast's says there was no test, and why."""
    return UNTESTED if uninformative(row) else formats.p_value(p)


A_AT_BASE = " (A read at the base's count)"


def read_words(row) -> str:
    """A_AT_BASE where equal updates read A at the base's update count in any seed (A made more updates than the base
    by B: contrasts.positions), so A is read short of its own B, which "equal updates" alone would hide; '' elsewhere
    (and in a table from before the column `read`)."""
    read = row.get("read", "")
    return A_AT_BASE if row["basis"] == "updates" and isinstance(read, str) and MOVED["a"] in read else ""


def basis_words(row) -> str:
    """The basis a verdict was read on, in words, as every place that shows the verdict says it: 'equal tokens',
    'equal updates (A read at the base's count)'."""
    return formats.BASIS_WORDS.get(row["basis"], row["basis"]) + read_words(row)


def planned_p(row) -> float:
    """The p of the planned test: TOST for equivalence, the non-inferiority test, else the two-sided t test."""
    return row[TEST_P.get(row["direction"], "p")]


# What the numbers say, whatever was predicted, by the paper's own reading (its section 3, "Preregistration and
# statistics"): a difference where the 95% paired-t interval excludes 0; equivalence only where TOST at the margin
# shows it; anything else shows neither (docs/robustness.md, "Result words").
RESULTS = {"less": "{a} trails {b}", "greater": "{a} beats {b}",
           "equivalent": "{a} matches {b} within ±{margin} points", "none": "{a} is on par with {b}",
           "inconclusive": "{a} against {b} is inconclusive (the interval reaches past ±{margin} points)",
           "undefined": "{a} against {b}", "uninformative": "{a} cannot be told from {b}"}


def found(row, alpha: float = 0.05) -> str:
    """What the numbers show, a key of RESULTS: less / greater where the 95% interval excludes 0; equivalent where
    TOST rejects at `alpha`; none (on par) where the interval includes 0 and lies within ±margin all the same;
    inconclusive where it reaches past the margin, which no number of words can make into 'on par'; undefined
    where there is no mean, uninformative where the data cannot tell the arms apart."""
    if uninformative(row):
        return "uninformative"
    if pd.isna(row["mean"]):
        return "undefined"
    if row["ci_high"] < 0:
        return "less"
    if row["ci_low"] > 0:
        return "greater"
    if row["tost_p"] < alpha:
        return "equivalent"
    return "none" if -row["margin"] < row["ci_low"] and row["ci_high"] < row["margin"] else "inconclusive"


def result(row, alpha: float = 0.05) -> str:
    """The result in words (`found`): trails, beats, matches within ±margin, on par, or inconclusive."""
    return RESULTS[found(row, alpha)].format(a=row["a"], b=row["b"], margin=f"{100 * row['margin']:g}")


# Results that say nothing a check could confirm: no robustness beside them.
SILENT = ("inconclusive", "undefined", "uninformative")


def judged(row, robustness: str | None = None) -> str:
    """The verdict and, where the checks were made, whether it is robust: 'confirmed, but fragile: ...'; an
    uninformative contrast's says why, never 'robust'; an inconclusive one is never 'robust' (checks that agree
    with a reading that shows nothing agree with nothing), only fragile where a check overturns it."""
    said = verdict(row)
    if said == "uninformative":
        return f"uninformative: {uninformative(row)}"
    if not robustness or said == "exploratory" or robustness.startswith("inconclusive"):
        return said
    if robustness == "robust":
        return said if found(row) in SILENT else f"{said}, and robust"
    return f"{said}, {'but' if said == 'confirmed' else 'and'} {robustness}"


def sentence(row, robustness: str | None = None, warning: str = "") -> str:
    """'T1 (primary, family H1; predicted: mc_k4 trails outcome): mc_k4 trails outcome at equal tokens:
    -3.9 [-7.2, -0.6] points, p = 0.032 (Holm 0.032), 4 seeds: confirmed, but fragile: ...', and `warning` (the
    contrast's `warning`) in brackets where there is one."""
    claim = PREDICTIONS.get(row["direction"], PREDICTIONS["two-sided"]).format(
        a=row["a"], b=row["b"], margin=f"{100 * row['margin']:g}")
    family = f", family {row['family']}" if row["label"] == "primary" and row["family"] else ""
    holm = f" (Holm {formats.p_value(row['p_holm'])})" if row["label"] == "primary" and not uninformative(row) else ""
    return (f"{row['id']} ({row['label']}{family}; predicted: {claim}): {result(row)} at {basis_words(row)}: "
            f"{formats.interval(row['mean'], row['ci_low'], row['ci_high'])} points, "
            f"p = {p_words(planned_p(row), row)}{holm}, {int(row['n'])} seed{'' if row['n'] == 1 else 's'}: "
            f"{judged(row, robustness)}" + (f" (warning: {warning})" if warning else ""))


def planned(contrasts: pd.DataFrame) -> pd.DataFrame:
    """The preregistered contrasts (those with a plan id), in plan order."""
    return contrasts[contrasts["id"] != ""].sort_values("id", key=lambda ids: ids.map(_plan_order), kind="stable")


def _plan_order(plan_id: str) -> tuple[int, str]:
    return ("T" != plan_id[:1], plan_id)


def labels(robustness: pd.DataFrame | None) -> dict[str, str]:
    """Plan id -> robustness label (analysis/robustness.parquet); empty without the checks."""
    return {} if robustness is None else dict(zip(robustness["id"], robustness["robustness"]))


UNINFORMATIVE_NOTE = ("uninformative: the data cannot tell the arms apart (every reading at 0 or at 1, the same "
                      "difference in every seed, fewer than two seeds, or a reading not defined), so no test was made "
                      "and the verdict is neither confirmed nor robust (docs/robustness.md#uninformative-verdicts).")


def _keys(by_seed: dict[int, list[str]]) -> str:
    return ", ".join(_key_list(by_seed))


def _key_list(by_seed: dict[int, list[str]]) -> list[str]:
    return list(dict.fromkeys(k for seed in sorted(by_seed) for k in by_seed[seed]))


def accepted_warnings(accepted: dict[str, dict[int, list[str]]]) -> list[str]:
    """One warning per arm whose runs were stored with recipe differences accepted ({arm: {seed: keys}},
    mcgrpo.core.study_runs.accepted_differences): its contrasts compare another recipe than the study's, which no
    reader of a table that uses them may miss (docs/trl.md, "Runs already made")."""
    out = []
    for arm, by_seed in sorted(accepted.items()):
        keys = _key_list(by_seed)
        seeds, verb = sorted(by_seed), "differs" if len(keys) == 1 and keys != ["prompts"] else "differ"
        out.append(f"arm {arm}'s runs of {formats.seeds_in_words(seeds)} were "
                   f"stored with recipe differences accepted (accept_differences): {_keys(by_seed)} {verb} from the "
                   f"study's {_differing(by_seed)}, so every contrast with {arm} compares another recipe (run.json: "
                   f"ingested.differences)")
    return out


def ingested_flags(arms: list[str]) -> dict[tuple[str, None], str]:
    """{(arm, None): words} per ingested arm, for the warning beside each verdict with it (flag_cell): its runs'
    tokens and training time are what its TRL folders' logs say, held to each other but not counted by mcgrpo (a log
    edited alike in every checkpoint is not seen: docs/trl.md, "Runs already made"), so the verdict rests on them."""
    return {(arm, None): f"{arm}'s tokens and training time are its TRL logs' own records (ingested, not counted "
                         f"by mcgrpo)" for arm in arms}


# keys that are not the recipe's (GRPOConfig) keys, and what each differs from
OWN_KEYS = {"model": "initial model", "tokenizer": "tokenizer", "prompts": "training prompts"}


def _differing(by_seed: dict[int, list[str]]) -> str:
    """What the keys are of: GRPOConfig keys are the recipe's; `prompts` (mcgrpo.integrations.ingest.differing) is
    the training prompts the log implies; `model` and `tokenizer` (mcgrpo.integrations.saved_model) what the
    checkpoints hold."""
    keys = set(_key_list(by_seed))
    named = ["recipe"] if keys - set(OWN_KEYS) else []
    named += [what for key, what in OWN_KEYS.items() if key in keys]
    return " and ".join(named) if len(named) < 3 else f"{', '.join(named[:-1])} and {named[-1]}"


def accepted_cell(a: str, b: str, accepted: dict[str, dict[int, list[str]]]) -> str:
    """A contrast's mark where arm `a` or `b` has runs stored with recipe differences accepted; '' elsewhere."""
    return "; ".join(f"{arm}: recipe differences accepted ({_keys(accepted[arm])})"
                     for arm in dict.fromkeys((a, b)) if arm in accepted)


STALE = "runs trained with a config other than the current one"


def stale_cell(a: str, b: str, stale: list[str]) -> str:
    """A contrast's mark where arm `a` or `b` has runs (`arm/seedN`, prereg.stale_runs) trained with a config other
    than the current one (analysis_only after an edit): '' elsewhere."""
    mine = [run for run in stale if run.rpartition("/seed")[0] in (a, b)]
    return f"{STALE}: {', '.join(mine)}" if mine else ""


def runs_warning(a: str, b: str, accepted: dict | None, stale: list[str] | None) -> str:
    """What a reader of contrast a-vs-b's verdict must see beside it about the runs it compares: its arms' runs
    stored with recipe differences accepted, or trained under another config than the current one; '' where
    neither (every other verdict reads as it did)."""
    return "; ".join(w for w in (accepted_cell(a, b, accepted or {}), stale_cell(a, b, stale or [])) if w)


def flag_cell(a: str, b: str, eval_set: str, flags: dict[tuple[str, str | None], str]) -> str:
    """A contrast's mark where arm `a` or `b` is flagged ({(arm, eval set, or None for every set): words}: a floor at
    its first evaluation, math-verify checks of its samples that overran: steps.flags); '' elsewhere."""
    return "; ".join(words for (arm, where), words in flags.items() if arm in (a, b) and where in (None, eval_set))


AMENDED = "amended after the preregistration lock"


def amended(row) -> str:
    """Where the contrast's plan entry was changed after the lock and a dated amendment covers it (prereg.compare:
    its label kept, its `note` 'amended <date>: <why>'), the words every line showing its verdict carries: 'amended
    after the preregistration lock (amended 2026-03-02: ...)'; '' elsewhere (and in a table without notes)."""
    note = row.get("note", "")
    return f"{AMENDED} ({note})" if isinstance(note, str) and note.startswith("amended ") else ""


def warning(row, accepted: dict | None = None, stale: list[str] | None = None,
            flags: dict[tuple[str, str | None], str] | None = None) -> str:
    """Everything a reader of a contrast's verdict must see beside it, in every place that shows the verdict: its
    plan entry `amended` after the lock, its arms read far apart in tokens or some seeds read before a filter arm
    chose a prompt (the contrasts.parquet row's `warning`; none in a table from before it), its `runs_warning`, then its arms' `flags` (flag_cell); '' where none."""
    apart = row.get("warning", "")
    return "; ".join(w for w in (amended(row), apart if isinstance(apart, str) else "",
                                 runs_warning(row["a"], row["b"], accepted, stale),
                                 flag_cell(row["a"], row["b"], row["eval_set"], flags or {})) if w)


def lines(study: str, contrasts: pd.DataFrame, prereg_note: str, results: str, clock: str = "wall",
          robustness: pd.DataFrame | None = None, warnings: list[str] = (), *, stale: list[str] | None = None,
          accepted: dict | None = None, flags: dict | None = None) -> list[str]:
    """The summary as markdown lines: any warnings, the contrasts with their robustness (and the clock of any at
    equal time) and, beside each verdict that has one, its `warning` (its arms read far apart in tokens, its runs
    stored with recipe differences `accepted` or `stale`: trained under another config, prereg.stale_runs, its arms'
    `flags`: the study's `warnings` that concern them), then where everything is."""
    rows, robust = planned(contrasts), labels(robustness)
    out = [f"# Study {study}: results", "", prereg_note, ""] + [line for w in warnings for line in (f"Warning: {w}.", "")]
    if rows.empty:
        out += ["The plan names no contrast: see tables/contrasts.md for every exploratory contrast.", ""]
    else:
        first = rows.iloc[0]
        out += [f"Preregistered contrasts ({first['metric']} on {first['eval_set']}, A minus base, "
                f"mean over paired seeds [95% paired-t interval]; 1 point = 0.01 accuracy):", ""]
        out += [f"- {sentence(r, robust.get(r['id']), warning(r, accepted, stale, flags))}"
                for _, r in rows.iterrows()] + [""]
        if any(not label.startswith(("uninformative", "inconclusive")) for label in robust.values()):
            out += ["robust: the verdict holds on the crossed seed-by-problem interval, the strict verifier, the "
                    "other clock (equal time), no drift of either arm, and each seed's two runs made under one "
                    "stack (and, on equal time, one machine); fragile: the checks it fails (tables/robustness.md).",
                    ""]
        if any(uninformative(r) for _, r in rows.iterrows()):
            out += [UNINFORMATIVE_NOTE, ""]
        if rows["basis"].isin(["time", "time_c"]).any():
            out += [f"Equal time is read on the {formats.CLOCK_WORDS[clock]} of the training stages (analysis.clock: "
                    f"{clock}).", ""]
    out += [f"- tables: {results}/tables/ (headline.md, then contrasts.md for every contrast)",
            f"- figures: {results}/figures/ (PNG, and PDF for papers)",
            f"- report: snakemake --report {results}/report.html (with the study's --configfile, if any; the "
            f"venv's snakemake: .venv/bin/snakemake, or `make report` for the default study), then open it in a "
            f"browser",
            f"- logs: {results}/logs/, and each run's train.log in its folder ({results}/runs/<arm>/seed<N>/)"]
    return out


def markdown(lines_: list[str]) -> str:
    return "\n".join(lines_) + "\n"


def rst(lines_: list[str], description: str) -> str:
    """The summary in reStructuredText (the report's first page), followed by the study's description."""
    title, *body = lines_
    heading = title.lstrip("# ")
    text = "\n".join(_rst_escape(line) for line in body)
    return f"{heading}\n{'=' * len(heading)}\n{text}\n\n{description}"


def _rst_escape(line: str) -> str:
    """Characters reStructuredText reads as markup (and braces, which Snakemake's Jinja would)."""
    for char in ("\\", "*", "`", "_", "|"):
        line = line.replace(char, "\\" + char)
    return line.replace("{", "(").replace("}", ")")
