"""Result tables as CSV (for machines), GitHub markdown and HTML (for reading), written atomically.

The HTML copy is what `snakemake --report` shows; a title and a note make it readable alone.
"""

from __future__ import annotations

import html
import io
from pathlib import Path

import numpy as np
import pandas as pd

from mcgrpo.analysis import formats, robustness, summary
from mcgrpo.analysis.drift import drift_counts
from mcgrpo.core.errors import DataError, IntegrityError
from mcgrpo.core.store import write_text


# How the readable copies (markdown, HTML) show a column; the CSV keeps the raw values.
P_COLUMNS = {"p", "p_holm", "tost_p", "ni_p"}
POINT_COLUMNS = {"mean", "ci_low", "ci_high", "ni_low", "crossed_low", "crossed_high", "margin"}
# the robustness checks' readings (analysis/robustness.parquet)
P_COLUMNS |= {"strict_p", "clock_p"}
POINT_COLUMNS |= {"strict_mean", "strict_low", "strict_high", "clock_mean", "clock_low", "clock_high"}
PERCENT_COLUMNS = {"a", "base", "mixed_low", "mixed_high"}
# The prediction table's training differences (diff_<basis>, its bounds) and observed minus extrapolated accuracy
# (and its bounds, ome_low/ome_high) are accuracy differences too; acc_* columns are accuracies.
POINT_PREFIXES = ("diff_", "ome_", "observed_minus_extrapolated")
READING_NOTE = "Readable copies: differences in points (1 point = 0.01 accuracy), accuracies and shares in %."


def _seeds(n: float) -> str:
    return "never" if not np.isfinite(n) else f"{int(n)}"


def _reader(column: str):
    if column.startswith("seeds_"):
        return _seeds
    if column == "sd":
        return lambda v: formats.points(v).lstrip("+")
    if column in P_COLUMNS:
        return formats.p_value
    if column in POINT_COLUMNS or column.startswith(POINT_PREFIXES):
        return formats.points
    if column in PERCENT_COLUMNS or column.startswith(("share_", "acc_")):
        return formats.percent
    if column.startswith("tokens") or column == "B":
        return formats.tokens
    return None


def _cell(value, column: str = "") -> str:
    """One readable cell: by its column's kind (p, points, %, tokens), other floats to 3 significant digits."""
    if isinstance(value, (float, np.floating, int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        reader = _reader(column)
        if reader is not None:
            return reader(value)
    if isinstance(value, (float, np.floating)):
        return "n/a" if np.isnan(value) else f"{value:.3g}"
    return "" if value is pd.NA else str(value)


def readable(df: pd.DataFrame) -> pd.DataFrame:
    """`df` as the strings a reader sees (plain Python strings: walking Arrow-backed columns value by value, and
    storing the cells as Arrow strings, cost more than the formatting)."""
    return pd.DataFrame({c: [_cell(v, c) for v in df[c].tolist()] for c in df.columns}, columns=df.columns,
                        dtype=object)


def _numeric(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column) and not pd.api.types.is_bool_dtype(column)


def _rows(cells: pd.DataFrame) -> list[list[str]]:
    """The readable cells row by row (as lists: itertuples builds a Series per column first)."""
    return cells.to_numpy(dtype=object).tolist()


def to_markdown(df: pd.DataFrame, cells: pd.DataFrame | None = None) -> str:
    """A GitHub markdown table of `df`, readable numbers (`cells`, its readable copy, where already made), numeric
    columns right-aligned."""
    align = ["---:" if _numeric(df[c]) else "---" for c in df.columns]
    cells = readable(df) if cells is None else cells
    lines = [list(map(str, df.columns)), align, *_rows(cells)]
    return "".join(f"| {' | '.join(cell.replace('|', chr(92) + '|') for cell in line)} |\n" for line in lines)


def _html_cell(text: str, tag: str) -> str:
    """One cell as pandas' DataFrame.to_html(escape=True) writes it (the same bytes, without its formatter's
    cost per cell): &, < and > escaped, tab and newlines as escapes, stripped, double spaces kept."""
    text = str(text).translate(_HTML_ESCAPES).strip().replace("  ", "&nbsp;&nbsp;")
    return f"      <{tag}>{text}</{tag}>\n"


_HTML_ESCAPES = str.maketrans({"\t": r"\t", "\n": r"\n", "\r": r"\r", "&": "&amp;", "<": "&lt;", ">": "&gt;"})


def _html_table(cells: pd.DataFrame) -> str:
    """`cells` (strings) as pandas' to_html(index=False, border=0, classes="table", escape=True); pandas writes a
    table whose columns carry a name or levels (a pivot's) itself."""
    if cells.columns.name is not None or cells.columns.nlevels > 1:
        return cells.to_html(index=False, border=0, classes="table", escape=True)
    head = "".join(_html_cell(c, "th") for c in cells.columns)
    rows = "".join(f"    <tr>\n{''.join(_html_cell(v, 'td') for v in row)}    </tr>\n"
                   for row in _rows(cells))
    return (f'<table class="dataframe table">\n  <thead>\n    <tr style="text-align: right;">\n{head}'
            f"    </tr>\n  </thead>\n  <tbody>\n{rows}  </tbody>\n</table>")


def to_html(df: pd.DataFrame, title: str = "", note: str = "", cells: pd.DataFrame | None = None) -> str:
    """A standalone HTML page holding `df` (readable numbers: `cells` where already made), with its title and note
    above it."""
    body = (_html_table(readable(df) if cells is None else cells) if len(df)
            else "<p><em>No rows in this study (the note says when there are).</em></p>")
    head = (f"<h3>{html.escape(title)}</h3>\n" if title else "") + (
        "".join(f"<p>{html.escape(line)}</p>\n" for line in note.splitlines() if line.strip()))
    style = ("<style>body{font-family:sans-serif;font-size:13px} table{border-collapse:collapse}"
             " th,td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}</style>")
    return f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'>{style}</head><body>\n{head}{body}\n</body></html>\n"


def readable_copies(df: pd.DataFrame, title: str = "", note: str = "") -> dict[str, str]:
    """{"md": ..., "html": ...}: the markdown and HTML copies of `df` write_table writes, its title and note above
    (an empty table says so in words)."""
    if any(_reader(c) in (formats.points, formats.percent) for c in df.columns):
        note = f"{note}\n{READING_NOTE}" if note else READING_NOTE
    preface = (f"### {title}\n\n" if title else "") + "".join(f"{line}\n\n" for line in note.splitlines()
                                                            if line.strip())
    cells = readable(df)  # once, for both readable copies
    body = to_markdown(df, cells) if len(df) else "*No rows in this study (the note says when there are).*\n"
    return {"md": preface + body, "html": to_html(df, title, note, cells)}


def write_table(df: pd.DataFrame, stem: Path, columns: list[str] | None = None, title: str = "",
                note: str = "") -> tuple[Path, Path, Path]:
    """Write `<stem>.csv` (raw values), `<stem>.md` and `<stem>.html` (readable_copies) holding `columns` of `df`.

    The title and note head the markdown and HTML copies, not the CSV; an empty table says so in words.
    """
    df = df if columns is None else df[columns]
    stem = Path(stem)
    copies = readable_copies(df, title, note)
    return (write_text(df.to_csv(index=False), stem.parent / f"{stem.name}.csv"),
            write_text(copies["md"], stem.parent / f"{stem.name}.md"),
            write_text(copies["html"], stem.parent / f"{stem.name}.html"))


def rerun(path: Path, rule: str = "tables") -> str:
    """What makes a shown file of analysis rule `rule` again from its analysis: that rule, forced."""
    return f"snakemake --configfile STUDY --forcerun {rule}; in a programme, --forcerun {path}"


def held_csv(path: Path, expected: pd.DataFrame, source: str = "the study's analysis", rule: str = "tables") -> None:
    """Refuse `path`, a CSV write_table wrote, where it is not `expected` (the table `source` gives now), naming its
    first differing cell: a table edited by hand, or an older copy put back, would show a verdict or a number the
    analysis does not give. `rule`: the analysis rule that writes it."""
    redo = f"allowed: the table its analysis gives now ({rerun(path, rule)})"
    if not path.is_file():
        raise DataError(f"{path}: not found; {redo}")
    found, want = _cells(path), _cells(io.StringIO(expected.to_csv(index=False)))
    if found.equals(want):
        return
    if list(found.columns) != list(want.columns) or len(found) != len(want):
        raise IntegrityError(f"{path}: holds {len(found)} rows of columns {', '.join(found.columns)}, but {source} "
                             f"gives {len(want)} rows of {', '.join(want.columns)}; {redo}")
    row, column = next((i, c) for i in range(len(found)) for c in found.columns if found.at[i, c] != want.at[i, c])
    named = f" ({want.at[row, 'id']})" if "id" in want.columns and want.at[row, "id"] else ""
    raise IntegrityError(f"{path}: line {row + 2}{named}, column {column}: {found.at[row, column]!r}, but {source} "
                         f"gives {want.at[row, column]!r}: edited by hand, or left from an earlier run of the study; "
                         f"{redo}")


def held_copies(stem: Path, expected: pd.DataFrame, title: str = "", note: str = "",
                source: str = "the study's analysis", rule: str = "tables") -> None:
    """Refuse `<stem>.md` or `<stem>.html`, the readable copies write_table wrote of the table `expected` (which
    `source` gives now, with its `title` and `note`), where one is not that copy, naming its first differing line:
    the report embeds the HTML copy and a reader opens the markdown one, so an older copy put back, or one edited by
    hand, would show a verdict, a number or a warning the analysis does not give beside a CSV that does. A copy not
    there is not held (as held_csv's callers leave a CSV not there). `rule`: the analysis rule that writes it."""
    stem = Path(stem)
    copies = None
    for ext in ("md", "html"):
        path = stem.parent / f"{stem.name}.{ext}"
        if not path.is_file():
            continue
        copies = copies or readable_copies(expected, title, note)  # rendered once, for both, only where held
        with open(path, newline="", errors="replace") as f:  # as write_text wrote it: no newline translated
            found = f.read()
        if found != copies[ext]:
            raise IntegrityError(_first_difference(path, found, copies[ext], source, rule))


def _first_difference(path: Path, found: str, want: str, source: str, rule: str = "tables") -> str:
    """The refusal of a readable copy `path` holding `found` where `source` gives `want`: its first differing line,
    both versions (cut to 300 characters), and what is allowed."""
    have, need = found.split("\n"), want.split("\n")
    line = next((i for i, (a, b) in enumerate(zip(have, need)) if a != b), min(len(have), len(need)))

    def shown(lines: list[str]) -> str:
        text = lines[line] if line < len(lines) else "(no such line: the file ends before it)"
        return repr(text if len(text) <= 300 else text[:300] + "...")
    return (f"{path}: line {line + 1}: {shown(have)}, but {source} gives {shown(need)}: edited by hand, or left from "
            f"an earlier run of the study; allowed: the copy its analysis writes now beside the CSV "
            f"({rerun(path, rule)})")


def _cells(csv) -> pd.DataFrame:
    """A CSV as write_table writes it, read back with every cell a string (a table of no columns: empty)."""
    try:
        return pd.read_csv(csv, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


NOT_DEFINED = formats.NOT_DEFINED
interval = formats.interval  # 'mean [low, high]' in points; not defined where a reading needs a curve past its end


BASIS_NOTE = ("Bases: tokens = each run at its first evaluation at or after B; updates = the base interpolated "
              "to A's update count at B, or, where A made more updates than the base by B, A interpolated to the "
              "base's count (column read says which, per seed); time = both at T*, the shorter of the two runs' "
              "training times at B; time_c = both at T_c, the base's training time at B; iterations = as updates, "
              "in iterations (an equal-iteration study: both at B iterations). not defined: the "
              "reading would need a curve beyond its end.")
CONTRAST_COLUMNS = ["id", "label", "family", "direction", "contrast", "basis", "metric", "eval_set", "n", "mean",
                    "ci_low", "ci_high", "p", "p_holm", "tost_p", "noninferior", "crossed_low", "crossed_high",
                    "higher_in", "result", "verdict", "robustness", "uninformative", "read", "tokens_a", "tokens_b",
                    "warning", "note"]
TOKENS_NOTE = ("tokens_a, tokens_b: the generated tokens each arm had spent at the point read, mean over seeds; "
               "warning: where, at equal tokens, two arms' points differ by more than a tenth of B, where an arm's "
               "runs were stored with recipe differences accepted (the keys that differ) or trained with a config "
               "other than the current one, where an arm scored 0 at its first evaluation in every seed, where "
               "math-verify checks of an arm's samples overran and were counted wrong, and where an arm is ingested "
               "(its tokens and training time its TRL logs' own records): the summary's words beside the same "
               "verdict.")


def _read_points(contrasts: pd.DataFrame) -> dict[str, pd.Series]:
    """tokens_a, tokens_b and warning of `contrasts` (NaN and empty in a contrasts.parquet from before them)."""
    return {c: contrasts[c] if c in contrasts else pd.Series([np.nan if c != "warning" else ""] * len(contrasts),
                                                             index=contrasts.index)
            for c in ("tokens_a", "tokens_b", "warning")}


def contrast_warnings(rows: pd.DataFrame, accepted: dict | None, stale: list[str] | None = None,
                      flags: dict | None = None) -> list[str]:
    """Each contrast's warning, as the summary words it beside its verdict (summary.warning: its amendment after the
    lock, from its `note`, among them)."""
    notes = rows["note"] if "note" in rows else ""
    return [summary.warning(r, accepted, stale, flags) for r in rows.assign(**_read_points(rows), note=notes)[
        ["a", "b", "eval_set", "warning", "note"]].to_dict("records")]


VERDICT_COLUMNS = ["result", "verdict", "robustness", "warning"]
VERDICT_NOTE = ("result, verdict, robustness, warning: as the headline and the summary give them beside the same "
                "verdict: the result in words (trails, beats, matches within the margin, on par, inconclusive); "
                "confirmed, not confirmed, uninformative or exploratory; robust, or the checks the verdict fails "
                "(tables/robustness.md), or why the data cannot tell the arms apart (empty: no checks, an exploratory "
                "contrast); what a reader of the verdict must see beside it.")


def verdict_cells(rows: pd.DataFrame, checks: pd.DataFrame | None = None, accepted: dict | None = None,
                  stale: list[str] | None = None, flags: dict | None = None) -> dict[str, list[str]]:
    """The cells every table that shows a contrast's verdict shows beside it, worded once (VERDICT_COLUMNS): `result`
    (summary.result: what the numbers show), `verdict` (summary.verdict), `robustness` ('uninformative: <why>' where
    the data cannot tell the arms apart, else its label in `checks`, analysis/robustness.parquet: 'robust',
    'fragile: ...', 'inconclusive: ...'; '' for a contrast with no checks, an exploratory one) and `warning`
    (contrast_warnings: what the summary says beside the same verdict), for each of `rows` (contrasts.parquet rows)."""
    labels, records = summary.labels(checks), rows.to_dict("records")
    return {"result": [summary.result(r) for r in records], "verdict": [summary.verdict(r) for r in records],
            "robustness": [f"uninformative: {summary.uninformative(r)}" if summary.uninformative(r)
                           else labels.get(r["id"], "") if r["id"] else "" for r in records],
            "warning": contrast_warnings(rows, accepted, stale, flags)}


def crossed_cell(row) -> str:
    """A contrast's crossed seed-by-problem interval as 'mean [low, high]'; where the mean is defined but the interval
    is not, 'n/a' and why, never the mean alone (which would read as a point estimate whose interval went missing):
    one seed (the bootstrap resamples seeds: it needs two), or a metric without per-problem scores (read from
    evals.parquet alone: the bootstrap resamples problems); not defined where the mean is not."""
    if formats.missing(row["mean"]) or not (formats.missing(row["crossed_low"]) or formats.missing(row["crossed_high"])):
        return interval(row["mean"], row["crossed_low"], row["crossed_high"])
    if row["n"] < 2:
        return f"n/a ({int(row['n'])} seed: the seed-by-problem bootstrap needs two)"
    return (f"n/a (no per-problem scores of {row['metric']}: it is read from evals.parquet, one number per "
            f"evaluation, so problems cannot be resampled)")


def prereg_note(status: dict) -> str:
    """One line on the plan against its lock, and a warning line for stale runs."""
    state = status["state"]
    line = {"missing": "No preregistration lock: every contrast is exploratory.",
            "late": "The plan was locked after training started: every contrast is exploratory.",
            "matches": f"The plan matches its lock of {status['locked_at']}.",
            "amended": f"The plan changed since its lock of {status['locked_at']}, with dated amendments.",
            "changed": f"The plan changed since its lock of {status['locked_at']} without a dated amendment: "
                       f"{', '.join(status['demoted']) or 'no contrast'} reported as exploratory."}[state]
    changes = f" Changes: {'; '.join(status['changes'])}." if status["changes"] and state != "missing" else ""
    if status.get("uncovered") and state not in ("missing", "late"):
        changes += f" Note: {status['uncovered']}."
    if status.get("amended") and state not in ("missing", "late"):
        changes += (f" Amended after the lock: {', '.join(status['amended'])} (each verdict says so beside it, in "
                    f"its warning).")
    stale = (f"\nWarning: {summary.STALE}: {', '.join(status['stale_runs'])} (each verdict with their arms says "
             f"so beside it, and so does its warning in the tables)." if status.get("stale_runs") else "")
    return line + changes + stale


def _contrasts(contrasts: pd.DataFrame, accepted: dict | None = None, stale: list[str] | None = None,
               flags: dict | None = None, checks: pd.DataFrame | None = None) -> pd.DataFrame:
    # One vocabulary in every table: a Holm family belongs to a planned primary contrast; the analysis marks
    # the others' family "secondary", which is a label, so they show none (as in the prereg table).
    return contrasts.assign(
        higher_in=[NOT_DEFINED if pd.isna(k) else f"{int(k)} of {n}" for k, n in zip(contrasts["seeds_higher"], contrasts["n"])],
        family=contrasts["family"].replace("secondary", ""),
        uninformative=contrasts.get("uninformative", ""),
        **{**_read_points(contrasts), **verdict_cells(contrasts, checks, accepted, stale, flags)})[CONTRAST_COLUMNS]


def _bases(contrasts: pd.DataFrame) -> pd.DataFrame:
    """One row per contrast, metric and eval set; one 'mean [95% CI]' column per basis."""
    cells = contrasts.assign(cell=[interval(r["mean"], r["ci_low"], r["ci_high"]) + summary.read_words(r)
                                   for r in contrasts.to_dict("records")])
    wide = cells.pivot_table(index=["contrast", "metric", "eval_set"], columns="basis", values="cell",
                             aggfunc="first", sort=False)
    order = [b for b in ("tokens", "iterations", "updates", "time", "time_c") if b in wide.columns]
    n = cells.groupby(["contrast", "metric", "eval_set"], sort=False)["n"].max()
    return wide[order].fillna("").assign(n=n).reset_index()[["contrast", "metric", "eval_set", "n", *order]]


def _pass_at_k(contrasts: pd.DataFrame, paired: pd.DataFrame) -> pd.DataFrame:
    """At equal tokens: pass@1 (acc_default) and each pass@k_default, both arms' means and the difference."""
    keep = contrasts[(contrasts["basis"] == "tokens")
                     & contrasts["metric"].str.fullmatch(r"acc_default|pass@\d+_default")]
    means = paired.groupby(["contrast", "basis", "metric", "eval_set"])[["value_a", "value_b"]].mean()
    rows = [{"contrast": r["contrast"], "eval_set": r["eval_set"],
             "k": 1 if r["metric"] == "acc_default" else int(r["metric"][5:].split("_")[0]), "n": r["n"],
             "a": means.loc[(r["contrast"], "tokens", r["metric"], r["eval_set"]), "value_a"],
             "base": means.loc[(r["contrast"], "tokens", r["metric"], r["eval_set"]), "value_b"],
             "difference": interval(r["mean"], r["ci_low"], r["ci_high"]), "p": r["p"],
             "crossed": crossed_cell(r)} for _, r in keep.iterrows()]
    return pd.DataFrame(rows, columns=["contrast", "eval_set", "k", "n", "a", "base", "difference", "p", "crossed"]
                        ).sort_values(["contrast", "eval_set", "k"], kind="stable")


def _share(value: float, low: float, high: float, defined: bool = True) -> str:
    if not defined:
        return f"{NOT_DEFINED} (A starts at or above the target)"

    def one(v):
        return "not reached" if not np.isfinite(v) else f"{v:.2f}"
    return f"{one(value)} [{one(low)}, {one(high)}]"


def _budget_share(shares: pd.DataFrame) -> pd.DataFrame:
    if shares.empty:
        return pd.DataFrame(columns=["contrast", "metric", "eval_set", "axis", "n", "target", "share"])
    defined = shares["defined"] if "defined" in shares else [True] * len(shares)
    return shares.assign(share=[_share(*v) for v in zip(shares["share"], shares["share_low"], shares["share_high"],
                                                        defined)],
                         curve_end=shares["curve_end"].round(3))[
        ["contrast", "metric", "eval_set", "axis", "n", "target", "share", "resamples_reached", "curve_end"]]


PREREG_COLUMNS = ["id", "planned", "reported", "family", "direction", "contrast", "basis", "metric", "difference",
                  "p", "p_holm", *VERDICT_COLUMNS, "note"]


def _prereg(contrasts: pd.DataFrame, status: dict, checks: pd.DataFrame | None = None, accepted: dict | None = None,
            stale: list[str] | None = None, flags: dict | None = None) -> pd.DataFrame:
    """Every planned contrast: its planned and reported label, its difference (with the planned test's p, as the
    headline and summary give it beside the verdict), its verdict with the words the headline gives beside it
    (verdict_cells), and why a label changed."""
    result = contrasts[contrasts["id"] != ""]
    judged = pd.DataFrame(verdict_cells(result, checks, accepted, stale, flags), index=result["id"].tolist())
    result = result.set_index("id")
    rows = []
    for i, e in status["labels"].items():
        r = result.loc[i] if i in result.index else None
        rows.append({"id": i, "planned": e["label"], "reported": e["reported"], "family": e["family"] if e["label"] == "primary" else "",
                     "direction": e["direction"], "contrast": f"{e['a']}-vs-{e['b']}", "basis": e["basis"],
                     "metric": e["metric"], "difference": "" if r is None else interval(r["mean"], r["ci_low"], r["ci_high"]),
                     "p": np.nan if r is None else summary.planned_p(r), "p_holm": np.nan if r is None else r["p_holm"],
                     **{c: "" if r is None else judged.at[i, c] for c in VERDICT_COLUMNS},
                     "note": e["note"]})
    return pd.DataFrame(rows, columns=PREREG_COLUMNS)


HEADLINE_COLUMNS = ["id", "label", "contrast", "basis", "n", "tokens_a", "tokens_b", "difference", "p", "p_holm",
                    "result", "verdict", "crossed", "strict", "drift", "other_clock", "alike", "robustness", "warning"]


def headline(contrasts: pd.DataFrame, checks: pd.DataFrame | None = None, accepted: dict | None = None,
              stale: list[str] | None = None, flags: dict | None = None) -> pd.DataFrame:
    """The preregistered contrasts, one line each, with their robustness checks and warning (summary.warning): what a
    reader looks at first."""
    rows = summary.planned(contrasts)
    found = (checks if checks is not None else pd.DataFrame(columns=["id", "robustness"])).set_index("id").reindex(
        rows["id"])

    def cells(make):  # a check's cell, empty where the contrast has no checks
        return [make(r) if pd.notna(r["robustness"]) else "" for _, r in found.iterrows()]
    # as every table that shows a verdict words it; an uninformative contrast says why, checked or not
    judged = verdict_cells(rows, checks, accepted, stale, flags)
    return pd.DataFrame({
        "id": rows["id"], "label": rows["label"], "contrast": [f"{a} minus {b}" for a, b in zip(rows["a"], rows["b"])],
        "basis": [summary.basis_words(r) for r in rows.to_dict("records")], "n": rows["n"],
        **{c: v.to_numpy() for c, v in _read_points(rows).items() if c != "warning"},
        "difference": [interval(*v) for v in zip(rows["mean"], rows["ci_low"], rows["ci_high"])],
        "p": [summary.planned_p(r) for _, r in rows.iterrows()], "p_holm": rows["p_holm"],
        "result": judged["result"],  # the summary's words: 'inconclusive (...)'
        "verdict": judged["verdict"],
        "crossed": [crossed_cell(r) for r in rows.to_dict("records")],
        "strict": cells(lambda r: interval(r["strict_mean"], r["strict_low"], r["strict_high"])
                        if r["strict_metric"] else "(the metric is strict)"),
        "drift": cells(robustness.drift_cell),
        "other_clock": cells(lambda r: "" if not r["other_clock"] else "not recorded" if not r["clock_recorded"]
                             else interval(r["clock_mean"], r["clock_low"], r["clock_high"])),
        "alike": cells(robustness.alike_cell),
        "robustness": judged["robustness"], "warning": judged["warning"]},
        columns=HEADLINE_COLUMNS)


ROBUSTNESS_COLUMNS = ["id", "contrast", "basis", "metric", "eval_set", "result", "verdict", "crossed_low",
                      "crossed_high", "crossed_holds", "strict_metric", "strict_mean", "strict_low", "strict_high",
                      "strict_p", "strict_holds", "drift", "drift_holds", "other_clock", "clock_mean", "clock_low",
                      "clock_high", "clock_p", "clock_holds", "alike_compared", "alike_holds", "alike_unlike",
                      "robustness", "warning"]


def _robustness(checks: pd.DataFrame | None, contrasts: pd.DataFrame, accepted: dict | None = None,
                stale: list[str] | None = None, flags: dict | None = None) -> pd.DataFrame:
    """Every check of every planned contrast, with whether the verdict holds on it, and the verdict with the words the
    headline gives beside it (verdict_cells of its `contrasts` row; empty without the checks)."""
    if checks is None or checks.empty:
        return pd.DataFrame(columns=ROBUSTNESS_COLUMNS)
    rows = summary.planned(contrasts).set_index("id", drop=False).loc[checks["id"]]
    judged = verdict_cells(rows, checks, accepted, stale, flags)
    return checks.assign(drift=[robustness.drift_cell(r) for _, r in checks.iterrows()],
                         **{c: judged[c] for c in ("result", "verdict", "warning")})[ROBUSTNESS_COLUMNS]


ROBUSTNESS_NOTE = ("A verdict holds on a check when the check, judged by the contrast's own rule, reaches the same "
                   "verdict: less/greater: the 95% interval excludes 0 on the predicted side; two-sided: it excludes "
                   "0 (on the side of the mean where the contrast was confirmed); equivalent: TOST p < alpha (crossed: the interval within ±margin); "
                   "noninferior: the non-inferiority test (crossed: the lower end above -margin). crossed: 95% "
                   "seed-by-problem bootstrap; strict: the contrast on the strict verifier; drift: per arm, "
                   "evaluations with acc_default - acc_strict > {gap:g} (A first; holds when none drifted); "
                   "other_clock: equal time read on the {other} (time bases only); alike: each seed's two runs "
                   "made under one stack (mcgrpo's code, torch, transformers, trl, vllm, math_verify) and, on the time bases, "
                   "timed on one machine (alike_compared: the pairs whose run.json records them). robust: the "
                   "verdict holds on "
                   "every check that applies; an empty holds cell: the check does not apply. "
                   + summary.UNINFORMATIVE_NOTE + "\n" + VERDICT_NOTE)


def study_tables(contrasts: pd.DataFrame, paired: pd.DataFrame, status: dict, drift: pd.DataFrame,
                 stages: pd.DataFrame, groups: pd.DataFrame, shares: pd.DataFrame,
                 extrapolation: pd.DataFrame, gap: float, checks: pd.DataFrame | None = None,
                 clock: str = "wall", accepted: dict | None = None, flags: dict | None = None
                 ) -> dict[str, tuple[pd.DataFrame, str, str]]:
    """name -> (table, title, note) of every table of the study; `checks`: analysis/robustness.parquet; `accepted`:
    {arm: {seed: keys}} of runs stored with recipe differences accepted, which every table's note names first and
    the headline and contrasts tables mark in each contrast that uses them, as they mark the runs trained with a
    config other than the current one (status's stale_runs, which the plan note names) and its arms' `flags`
    (steps.flags)."""
    plan_note = prereg_note(status)
    other = formats.CLOCK_WORDS[robustness.OTHER_CLOCK[clock]]
    tables = _study_tables(contrasts, paired, status, drift, stages, groups, shares, extrapolation, gap, checks,
                           accepted, flags, plan_note, other)
    return {name: (df, title, accepted_note(accepted, note)) for name, (df, title, note) in tables.items()}


def accepted_note(accepted: dict | None, note: str = "") -> str:
    """`note` headed by a warning line per arm whose runs were stored with recipe differences accepted."""
    lines = [f"Warning: {w}." for w in summary.accepted_warnings(accepted or {})]
    return "\n".join([*lines, note] if note else lines)


def _study_tables(contrasts, paired, status, drift, stages, groups, shares, extrapolation, gap, checks, accepted,
                  flags, plan_note, other) -> dict[str, tuple[pd.DataFrame, str, str]]:
    return {
        "headline": (headline(contrasts, checks, accepted, status.get("stale_runs"), flags),
                     "Headline: the preregistered contrasts",
                     f"{plan_note}\ndifference: A minus base, mean over paired seeds [95% paired-t CI] in points; "
                     f"p: the planned test; p_holm: Holm within the primary family. Every contrast: the contrasts "
                     f"table.\ncrossed: mean [95% seed-by-problem bootstrap]; strict: the same contrast on the strict "
                     f"verifier; drift: evaluations where acc_default - acc_strict > {gap:g}, per arm (A first); "
                     f"other_clock: equal time on the {other}; alike: each seed's two runs made under one stack "
                     f"(and, on the time bases, timed on one machine); robustness: robust, or the checks the verdict "
                     f"fails (tables/robustness.md).\n{TOKENS_NOTE}\n{summary.UNINFORMATIVE_NOTE}"),
        "robustness": (_robustness(checks, contrasts, accepted, status.get("stale_runs"), flags),
                       "Robustness of each preregistered verdict",
                       ROBUSTNESS_NOTE.format(gap=gap, other=other)),
        "contrasts": (_contrasts(contrasts, accepted, status.get("stale_runs"), flags, checks),
                      "Every contrast (A minus base, paired by seed)",
                      f"{plan_note}\nmean, 95% paired-t CI (ci_low, ci_high), two-sided p; p_holm: Holm within "
                      f"the primary family; tost_p: equivalence within ±margin; noninferior: lower 90% bound > "
                      f"-margin; crossed: 95% seed-by-problem bootstrap.\n{VERDICT_NOTE}\n{TOKENS_NOTE}\n"
                      f"{BASIS_NOTE}"),
        "equal_bases": (_bases(contrasts), "Equal tokens against equal time (and equal updates)",
                        f"mean difference [95% paired-t CI], A minus base.\n{BASIS_NOTE}"),
        "stage_seconds": (stages, "Training seconds per stage before B (mean over seeds)",
                          "share_*: the stage's share of the total; evaluation time is excluded."),
        "drift": (drift_counts(drift), "Verifier drift: evaluations where default exceeds strict accuracy",
                  f"drifted: evaluations with acc_default - acc_strict > {gap:g}; runs_drifted: runs with any."),
        "pass_at_k": (_pass_at_k(contrasts, paired), "pass@k at equal tokens (unbiased estimator)",
                      "a, base: mean over seeds; difference: mean [95% paired-t CI]; crossed: mean "
                      "[95% seed-by-problem bootstrap]. k = 1 is acc_default."),
        "budget_share": (_budget_share(shares), "Share of the budget at which A's mean curve reaches the base at B",
                         "axis tokens: share of B; axis time: share of the base's training time at B. "
                         "[95% interval over seed resamples, pairs kept together; not reached: the "
                         "curve never gets there]. not defined: A's mean curve already reaches the target at "
                         "its first evaluation (tokens 0), so no share of the budget is needed. curve_end: the "
                         "mean position of A's last evaluation that every seed reached, on the same scale "
                         "(share of B, or of the base's time at B): shares beyond it cannot be observed."),
        "groups": (groups, "Group composition before B (share of groups trained on)",
                   "mixed_low, mixed_high: 95% t interval over seeds of the mixed share. cand_pred_mean, "
                   "chosen_pred_mean: the critic's mean predicted success of the candidates and of the prompts "
                   "chosen (selection arms; a filter can help where candidates average below 1/2). "
                   "prompts_distinct: distinct prompts trained by B."),
        "extrapolation": (extrapolation, "Heuristic extrapolation from per-token efficiency (exploratory)",
                          "An arm of efficiency e is supposed to reach after t tokens what the base reaches after "
                          "e*t; mean: observed minus extrapolated, over evaluations up to B, then seeds [95% CI]. "
                          "Empty without analysis.efficiency."),
        "prereg": (_prereg(contrasts, status, checks, accepted, status.get("stale_runs"), flags),
                   "Preregistered contrasts: planned and reported labels", f"{plan_note}\n{VERDICT_NOTE}"),
    }
