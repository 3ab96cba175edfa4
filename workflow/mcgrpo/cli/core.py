"""The verbs of mcgrpo/core: a study validated, a completion verified, and the run store linked and checked."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mcgrpo.cli.common import _config, _study_source
from mcgrpo.core import config as study_config, layout, manifest, study_runs
from mcgrpo.core.errors import ConfigError, DataError, McgrpoError


def check(args) -> None:
    """Validate a study file as the workflow does, without running any job.

    Strict YAML, the schema and every domain's checks; prints how many training runs the study has.

    Example:
      python -m mcgrpo check --config config/studies/dense.yaml
    """
    cfg = _config(args)
    print(f"{args.config or 'the config'}: valid; study {cfg['study']!r}, {len(study_config.runs(cfg))} training "
          f"runs ({len(cfg['arms'])} arms x {len(cfg['seeds'])} seeds) into {cfg['results_dir']}/{cfg['study']}/")


def verify(args) -> None:
    """Show what each verifier reads from a completion, and its verdict.

    TEXT with --reference checks one completion, --file one JSON object per line; --claims also lists every
    arithmetic claim and whether it holds, so that a user can see why a completion scored as it did.

    Example:
      python -m mcgrpo verify 'So 2 + 3 = 5, and the answer is \\boxed{5}.' --reference 5 --claims
    """
    from mcgrpo.core.claims import claims, verdict
    from mcgrpo.core.verify import bounded, explain, math_verify_backend
    backend = math_verify_backend()
    if backend is None and not args.json:
        print("math_verify: not installed (pip install 'mcgrpo[math]'); its verdicts are left out", file=sys.stderr)
    for where, text, reference in _verify_inputs(args):
        out = explain(bounded(text, where), reference, backend)
        if args.claims:
            out["claims"] = [verdict(c) for c in claims(text)]
        if args.json:
            print(json.dumps(out))
            continue
        print(f"{where}: reference {reference!r}")
        for name, rule in (("default", "whole_box"), ("strict", "whole_box, boxed only"), ("paper", "paper, C.1/H.1")):
            judged = "correct" if out[name + "_correct"] else "wrong"
            print(f"  {name} ({rule}): answer {out[name + '_answer']!r} -> {judged}")
        if out["math_verify_correct"] is not None:
            print(f"  math_verify: {'correct' if out['math_verify_correct'] else 'wrong'}")
        for c in out.get("claims", []):
            holds = "cannot parse" if c["true"] is None else "true" if c["true"] else "false"
            print(f"  claim {c['text']!r}: value {c['value']}, {holds}")


def _verify_inputs(args) -> list[tuple[str, str, str]]:
    """(where, text, reference) from TEXT and --reference, or from each line of --file: every line read and
    checked before any verdict is printed, so a refused line leaves no partial output to be taken for the file's."""
    if (args.text is None) == (args.file is None):
        raise ConfigError("give either TEXT with --reference, or --file FILE (one JSON object per line)")
    if args.text is not None:
        if args.reference is None:
            raise ConfigError("TEXT needs --reference, the answer it is checked against")
        return [("text", args.text, args.reference)]
    out = []
    for n, line in enumerate(study_config.text(args.file, "--file").splitlines(), 1):
        if line.strip():
            where = f"{args.file} line {n}"
            item = _json_line(line, where)
            out.append((where, _field(item, "text", where), _field(item, "reference", where)))
    return out


LINE = "an object with 'text' (a string, the completion) and 'reference' (a string, or a finite JSON number)"


def _json_line(line: str, where: str):
    """A line of --file read as JSON, its numbers as written (Decimal: no float rounding, no digit limit) and
    each key of an object once (json.loads keeps the last of a key given twice, without a word)."""
    from decimal import Decimal

    def once(pairs: list) -> dict:
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise DataError(f"{where}: {key!r} is given twice; allowed: each key once")
            seen.add(key)
        return dict(pairs)
    try:
        return json.loads(line, object_pairs_hook=once, parse_float=Decimal, parse_int=Decimal,
                          parse_constant=Decimal)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: not JSON ({e.msg})") from None
    except RecursionError:
        raise DataError(f"{where}: nested too deep to read; allowed: {LINE}") from None


def _field(item, key: str, where: str) -> str:
    """`key` of a --file line as a string: the text as given; a reference string as given, or a JSON number written
    out in plain digits exactly as the file has it (1e16 is 10000000000000000, which the verifiers read as a
    number; str() of a float wrote '1e+16', which none does). Anything else is refused by name, never stringified
    (a JSON true was checked as the answer 'True')."""
    from decimal import Decimal
    from mcgrpo.core.verify import MAX_ANSWER_CHARS
    if not isinstance(item, dict) or key not in item:
        raise DataError(f"{where}: {f'no {key!r}' if isinstance(item, dict) else _kind(item)}; allowed: {LINE}")
    value = item[key]
    if isinstance(value, str):
        return value
    if key == "reference" and isinstance(value, Decimal) and value.is_finite():
        digits = max(value.adjusted() + 1, 1) - min(value.as_tuple().exponent, 0)
        if digits <= MAX_ANSWER_CHARS:
            return format(value, "f")
        held = f"a number of {digits} digits"
    else:
        held = _kind(value)
    allowed = ("a string, or a finite JSON number (at most {MAX_ANSWER_CHARS} digits written out: a longer "
               "answer is no answer)" if key == "reference" else "a string (the completion)")
    raise DataError(f"{where}: {key!r} is {held}; allowed: {allowed.format(MAX_ANSWER_CHARS=MAX_ANSWER_CHARS)}")


def _kind(value) -> str:
    """What a JSON value is, in a message's words."""
    from decimal import Decimal
    if isinstance(value, bool):
        return f"{str(value).lower()} (a JSON boolean)"
    if isinstance(value, Decimal):
        return "a number" if value.is_finite() else str(value)
    return {type(None): "null", list: "a list", dict: "an object", str: "a string"}[type(value)]


def _verify_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("text", nargs="?", help="a completion (or use --file)")
    v.add_argument("--reference", help="the reference answer TEXT is checked against")
    v.add_argument("--file", help="one JSON object per line, with 'text' and 'reference'")
    v.add_argument("--claims", action="store_true", help="also list each arithmetic claim and its verdict")
    v.add_argument("--json", action="store_true", help="print one JSON object per input")


def link_study(args) -> None:
    """Link the study's runs and calibration into the run store, and write runs/store.parquet.

    The links are results/<study>/runs/<arm>/seed<N> and calibration/, into results/_shared/ (the link_study rule).
    A link the plan no longer has (a seed or arm taken out) is removed; the stored run it pointed at is kept.

    Example:
      python -m mcgrpo link-study --config config/config.yaml --out results/default/runs/store.parquet
    """
    for path in layout.link_study(_config(args), Path(args.out)):
        print(f"removed {path}: a link the study's plan no longer has (its stored run is kept)")


def _link_study_arguments(v: argparse.ArgumentParser) -> None:
    _study_source(v)
    v.add_argument("--out", required=True, help="the study's runs/store.parquet to write (the links go beside it)")


def check_store(args) -> None:
    """Verify every stored run and each study's links, and name the runs to retrain.

    A run's manifest, every file's sha256 and its config_hash; with --results, each study's index
    (runs/store.parquet) against its links, the runs' manifests and run.json, and links the index does not list.
    --repair moves the runs that fail aside (to <results>/_shared/quarantine/, never deleted): the workflow
    retrains them on its next run; it moves a study's disagreeing index there too (the workflow's link_study
    relinks the study from its plan) and removes its stale links (never the runs they point at).

    Example:
      python -m mcgrpo check-store --results results
    """
    runs = Path(args.store) if args.store else Path(args.results) / layout.SHARED / "runs"
    # which studies there are (each study's index): a glob for the studies, never for a study's runs
    studies_ = [] if args.store else sorted(p.parent.parent for p in Path(args.results).glob("*/runs/store.parquet"))
    if not runs.is_dir():
        raise DataError(f"{runs}: no run store here; allowed: --results RESULTS_DIR (holding {layout.SHARED}/runs) "
                        f"or --store RESULTS_DIR/{layout.SHARED}/runs")
    bad, unfinished = manifest.check_store(runs)
    bad.update(_inconsistent(runs, {*bad, *unfinished}))
    for name in unfinished:
        print(f"unfinished {name}: no results yet (training, its job failed, or resumed by its retry); left alone")
    linked, stale, failed = _check_studies(studies_, set(bad))
    for name, why in [*bad.items(), *linked.items()]:
        print(f"BAD {name}:\n  " + "\n  ".join(why))
    for name, why in failed.items():
        print(f"unfinished {name}: {why}")
    for path in stale:
        print(f"STALE {path}: a link its study's index does not list (an arm or seed of an earlier plan); never read")
    total = sum(1 for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))
    print(f"{total - len(bad) - len(unfinished)} of {total} stored runs verified" + (
        f"; {len(linked)} study run(s) disagree with their index" if linked else "") + (
        f"; {len(stale)} stale link(s)" if stale else ""))
    if not (bad or linked or stale):
        return
    if not args.repair:
        raise DataError("; ".join(
            ([f"{len(bad)} run(s) to retrain: {', '.join(bad)}"] if bad else [])
            + ([f"{len(linked)} study run(s) disagree with their study's index: {', '.join(linked)}"] if linked else [])
            + ([f"{len(stale)} stale link(s)"] if stale else []))
            + "; rerun with --repair (runs to retrain and wrong indexes moved aside, stale links removed), then rerun "
              "the workflow")
    into = runs.parent / "quarantine"
    for name in bad:
        print(f"moved {runs / name} to {manifest.quarantine(runs / name, into)}")
    for study in sorted({study for study in studies_ if any(n.startswith(f"{study.name}/") for n in linked)}):
        index = study_runs.index_path(study)
        print(f"moved {index} to {manifest.quarantine(index, into / study.name)}: the workflow's link_study relinks "
              f"{study.name} from its plan")
    for path in stale:
        path.unlink()
        print(f"removed {path}")
    print(f"{len(bad)} run(s) set aside; the workflow retrains them, and relinks each study moved, on its next run")


def _inconsistent(runs: Path, skip: set[str]) -> dict[str, list[str]]:
    """Of the stored runs not in `skip`: {run: why} for each whose files, whole and sealed, disagree with each other
    (mcgrpo.analysis.runs refuses such a run before any analysis reads a number of it: retrained here instead)."""
    from mcgrpo.analysis.runs import read_evals, read_runs
    out = {}
    for folder in sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in skip):
        try:
            read_runs(folder, "", 0, sorted(set(read_evals(folder / "evals.parquet")["eval_set"])))
        except McgrpoError as e:
            out[folder.name] = [str(e)]
    return out


def _check_studies(studies_: list[Path], bad: set[str]) -> tuple[dict[str, list[str]], list[Path], dict[str, str]]:
    """Of each study's index (mcgrpo.core.study_runs): ({study/arm/seed: what disagrees}, the stale links,
    {study/arm/seed: why it never finished}); a link to one of the `bad` stored runs is named with its run."""
    linked, stale, failed = {}, [], {}
    for study in studies_:
        try:
            found = study_runs.problems(study)
        except McgrpoError as e:  # the index itself is damaged
            found = {"index": [str(e)]}
        else:
            stale += study_runs.stale_links(study)
            failed.update({f"{study.name}/{run}": why for run, why in study_runs.unfinished(study).items()})
        linked.update({f"{study.name}/{run}": why for run, why in found.items()
                       if (study / "runs" / run).resolve().name not in bad})
    return linked, stale, failed


def _check_store_arguments(v: argparse.ArgumentParser) -> None:
    where = v.add_mutually_exclusive_group()
    where.add_argument("--results", default="results", help="the results folder holding _shared/runs (default results)")
    where.add_argument("--store", help="a run store folder (RESULTS/_shared/runs) itself")
    v.add_argument("--repair", action="store_true",
                   help="move the runs that fail to RESULTS/_shared/quarantine/<run>-<time>, so that they are retrained")


COMMANDS = {"verify": (verify, _verify_arguments), "link-study": (link_study, _link_study_arguments),
            "check": (check, _study_source), "check-store": (check_store, _check_store_arguments)}
