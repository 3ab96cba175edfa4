"""An arm that TRL trains (`arms.<arm>.trainer.trl`): its GRPOConfig from the study's recipe, what cannot map
refused by name before any job, and what the run's identity adds (TRL's version, the user script's hash and
that of the user's code it imports).

Light (no trl, transformers or torch): a study naming a TRL arm validates where TRL is not installed; the train
job then needs the `mcgrpo[trl]` extra (mcgrpo.integrations.trl). docs/trl.md gives the mapping in words.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from mcgrpo.core import user_code

TRL_VERSION = "1.16.0"  # the version of the `trl` extra (pyproject.toml) and of bench/requirements-trl.txt

# recipe key -> the GRPOConfig fields it sets (docs/trl.md); every recipe key is here, mapped or not
RECIPE = {
    "prompts_per_iteration": "per_device_train_batch_size = prompts_per_iteration x group_size",
    "group_size": "num_generations",
    "completion_limit": "max_completion_length",
    "temperature": "temperature",
    "top_p": "top_p (top_k = 0)",
    "lr": "learning_rate (x arms.<arm>.lr.scale; lr_scheduler_type constant, no warm-up)",
    "adam_betas": "adam_beta1, adam_beta2 (optim adamw_torch, weight_decay 0: Adam)",
    "adam_eps": "adam_epsilon",
    "grad_clip": "max_grad_norm",
    "advantage_eps": "not settable: TRL divides by the group's std + 1e-4 (by design, docs/trl.md); above it refused",
    "microbatch_size": "not used: memory only in mcgrpo; TRL scores the batch in one pass",
    "reward_verifier": "the reward function (mcgrpo's verifier of the study's verifier.rule)",
    "threads": "torch threads of the train job",
}
# what every TRL arm fixes: one on-policy optimizer step per batch of P x G completions, no KL, mcgrpo's
# constant-normaliser loss as near as TRL has it (dr_grpo), the stream's prompts in order
FIXED = {"gradient_accumulation_steps": 1, "steps_per_generation": 1, "num_iterations": 1, "beta": 0.0,
         "loss_type": "dr_grpo", "scale_rewards": "group", "shuffle_dataset": False, "disable_dropout": True,
         "mask_truncated_completions": False, "top_k": 0, "lr_scheduler_type": "constant", "warmup_steps": 0,
         "optim": "adamw_torch", "weight_decay": 0.0, "report_to": "none", "save_strategy": "no",
         "logging_strategy": "steps", "logging_steps": 1, "disable_tqdm": True, "log_completions": False,
         "dataloader_num_workers": 0}

TRL_ADVANTAGE_EPS = 1e-4  # GRPOTrainer's (trl 1.16): advantages (R - mean) / (std + 1e-4), not settable

# sampling settings the recipe leaves at TRL's defaults: another value samples another distribution
SAMPLING = {"repetition_penalty": 1.0, "min_p": None, "generation_kwargs": None, "warmup_ratio": 0.0}
# GRPOConfig keys that say where and how a run is kept, logged and placed, not what it trains
NOT_SETTINGS = {"output_dir", "max_steps", "save_strategy", "logging_strategy", "logging_steps", "disable_tqdm",
                "log_completions", "report_to", "dataloader_num_workers", "use_cpu", "bf16"}


def arms(cfg: dict, kind: str = "trl") -> dict[str, dict]:
    """The study's TRL arms (`kind` trl) or ingested arms (`kind` ingested): name -> their `trainer.<kind>` block."""
    return {arm: spec["trainer"][kind] for arm, spec in cfg["arms"].items() if kind in (spec.get("trainer") or {})}


def problems(cfg: dict) -> list[str]:
    """What a TRL arm asks that TRL cannot do the way the protocol needs: one line per key, named."""
    found = []
    along = (cfg["evaluation"].get("alignment") or {}).get("arms", [])
    tested = (cfg.get("gradient_tests") or {}).get("arms", [])
    for arm, block in arms(cfg, "ingested").items():
        for seed in cfg["seeds"]:
            folder = output_folder(block, seed)
            if not folder.is_dir():
                found.append(f"config key arms.{arm}.trainer.ingested.trl_output: {folder} (seed {seed}): not a "
                             f"folder; allowed: the TRL output_dir of each seed ({{seed}} stands for the seed)")
    found += shared_runs(cfg)
    named, eps = [*arms(cfg), *arms(cfg, "ingested")], cfg["recipe"]["advantage_eps"]
    if named and eps > TRL_ADVANTAGE_EPS:
        found.append(f"config key recipe.advantage_eps: {eps:g} with TRL arm(s) {', '.join(map(repr, named))}: "
                     f"GRPOTrainer divides by the group's std + {TRL_ADVANTAGE_EPS:g} and cannot be given another "
                     f"epsilon, so its advantages would differ from the recipe's wherever a group's std is near "
                     f"{eps:g}, not only near 0; allowed: at most {TRL_ADVANTAGE_EPS:g} in a study with a TRL or "
                     f"ingested arm (docs/trl.md)")
    for arm, block in {**arms(cfg), **arms(cfg, "ingested")}.items():
        spec, key = cfg["arms"][arm], f"config key arms.{arm}"
        credit = spec.get("credit") or {"outcome": {}}
        if set(credit) != {"outcome"}:
            found.append(f"{key}.credit: {', '.join(credit)} is mcgrpo's credit rule, which TRL does not run; "
                         f"allowed: outcome (the study's verifier as TRL's reward), or trainer.trl.script with a "
                         f"reward function of your own (docs/trl.md)")
        for block_name, why in (("selection", "TRL draws the prompt stream in order"),
                                ("update", "TRL's clipped reuse (num_iterations) is not mapped")):
            if spec.get(block_name):
                found.append(f"{key}.{block_name}: {why}; allowed: leave it out for a TRL arm")
        if (spec.get("lr") or {}).get("schedule", "constant") != "constant":
            found.append(f"{key}.lr.schedule: {spec['lr']['schedule']} decays by generated tokens, TRL's schedules "
                         f"by steps; allowed: constant for a TRL arm")
        if cfg["engine"]["name"] != "hf":
            found.append(f"config key engine.name: {cfg['engine']['name']} with TRL arm {arm!r}; allowed: hf")
        if cfg["evaluation"].get("entropy_kl"):
            found.append(f"config key evaluation.entropy_kl: measured by mcgrpo's trainer, not in TRL arm {arm!r}; "
                         f"allowed: false")
        for what, names in (("evaluation.alignment.arms", along), ("gradient_tests.arms", tested)):
            if arm in names:
                found.append(f"config key {what}: names TRL arm {arm!r}, whose credit mcgrpo does not compute; "
                             f"allowed: mcgrpo's arms")
        script = block.get("script") if "trl" in spec["trainer"] else None
        if script is not None and not Path(script).is_file():
            found.append(f"{key}.trainer.trl.script: {script}: file not found (relative to the working directory)")
    return found


def shared_runs(cfg: dict) -> list[str]:
    """Ingested runs that are one run: two (arm, seed) whose folders are one folder (a trl_output without {seed}) or
    whose logs trained alike, every step's logged value the same but its time (a copied folder, or a run repeated
    with TRL's seed unchanged: GRPOConfig's default is 42). Each would enter the contrasts as an independent seed."""
    by: dict[tuple, list[str]] = {}
    for arm, block in arms(cfg, "ingested").items():
        for seed in cfg["seeds"]:
            folder = output_folder(block, seed)
            key = ("folder", folder.resolve())
            new = key not in by
            by.setdefault(key, []).append(f"arms.{arm} seed {seed}")
            trained = trajectory(folder) if new else None
            if trained:
                by.setdefault(("log", trained), []).append(f"arms.{arm} seed {seed} ({folder})")
    return [f"config key arms.<arm>.trainer.ingested.trl_output: {', '.join(runs)} read one "
            f"{f'folder, {what[1]}' if what[0] == 'folder' else 'run (logs the same at every step but its times)'}; "
            f"allowed: one TRL run of its own for each seed of each arm ({{seed}} in the path stands for the seed; "
            f"each run trained with a seed of its own, GRPOConfig's seed)"
            for what, runs in by.items() if len(runs) > 1]


def trajectory(folder: Path) -> str | None:
    """The sha256 of the newest log's per-step values but their times (None without a logged step): equal for two
    runs that trained alike."""
    saved = saved_checkpoints(folder)
    state = saved[max(saved)] / "trainer_state.json" if saved else None
    if state is None or not state.is_file():
        return None
    log = json.loads(state.read_text()).get("log_history", [])
    timeless = [{k: v for k, v in e.items() if not any(w in k for w in ("time", "runtime", "per_second"))}
                for e in log if isinstance(e, dict)]
    if not any("loss" in e for e in timeless):
        return None
    return hashlib.sha256(json.dumps(timeless, sort_keys=True).encode()).hexdigest()


def identity(block: dict) -> dict:
    """What a TRL arm adds to its run's effective config: TRL's version, the script's sha256 (None: mcgrpo's default
    trainer) and, where it imports any, the user's other code it reaches (mcgrpo.core.user_code), so that another TRL,
    an edited script or an edited helper of it makes another run. A script that imports none keeps its runs' keys."""
    script = Path(block["script"]) if block.get("script") else None
    if script is None or not script.is_file():
        return {"version": TRL_VERSION, "script_sha256": None}
    # The train job loads the script from its file (spec_from_file_location), in `python -m mcgrpo train` run in
    # the workflow's working directory: the script's imports resolve on that process's sys.path, its working
    # directory first. They are resolved here on the planning process's, where Snakemake puts the Snakefile's folder
    # first instead: the same folder unless --directory moves the working directory. The script's own folder is on
    # neither by itself, so a sibling module it imports fails at run time as it goes unseen here.
    reached = user_code.reached([script])
    return {"version": TRL_VERSION, "script_sha256": user_code.file_sha256(script),
            **({"user_code": reached} if reached else {})}


def edited(planned: dict, now: dict) -> list[str]:
    """What of a TRL arm's code differs from what its run was planned with (two identity() dicts): TRL's version,
    the script, or a module it imports (added, removed or edited), each named with both values."""
    def parts(ident: dict) -> dict[str, str]:
        return {"trl": f"version {ident.get('version')}", "the script": f"sha256 {ident.get('script_sha256')}",
                **{f"module {name}": f"sha256 {digest}" for name, digest in (ident.get("user_code") or {}).items()}}
    was, now = parts(planned), parts(now)
    return [f"{what} ({now.get(what, 'not imported')}, the run's {was.get(what, 'not imported')})"
            for what in {**was, **now} if was.get(what) != now.get(what)]


def output_folder(block: dict, seed: int) -> Path:
    """An ingested arm's TRL output folder of `seed` (`trainer.ingested.trl_output`, `{seed}` replaced)."""
    return Path(block["trl_output"].replace("{seed}", str(seed)))


CHECKPOINT = r"checkpoint-([1-9]\d*)"  # the name TRL gives a checkpoint (f"checkpoint-{global_step}")


def saved_checkpoints(folder: Path) -> dict[int, Path]:
    """A TRL output folder's checkpoint-<step>/ folders by step (empty where there are none): by TRL's name only, so
    that no two folders stand for one step (checkpoint-03 beside checkpoint-3: one read or the other by the
    directory's order)."""
    found = {int(m.group(1)): p for p in folder.iterdir() if (m := re.fullmatch(CHECKPOINT, p.name))} \
        if folder.is_dir() else {}
    return dict(sorted(found.items()))


def ingested_identity(block: dict, seed: int) -> dict:
    """What an ingested run's identity holds instead of a recipe it was not trained by: what its folder says it did
    (the sha256 of its newest checkpoint's trainer_state.json, the log, and training_args.bin, TRL's arguments), the
    reward functions its log names and every checkpoint's files (`checkpoint_files`), beside the arm's block (the
    folder's path) in the run's config: a folder changed since it was stored is another run, ingested anew."""
    saved = saved_checkpoints(output_folder(block, seed))
    if not saved:
        return {"trainer_state_sha256": None, "training_args_sha256": None, "rewards": [], "checkpoint_files": None}
    newest = saved[max(saved)]

    def digest(name: str) -> str | None:
        path = newest / name
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    state = newest / "trainer_state.json"
    logged = json.loads(state.read_text()).get("log_history", []) if state.is_file() else []
    rewards = sorted({name for e in logged for name in reward_names(e)})
    return {"trainer_state_sha256": digest("trainer_state.json"), "training_args_sha256": digest("training_args.bin"),
            "rewards": rewards, "checkpoint_files": checkpoint_files(saved)}


def reward_names(entry: dict) -> set[str]:
    """The reward functions a TRL log entry names: <name> of its rewards/<name>/mean (and /std), one per function."""
    return {k.split("/")[1] for k in entry if k.startswith("rewards/") and k.count("/") == 2}


def checkpoint_files(saved: dict[int, Path]) -> str:
    """The sha256 of every file of every checkpoint by path, size and modification time: ingest evaluates each
    checkpoint's weights and reads each one's log and arguments, so any of them rewritten (an earlier checkpoint's
    weights replaced, a checkpoint added or removed) makes another run, where the newest log alone stays the same.
    File times, not contents: a model's weights are too large to hash at every plan; a file touched, or copied in
    place without its times, is another run too, ingested again."""
    entries = []
    for folder in saved.values():
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            stat = path.stat()
            entries.append((path.relative_to(folder.parent).as_posix(), stat.st_size, stat.st_mtime_ns))
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def grpo_arguments(run: dict, output_dir: str, max_steps: int, on_gpu: bool) -> dict:
    """GRPOConfig's keyword arguments for a run's effective config (RECIPE and FIXED)."""
    r, scale = run["recipe"], (run["arm_config"].get("lr") or {}).get("scale", 1.0)
    chat = (run.get("model") or {}).get("chat_template")
    return {**FIXED, "output_dir": output_dir, "max_steps": max_steps, "seed": run["seed"],
            "per_device_train_batch_size": r["prompts_per_iteration"] * r["group_size"],
            "num_generations": r["group_size"], "max_completion_length": r["completion_limit"],
            "temperature": r["temperature"], "top_p": r["top_p"], "learning_rate": r["lr"] * scale,
            "adam_beta1": r["adam_betas"][0], "adam_beta2": r["adam_betas"][1], "adam_epsilon": r["adam_eps"],
            "max_grad_norm": r["grad_clip"], "use_cpu": not on_gpu, "bf16": on_gpu,
            **({"chat_template_kwargs": dict(chat)} if chat else {})}
