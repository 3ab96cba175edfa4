"""The card's own ceilings, measured in the run that compares against them: a bf16 matrix product's TFLOP/s and a
device-to-device copy's TB/s (bytes read plus bytes written), each the median of timed repeats after warm-ups.

  python bench/gpu/ceilings.py --json FILE [--size 8192] [--copy-gib 4]   (bench/gpu/run.py's first step)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch


def timed(fn, device: torch.device, repeats: int = 10, warmup: int = 3) -> float:
    """Median seconds of `fn` over `repeats` calls after `warmup`, the device synchronised around each."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", required=True)
    p.add_argument("--size", type=int, default=8192, help="the square matrices' side")
    p.add_argument("--copy-gib", type=float, default=4.0, help="GiB copied")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    a, b = (torch.randn(args.size, args.size, device=device, dtype=torch.bfloat16) for _ in range(2))
    tflops = 2 * args.size ** 3 / timed(lambda: a @ b, device) / 1e12
    source = torch.empty(int(args.copy_gib * 2**30), dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    tbps = 2 * source.numel() / timed(lambda: target.copy_(source), device) / 1e12
    print(f"{device}: bf16 matmul {args.size}^3 {tflops:.1f} TFLOP/s; copy {args.copy_gib:g} GiB {tbps:.2f} TB/s "
          "(read + written)")
    Path(args.json).write_text(json.dumps({"matmul_tflops": tflops, "copy_tbps": tbps}))


if __name__ == "__main__":
    main()
