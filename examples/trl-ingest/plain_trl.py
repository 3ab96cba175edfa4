"""A plain TRL run, made before mcgrpo knew of it: the folder an ingested arm stores (docs/trl.md, "Runs already
made").

Nothing of mcgrpo's protocol runs here: TRL's GRPOTrainer trains the model on the study's training problems with a
reward of its own, logs every step and saves a checkpoint every step, as a user's own script would. mcgrpo is used
only to read what the study says (its problems, its recipe's numbers, its initial model), so that the run can be
compared with the study's other arms; `mcgrpo ingest`, or the study's train job for an ingested arm, then evaluates
its checkpoints under the protocol.

    .venv-bench/bin/python examples/trl-ingest/plain_trl.py --study examples/trl-ingest/trl-four-arms.yaml \
        --seed 1 --out results/trl-ingest-example/seed1

The GRPOConfig below is the study's recipe written out by hand, as the user who wants the run compared would have
written it; a run of another recipe is refused by ingest by key, or stored and marked in every table with the arm's
`accept_differences: true`. The prompts are the training pool in an order of the user's own (the seed's shuffle),
not the protocol's prompt stream.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def study(path: str) -> dict:
    """The study's task, model and recipe, validated (defaults filled in) without its arms: its ingested arm's folders
    are what this script is about to make."""
    from mcgrpo import studies
    from mcgrpo.core import config
    raw = config.read(path)
    kept = {key: raw[key] for key in ("study", "task", "model", "recipe") if key in raw}
    return studies.validate({**kept, "seeds": [1], "arms": {"outcome": {}}})


def initial_model(cfg: dict, given: str | None) -> Path:
    """The folder the run starts from: `given`, else the study's initial model (the shipped warm-started tiny model
    where the study's warm start is the default study's, else the one the workflow built)."""
    from mcgrpo.core import layout
    from mcgrpo.train.models import shipped
    if given:
        return Path(given)
    if cfg["model"]["source"] is None and shipped.matches(layout.warm_start_spec(cfg)):
        return shipped.FOLDER
    built = layout.model_path(cfg)
    if not built.is_dir():
        sys.exit(f"{built}: not found (the study's initial model); allowed: --model DIR, a Hugging Face folder")
    return built


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="the study's YAML (its task, model and recipe)")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True, help="TRL's output_dir (the arm's trl_output with {seed} filled in)")
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps (enough to pass the study's B)")
    parser.add_argument("--model", help="the folder to start from (default: the study's initial model)")
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from mcgrpo import data
    from mcgrpo.api import is_correct

    cfg = study(args.study)
    recipe, task = cfg["recipe"], cfg["task"]
    torch.set_num_threads(recipe["threads"])
    folder = initial_model(cfg, args.model)
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)

    pool, _ = data.build(task)  # the study's training problems; the evaluation sets are never trained on
    order = np.random.default_rng(args.seed).permutation(len(pool))
    rows = pool.iloc[order]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": task["prompt"].replace("{question}", q)}],
                                  "answer": str(a)} for q, a in zip(rows["question"], rows["answer"])])

    def boxed_answer(completions, answer, **_) -> list[float]:
        """1 where the final boxed answer is the reference (the study's default verifier), else 0."""
        return [float(is_correct(c[-1]["content"], a, recipe["reward_verifier"]))
                for c, a in zip(completions, answer)]

    grpo = GRPOConfig(
        output_dir=args.out, seed=args.seed, max_steps=args.steps, use_cpu=not torch.cuda.is_available(),
        # one optimizer step on each generated batch of prompts_per_iteration x group_size completions
        per_device_train_batch_size=recipe["prompts_per_iteration"] * recipe["group_size"],
        num_generations=recipe["group_size"], gradient_accumulation_steps=1, num_iterations=1,
        max_completion_length=recipe["completion_limit"], temperature=recipe["temperature"], top_p=recipe["top_p"],
        top_k=0,
        # Adam at a constant learning rate, clipped
        learning_rate=recipe["lr"], lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        weight_decay=0.0, adam_beta1=recipe["adam_betas"][0], adam_beta2=recipe["adam_betas"][1],
        adam_epsilon=recipe["adam_eps"], max_grad_norm=recipe["grad_clip"],
        # GRPO without KL, rewards scaled per group, the prompts in the dataset's order, no dropout
        beta=0.0, loss_type="dr_grpo", scale_rewards="group", shuffle_dataset=False, disable_dropout=True,
        # what ingest reads: a log entry every step, a checkpoint every step (the model, not the optimizer)
        logging_steps=1, save_strategy="steps", save_steps=1, save_only_model=True, report_to="none",
        disable_tqdm=True)
    GRPOTrainer(model=model, reward_funcs=[boxed_answer], args=grpo, train_dataset=dataset,
                processing_class=tokenizer).train()
    print(f"{args.out}: {args.steps} steps, a checkpoint each")


if __name__ == "__main__":
    main()
