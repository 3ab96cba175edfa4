"""The verbs of mcgrpo/analysis: the plan locked, one verb per analysis rule, and a contrast, its power or the
bases pooled, recomputed by hand from a results folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from mcgrpo.cli.common import BASES, _config, _folder, _format, _resamples, _seed, _share, _study_source
from mcgrpo.core import sealed, store
from mcgrpo.core.errors import DataError, McgrpoError

RESULTS = "the study's results folder (results/<study>)"


def prereg_lock(args) -> None:
    """Lock the study's plan before training; an existing lock is never replaced.

    A changed plan needs a dated plan.amendments entry, not a new lock.

    Example:
      python -m mcgrpo prereg-lock --config config/config.yaml --out results/default/prereg.lock.json
    """
    from mcgrpo.analysis import prereg
    out = Path(args.out)
    if out.exists():
        raise DataError(f"{out}: the study is locked already; a changed plan needs a dated "
                         f"plan.amendments entry, not a new lock")
    lock = prereg.make_lock(_config(args))
    store.write_json(lock, out)
    print(f"locked {lock['material']['study']} at {lock['locked_at']}: sha256 {lock['sha256']}")


def _prereg_lock_arguments(v: argparse.ArgumentParser) -> None:
    _study_source(v)
    v.add_argument("--out", required=True, help="the lock file to write")


# One verb per analysis rule, name: its summary (the rule runs mcgrpo.analysis.steps.<name>_step).
STEPS = {"drift": "Write the verifier drift (default minus strict accuracy) of every run and evaluation.",
         "contrasts": "Compute every contrast with its statistics, labelled against the preregistration lock.",
         "robustness": "Recompute each planned contrast with the crossed interval, the strict verifier, drift and "
                       "the other clock.",
         "curves": "Compute the differences at every evaluation, the share of B to reach the base, and the "
                   "extrapolation.",
         "breakdown": "Tabulate training seconds per stage and the composition of groups before B.",
         "figures": "Draw the study's figures (PNG and PDF) from the analysis tables.",
         "tables": "Write the study's tables (CSV, markdown, HTML).",
         "summary": "Write the results summary, summary.md (printed when a run ends) and summary.rst (the report's "
                    "first page).",
         "prediction": "Compare the gradient tests' efficiencies with the trained contrasts, as a table and a figure.",
         "alignment": "Tabulate alignment with the reference gradient along training beside accuracy "
                      "(evaluation.alignment).",
         "verifiers": "Compare the verifier rules: accuracy under each and how often they disagree, per evaluation."}


def _step(name: str):
    """The verb of one analysis rule: mcgrpo.analysis.steps.<name>_step on the study config and results folder."""
    def verb(args) -> None:
        from mcgrpo.analysis import steps
        getattr(steps, f"{name}_step")(_config(args), Path(args.results))
    verb.__doc__ = (f"{STEPS[name]}\n\nAn analysis rule's step (mcgrpo.analysis.steps.{name}_step): it reads the study's "
                    f"runs through its results folder\nand writes under it.\n\n"
                    f"Example:\n  python -m mcgrpo {name} --config config/config.yaml --results results/default\n")
    return verb


def _step_arguments(v: argparse.ArgumentParser) -> None:
    _study_source(v)
    v.add_argument("--results", required=True, help=RESULTS)


def pool_bases(args) -> None:
    """Print each planned contrast per warm-start base and pooled over the bases.

    For a study with `bases`, once the study of each base has been analysed.

    Example:
      python -m mcgrpo pool-bases --config config/studies/bases.yaml
    """
    from mcgrpo.analysis import steps
    print(steps.pool_bases(_config(args, every_base=True)), end="")


def contrast(args) -> None:
    """Recompute one contrast from a results folder alone; print it and write it as Parquet.

    Read as the workflow reads it: margin, alpha, clock, resamples, bootstrap seed and drift gap the lock's, unless
    given; a planned contrast read with any of them given other than planned is exploratory, saying so. The result
    in words and the verdict are printed as the summary words them: with its robustness (the robustness step's
    checks) and any warning.

    Example:
      python -m mcgrpo contrast --results results/default --a mc_k4 --b outcome --basis tokens
    """
    from mcgrpo.analysis import recompute, summary
    from mcgrpo.analysis.tables import to_markdown
    given = {key: getattr(args, key) for key in recompute.READ_WITH}
    table, paired, read = recompute.contrast(Path(args.results), args.a, args.b, args.basis, args.metric,
                                             args.eval_set, _config(args) if args.config else None, **given)
    row = table.iloc[0]
    out = _contrast_out(args, row)
    for frame, path in ((table, out), (paired, _paired_path(out))):
        store.write_parquet(frame, path, metadata={WRITTEN_BY: "mcgrpo contrast"})
    print(to_markdown(paired[["seed", "value_a", "value_b", "diff", "at", "at_b", "moved", "clamped", "tokens_a",
                              "tokens_b"]]))
    print(to_markdown(table[["contrast", "label", "basis", "metric", "eval_set", "n", "mean", "ci_low", "ci_high",
                             "p", "p_holm", "tost_p", "noninferior", "crossed_low", "crossed_high",
                             "seeds_higher"]]))
    print("read with: " + ", ".join(f"{key} {value} ({where})" for key, (value, where) in read.items()))
    print(f"result: {summary.result(row)} at {summary.basis_words(row)}")
    demoted = row["note"] if str(row["note"]).startswith("demoted") else ""  # why a planned contrast reads exploratory
    print(f"verdict: {summary.judged(row, row['robustness'])}" + (f" ({demoted})" if demoted else ""))
    if row["warning"]:
        print(f"warning: {row['warning']}")
    print(f"written: {out}")


WRITTEN_BY = "written_by"  # a Parquet metadata key: what wrote the file; the contrast verb overwrites only its own


def _paired_path(out: Path) -> Path:
    return out.with_name(f"{out.name[:-len('.parquet')]}.paired.parquet")


def _ours(path: Path) -> bool:
    """Whether `path` is a Parquet file this verb wrote (a link, or any other file, is not)."""
    try:
        return store.parquet_metadata(path).get(WRITTEN_BY) == "mcgrpo contrast"
    except McgrpoError:
        return False


def _contrast_out(args, row) -> Path:
    """Where the verb writes (--out, else under analysis/contrast/), refused where that, or the .paired file beside
    it, is a file the verb did not write: --out must never replace a study's analysis, a run's file or a table."""
    folder = Path(args.results) / "analysis" / "contrast"
    out = Path(args.out or folder / f"{row['contrast']}.{row['basis']}.{row['metric']}.{row['eval_set']}.parquet")
    if not out.name.endswith(".parquet") or out.name == ".parquet":
        raise DataError(f"--out {out}: allowed: a file name ending in .parquet (the per-seed values go beside it, "
                        f"in <name>.paired.parquet)")
    for path in (out, _paired_path(out)):
        if (path.exists() or path.is_symlink()) and path.parent.resolve() != folder.resolve() and not _ours(path):
            raise DataError(f"--out {out}: {path} exists and was not written by `mcgrpo contrast`; allowed: a new "
                            f"file, one this verb wrote, or the default under {folder}")
    return out


def _contrast_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("--results", required=True, type=_folder, help=RESULTS)
    v.add_argument("--config", metavar="STUDY.yaml",
                   help="the study's config: labels as the workflow gives them against the lock (a plan changed "
                        "since without a dated amendment: exploratory), read with its analysis block (default: the "
                        "lock's plan and analysis, which cannot tell a plan changed since the lock)")
    v.add_argument("--out", help="the Parquet file to write (default: under results/<study>/analysis/contrast/)")
    v.add_argument("--a", required=True, type=_format("key"), help="the arm under test")
    v.add_argument("--b", required=True, type=_format("key"), help="the arm it is compared with (the base)")
    v.add_argument("--basis", default="tokens",  # the verb names the bases allowed (mcgrpo.analysis.recompute)
                   help="tokens, iterations, updates, time or time_c (default tokens; an equal-iteration study: "
                        "iterations, updates or time)")
    v.add_argument("--metric", default="acc_default", type=_format("metric"),
                   help="acc_<verifier> or pass@<k>_<verifier>, e.g. acc_strict, pass@8_default")
    v.add_argument("--eval-set", type=_format("key"), help="the evaluation set (default: the only one)")
    lock = "default: the lock's analysis.{}, as the workflow reads it; else {}"
    v.add_argument("--margin", type=_share, help=f"equivalence margin ({lock.format('margin', '0.02')})")
    v.add_argument("--alpha", type=_share, help=f"test level ({lock.format('alpha', '0.05')})")
    v.add_argument("--resamples", type=_resamples, help=f"crossed-bootstrap resamples "
                                                          f"({lock.format('resamples', '10000')})")
    v.add_argument("--bootstrap-seed", dest="bootstrap_seed", type=_seed,
                   help=f"seed of the bootstrap's draws ({lock.format('bootstrap_seed', '0')})")
    v.add_argument("--clock", choices=("wall", "cpu"), help="the training-time clock of the time bases: the stages' "
                   f"wall or process CPU time ({lock.format('clock', 'wall')})")
    v.add_argument("--drift-gap", dest="drift_gap", type=_share, help="the robustness check's drift threshold: "
                   f"default minus strict accuracy ({lock.format('drift_gap', '0.1')})")


def seeds_power(args) -> None:
    """Estimate how many paired seeds each contrast needs, from a study's or a pilot's per-seed differences.

    80% power (--power) to exclude 0, and to show equivalence within the margin, from the study's
    analysis/paired.parquet, held to the study's config where --config gives it (a file left from an earlier
    config or another study is refused) and planned with its analysis.margin and alpha, as its power table is;
    without it, the output names the config the file was written for, and the lock's margin and alpha plan it. A
    file whose rows are not the ones it sealed (edited) is refused either way. A file written before paired readings
    recorded their iterations is refused where an arm has a prompt filter (its warm-up cannot be checked), and a
    --metric or --basis the file does not hold is refused, naming those it does.

    Example:
      python -m mcgrpo power --results results/default --metric acc_default --config config/config.yaml
    """
    from mcgrpo.analysis import informative, power, recompute, steps
    from mcgrpo.analysis.tables import to_markdown
    results = Path(args.results)
    path = results / "analysis" / "paired.parquet"
    study = _config(args) if args.config else None
    if study is not None:
        paired = steps.analysis_reader(study, results)("paired", "paired")
    else:
        paired = store.read_contract(path, "paired")
        sealed.held(path)  # its own rows: no study needed
        written = store.parquet_metadata(path).get("config_hash", "")
        print(f"{path}: written for config {written[:12] or '(none recorded)'}, not checked against a study "
              f"(give --config STUDY.yaml to hold it to the study's config)")
    paired = _chosen(paired, args.metric, args.basis, path)
    cfg = study or recompute._locked_plan(results)[0]
    arms = {arm for contrast in paired["contrast"].unique() for arm in str(contrast).split("-vs-")}
    warmups = recompute.warmups(results, cfg, arms)
    informative.require_recorded(paired, warmups, str(path))
    read = recompute.reading(cfg, {"margin": args.margin, "alpha": args.alpha},
                             "the study's" if study is not None else "the lock's")
    read = {key: read[key] for key in ("margin", "alpha")}  # the study's own test, as its power table plans with
    margin, alpha = read["margin"][0], read["alpha"][0]
    table = power.plan(paired, margin, alpha, args.power, warmups)
    print(to_markdown(table))
    print(steps.power_note(margin, alpha).replace("80%", f"{100 * args.power:g}%"))
    print("planned with: " + ", ".join(f"{key} {value} ({where})" for key, (value, where) in read.items()))


def _chosen(paired, metric: str, bases: list[str] | None, path: Path):
    """The rows of `paired` of `metric` and `bases` (default: every basis), refused where the file holds none of the
    metric or of a basis asked for: an empty table would read as nothing to plan."""
    held = sorted(paired["metric"].astype(str).unique())
    if metric not in held:
        raise DataError(f"--metric {metric}: {path} holds no readings of it; allowed: {', '.join(held) or 'none'}")
    mine = paired[paired["metric"] == metric]
    there = sorted(mine["basis"].astype(str).unique())
    missing = [basis for basis in bases or [] if basis not in there]
    if missing:
        raise DataError(f"--basis {', '.join(missing)}: {path} holds no {metric} readings on it; allowed: "
                        f"{', '.join(there)}")
    return mine[mine["basis"].isin(bases or there)]


def _power_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("--results", required=True, type=_folder,
                   help="the study's (or pilot's) results folder (results/<study>)")
    v.add_argument("--config", metavar="STUDY.yaml",
                   help="the study's config: paired.parquet must have been written for it, and its analysis "
                        "margin and alpha plan the seeds (default: unchecked, the config it was written for printed, "
                        "the lock's margin and alpha)")
    v.add_argument("--metric", default="acc_default", type=_format("metric"), help="the metric (default acc_default)")
    v.add_argument("--basis", action="append", choices=BASES, help="only this basis (repeatable; default: every basis)")
    v.add_argument("--margin", type=_share, help="equivalence margin (default: the study's with --config, else "
                                                   "the lock's, else 0.02)")
    v.add_argument("--alpha", type=_share, help="test level (default: the study's analysis.alpha with --config, "
                                                 "else the lock's, else 0.05)")
    v.add_argument("--power", type=_share, default=0.8, help="power wanted (default 0.8)")


COMMANDS = {"prereg-lock": (prereg_lock, _prereg_lock_arguments), "contrast": (contrast, _contrast_arguments),
            "power": (seeds_power, _power_arguments), "pool-bases": (pool_bases, _study_source),
            **{name: (_step(name), _step_arguments) for name in STEPS}}
