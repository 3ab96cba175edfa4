"""`python -m mcgrpo <verb>`: what every Snakemake rule calls, one verb per stage, and the verbs a user runs by hand.

A verb is a function of the parsed arguments, listed in VERBS. Its docstring is its help: the first line, one
sentence, is its summary in `python -m mcgrpo --help`; the paragraphs after it explain it in `python -m mcgrpo VERB
--help`, and the last, `Example:` and an indented command, shows it in use (tests/test_cli.py checks each).
"""

from __future__ import annotations

import argparse
import difflib
import inspect
import json
import logging
import sys
import time
from pathlib import Path

from mcgrpo import __version__
from mcgrpo.core import config as study_config, layout, manifest, store, study_runs
from mcgrpo import studies
from mcgrpo.core.errors import ConfigError, DataError, Interrupted, McgrpoError


def _json(text: str, option: str, required: tuple[str, ...] = ()) -> dict:
    """The JSON object an option carries (what a rule passes), with the keys the verb reads."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{option}: not valid JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{option}: expected a JSON object, got {type(value).__name__}")
    return _require(value, option, required)


def _require(value: dict, option: str, required: tuple[str, ...]) -> dict:
    missing = [k for k in required if k not in value]
    if missing:
        raise ConfigError(f"{option}: missing key(s) {', '.join(missing)}; allowed: the object the workflow's "
                          f"rule passes (a run's: mcgrpo.core.config.run_config)")
    return value


# The study blocks of a run's effective config checked against the schema (its evaluation block is resolved for
# the run: mcgrpo.core.config.run_config).
RUN_BLOCKS = ("task", "model", "engine", "budget", "recipe")


def _run(args) -> dict:
    return study_config.validate_blocks(_json(args.run_json, "--run-json", study_config.RUN_KEYS), RUN_BLOCKS,
                                        "--run-json")


def _config(args, every_base: bool = False) -> dict:
    """The study config; of a study over `bases`, the first base's study, as Snakemake runs it by default (unless
    `every_base`: pool-bases reads them all)."""
    if getattr(args, "config_json", None):
        cfg = studies.validate(_json(args.config_json, "--config-json"))
    else:
        cfg = _study(args.config)
    return cfg if every_base else study_config.select_base(cfg)


def _study(path: str) -> dict:
    """The study config at `path`; a path that is not there names the studies that are (nearest first)."""
    if not Path(path).exists():
        here = Path(path).parent if Path(path).parent.is_dir() else Path(".")
        found = sorted({str(p) for folder in (here, Path("config"), Path("config/studies"), Path("config/studies/paper"))
                        for p in folder.glob("*.yaml")})
        near = difflib.get_close_matches(str(path), found, n=1, cutoff=0.6)
        listed = [f for f in found if "paper/" not in f]
        raise ConfigError(f"{path}: config file not found" + (f"; did you mean {near[0]}?" if near else "")
                          + (f" Studies: {', '.join(listed)}" if listed else "")
                          + (f" and {len(found) - len(listed)} under config/studies/paper/" if len(found) > len(listed)
                             else ""))
    return studies.load(path)


def _training_run(args) -> tuple[dict, dict[str, str], tuple[str, str]]:
    """The run's effective config, files and names (study, arm): from the rule (--run-json, every file and
    --label), or by hand (--config STUDY.yaml --arm A --seed N, files defaulting to where the workflow puts them:
    the run store, mcgrpo.core.layout)."""
    given = {k: getattr(args, k) for k in ("model", "data", "budget", "out")}
    if args.run_json:
        run, problems = _json(args.run_json, "--run-json"), []
        try:
            _require(run, "--run-json", study_config.RUN_KEYS)
        except ConfigError as e:
            problems.append(str(e))
        missing = [f"--{k}" for k, v in given.items() if v is None]
        if missing:
            problems.append(f"train --run-json also needs {', '.join(missing)}")
        if problems:
            raise ConfigError("\n".join(problems))
        return study_config.validate_blocks(run, RUN_BLOCKS, "--run-json"), given, _names(args.label)
    if args.arm is None or args.seed is None:
        raise ConfigError("train --config names the run with --arm A --seed N")
    cfg = study_config.select_base(_study(args.config))
    run = study_config.run_config(cfg, args.arm, args.seed)
    defaults = {"model": layout.model_path(cfg), "data": layout.data_dir(cfg), "budget": layout.budget_path(cfg),
                "out": layout.run_dir(cfg, args.arm, args.seed)}
    files = {k: str(default if given[k] is None else given[k]) for k, default in defaults.items()}
    return run, files, (cfg["study"], args.arm)


def _names(label: str | None) -> tuple[str, str]:
    """(study, arm) of --label STUDY/ARM: what messages and trackers call a run the rule passes."""
    study, slash, arm = (label or "run/run").rpartition("/")
    if not slash:
        raise ConfigError(f"--label {label!r}: expected STUDY/ARM, e.g. default/mc_k4")
    return study, arm


def _tracking(args) -> str:
    """The experiment tracker: --tracking, else (by hand) the study's `tracking` key, else none. The rule passes
    the key as an option, not in the run's config: switching tracking on never makes a finished run out of date."""
    if args.tracking is None and args.config:
        return _study(args.config)["tracking"]
    return args.tracking or "none"


def prepare_data(args) -> None:
    """Write the pool and evaluation sets, and the log of what filtering and deduplication removed.

    The task block's data, filtered and deduplicated against the evaluation sets (the prepare_data rule's step).

    Example:
      python -m mcgrpo prepare-data --out data-arith \\
        --task-json '{"name": "arith", "seed": 0, "pool": {"size": 200, "levels": [2]}, "eval_sets": {"test": {"size": 8}}}'
    """
    from mcgrpo import data
    task = _json(args.task_json, "--task-json", ("name", "seed", "pool", "eval_sets"))
    study_config.validate_blocks({"task": task}, ("task",), "--task-json")
    prepared = data.prepare(task)
    data.write(prepared.pool, prepared.evals, args.out, study_config.config_hash(task), prepared.removed)
    print("\n".join(prepared.lines()))
    print(f"pool: {len(prepared.pool)} problems; " + ", ".join(f"eval_{k}: {len(v)}" for k, v in prepared.evals.items()))


def data_summary(args) -> None:
    """Check a data file before spending GPU time on it.

    Counts, levels, answers and fields of a pool or evaluation file, and with --against the problems that
    deduplication would remove against an evaluation file.

    Example:
      python -m mcgrpo data data/MATH/train --against data/MATH/test
    """
    from mcgrpo.data import summary
    try:
        s = summary.summarize(args.path, args.format, args.against or [], args.math_verify)
    except ImportError as e:
        raise DataError(str(e)) from None
    print(json.dumps(s, sort_keys=True) if args.json else summary.render(s))


def _data_arguments(v: argparse.ArgumentParser) -> None:
    from mcgrpo.data.summary import FORMATS
    v.add_argument("path", help="a .jsonl, .parquet or .json file, or a folder of per-problem .json files")
    v.add_argument("--format", choices=FORMATS, help="the record fields (default: detected)")
    v.add_argument("--against", action="append", metavar="EVAL_FILE",
                   help="count the problems that deduplication would remove against this evaluation file (repeatable)")
    v.add_argument("--math-verify", action="store_true", help="also check gold solutions with math-verify")
    v.add_argument("--json", action="store_true", help="print one JSON object")


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
            verdict = "correct" if out[name + "_correct"] else "wrong"
            print(f"  {name} ({rule}): answer {out[name + '_answer']!r} -> {verdict}")
        if out["math_verify_correct"] is not None:
            print(f"  math_verify: {'correct' if out['math_verify_correct'] else 'wrong'}")
        for c in out.get("claims", []):
            holds = "cannot parse" if c["true"] is None else "true" if c["true"] else "false"
            print(f"  claim {c['text']!r}: value {c['value']}, {holds}")


def _verify_inputs(args):
    """(where, text, reference) from TEXT and --reference, or from each line of --file."""
    if (args.text is None) == (args.file is None):
        raise ConfigError("give either TEXT with --reference, or --file FILE (one JSON object per line)")
    if args.text is not None:
        if args.reference is None:
            raise ConfigError("TEXT needs --reference, the answer it is checked against")
        yield "text", args.text, args.reference
        return
    for n, line in enumerate(study_config.text(args.file, "--file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{args.file} line {n}: not JSON ({e.msg})") from None
        if not (isinstance(item, dict) and isinstance(item.get("text"), str)
                and isinstance(item.get("reference"), (str, int, float))):
            raise DataError(f"{args.file} line {n}: needs an object with string 'text' and 'reference'")
        yield f"{args.file} line {n}", item["text"], str(item["reference"])


def _verify_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("text", nargs="?", help="a completion (or use --file)")
    v.add_argument("--reference", help="the reference answer TEXT is checked against")
    v.add_argument("--file", help="one JSON object per line, with 'text' and 'reference'")
    v.add_argument("--claims", action="store_true", help="also list each arithmetic claim and its verdict")
    v.add_argument("--json", action="store_true", help="print one JSON object per input")


def resolve_model(args) -> None:
    """Write the reference file that training loads a model with a source from, checked to be there.

    The source is a hub id, a folder or a GGUF file (the study's model.source); nothing is downloaded here.

    Example:
      python -m mcgrpo resolve-model --model-json '{"name": "qwen2.5-1.5b", "source": "Qwen/Qwen2.5-1.5B"}' \\
        --out qwen2.5-1.5b.json
    """
    from mcgrpo.train.models import sources
    model = _json(args.model_json, "--model-json", ("name", "source"))
    study_config.validate_blocks({"model": model}, ("model",), "--model-json")
    where = sources.resolve(model["source"])
    store.write_json({"name": model["name"], "source": model["source"], "resolved": where}, args.out)
    print(f"model {model['name']}: {where['location']}" + (f" ({where['gguf_file']})" if where["gguf_file"] else ""))


def warm_start(args) -> None:
    """Warm-start the tiny model on a fresh corpus of training-side problems, or copy the shipped checkpoint.

    Where the spec (the study's model and task blocks) is the one the shipped checkpoint was built from
    (mcgrpo.train.models.shipped), its files are copied byte for byte; --rebuild warm-starts anyway.
    `snakemake -n -p warm_start` prints the command the workflow runs.

    Example:
      python -m mcgrpo warm-start --model-json "$(cat spec.json)" --data data-arith --out model --threads 2
    """
    from mcgrpo.train.models import shipped
    spec = _json(args.model_json, "--model-json", ("model", "task"))
    study_config.validate_blocks(json.loads(json.dumps(spec)), ("model", "task"), "--model-json")  # a copy
    if not args.rebuild and shipped.matches(spec):  # before torch is imported: seconds, not half a minute
        shipped.copy_to(args.out)
        print(f"warm start: the shipped checkpoint of this model and task ({shipped.FOLDER.name}), copied")
        return
    import torch
    from mcgrpo import data
    from mcgrpo.train import models
    from mcgrpo.train.models.warm_start import warm_start as run_warm_start
    torch.set_num_threads(args.threads)
    ws = dict(spec["model"]["warm_start"])
    corpus = data.warm_start_corpus(spec["task"], ws.pop("problems"), ws.pop("levels"), ws["seed"], args.data)
    model, tokenizer = run_warm_start(corpus, spec["model"]["tiny"], **ws, study=spec)
    models.save(model, tokenizer, args.out)


def calibrate(args) -> None:
    """Write the budget B, from the calibration run or as the config gives it.

    The calibration run is the run config of the calibration arm; a study that gives B in tokens, or an
    equal-iteration study (its iterations), needs no calibration run. `snakemake -n -p calibrate` prints the
    command the workflow runs.

    Example:
      python -m mcgrpo calibrate --run-json "$(cat calibration.json)" --model model --data data-arith \\
        --out budget.parquet
    """
    import torch
    from mcgrpo.core import budget as budget_rules
    from mcgrpo import data
    from mcgrpo.train import models
    from mcgrpo.train.trainer import Trainer
    from mcgrpo.data.checks import check_run_data
    run = _run(args)
    b = run["budget"]
    pool, _ = data.read(args.data, [])
    check_run_data(pool, {}, run, args.data)  # a pool too small for one iteration fails here, before any run
    if b.get("iterations") is not None:
        table = budget_rules.budget_table(run["model"]["name"], [], b["iterations"], "iterations", unit="iterations")
    elif b["tokens"] is not None:
        table = budget_rules.budget_table(run["model"]["name"], [], b["tokens"], "config")
    else:
        torch.set_num_threads(run["recipe"]["threads"])
        model, tokenizer = models.load(args.model)
        log = Trainer(run, model, tokenizer, pool, None, None).run(max_iterations=b["calibration_iterations"])
        totals = [row["tokens_total"] for row in log.iterations]
        per_iteration = [t - s for t, s in zip(totals, [0] + totals[:-1])]
        B = budget_rules.budget_from_tokens(per_iteration, b["multiplier"], b["round_to"])
        table = budget_rules.budget_table(run["model"]["name"], per_iteration, B, "calibrated")
    store.write_parquet(table, args.out, study_config.config_hash(run))
    B = budget_rules.from_table(table)
    print(f"B = {int(B)} {'generated tokens' if B.unit == 'tokens' else 'iterations'} ({table['source'].iloc[0]})")


def train(args) -> None:
    """Train one run (arm, seed) to the budget and write its Parquet files, resuming from its newest checkpoint.

    By hand: `mcgrpo train --config STUDY.yaml --arm A --seed N` trains the run where the workflow would
    (once `snakemake` has built the study's data, model and budget); --out puts it elsewhere.

    SIGTERM or SIGUSR1 (what SLURM sends before a time limit or a preemption) makes the trainer checkpoint
    at the next iteration boundary and exit with status 75; under SLURM an attempt that made progress first
    requeues its job, which resumes the run under its id (mcgrpo.train.requeue), and one without progress leaves it
    to Snakemake's retry. The final checkpoint stays (the workflow removes it once Snakemake has the outputs): a run ended by its job
    after finishing is written again from it, not trained again. Each attempt is logged and kept in run.json.
    A failure that is not a preemption is left in --failed-log, if given (mcgrpo.train.job).

    Example:
      python -m mcgrpo train --config config/config.yaml --arm mc_k4 --seed 1
    """
    from mcgrpo.train import job
    job.logged(args.failed_log, lambda: _train_run(*_training_run(args), _tracking(args)))


def _train_run(run: dict, files: dict[str, str], names: tuple[str, str], backend: str) -> None:
    """The train job of a run, by who makes it: mcgrpo's trainer, TRL's (a TRL arm), or a finished TRL folder
    stored (an ingested arm: mcgrpo.integrations.ingest)."""
    from mcgrpo.train import job
    trainer = run["arm_config"].get("trainer") or {}
    if "ingested" in trainer:
        from mcgrpo.integrations import ingest as trl_ingest
        return _report_ingest(trl_ingest.store_arm_run(run, files))
    runner = None
    if "trl" in trainer:  # TRL's GRPOTrainer under the protocol
        from mcgrpo.integrations.trl import TRLRun
        runner = TRLRun.for_job
    job.train(run, files, names, backend, runner)


def ingest(args) -> None:
    """Store a finished TRL output folder as a run of an ingested arm, its checkpoints evaluated at budget points.

    The arm declares itself ingested in the study (`trainer: {ingested: {trl_output: DIR}}`, `{seed}` in DIR standing
    for the seed); the run takes an identity of its own, from what the folder says it did. The run's generated tokens
    per step are rebuilt from TRL's log (completions/mean_length x train_batch_size, checked against num_tokens); each
    budget point k B / per_budget is evaluated on a checkpoint (before B the one at or before its step, from B on the
    first at or after it) and recorded at that checkpoint's counts. A folder whose recipe differs from the study's is
    refused by key, unless --accept-differences (or the arm's accept_differences). The run is written where `train
    --config` would write it (--out elsewhere), which is also what the workflow's train job does for the arm. What
    the log cannot give is printed and kept in run.json (`ingested`): see docs/trl.md, "Runs already made".

    Example:
      python -m mcgrpo ingest --config my-study.yaml --arm mine --seed 1
    """
    from mcgrpo.integrations import ingest as trl_ingest
    run, files, _ = _training_run(args)
    block = (run["arm_config"].get("trainer") or {}).get("ingested")
    if block is None:
        raise ConfigError(f"--arm {args.arm}: not declared ingested in {args.config}; allowed: an arm with trainer: "
                          f"{{ingested: {{trl_output: DIR}}}} (a protocol arm's runs are trained under the "
                          f"protocol, never taken from a folder)")
    if args.trl_output is not None and Path(args.trl_output).resolve() != trl_ingest.output_folder(
            block, args.seed).resolve():
        raise ConfigError(f"--trl-output {args.trl_output}: not the arm's folder of seed {args.seed} "
                          f"({trl_ingest.output_folder(block, args.seed)}, arms.{args.arm}.trainer.ingested."
                          f"trl_output); allowed: that folder, or leave --trl-output out")
    _report_ingest(trl_ingest.store_arm_run(run, files, args.config, args.accept_differences))


def _report_ingest(block: dict) -> None:
    """What an ingest stored, and what it could not recover or found different from the recipe."""
    for line in block["unrecovered"]:
        print(f"not recovered: {line}")
    for line in block["differences"]:
        print(f"differs from the recipe (accepted): {line}")
    print(f"stored {block['folder']} as steps 1..{block['stop_step']} of the run, {len(block['points'])} points")


def check(args) -> None:
    """Validate a study file as the workflow does, without running any job.

    Strict YAML, the schema and every domain's checks; prints how many training runs the study has.

    Example:
      python -m mcgrpo check --config config/studies/dense.yaml
    """
    cfg = _config(args)
    print(f"{args.config or 'the config'}: valid; study {cfg['study']!r}, {len(study_config.runs(cfg))} training "
          f"runs ({len(cfg['arms'])} arms x {len(cfg['seeds'])} seeds) into {cfg['results_dir']}/{cfg['study']}/")


def gradient_tests(args) -> None:
    """Run the gradient tests at the initial policy, one row per arm, batch and measure.

    What the gradient_tests rule runs for a study with a gradient_tests block (paper 2.4, A, H.3); `snakemake -n -p
    gradient_tests` prints its command.

    Example:
      python -m mcgrpo gradient-tests --run-json "$(cat gradient_tests.json)" --model model --data data-arith \\
        --out gradient_tests.parquet
    """
    import torch
    from mcgrpo import data
    from mcgrpo.train import gradients, models
    run = study_config.validate_blocks(_json(args.run_json, "--run-json"), GRADIENT_BLOCKS, "--run-json")
    torch.set_num_threads(run["recipe"]["threads"])
    pool, _ = data.read(args.data, [])
    model, tokenizer = models.load(args.model)
    table = gradients.run(run, model, tokenizer, pool)
    store.write_parquet(table, args.out, study_config.config_hash(run))
    means = table.pivot_table(index="arm", columns="measure", values="value", sort=False)
    # reindex: a measure undefined on every batch (all groups one outcome: NaN) is a column of NaN, not a KeyError
    print(means.reindex(columns=["alignment", "share_outside_v", "projection_residual", "cos_full", "tokens"]).to_string())


def screen(args) -> None:
    """Screen one arm before training, by its gradient tests against outcome-only.

    On the study's model and data: efficiency per update and per generated token, alignment and share outside V,
    the shuffled control, and the equal-tokens difference its per-token efficiency predicts; no training
    (mcgrpo.screen).

    An arm that is not in the study: add it on Snakemake's command line, `snakemake screen --configfile STUDY.yaml
    --config 'arms={"mine": {"credit": {"my_rule": {}}}}' screen_arm=mine` (docs/plugins.md).

    Example:
      python -m mcgrpo screen --config config/studies/dense.yaml --arm mc_k4
    """
    from mcgrpo import screen as screening
    cfg = _config(args)
    table, folder, curve_from = screening.screen(cfg, args.arm, args.batches, args.out, args.curve, args.budget,
                                                 log=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        rows = table.astype(object).where(table.notna(), None).to_dict(orient="records")
        print(json.dumps({"study": cfg["study"], "arm": args.arm, "curve": curve_from, "folder": str(folder),
                          "rules": rows}))
    else:
        print("\n".join(screening.render(table, args.arm, curve_from)))
        print(f"written: {folder}/screen.parquet, {folder}/gradient_tests.parquet")


def _screen_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("--arm", required=True, type=_format("key"), help="the study's arm to screen")
    v.add_argument("--batches", type=_positive, help="fixed batches, at least 2 (default: the study's "
                   "gradient_tests.batches)")
    v.add_argument("--curve", metavar="FILE", help="the base's accuracy curve (CSV or Parquet: tokens, accuracy) "
                   "to predict the equal-tokens difference on (default: the study's trained base runs)")
    v.add_argument("--budget", type=_typed(float, lambda v: v > 0, "a number above 0"), help="with --curve: B in generated tokens (default: the curve's last point)")
    v.add_argument("--out", help="the folder to write (default: results/<study>/screen/<arm>/)")
    v.add_argument("--json", action="store_true", help="print one JSON object")


GRADIENT_BLOCKS = ("task", "model", "engine", "recipe", "gradient_tests", "arms")  # gradient_tests_config's
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


def pool_bases(args) -> None:
    """Print each planned contrast per warm-start base and pooled over the bases.

    For a study with `bases`, once the study of each base has been analysed.

    Example:
      python -m mcgrpo pool-bases --config config/studies/bases.yaml
    """
    from mcgrpo.analysis import steps
    print(steps.pool_bases(_config(args, every_base=True)), end="")


def link_study(args) -> None:
    """Link the study's runs and calibration into the run store, and write runs/store.parquet.

    The links are results/<study>/runs/<arm>/seed<N> and calibration/, into results/_shared/ (the link_study rule).
    A link the plan no longer has (a seed or arm taken out) is removed; the stored run it pointed at is kept.

    Example:
      python -m mcgrpo link-study --config config/config.yaml --out results/default/runs/store.parquet
    """
    for path in layout.link_study(_config(args), Path(args.out)):
        print(f"removed {path}: a link the study's plan no longer has (its stored run is kept)")


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


def contrast(args) -> None:
    """Recompute one contrast from a results folder alone; print it and write it as Parquet.

    Example:
      python -m mcgrpo contrast --results results/default --a mc_k4 --b outcome --basis tokens
    """
    from mcgrpo.analysis import recompute, summary
    from mcgrpo.analysis.tables import to_markdown
    table, paired = recompute.contrast(Path(args.results), args.a, args.b, args.basis, args.metric,
                                   args.eval_set, args.margin, args.resamples, args.bootstrap_seed, args.clock)
    row = table.iloc[0]
    out = Path(args.out or Path(args.results) / "analysis" / "contrast" /
               f"{row['contrast']}.{row['basis']}.{row['metric']}.{row['eval_set']}.parquet")
    store.write_parquet(table, out)
    store.write_parquet(paired, out.with_name(out.name.replace(".parquet", ".paired.parquet")))
    print(to_markdown(paired[["seed", "value_a", "value_b", "diff", "at", "at_b", "moved", "clamped"]]))
    print(to_markdown(table[["contrast", "label", "basis", "metric", "eval_set", "n", "mean", "ci_low", "ci_high",
                             "p", "p_holm", "tost_p", "noninferior", "crossed_low", "crossed_high",
                             "seeds_higher"]]))
    print(f"verdict: {summary.judged(row)}")
    print(f"written: {out}")


def _typed(convert, ok, allowed: str):
    """An argparse type: `convert(text)` where `ok` holds of it, else argparse's message naming the option, the
    value and what is allowed (exit 2, no traceback)."""
    def parse(text: str):
        try:
            value = convert(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: {allowed}")
        return value
    return parse


def _format(name: str):
    """An argparse type: a string of the study schema's format `name` (a metric, an arm or set key)."""
    check, allowed = study_config.FORMATS[name]
    return _typed(str, check, allowed)


# The options' values, one validator per kind (the study schema's bounds where an option mirrors a key).
_positive = _typed(int, lambda v: v >= 1, "an integer of at least 1")
_resamples = _typed(int, lambda v: 1 <= v <= 1_000_000, "an integer from 1 to 1000000")
_threads = _typed(int, lambda v: 1 <= v <= 1024, "an integer from 1 to 1024")
_seed = _typed(int, lambda v: 0 <= v < 2 ** 32, "an integer from 0 to 4294967295")
_share = _typed(float, lambda v: 0 < v < 1, "a number strictly between 0 and 1")
_folder = _typed(Path, Path.is_dir, "an existing folder (a study's results folder, results/<study>)")
BASES = tuple(study_config.schema()["$defs"]["basis"]["enum"])


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


def seeds_power(args) -> None:
    """Estimate how many paired seeds each contrast needs, from a study's or a pilot's per-seed differences.

    80% power (--power) to exclude 0, and to show equivalence within the margin, from the study's
    analysis/paired.parquet.

    Example:
      python -m mcgrpo power --results results/default --metric acc_default
    """
    from mcgrpo.analysis import power, recompute, steps
    from mcgrpo.analysis.tables import to_markdown
    results = Path(args.results)
    paired = store.read_contract(results / "analysis" / "paired.parquet", "paired")
    paired = paired[(paired["metric"] == args.metric) & (paired["basis"].isin(args.basis or paired["basis"]))]
    locked = recompute._locked_plan(results)[0]
    margin = args.margin if args.margin is not None else locked["analysis"]["margin"] if locked else 0.02
    table = power.plan(paired, margin, args.alpha, args.power)
    print(to_markdown(table))
    print(steps.power_note(margin, args.alpha).replace("80%", f"{100 * args.power:g}%"))


def _power_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("--results", required=True, type=_folder,
                   help="the study's (or pilot's) results folder (results/<study>)")
    v.add_argument("--metric", default="acc_default", type=_format("metric"), help="the metric (default acc_default)")
    v.add_argument("--basis", action="append", choices=BASES, help="only this basis (repeatable; default: every basis)")
    v.add_argument("--margin", type=_share, help="equivalence margin (default: the lock's, else 0.02)")
    v.add_argument("--alpha", type=_share, default=0.05, help="test level (default 0.05)")
    v.add_argument("--power", type=_share, default=0.8, help="power wanted (default 0.8)")


def _contrast_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("--a", required=True, type=_format("key"), help="the arm under test")
    v.add_argument("--b", required=True, type=_format("key"), help="the arm it is compared with (the base)")
    v.add_argument("--basis", default="tokens",  # the verb names the bases allowed (mcgrpo.analysis.recompute)
                   help="tokens, iterations, updates, time or time_c (default tokens; an equal-iteration study: "
                        "iterations, updates or time)")
    v.add_argument("--metric", default="acc_default", type=_format("metric"),
                   help="acc_<verifier> or pass@<k>_<verifier>, e.g. acc_strict, pass@8_default")
    v.add_argument("--eval-set", type=_format("key"), help="the evaluation set (default: the only one)")
    v.add_argument("--margin", type=_share, help="equivalence margin (default: the lock's, else 0.02)")
    v.add_argument("--resamples", type=_resamples, default=10_000, help="crossed-bootstrap resamples (default 10000)")
    v.add_argument("--bootstrap-seed", type=_seed, default=0, help="seed of the bootstrap's draws (default 0)")
    v.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="the training-time clock of the time bases: the stages' wall or process CPU time (default wall)")


VERBS = {"data": data_summary, "verify": verify, "prepare-data": prepare_data, "resolve-model": resolve_model, "warm-start": warm_start, "calibrate": calibrate, "train": train, "ingest": ingest,
         "gradient-tests": gradient_tests, "screen": screen,
         "prereg-lock": prereg_lock, "link-study": link_study, "contrast": contrast, "check": check, "power": seeds_power,
         "check-store": check_store, "pool-bases": pool_bases,
         **{name: _step(name) for name in STEPS}}


# Each stage gets only the part of the config that can change its output, so that editing, say, the
# analysis margin never makes Snakemake rerun training.
JSON_INPUT = {"prepare-data": ("--task-json", "the study's task: block as JSON"),
              "resolve-model": ("--model-json", "the study's model: block as JSON"),
              "warm-start": ("--model-json", "the study's model: and task: blocks as JSON"),
              "calibrate": ("--run-json", "the calibration run's effective config as JSON"),
              "gradient-tests": ("--run-json", "what the stage reads (mcgrpo.core.config.gradient_tests_config)")}
# The files each verb reads and writes (the rules name them; by hand, see `train --config`).
FILES = {"prepare-data": {"--out": "the data folder to write"},
         "resolve-model": {"--out": "the reference file to write"},
         "warm-start": {"--data": "the study's data folder", "--out": "the model folder to write"},
         "calibrate": {"--model": "the model folder or reference file", "--data": "the study's data folder",
                       "--out": "budget.parquet to write"},
         "train": {"--model": "the model (default: the study's, as the workflow places it)",
                   "--data": "the data folder (default: the study's, under results/_shared/data/)",
                   "--budget": "budget.parquet (default: the study's, under results/_shared/calibrations/)",
                   "--out": "the run folder (default: the run store's, results/_shared/runs/<hash>, which "
                            "results/<study>/runs/<arm>/seed<N> links to)",
                   "--failed-log": "where a failure that is not a preemption leaves its traceback (the rule's)"},
         "ingest": {"--model": "the study's initial model (point 0; default: the study's)",
                    "--data": "the data folder (default: the study's)", "--budget": "budget.parquet (default: the "
                    "study's)", "--out": "the run folder (default: the run store's, as train --config)"},
         "gradient-tests": {"--model": "the model folder or reference file", "--data": "the study's data folder",
                            "--out": "gradient_tests.parquet to write"},
         "prereg-lock": {"--out": "the lock file to write"},
         "link-study": {"--out": "the study's runs/store.parquet to write (the links go beside it)"},
         "contrast": {"--results": "the study's results folder (results/<study>)",
                      "--out": "the Parquet file to write (default: under results/<study>/analysis/contrast/)"}}
REQUIRED = {("--out", name) for name in FILES if name not in ("train", "ingest", "contrast")} | {("--results", "contrast")}


def _study_source(v: argparse.ArgumentParser) -> None:
    src = v.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", metavar="STUDY.yaml", help="study config YAML")
    src.add_argument("--config-json", help="the validated study config as JSON (what the rules pass)")


def _train_arguments(v: argparse.ArgumentParser) -> None:
    src = v.add_mutually_exclusive_group(required=True)
    src.add_argument("--run-json", help="the run's effective config as JSON (what the rule passes)")
    src.add_argument("--config", metavar="STUDY.yaml", help="by hand: the study config; with --arm and --seed")
    v.add_argument("--arm", type=_format("key"), help="with --config: the arm to train")
    v.add_argument("--seed", type=_seed, help="with --config: the seed")
    v.add_argument("--label", metavar="STUDY/ARM",
                   help="with --run-json: what messages and trackers call the run (the rule's study and arm; a stored "
                        "run is one run whichever studies name it)")
    from mcgrpo.train.tracking import BACKENDS
    v.add_argument("--tracking", choices=BACKENDS,
                   help="log every iteration and evaluation to TensorBoard or offline W&B, in <out>/tracking/ "
                        "(default: the study's `tracking`, else none)")


def _ingest_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("--trl-output", metavar="DIR", help="the TRL output_dir (default: the arm's trl_output of the seed; "
                                                       "if given, it must be that folder)")
    v.add_argument("--config", required=True, metavar="STUDY.yaml", help="the study config")
    v.add_argument("--arm", type=_format("key"), required=True, help="the study's ingested arm to store it as")
    v.add_argument("--seed", type=_seed, required=True, help="the seed to store it as")
    v.add_argument("--accept-differences", action="store_true",
                   help="store a run whose GRPOConfig differs from the recipe, its differences listed")
    v.set_defaults(run_json=None)


def help_of(verb) -> tuple[str, str, str]:
    """(summary, description, example) of a verb, from its docstring: the first line, everything before
    `Example:`, and that paragraph."""
    doc = inspect.cleandoc(verb.__doc__ or "")
    description, _, example = doc.partition("\nExample:")
    return doc.partition("\n")[0], description.strip(), "Example:" + example.rstrip() if example else ""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mcgrpo", description=__doc__.partition("\n")[0],
                                epilog="`python -m mcgrpo VERB --help` explains a verb's options, with an example.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"mcgrpo {__version__}")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name, verb in VERBS.items():
        summary, description, example = help_of(verb)
        # argparse %-formats help (not descriptions): a docstring's "80%" must reach it as "80%%".
        v = sub.add_parser(name, help=summary.replace("%", "%%"), description=description, epilog=example,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if name in JSON_INPUT:
            v.add_argument(JSON_INPUT[name][0], required=True, help=JSON_INPUT[name][1])
        elif name == "train":
            _train_arguments(v)
        elif name == "ingest":
            _ingest_arguments(v)
        elif name not in ("data", "verify", "contrast", "power", "check-store"):
            _study_source(v)
        if name in STEPS:
            v.add_argument("--results", required=True, help="the study's results folder (results/<study>)")
        for opt, text in FILES.get(name, {}).items():
            v.add_argument(opt, help=text, required=(opt, name) in REQUIRED,
                           **({"type": _folder} if (opt, name) == ("--results", "contrast") else {}))
        if name == "warm-start":
            v.add_argument("--threads", type=_threads, default=1, help="torch threads (default 1)")
            v.add_argument("--rebuild", action="store_true",
                           help="warm-start even where the shipped checkpoint is this model's (make tiny-model)")
    _data_arguments(sub.choices["data"])
    _verify_arguments(sub.choices["verify"])
    _contrast_arguments(sub.choices["contrast"])
    _power_arguments(sub.choices["power"])
    _screen_arguments(sub.choices["screen"])
    _check_store_arguments(sub.choices["check-store"])
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit 0, 2 on a user error (a message naming the key, file or line; the train rule does not retry it),
    75 on a preemption (the job, requeued, or the retry resumes); anything else is a bug and keeps its traceback
    (exit 1)."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"mcgrpo {args.verb}: %(message)s", stream=sys.stderr)
    start = time.perf_counter()
    try:
        VERBS[args.verb](args)
    except Interrupted as e:
        print(f"mcgrpo {args.verb}: {e}; checkpoint written, rerun to resume", file=sys.stderr)
        return 75  # EX_TEMPFAIL: the requeued job or Snakemake's retry resumes from the checkpoint
    except McgrpoError as e:
        print(f"mcgrpo {args.verb}: error: {e}", file=sys.stderr)
        return 2
    # On stderr, so that what a verb prints (`data --json`) can be piped as it is.
    print(f"mcgrpo {args.verb}: done in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0
