"""The gradient tests along training (paper H.5, Figure 16): does a reward's alignment with the reference
gradient decay while training with it fails?

At every `evaluation.alignment.every`-th iteration boundary of a listed arm's run (iteration 0, the initial
policy, included; H.5 saves checkpoints every four iterations) and at its last boundary, `gradients.probe`
measures, on the same fixed batches each time, the run's own credit rule, outcome-only GRPO's and the controls'
at the policy as it is then: alignment cos(P_perp u, P_perp h), the share outside V, and the rest of the
gradient tests' measures. The paper probes at saved checkpoints after training; measuring inside the run is the
same policy without keeping checkpoints (ours are removed once a run is done).

The probe runs on a copy of the policy, with its own hf engine and its own seeds, and the global random state
is put back afterwards, so the run trains exactly as it would unmeasured; its time is not training time. The
implicit control's pi_ref is the run's frozen initial policy.
"""

from __future__ import annotations

import copy

import pandas as pd

from mcgrpo.core import plugins, store
from mcgrpo.train import checkpoint, contract, engines
from mcgrpo.train import credit as credit_rules
from mcgrpo.train.gradients import fixed_batches, parameter_space, probe, reference_rule
from mcgrpo.train.policy import log_ratio
from mcgrpo.train.rollout import problem_records, study_prompter, study_rule

COLUMNS = list(store.COLUMNS["alignment"])


def wanted(cfg: dict) -> dict | None:
    """The run's alignment spec, if it is measured along training (run_config keeps it only then)."""
    return cfg["evaluation"].get("alignment") or None


class AlongTraining:
    """Measures one run's policy every `every` iterations (`due`), as rows of alignment.parquet (`__call__`)."""

    def __init__(self, cfg: dict, spec: dict, tokenizer, pool: pd.DataFrame, reference_model=None):
        self.cfg, self.spec, self.tokenizer = cfg, spec, tokenizer
        self.problems = problem_records(pool)
        credits = {"outcome": {}, cfg["arm"]: cfg["arm_config"].get("credit", {}), **spec["controls"]}
        self.rules = {name: credit_rules.build(c, pool, name) for name, c in credits.items()}
        # what a message about a rule's broken credit names
        keys = {cfg["arm"]: f"arms.{cfg['arm']}.credit",
                **{name: f"{plugins.ALIGNMENT_CONTROLS}.{name}" for name in spec["controls"]}}
        self.subjects = {name: contract.Subject.of("credit", *credit_rules.named(c, keys.get(name, name)))
                         for name, c in credits.items()}
        self.verifier_key = plugins.reward_verifier(cfg["arm_config"], cfg["recipe"], f"arms.{cfg['arm']}")[1]
        self.needs_reference = any(getattr(r, "needs_reference", False) for r in self.rules.values())
        self.reference_model = reference_model
        self.batches = fixed_batches(len(pool), spec["batches"], cfg["recipe"]["prompts_per_iteration"], spec["seed"])

    def due(self, iteration: int, last: bool) -> bool:
        return iteration % self.spec["every"] == 0 or last

    def __call__(self, model, iteration: int) -> pd.DataFrame:
        """The long table (iteration, arm, batch, measure, value) at the policy `model` is after `iteration`
        iterations; `model` and the global random state are left as they were."""
        state = checkpoint.rng_state()
        try:
            table = self._probe(copy.deepcopy(model))
        finally:
            checkpoint.set_rng_state(state)
        return table.assign(iteration=iteration)[COLUMNS]

    def _probe(self, policy) -> pd.DataFrame:
        r, spec = self.cfg["recipe"], self.spec
        params = parameter_space(policy, spec["space"], spec["lora"], spec["seed"])
        prompter = study_prompter(self.tokenizer, self.cfg)
        engine = engines.build("hf", policy, self.tokenizer, temperature=r["temperature"], top_p=r["top_p"],
                               batch_size=self.cfg["engine"].get("batch_size", 512))
        ratio = log_ratio(policy, self.reference_model, self.tokenizer.pad_token_id) if self.needs_reference else None
        return probe(policy, self.tokenizer, self.problems, r, self.rules, reference_rule(spec["reference"]),
                     self.batches, spec["seed"], engine, prompter, params, ratio, rule=study_rule(self.cfg),
                     subjects=self.subjects, verifier_key=self.verifier_key)
