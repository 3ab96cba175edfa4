"""Gradient tests (paper 2.4, A, H.3): each arm's update direction against a reference gradient, on fixed
batches at one policy, before any training.

For a batch of rollouts and an arm's credit rule, u is the gradient of the recipe's loss (train/loss.py, the
arm's own credit, its extra sequences included) with its sign flipped: the direction the trainer's step
follows before clipping and Adam. The reference h estimates the gradient of expected accuracy J from
separately sampled continuations (H.3): three interior cuts and the endpoint, each segment credited with
the change in success rate across it, p_0 = a success prior of 0.5 (the Monte-Carlo rule in its value-difference
form, so the estimate is unbiased: the prior is a baseline and each p_s is unbiased for the prefix's value).
Its continuations have their own seeds: they are the paper's half A, and a Monte-Carlo arm's own draws give
the disjoint candidate of half B. As in H.3 they run at most 200 tokens at top-p 0.95 by default
(`gradient_tests.reference.length`, `top_p`; length null: the rest of the completion limit, so that h estimates
the gradient of J at that limit itself).

V is the span of the per-completion score vectors s_n = grad sum_t log pi(a_n,t); every update that weights
whole completions lies in V (Proposition 1). P_perp x = x - S^T c with c the least-squares solution of
S^T c = x. Per arm and batch: alignment cos(P_perp u, P_perp h), the share of the update outside V
||P_perp u|| / ||u|| (outcome-only's is the projection's residual, ~0), the projection's numerical
orthogonality, the full cosine, <u, h>, ||u||^2 and the generated tokens the update consumes, from which
analysis/efficiency.py forms (E<u, h>)^2 / E||u||^2 relative to outcome-only, per update and per token.

Parameter space: every parameter (the tiny model), or LoRA adapters (rank and target modules from the config,
injected with peft) for large models, as the paper's probes did. With peft's zero-initialized B matrices the
gradient at the initial policy lies in the B factors alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from mcgrpo.core import plugins, progress
from mcgrpo.core.seeds import stable_seed
from mcgrpo.train import credit as credit_rules
from mcgrpo.train import contract, engines, updates
from mcgrpo.train.credit import Credit, CreditContext
from mcgrpo.train.credit.monte_carlo import MonteCarlo
from mcgrpo.train.loss import backward_policy_loss
from mcgrpo.train.policy import PolicyView, frozen, log_ratio
from mcgrpo.train.rollout import PrompterView, Rollouts, problem_records, sample_groups, study_prompter, study_rule

INSIDE_V = 1e-5  # ||P_perp u|| / ||u|| below this is the projection's float32 noise: the update lies in V
MEASURES = ("inner", "sq_norm", "alignment", "share_outside_v", "projection_residual", "cos_full", "tokens",
            "tokens_continuation")


def parameter_space(model, space: str, lora: dict | None = None, seed: int = 0) -> list[torch.nn.Parameter]:
    """The parameters the gradients live in: all of them, or LoRA adapters injected into `model` in place
    (its forward signature unchanged, so the engine and the loss run it as before). peft draws the A matrices from
    torch's global generator: here seeded from `seed` alone (the gradient tests' seed) and put back after, so that the
    subspace measured is the same at every measurement of every run, whatever drew from that generator before (a
    plugin, built or called: tests/test_plugin_globals.py), and the run's own draws are left as they were."""
    if space == "full":
        return [p for p in model.parameters() if p.requires_grad]
    from peft import LoraConfig, inject_adapter_in_model
    lora = lora or {}
    config = LoraConfig(r=lora.get("rank", 16), lora_alpha=lora.get("alpha", 32), lora_dropout=0.0,
                        target_modules=list(lora.get("targets", ["q_proj", "v_proj"])))
    with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_available() else []):
        torch.manual_seed(stable_seed(seed, "lora"))
        inject_adapter_in_model(config, model)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return [p for p in model.parameters() if p.requires_grad]


def direction(model, params: Sequence[torch.nn.Parameter], batch: updates.Batch, pad_id: int,
              microbatch_size: int) -> torch.Tensor:
    """-grad of the recipe's loss on `batch` (float64, flattened over `params`): the update direction."""
    for p in params:
        p.grad = None
    backward_policy_loss(model, batch.contexts, batch.tokens, batch.credit, pad_id, microbatch_size)
    return -torch.cat([p.grad.reshape(-1).double() for p in params])


def score_vectors(model, params, rollouts: Rollouts, pad_id: int, microbatch_size: int) -> torch.Tensor:
    """[completions, parameters]: row n is grad sum_t log pi(a_n,t) (one backward pass per completion)."""
    n = len(rollouts.completions)
    rows = []
    for r, c in enumerate(rollouts.completions):
        credit = [np.ones(len(c)) if q == r else np.zeros(len(x)) for q, x in enumerate(rollouts.completions)]
        rows.append(n * direction(model, params, updates.training_batch(rollouts, Credit(credit)), pad_id,
                                  microbatch_size))
    return torch.stack(rows)


def project_out(scores: torch.Tensor, vectors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """P_perp of each row of `vectors` (least squares against the span of the rows of `scores`), and each
    projection's numerical residual max_n |<s_n, P_perp x>| / (max_n ||s_n|| ||x||) (0 in exact arithmetic)."""
    basis = scores.T  # [parameters, completions]
    # SVD-based: repeated completions make the scores rank-deficient, where gelsy (the CPU default) fails
    coefficients = torch.linalg.lstsq(basis.cpu(), vectors.T.cpu(), driver="gelsd").solution.to(basis.device)
    outside = vectors - (basis @ coefficients).T
    scale = scores.norm(dim=1).max() * vectors.norm(dim=1)
    residual = (scores @ outside.T).abs().max(dim=0).values / scale.clamp(min=torch.finfo(scale.dtype).tiny)
    return outside, residual


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    denominator = float(a.norm() * b.norm())
    return float(a @ b) / denominator if denominator > 0 else np.nan


def measures(u: torch.Tensor, h: torch.Tensor, u_out: torch.Tensor, h_out: torch.Tensor) -> dict[str, float]:
    """One arm's numbers on one batch, from its update, the reference and their parts outside V."""
    norm = float(u.norm())
    # an update numerically inside V (outcome-only) has nothing outside it to align: NaN, not noise
    alignment = _cos(u_out, h_out) if float(u_out.norm()) > INSIDE_V * norm else np.nan
    return {"inner": float(u @ h), "sq_norm": norm ** 2, "alignment": alignment,
            "share_outside_v": float(u_out.norm()) / norm if norm > 0 else np.nan, "cos_full": _cos(u, h)}


def alignment_text(alignment: float) -> str:
    """The alignment outside V as a terminal line shows it: undefined (NaN) for an update with nothing outside V."""
    return f"{alignment:+.3f}" if np.isfinite(alignment) else "n/a (inside V)"


@dataclass
class Reference:
    """The reference gradient's credit (H.3): value differences from `cuts` interior cuts and the endpoint,
    p_0 = the success prior, its continuations at most `length` tokens (H.3: 200; never past the completion
    limit, on which the paper is silent) sampled at `top_p` (H.3: 0.95; None: the recipe's)."""
    rule: MonteCarlo
    top_p: float | None = None

    def __call__(self, rollouts: Rollouts, ctx: CreditContext, engine=None) -> Credit:
        """The credit, `engine` (the one ctx.engine samples with, by default itself) at the reference's top-p."""
        with engines.sampling(engine or ctx.engine, **({} if self.top_p is None else {"top_p": self.top_p})):
            return self.rule(rollouts, ctx)


def reference_rule(spec: dict) -> Reference:
    return Reference(MonteCarlo(k=spec["k"], cuts=spec["cuts"], form="vineppo", prompt_value=spec["prior"],
                                max_tokens=spec.get("length")), spec.get("top_p"))


class Memo:
    """An engine that samples each (prompt, limit, seed) request once per batch: a request's tokens depend on its
    seed alone (the engine contract), so a control that reuses an arm's draws (shuffled) costs no new tokens here,
    while its credit still counts them as the tokens its update would consume."""

    def __init__(self, engine):
        self.engine, self.done = engine, {}

    def generate(self, prompts, max_new_tokens, seeds):
        keys = [(tuple(p), int(n), int(s)) for p, n, s in zip(prompts, max_new_tokens, seeds)]
        missing = list(dict.fromkeys(k for k in keys if k not in self.done))
        if missing:
            self.done.update(zip(missing, self.engine.generate(*(list(x) for x in zip(*missing)))))
        return [self.done[k] for k in keys]

    def sync(self, model) -> None:
        self.engine.sync(model)


def fixed_batches(pool_size: int, batches: int, prompts: int, seed: int) -> list[np.ndarray]:
    """`batches` disjoint sets of pool indices (drawn once from `seed`; with replacement across batches only
    when the pool is smaller than batches x prompts)."""
    rng = np.random.default_rng(stable_seed(seed, "gradient-batches"))
    need = batches * prompts
    order = rng.permutation(pool_size) if need <= pool_size else rng.integers(0, pool_size, need)
    return [order[b * prompts:(b + 1) * prompts] for b in range(batches)]


def probe(model, tokenizer, problems: list[dict], recipe: dict, rules: dict[str, Callable], reference,
          batches: Sequence[np.ndarray], seed: int, engine, prompter, params, log_ratio_fn=None,
          log: Callable[[str], None] = lambda line: None, rule: str = "whole_box",
          subjects: dict[str, contract.Subject] | None = None,
          verifier_key: str = plugins.STUDY_VERIFIER) -> pd.DataFrame:
    """The long table (arm, batch, measure, value) of every rule on every batch, at the model as it is. Each rule's
    credit is checked before any linear algebra (mcgrpo.train.contract; `subjects`: what its messages name each
    rule, by default as a built-in), its sampled tokens counted by the engine it is handed. `verifier_key`: the key
    that names the recipe's reward_verifier (the study's here, a run's own arm's along training)."""
    subjects = subjects or {}
    r, pad_id = recipe, tokenizer.pad_token_id
    features = PolicyView(model, prompter, problems, pad_id, r["microbatch_size"]).features_function()
    rows = []
    for b, indices in enumerate(batches):
        seeds = [stable_seed(seed, "gradient-rollout", b, k) for k in range(len(indices) * r["group_size"])]
        batch = sample_groups(engine, prompter, [problems[j] for j in indices], r["group_size"],
                              r["completion_limit"], seeds, r["reward_verifier"], rule, verifier_key)

        memo = Memo(engine)

        def context(tag: str, sampler=memo) -> CreditContext:
            return CreditContext(engine=sampler, prompter=PrompterView(prompter), limit=r["completion_limit"],
                                 verifier=r["reward_verifier"], rule=rule, advantage_eps=r["advantage_eps"],
                                 verifier_key=verifier_key,
                                 seed=(seed, f"gradient-{tag}", b), features=features,
                                 log_ratio=log_ratio_fn)

        def grad(credit: Credit) -> torch.Tensor:
            return direction(model, params, updates.training_batch(batch, credit), pad_id, r["microbatch_size"])

        def credited(arm: str, rule: Callable) -> Credit:
            counted, subject = engines.Counting(memo), subjects.get(arm) or contract.Subject("credit", arm, arm, True)
            return contract.credit(subject, subject.call(rule, batch, context("arm", counted)), batch, counted)

        with contract.during(f"the gradient tests, batch {b}"):  # checked before any gradient is taken
            credits = {arm: credited(arm, rule) for arm, rule in rules.items()}
        h = grad(reference(batch, context("reference"), engine))  # its own seeds: never in the arms' memo
        us = {arm: grad(c) for arm, c in credits.items()}
        scores = score_vectors(model, params, batch, pad_id, r["microbatch_size"])
        outside, residual = project_out(scores, torch.stack([h, *us.values()]))
        del scores
        line = []
        for i, (arm, u) in enumerate(us.items(), start=1):
            values = {**measures(u, h, outside[i], outside[0]), "projection_residual": float(residual[i]),
                      "tokens": batch.n_tokens + credits[arm].tokens_generated,
                      "tokens_continuation": credits[arm].tokens_generated}
            rows += [{"arm": arm, "batch": b, "measure": m, "value": float(values[m])} for m in MEASURES]
            line.append(f"{arm} align {alignment_text(values['alignment'])} outside V {values['share_outside_v']:.3f}")
        log(f"batch {b}: " + ", ".join(line))
    return pd.DataFrame(rows, columns=["arm", "batch", "measure", "value"])


SWEEP = "sweep_k"  # the k sweep's rules are named sweep_k1, sweep_k2, ... (analysis/efficiency.py reads k back)


def arm_credits(cfg: dict) -> dict[str, tuple[dict, str]]:
    """Each measured rule's `credit:` block and its config key: outcome-only first (the base every efficiency is
    relative to), then the measured arms, the controls, and the k sweep (C.3.2): the first measured Monte-Carlo
    arm's rule at each k, on the same batches."""
    spec = cfg["gradient_tests"]
    credits = {"outcome": ({}, "gradient_tests")}
    credits.update({arm: (cfg["arms"][arm].get("credit", {}), f"arms.{arm}.credit") for arm in spec["arms"]})
    credits.update({name: (c, f"gradient_tests.controls.{name}") for name, c in spec["controls"].items()})
    template = next((c["monte_carlo"] for c, _ in credits.values() if "monte_carlo" in (c or {})), {})
    credits.update({f"{SWEEP}{k}": ({"monte_carlo": {**template, "k": k}}, "gradient_tests.k_sweep")
                    for k in spec["k_sweep"]})
    return credits


def arm_rules(cfg: dict, pool=None) -> dict[str, Callable]:
    """The rule of each of arm_credits' blocks, by name."""
    return {name: credit_rules.build(c, pool, name) for name, (c, _) in arm_credits(cfg).items()}


def arm_subjects(cfg: dict) -> dict[str, contract.Subject]:
    """What messages about each measured rule's credit name it (mcgrpo.train.contract)."""
    return {name: contract.Subject.of("credit", *credit_rules.named(c, key))
            for name, (c, key) in arm_credits(cfg).items()}


def run(cfg: dict, model, tokenizer, pool: pd.DataFrame, log: Callable[[str], None] | None = None) -> pd.DataFrame:
    """The study's gradient tests at the initial policy: `gradient_tests.batches` fixed batches of the recipe's
    shape (prompts_per_iteration x group_size), every arm on the same rollouts; a progress bar over the batches,
    each batch's measures noted above it, or handed to `log` where one is given (mcgrpo screen's timed lines)."""
    spec, r = cfg["gradient_tests"], cfg["recipe"]
    rules = arm_rules(cfg, pool)
    reference_policy = frozen(model) if any(getattr(x, "needs_reference", False) for x in rules.values()) else None
    params = parameter_space(model, spec["space"], spec["lora"], spec["seed"])
    prompter = study_prompter(tokenizer, cfg)
    engine = engines.build(cfg["engine"]["name"], model, tokenizer, temperature=r["temperature"], top_p=r["top_p"],
                           **{k: v for k, v in cfg["engine"].items() if k != "name"})
    batches = fixed_batches(len(pool), spec["batches"], r["prompts_per_iteration"], spec["seed"])
    ratio = log_ratio(model, reference_policy, tokenizer.pad_token_id) if reference_policy is not None else None
    with progress.bar("gradient tests", total=len(batches), unit="batch") as shown:
        def noted(line: str) -> None:
            if log is None:
                progress.note(shown, line)
            else:
                log(line)
            shown.update()
        table = probe(model, tokenizer, problem_records(pool), r, rules, reference_rule(spec["reference"]),
                      batches, spec["seed"], engine, prompter, params, ratio, noted, study_rule(cfg),
                      arm_subjects(cfg))
    return table.assign(policy="initial", space=spec["space"])
