"""A programme: several studies in one Snakemake invocation, each stored run of all of them trained once.

    snakemake --configfile config/programmes/tiny-pair.yaml
    snakemake --config programme=config/programmes/tiny-pair.yaml

A programme file holds one block:

    programme:
      name: tiny-pair                 # the programme summary's folder: <results_dir>/_programmes/<name>
      studies:                        # study files, relative to this file (or absolute)
        - ../studies/a.yaml
        - ../studies/b.yaml
      overrides:                      # optional: merged into every study before it is validated
        results_dir: /scratch/results

Every study is read as `snakemake --configfile STUDY.yaml` reads it (strictly, no template, validated, its first
base), with the overrides and the command line's other `--config` entries merged in. The studies share one run
store (one results_dir): the DAG's store jobs (data, warm start, calibration, train) are keyed by what they compute,
so a run named by several studies is one job; the study jobs (lock, links, gradient tests, analysis) are keyed by
the study. What is wrong with the programme (a missing file, a study named twice, two results folders) is one
message naming the file or key, before any job.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mcgrpo.core import config as study_config
from mcgrpo.core import templating
from mcgrpo.core.errors import ConfigError, McgrpoError

KEY = "programme"
KEYS = ("name", "studies", "overrides")
STUDIES_KEY = "_programme_studies"  # where the Snakefile keeps each study's config in a programme's config
FOLDER = "_programmes"  # beside _shared/: no study can be named so (study names start with a letter or digit)
OWNER = "programme.json"  # in a programme's folder: which programme wrote its summary (`owner`)


@dataclass
class Programme:
    name: str
    source: str  # the programme file, or "--config" when given inline
    studies: dict[str, dict] = field(default_factory=dict)  # study name -> validated config
    files: dict[str, Path] = field(default_factory=dict)  # study name -> its file

    @property
    def results_dir(self) -> str:
        return next(iter(self.studies.values()))["results_dir"]

    @property
    def folder(self) -> Path:
        """Where the programme summary goes."""
        return Path(self.results_dir) / FOLDER / self.name


def given(cfg: dict) -> bool:
    """Whether Snakemake's config names a programme (a programme file's block, or --config programme=FILE)."""
    return KEY in cfg


def _named(cfg: dict, configfiles: list, entries: list[str] | str | None) -> Programme:
    """The programme Snakemake's `cfg` names: `programme: FILE` (--config) or the programme file's block
    (--configfile), with the command line's other --config entries as overrides of every study."""
    command = study_config.command_line(entries if isinstance(entries, list) else None)
    command.pop(KEY, None)
    block = cfg[KEY]
    if isinstance(block, str):  # --config programme=FILE
        return load(block, command)
    source = next((str(p) for p in configfiles if KEY in (study_config.read(p) or {})), "--config")
    extra = sorted(set(cfg) - {KEY} - set(command))
    if extra and source != "--config":
        raise ConfigError(f"{source}: config key {extra[0]}: a programme file holds the `programme` block alone; "
                          f"allowed: {extra[0]} under programme.overrides (it applies to every study)")
    base = Path(source).parent if source != "--config" else Path.cwd()
    return build(block, base, source, command)


def from_snakemake(cfg: dict, configfiles: list, entries: list[str] | str | None) -> Programme:
    """The programme Snakemake's `cfg` names (_named), checked to own its summary's folder (check_owner)."""
    programme = _named(cfg, configfiles, entries)
    check_owner(programme)
    return programme


def owner(programme: Programme) -> str:
    """What a programme is across edits of its file: the file (relative to the working folder Snakemake runs in),
    or, given inline (--config), its study files. Two programmes of one name write one folder."""
    if programme.source != "--config":
        return os.path.relpath(os.path.abspath(programme.source))
    return "--config: " + ", ".join(sorted(os.path.relpath(os.path.abspath(f)) for f in programme.files.values()))


def check_owner(programme: Programme) -> None:
    """Refuse, before any job, a programme whose summary folder holds another programme's summary (a programme file
    of the same name): Snakemake would replace that summary without a word. A folder written before its owner was
    recorded is taken as this programme's."""
    from mcgrpo.core import store
    path = programme.folder / OWNER
    if not path.exists():
        return
    record = store.read_json(path)
    theirs = record.get("owner") if isinstance(record, dict) else None
    if theirs != owner(programme):
        raise ConfigError(f"{programme.source}: config key programme.name: {programme.name!r}: {programme.folder} "
                          f"holds the summary of another programme of that name ({theirs!r}, {path}); allowed: "
                          f"another programme.name (a summary is never replaced by another programme's)")


def load(path: str | Path, command: dict | None = None) -> Programme:
    """The programme file at `path`, every study read and validated (errors name the file and key)."""
    doc = study_config.read(path)
    templating.refuse(path, doc, allowed=False)
    if not isinstance(doc, dict) or set(doc) != {KEY}:
        other = sorted(set(doc or {}) - {KEY}) if isinstance(doc, dict) else []
        raise ConfigError(f"{path}: " + (f"config key {other[0]}: not a programme key; " if other else "")
                          + "allowed: one block, `programme:`, with name, studies and overrides")
    return build(doc[KEY], Path(path).parent, str(path), command or {})


def build(block, base: Path, source: str, command: dict) -> Programme:
    """The programme of `block` (its study paths relative to `base`); `source` names it in messages."""
    if not isinstance(block, dict):
        raise ConfigError(f"{source}: config key programme: a block of {', '.join(KEYS)}; allowed: e.g. "
                          f"programme: {{name: mine, studies: [a.yaml, b.yaml]}}")
    unknown = sorted(set(block) - set(KEYS))
    if unknown:
        raise ConfigError(f"{source}: config key programme.{unknown[0]}: unknown; allowed: {', '.join(KEYS)}")
    name = block.get("name") or (Path(source).stem if source != "--config" else None)
    if not isinstance(name, str) or not study_config._NAME.fullmatch(name):
        raise ConfigError(f"{source}: config key programme.name: {name!r}; allowed: a name of letters, digits, "
                          f"'_', '.' and '-' starting with a letter or digit")
    paths = block.get("studies")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise ConfigError(f"{source}: config key programme.studies: {paths!r}; allowed: a list of study files")
    overrides = block.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{source}: config key programme.overrides: {overrides!r}; allowed: a block of study "
                          f"keys, merged into every study")
    for i, path in enumerate(paths):
        file = base / path
        if not file.is_file():
            raise ConfigError(f"{source}: config key programme.studies[{i}]: {path}: study file not found "
                              f"(paths are relative to the programme file's folder, {base})")
    programme = Programme(name, source)
    folders: dict[str, str] = {}  # each study's folder (absolute) -> the study
    for i, path in enumerate(paths):
        file = base / path
        cfg = _study(file, {**overrides, **command})
        study, where = cfg["study"], f"{source}: config key programme.studies[{i}]: {path}"
        folder = os.path.join(os.path.abspath(cfg["results_dir"]), study)
        if folder in folders:
            raise ConfigError(f"{where} names study {study!r}, as {programme.files[folders[folder]]} does: both "
                              f"would write results folder {os.path.join(cfg['results_dir'], study)}; allowed: one "
                              f"study of each name in a programme")
        if programme.studies and os.path.normpath(cfg["results_dir"]) != os.path.normpath(programme.results_dir):
            first = next(iter(programme.files.values()))
            same = os.path.abspath(cfg["results_dir"]) == os.path.abspath(programme.results_dir)
            raise ConfigError(f"{source}: config key results_dir: {file} has {cfg['results_dir']!r}, {first} has "
                              f"{programme.results_dir!r}" + (" (one folder, spelled two ways)" if same else "")
                              + "; allowed: one results_dir (one run store) for the programme: set it in "
                              "programme.overrides")
        programme.studies[study], programme.files[study], folders[folder] = cfg, file, study
    return programme


def _study(path: Path, overrides: dict) -> dict:
    """A study file as `snakemake --configfile` reads it, with `overrides` merged in: validated, its first base."""
    from mcgrpo import studies
    cfg = studies.load(path, overrides)
    try:
        return study_config.select_base(cfg)
    except ConfigError as e:
        raise ConfigError(f"{path}:\n{e}") from None


# The programme summary: every study's preregistered verdicts (its headline table) in one table.
# warning: the headline's words beside a verdict (arms read far apart in tokens, recipe differences accepted)
COLUMNS = ["study", "id", "label", "contrast", "basis", "n", "difference", "p", "p_holm", "result", "verdict",
           "robustness", "warning"]


UNTESTED = "n/a (uninformative)"  # the p of a contrast whose data cannot tell its arms apart: no test was made


def verdicts(headlines: dict[str, Path], clocks: dict[str, str] | None = None):
    """One table of every study's headline (tables/headline.csv): its preregistered contrasts and verdicts, each
    with its warning, without which a verdict the study words with one would read plain. An uninformative
    contrast's p says there was no test; its robustness cell says why. A verdict at equal time names the clock its
    study read time on (`clocks`: {study: analysis.clock}), as the study's summary does: studies side by side may
    read it on different clocks."""
    import pandas as pd
    frames = []
    for study, path in headlines.items():
        table = _on_clock(pd.read_csv(path, dtype=str, keep_default_na=False), (clocks or {}).get(study))
        frames.append(table.assign(study=study).reindex(columns=COLUMNS, fill_value=""))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    table.loc[table["verdict"] == "uninformative", "p"] = UNTESTED
    return table


def _on_clock(headline, clock: str | None):
    """`headline` with each equal-time basis followed by the `clock` it was read on ('equal time (T*) on wall
    time'); as it is without one."""
    from mcgrpo.analysis.formats import BASIS_WORDS, CLOCK_WORDS
    if clock is None:
        return headline
    timed = headline["basis"].isin([BASIS_WORDS["time"], BASIS_WORDS["time_c"]])
    return headline.assign(basis=headline["basis"].where(~timed, headline["basis"] + f" on {CLOCK_WORDS[clock]}"))


def held(studies: dict[str, dict]) -> dict[str, Path]:
    """{study: its tables/headline.csv}, each checked to be the headline its analysis files (held to the study's
    config and runs) give now: a CSV edited by hand, or left from an earlier config or training, would put in the
    programme's table a verdict the study's analysis does not give. Refused, naming the file, row and column."""
    from mcgrpo.analysis import steps, tables
    from mcgrpo.core.layout import study_dir
    out = {}
    for study, cfg in studies.items():
        path = study_dir(cfg) / "tables" / "headline.csv"
        tables.held_csv(path, steps.headline(cfg, study_dir(cfg)),
                        "the study's analysis (analysis/contrasts.parquet, robustness.parquet)")
        out[study] = path
    return out


def write_summary(name: str, headlines: dict[str, Path], parquet: Path, markdown: Path,
                  identity: str | None = None, clocks: dict[str, str] | None = None) -> None:
    """verdicts.parquet and verdicts.md of the studies' `headlines` (`clocks`: verdicts'); `identity`: the parquet's
    config_hash (by default the headlines' paths')."""
    from mcgrpo.core import store
    table = verdicts(headlines, clocks)
    store.write_parquet(table, parquet, identity or study_config.config_hash(sorted(headlines)))
    store.write_text(verdicts_markdown(name, table, len(headlines)), markdown)


def verdicts_markdown(name: str, table, studies: int) -> str:
    """verdicts.md of the `verdicts` `table` of programme `name`'s `studies` studies."""
    lines = [f"# Programme {name}: the preregistered verdicts of its {studies} studies", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    shown = table.assign(**{c: table[c].map(_p_cell) for c in ("p", "p_holm")})
    lines += ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in shown.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def held_summary(programme: Programme) -> str:
    """verdicts.md as the end of a run prints it, held to the verdicts its studies' analysis gives now (held): a run
    that did not rerun the programme's summary (other targets, `--touch`, `--rerun-triggers mtime` after an edit of
    a study) would otherwise print the verdicts of an earlier config or training as this one's. Refused, naming it."""
    from mcgrpo.core.errors import IntegrityError
    configs, path = programme.studies, programme.folder / "verdicts.md"
    table = verdicts(held(configs), {study: cfg["analysis"]["clock"] for study, cfg in configs.items()})
    now = verdicts_markdown(programme.name, table, len(configs))
    if path.read_text() != now:
        raise IntegrityError(f"{path}: not the verdicts its studies' analysis gives now (left from an earlier config "
                             f"or training: this run did not write it); allowed: the programme summary's own "
                             f"(snakemake --configfile PROGRAMME --forcerun {path})")
    return now


def _p_cell(text: str) -> str:
    """A p of a headline CSV as the study's markdown tables show it (0.047, <0.001, n/a); words (UNTESTED) kept."""
    from mcgrpo.analysis.formats import p_value
    try:
        return p_value(float(text)) if text else "n/a"
    except ValueError:
        return text


def _studies(texts: list[str]) -> dict[str, dict]:
    """{study: config} of the JSON configs the rule passes (each study's, as its analysis jobs get it)."""
    import json
    from mcgrpo import studies
    configs = [study_config.select_base(studies.validate(json.loads(text))) for text in texts]
    return {cfg["study"]: cfg for cfg in configs}


def main(argv: list[str]) -> int:
    """python -m mcgrpo.programme summary --name N --parquet P --markdown M --studies STUDY_JSON ..."""
    from mcgrpo.analysis.steps import analysis_hash
    parser = argparse.ArgumentParser(prog="python -m mcgrpo.programme")
    parser.add_argument("verb", choices=["summary"])
    parser.add_argument("--name", required=True)
    parser.add_argument("--parquet", required=True, type=Path)
    parser.add_argument("--markdown", required=True, type=Path)
    parser.add_argument("--studies", nargs="+", required=True, help="each study's config as JSON (the rule's)")
    parser.add_argument("--owner", help="the programme (`owner`), recorded in the summary's folder")
    args = parser.parse_args(argv)
    configs = _studies(args.studies)
    identity = study_config.config_hash({study: analysis_hash(cfg) for study, cfg in configs.items()})
    try:
        write_summary(args.name, held(configs), args.parquet, args.markdown, identity,
                      {study: cfg["analysis"]["clock"] for study, cfg in configs.items()})
    except McgrpoError as e:  # a user's file: one message, as the mcgrpo verbs give it
        print(f"mcgrpo programme summary: error: {e}", file=sys.stderr)
        return 2
    if args.owner:
        from mcgrpo.core import store
        store.write_json({"name": args.name, "owner": args.owner}, args.parquet.parent / OWNER)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
