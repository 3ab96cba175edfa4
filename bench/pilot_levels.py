"""A model's base accuracy per level of a leveled task, to choose a study's level and completion limit (not a test).

A study's contrast can decide only where the model starts neither at the floor nor at the ceiling: this samples
`--problems` evaluation-side problems of each level, `--samples` completions each at the study's completion limit
(or --limit), through the study's prompt, chat template and engine, and prints per level what the evaluation would
record (both verifiers, boxed, truncated, mean length) and the tokens per second. It is a pilot: what it prints
chooses a study's shape before the lock, and is read into no verdict.

    .venv-vllm/bin/python bench/pilot_levels.py --study config/studies/smollm2-arith-cpu.yaml --model smollm2 \
        --engine vllm --levels 2 3 4 5 --problems 32 --samples 2 [--limit 96] [--show 2]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow"))

from mcgrpo import data  # noqa: E402
from mcgrpo.train import engines  # noqa: E402
from mcgrpo.train.evaluation import Evaluator  # noqa: E402
from mcgrpo.train.rollout import study_prompter  # noqa: E402
from trainer_vs_trl import load_world, world_arguments  # noqa: E402


def level_set(cfg: dict, level: int, problems: int) -> dict:
    """{f"level{level}": `problems` evaluation-side problems of that level}, drawn as a study's eval set is."""
    task = copy.deepcopy(cfg["task"])
    task["pool"] = {**task.get("pool", {}), "levels": [level], "size": 8}
    task["eval_sets"] = {f"level{level}": {"size": problems, "levels": [level]}}
    _, sets = data.build(task)
    return sets


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    world_arguments(p)
    p.add_argument("--engine", default="hf", help="hf or vllm (the study's engine by default: hf)")
    p.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--problems", type=int, default=32)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--show", type=int, default=0, help="completions to print per level")
    p.add_argument("--prompt", help="task.prompt to try instead of the study's")
    p.add_argument("--temperature", type=float, help="recipe.temperature to try instead of the study's")
    args = p.parse_args()
    cfg, model, tokenizer, _ = load_world(args)
    cfg["task"]["prompt"] = args.prompt or cfg["task"].get("prompt", "{question}")
    cfg["recipe"]["temperature"] = args.temperature or cfg["recipe"]["temperature"]
    torch.set_num_threads(cfg["recipe"]["threads"])
    r, limit = cfg["recipe"], cfg["recipe"]["completion_limit"]
    engine = engines.build(args.engine, model, tokenizer, temperature=r["temperature"], top_p=r["top_p"])
    engine.sync(model)
    print(f"{args.problems} problems x {args.samples} samples per level, at most {limit} tokens, temperature "
          f"{r['temperature']}, engine {args.engine}, {torch.get_num_threads()} thread(s); prompt "
          f"{cfg['task']['prompt']!r}")
    print(f"{'level':<7}{'acc_default':>12}{'acc_strict':>11}{'boxed':>7}{'truncated':>10}{'mean_len':>9}"
          f"{'tokens/s':>9}")
    for level in args.levels:
        sets = level_set(cfg, level, args.problems)
        evaluate = Evaluator(engine, study_prompter(tokenizer, cfg), sets, args.samples, limit, run_seed=0,
                             rule=cfg.get("verifier", {}).get("rule", "whole_box"))
        start = time.perf_counter()
        (row,), table = evaluate(0)
        seconds = time.perf_counter() - start
        print(f"{level:<7}{row['acc_default']:>12.3f}{row['acc_strict']:>11.3f}{row['boxed_share']:>7.2f}"
              f"{row['truncated_share']:>10.2f}{row['mean_length']:>9.1f}{table['length'].sum() / seconds:>9.1f}",
              flush=True)
        for text, ok in list(zip(table["text"], table["correct_default"]))[:args.show]:
            print(f"    [{'right' if ok else 'wrong'}] {text!r}")


if __name__ == "__main__":
    main()
