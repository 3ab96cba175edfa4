"""Seconds per training stage (select, generate, credit, update, sync) for one configuration.

Two modes:
  python bench/iteration_profile.py --study config/config.yaml --arm mc_k4 [--model results/_shared/models/tiny-<hash>]
      the real trainer on a study's arm (the tiny model by default), N iterations after warm-up;
  python bench/iteration_profile.py --shape qwen2.5-1.5b [--device cuda]
      a randomly initialized model of Qwen2.5-1.5B's shape (no download), 8 prompts x 8 completions forced
      to 380 tokens, generate + update timed like the trainer's stages (bf16 autocast on a GPU), against the
      paper's Table 14 (H200: 604 s generating and 940 s updating over 584 iterations, about 1.0 s and 1.6 s
      per iteration). A smoke check on the CPU keeps the shape of a layer but fewer of them:
  python bench/iteration_profile.py --shape qwen2.5-1.5b --layers 1 --limit 8 --warmup 0 --iterations 1
  (tests/test_benches.py also shrinks the vocabulary, --vocab 1000, to run it in seconds; --narrow 8 divides
  the hidden and MLP sizes too, as bench/gpu/run.py --dry-run does)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "workflow"))

from mcgrpo.core.openmp import set_wait_defaults  # noqa: E402

set_wait_defaults()  # before torch loads OpenMP: threads wait as a pipeline job's do (`python -m mcgrpo`)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from mcgrpo.core.clock import STAGES, StageClock  # noqa: E402

PAPER = {"generate": 604 / 584, "update": 940 / 584}
QWEN25_15B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                  num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=4096,
                  tie_word_embeddings=True, rope_theta=1e6)


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    """Median seconds per iteration of each stage."""
    return {s: statistics.median(r[f"t_{s}"] for r in rows) for s in STAGES}


def write_json(path: str | None, rows: list[dict[str, float]], **figures) -> None:
    """--json: the stage medians and the run's other figures, for bench/gpu/run.py's comparison."""
    if path:
        Path(path).write_text(json.dumps({"seconds": medians(rows), "iterations": len(rows), **figures}))


def print_table(rows: list[dict[str, float]], title: str, reference: dict[str, float] | None = None) -> None:
    print(f"\n{title}: median seconds per iteration over {len(rows)} iterations")
    print(f"{'stage':<10}{'seconds':>10}{'share':>8}" + (f"{'paper':>10}" if reference else ""))
    seconds = medians(rows)
    total = sum(seconds.values())
    for s in STAGES:
        med = seconds[s]
        ref = f"{reference[s]:>10.3f}" if reference and s in reference else ("" if not reference else f"{'':>10}")
        print(f"{s:<10}{med:>10.3f}{med / total:>8.1%}" + ref)
    print(f"{'total':<10}{total:>10.3f}")


def profile_study(args) -> None:
    from mcgrpo import data, studies
    from mcgrpo.core import config as study_config, layout
    from mcgrpo.train import models
    from mcgrpo.train.trainer import Trainer
    cfg = studies.load(args.study)
    model, tokenizer = models.load(args.model or layout.model_path(cfg))
    pool, _ = data.read(layout.data_dir(cfg), [])
    trainer = Trainer(study_config.run_config(cfg, args.arm, cfg["seeds"][0]), model, tokenizer, pool, None, None)
    trainer.run(max_iterations=args.warmup + args.iterations)
    rows = trainer.log.iterations[args.warmup:]
    print_table(rows, f"{cfg['study']} / {args.arm} on {model.device}, {args.threads} thread(s)")
    tokens = np.diff([0] + [r["tokens_total"] for r in trainer.log.iterations])[args.warmup:]
    print(f"generated tokens per iteration: {np.median(tokens):.0f}")
    write_json(args.json, rows, tokens_per_iteration=float(np.median(tokens)), device=str(model.device))


def profile_shape(args) -> None:
    from mcgrpo.train.engines.hf import HFEngine
    device = torch.device(args.device)
    model = shape_model(args)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-6)
    tokenizer = type("T", (), {"eos_token_id": -1, "pad_token_id": 0})()  # no end token: every row runs to L
    engine = HFEngine(model, tokenizer, batch_size=64, decode=args.decode)
    clock, rows = StageClock(torch.cuda.synchronize if torch.device(device).type == "cuda" else None), []
    prompts = paper_prompts(args.vocab)
    for it in range(args.warmup + args.iterations):
        with clock.stage("generate"):
            completions = engine.generate(prompts, [args.limit] * 64, [it * 64 + r for r in range(64)])
        credit = [np.random.default_rng(r).standard_normal(len(c)) for r, c in enumerate(completions)]
        with clock.stage("update"):
            update(model, optimizer, prompts, [c.tokens for c in completions], credit, args.microbatch)
        lap = clock.lap()
        if it >= args.warmup:
            rows.append(lap)
    print_table(rows, f"{shape_title(args)}, 8 x 8 x {args.limit} tokens on {device}, decode {args.decode}", PAPER)
    write_json(args.json, rows, tokens_per_iteration=64 * args.limit, device=str(device), decode=args.decode,
               **shape_figures(args, model))


def update(model, optimizer, prompts, completions, credit, microbatch: int) -> None:
    """One update as the trainer's: the policy loss's gradient over microbatches, the norm clipped, a step."""
    from mcgrpo.train.loss import backward_policy_loss
    optimizer.zero_grad(set_to_none=True)
    backward_policy_loss(model, prompts, completions, credit, 0, microbatch)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def shape_model(args):
    """Qwen2.5-1.5B's architecture (less of it where --layers, --vocab or --narrow say), random weights, on
    --device: the same model for the same arguments."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    shape = {**QWEN25_15B, "num_hidden_layers": args.layers, "vocab_size": args.vocab,
             "hidden_size": QWEN25_15B["hidden_size"] // args.narrow,
             "intermediate_size": QWEN25_15B["intermediate_size"] // args.narrow}
    return Qwen2ForCausalLM(Qwen2Config(**shape)).to(torch.device(args.device))


def paper_prompts(vocab: int) -> list[tuple[int, ...]]:
    """8 prompts of 120 random tokens, each 8 times (a group per prompt)."""
    groups = [tuple(np.random.default_rng(i).integers(1, vocab, size=120).tolist()) for i in range(8)]
    return [p for p in groups for _ in range(8)]


def shape_title(args) -> str:
    title = "Qwen2.5-1.5B shape"
    title += "" if args.layers == QWEN25_15B["num_hidden_layers"] else f" ({args.layers} of its layers)"
    title += "" if args.vocab == QWEN25_15B["vocab_size"] else f" (vocabulary {args.vocab})"
    return title + ("" if args.narrow == 1 else f" ({args.narrow}x narrower)")


def shape_figures(args, model) -> dict:
    """What bench/gpu/run.py's floors need: the shape's parameters and tokens."""
    return {"limit": args.limit, "prompt": 120, "parameters": sum(p.numel() for p in model.parameters())}


def add_shape_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--limit", type=int, default=380)
    p.add_argument("--layers", type=int, default=QWEN25_15B["num_hidden_layers"], help="--shape: layers kept")
    p.add_argument("--vocab", type=int, default=QWEN25_15B["vocab_size"], help="--shape: vocabulary size")
    p.add_argument("--narrow", type=int, default=1, help="--shape: hidden and MLP sizes divided by this (12 heads "
                   "kept: at most 128)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--study", default="config/config.yaml")
    p.add_argument("--arm", default="outcome")
    p.add_argument("--model", default=None)
    p.add_argument("--shape", choices=["qwen2.5-1.5b"], default=None)
    add_shape_arguments(p)
    p.add_argument("--decode", default="auto", help="--shape: the hf engine's decode (auto, dynamic, static, graph, "
                   "compile)")
    p.add_argument("--microbatch", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iterations", type=int, default=8)
    p.add_argument("--json", default=None, help="also write the stage medians to this file")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    profile_shape(args) if args.shape else profile_study(args)


if __name__ == "__main__":
    main()
