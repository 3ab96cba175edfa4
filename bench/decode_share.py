"""Seconds the hf engine takes to decode an evaluation and a rollout batch, for each share of finished rows at
which they leave the decode batch (`mcgrpo.train.engines.hf.LEAVE_SHARE`; 0: at every finish), alternating the
shares round by round in one process, on one thread, with the tokens checked equal across shares:

    python bench/decode_share.py [--study config/config.yaml] [--model DIR] [--shares 0 0.125 0.25] [--rounds 7]

The study's warm-started model is used where `make run` built it (else an untrained one, whose completions
run to their limit). The evaluation is the study's first evaluation set x `evaluation.samples`, the rollout batch
`prompts_per_iteration` x `group_size` pool problems, at the recipe's completion limit. The last line prints each
share's evaluation time over the first share's.
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

from mcgrpo.train.engines import hf  # noqa: E402
from mcgrpo.train.rollout import Prompter  # noqa: E402
from engines import rollout_prompts  # noqa: E402
from trainer_vs_trl import load_world, study_data  # noqa: E402


def batches(cfg, tokenizer, pool) -> dict[str, list[tuple[int, ...]]]:
    """The prompts of one evaluation and of one rollout batch."""
    prompter = Prompter(tokenizer, cfg["task"].get("prompt", "{question}"))
    name = cfg["evaluation"]["sets"][0]
    evals = study_data(cfg, [name])[1][name]
    return {"evaluation": [prompter(q) for q in evals["question"] for _ in range(cfg["evaluation"]["samples"])],
            "rollouts": rollout_prompts(cfg, tokenizer, pool)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", default="config/config.yaml")
    p.add_argument("--model", default=None, help="a model folder (default: the study's warm-started model)")
    p.add_argument("--shares", type=float, nargs="+", default=[0.0, 0.125, 0.25])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    args.limit = None
    torch.set_num_threads(1)
    cfg, model, tokenizer, pool = load_world(args)
    engine, limit = hf.HFEngine(model, tokenizer), cfg["recipe"]["completion_limit"]
    prompts_of, seconds, tokens = batches(cfg, tokenizer, pool), {}, {}
    for _ in range(args.rounds):
        for share in args.shares:
            hf.LEAVE_SHARE = share
            for kind, prompts in prompts_of.items():
                start = time.perf_counter()
                out = engine.generate(prompts, [limit] * len(prompts), list(range(len(prompts))))
                seconds.setdefault((share, kind), []).append(time.perf_counter() - start)
                tokens.setdefault(kind, {})[share] = [c.tokens for c in out]
    print(f"medians over {args.rounds} rounds, shares alternating, 1 thread")
    for (share, kind), values in seconds.items():
        print(f"share {share:<6g} {kind:<11}{statistics.median(values):>8.3f} s  "
              f"{sum(map(len, tokens[kind][share]))} tokens")
    same = all(len({tuple(map(tuple, t)) for t in by_share.values()}) == 1 for by_share in tokens.values())
    print(f"tokens identical across shares: {same}")
    base = statistics.median(seconds[(args.shares[0], "evaluation")])
    print("evaluation time over share " + f"{args.shares[0]:g}: " + ", ".join(
        f"{s:g} {statistics.median(seconds[(s, 'evaluation')]) / base:.2f}x" for s in args.shares))


if __name__ == "__main__":
    main()
