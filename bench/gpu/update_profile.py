"""The paper-shape update alone (issue 45, item 2): where it stands against its floor, what costs the rest, and
what the changes a GPU session should weigh would buy, measured side by side in one run.

Seconds per update (the trainer's: the policy loss over microbatches, the norm clipped, an Adam step) on
64 completions of --limit random tokens after 120-token prompts, for the trainer's settings (microbatch 16; on a
GPU since 2026-12-05 the fused Adam and the chosen token's log-prob as logit - logsumexp, loss.chosen_logprobs)
and each variant: microbatch 64; each of the two changes undone (the unfused Adam, torch's default; a float32
log-softmax over the vocabulary, then gather); both undone (the update as issue 45 measured it). Then one update
of the trainer's settings under
torch.profiler, its kernel time summed by kind (the vocabulary's log-softmax, attention, matrix products, the
optimizer, the rest) and its costliest kernels by name. No variant changes the trainer: choosing one is a
change to train/ that must pass tests/test_update_exactness.py.

  python bench/gpu/update_profile.py --json FILE                       (bench/gpu/run.py's step "update")
  python bench/gpu/update_profile.py --device cpu --layers 1 --vocab 1000 --narrow 8 --limit 4 --json FILE
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ceilings import timed  # noqa: E402
from iteration_profile import add_shape_arguments, paper_prompts, shape_figures, shape_model, update  # noqa: E402

TRAINER = {"microbatch": 16, "adam": "trainer", "chosen": True}
VARIANTS = {"trainer": TRAINER, "microbatch 64": {**TRAINER, "microbatch": 64},
            "Adam unfused": {**TRAINER, "adam": "unfused"}, "log-softmax": {**TRAINER, "chosen": False},
            "before": {**TRAINER, "adam": "unfused", "chosen": False}}
RECIPE = {"lr": 1e-6, "adam_betas": [0.9, 0.999], "adam_eps": 1e-8}
# Kernel or operator names -> kind, first match wins (attention before matrix products: its kernels say cutlass).
# "log-softmax": either scoring of the chosen token's log-prob (log_softmax + gather, or loss.chosen_logprobs).
KINDS = [("log-softmax", r"softmax|logsumexp|scatter_add"), ("attention", r"attention|attn|flash|fmha|sdpa"),
         ("matrix products", r"gemm|xmma|nvjet|cutlass|cublas|aten::(mm|addmm|bmm|matmul|linear)\b"),
         ("optimizer", r"adam|multi_tensor|foreach")]


def kind(name: str) -> str:
    return next((k for k, pattern in KINDS if re.search(pattern, name, re.I)), "other")


def optimizer(model, which: str) -> torch.optim.Adam:
    """The trainer's Adam (mcgrpo.train.trainer.adam), or torch's default one, unfused."""
    from mcgrpo.train.trainer import adam
    return adam(model, RECIPE) if which == "trainer" else torch.optim.Adam(model.parameters(), lr=RECIPE["lr"])


def seconds_per_update(model, batch, variant: dict, repeats: int) -> float | str:
    """Median seconds of the variant's update after a warm-up (which allocates Adam's state), or why it could not
    run. On a CPU too the variant's scoring is used where it says chosen (a GPU's choice, timed on a CPU)."""
    from mcgrpo.train import loss
    optimizer_, chosen_on = optimizer(model, variant["adam"]), loss.CHOSEN_ON
    loss.CHOSEN_ON = frozenset({model.device.type}) if variant["chosen"] else frozenset()
    try:
        return timed(lambda: update(model, optimizer_, *batch, variant["microbatch"]), model.device, repeats, 1)
    except torch.OutOfMemoryError:
        return "out of memory"
    finally:
        loss.CHOSEN_ON = chosen_on
        optimizer_.state.clear()
        model.zero_grad(set_to_none=True)
        if model.device.type == "cuda":
            torch.cuda.empty_cache()


def breakdown(model, batch) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """One update of the trainer's settings profiled: seconds by kind, and the eight costliest kernels (on a CPU,
    operators: their self time)."""
    on_gpu = model.device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_gpu else [])
    trainers = optimizer(model, VARIANTS["trainer"]["adam"])
    with torch.profiler.profile(activities=activities) as prof:
        update(model, trainers, *batch, VARIANTS["trainer"]["microbatch"])
        if on_gpu:
            torch.cuda.synchronize()
    spent = {e.key: (e.self_device_time_total if on_gpu else e.self_cpu_time_total) / 1e6
             for e in prof.key_averages()}
    by_kind: dict[str, float] = {}
    for name, seconds in spent.items():
        by_kind[kind(name)] = by_kind.get(kind(name), 0.0) + seconds
    return by_kind, sorted(spent.items(), key=lambda kv: -kv[1])[:8]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(p)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", required=True)
    args = p.parse_args()
    model = shape_model(args)
    prompts = paper_prompts(args.vocab)
    completions = [np.random.default_rng(100 + r).integers(1, args.vocab, size=args.limit).tolist()
                   for r in range(64)]
    credit = [np.random.default_rng(r).standard_normal(args.limit) for r in range(64)]
    batch = (prompts, completions, credit)
    seconds = {name: seconds_per_update(model, batch, v, args.repeats) for name, v in VARIANTS.items()}
    by_kind, top = breakdown(model, batch)
    print(f"update, 64 x {args.limit} tokens on {model.device}: seconds per update")
    for name, s in seconds.items():
        print(f"  {name:<16}{s:>9.3f}" if isinstance(s, float) else f"  {name:<16}{s:>9}")
    print("one update (trainer's settings) by kind, kernel seconds: "
          + ", ".join(f"{k} {s:.3f}" for k, s in sorted(by_kind.items(), key=lambda kv: -kv[1])))
    for name, s in top:
        print(f"  {s:9.4f}  {name[:100]}")
    Path(args.json).write_text(json.dumps({"update_s": seconds, "by_kind_s": by_kind, "top_s": top,
                                           "device": str(model.device), **shape_figures(args, model)}))


if __name__ == "__main__":
    main()
