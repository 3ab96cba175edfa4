"""The equal-iteration study (paper 3.1, G, H.5): a stop after a fixed number of iterations, greedy evaluation,
entropy and KL from the initial policy per iteration, alignment along training, and the config's checks."""

import copy

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import SMALL_STUDY
from mcgrpo import studies
from mcgrpo.analysis import contrasts
from mcgrpo.analysis.runs import Run
from mcgrpo.core import config as study_config
from mcgrpo.core.budget import Budget, budget_table, from_table
from mcgrpo.core.errors import ConfigError
from mcgrpo.core.verify import extract_answer
from mcgrpo.train import engines
from mcgrpo.train.entropy_kl import entropy_kl
from mcgrpo.train.evaluation import Evaluator
from mcgrpo.train.models.tiny import build_model
from mcgrpo.train.rollout import Prompter
from mcgrpo.train.trainer import Trainer

MC = {"monte_carlo": {"k": 1, "prompt_value": 0.5}}  # nonzero credit even when every reward is 0: the policy moves


def _study(**changes) -> dict:
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["budget"] = {"iterations": 5}
    cfg["arms"]["mc_k1"] = {"credit": MC}
    for key, value in changes.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    return studies.validate(cfg)


def _trainer(cfg, tiny, world, arm="outcome", seed=1):
    model, tokenizer = tiny
    pool, evals = world
    return Trainer(study_config.run_config(cfg, arm, seed), model, tokenizer, pool, evals,
                   Budget(cfg["budget"]["iterations"], "iterations"))


def test_a_fixed_iteration_study_trains_exactly_that_many_iterations(tiny, world):
    log = _trainer(_study(), tiny, world, arm="mc_k1").run()
    frames = log.frames()
    assert frames["iterations"]["iteration"].tolist() == [0, 1, 2, 3, 4]
    assert frames["iterations"]["updates"].iloc[-1] == 5
    # evaluation k at the first boundary at or after k x 5 / 4 iterations, the last at exactly 5
    assert frames["evals"]["iteration"].tolist() == [0, 2, 3, 4, 5]
    assert frames["evals"]["eval_index"].tolist() == [0, 1, 2, 3, 4]


def test_the_budget_of_an_equal_iteration_study_is_its_iteration_count():
    table = budget_table("tiny", [], 32, "iterations", unit="iterations")
    B = from_table(table)
    assert (int(B), B.unit, B.column) == (32, "iterations", "iteration")
    assert from_table(budget_table("tiny", [5], 1000, "calibrated")).unit == "tokens"
    assert "unit" not in budget_table("tiny", [5], 1000, "calibrated")  # token budgets keep their files


def _greedy_text(model, prompter, question: str, limit: int, eos: int) -> str:
    """Argmax decoding by hand: the whole sequence through the model at every step, no cache."""
    ids = list(prompter(question))
    out = []
    with torch.no_grad():
        for _ in range(limit):
            token = int(model(input_ids=torch.tensor([ids + out])).logits[0, -1].argmax())
            out.append(token)
            if token == eos:
                break
    return prompter.decode(out)


def _digit_heavy(model, tokenizer):
    """The untrained model with its output layer untied and pushed toward digits, so that its greedy
    completions hold numbers (an untrained one rarely writes any) while sampling at T = 1 still wanders."""
    digits = tokenizer.convert_tokens_to_ids(list("0123456789"))
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=False)
    with torch.no_grad():
        head.weight.zero_()
        head.weight[digits] = 5 * model.get_input_embeddings().weight[digits]
    model.lm_head, model.config.tie_word_embeddings = head, False
    return model


def test_greedy_accuracy_is_the_accuracy_of_argmax_decoding(tiny, world):
    model, tokenizer = tiny
    model = _digit_heavy(model, tokenizer)
    prompter, limit = Prompter(tokenizer), 24
    pool, _ = world
    texts = {q: _greedy_text(model, prompter, q, limit, tokenizer.eos_token_id) for q in pool["question"][:40]}
    answered = [q for q, t in texts.items() if extract_answer(t) is not None][:8]
    assert len(answered) >= 4, "the untrained model's greedy completions should hold numbers"
    # every other problem's answer is what its greedy completion says: greedy accuracy 1/2 exactly
    answers = [extract_answer(texts[q]) if i % 2 == 0 else "-987654321" for i, q in enumerate(answered)]
    problems = pd.DataFrame({"problem_id": [f"p{i}" for i in range(len(answered))], "question": answered,
                             "answer": answers})
    engine = engines.build("hf", model, tokenizer, temperature=1.0, top_p=1.0)
    summary, samples = Evaluator(engine, prompter, {"s": problems}, 4, limit, 1, greedy=True)(0)
    assert summary[0]["acc_greedy"] == 0.5
    assert summary[0]["acc_default"] != summary[0]["acc_greedy"]  # sampling at T = 1 reads otherwise
    assert engine.temperature == 1.0 and len(samples) == 4 * len(answered)  # sampled evaluation unchanged
    plain, _ = Evaluator(engine, prompter, {"s": problems}, 4, limit, 1)(0)
    assert "acc_greedy" not in plain[0] and plain[0]["acc_default"] == summary[0]["acc_default"]


def test_kl_from_the_initial_policy_is_zero_at_iteration_0_and_positive_after_an_update(tiny, world):
    cfg = _study(evaluation={"entropy_kl": True}, recipe={"lr": 1e-2})
    its = _trainer(cfg, tiny, world, arm="mc_k1").run().frames()["iterations"]
    assert its["kl_initial"].iloc[0] == 0.0
    assert (its["kl_initial"].iloc[1:] > 0).all()
    assert np.isfinite(its["entropy"]).all() and (its["entropy"] > 0).all()


def test_entropy_is_the_exact_token_entropy_and_kl_of_a_policy_from_itself_is_zero(tiny):
    model, tokenizer = tiny
    contexts, completions = [(5, 6, 7), (5, 6, 7), (8, 9)], [(10, 11, 12), (13,), (14, 15)]
    moved = entropy_kl(model, model, contexts, completions, tokenizer.pad_token_id, 2)
    with torch.no_grad():
        tokens = []
        for c, t in zip(contexts, completions):
            logp = torch.log_softmax(model(input_ids=torch.tensor([list(c) + list(t)])).logits[0].double(), -1)
            at = logp[len(c) - 1:len(c) - 1 + len(t)]  # the positions that predict the completion
            tokens += (-(at.exp() * at).sum(-1)).tolist()
    assert moved["kl_initial"] == 0.0
    assert moved["entropy"] == pytest.approx(np.mean(tokens), rel=1e-5)


def test_measuring_alignment_along_training_leaves_training_unchanged(tiny, world):
    _, tokenizer = tiny

    def run(alignment):
        model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_positions=96, seed=0)
        evaluation = {"alignment": {"arms": ["mc_k1"], "every": 2, "batches": 1,
                                    "reference": {"k": 1, "cuts": 2}}} if alignment else {}
        return _trainer(_study(evaluation=evaluation), (model, tokenizer), world, arm="mc_k1").run().frames()

    measured, plain = run(True), run(False)
    timing = [c for c in plain["iterations"].columns if c.startswith(("t_", "cpu_")) or c.startswith("train_")]
    assert measured["iterations"].drop(columns=timing).equals(plain["iterations"].drop(columns=timing))
    assert measured["samples"].equals(plain["samples"]) and plain["alignment"].empty  # written, empty: unmeasured
    table = measured["alignment"]
    assert sorted(table["iteration"].unique()) == [0, 2, 4, 5]  # every 2 iterations, and the last boundary
    assert set(table["arm"]) == {"outcome", "mc_k1"}
    outside = table[(table["measure"] == "share_outside_v") & (table["arm"] == "mc_k1")]["value"]
    assert (outside > 0.01).all()  # the Monte-Carlo update leaves V


def _run(arm: str, iterations: list[int], tokens: list[int]) -> Run:
    evals = pd.DataFrame({"eval_index": range(len(iterations)), "iteration": iterations, "updates": iterations,
                          "tokens_total": tokens, "train_seconds": np.arange(len(iterations), dtype=float),
                          "eval_set": "s", "acc_greedy": np.linspace(0.2, 0.4, len(iterations))})
    return Run(arm, 1, "s", evals)


def test_an_equal_iteration_study_contrasts_at_equal_iterations_and_has_no_token_basis():
    B = Budget(4, "iterations")
    mc, outcome = _run("mc", [0, 2, 4], [0, 5000, 10000]), _run("outcome", [0, 2, 4], [0, 500, 1000])
    column, at_a, end_a, at_b, end_b, _ = contrasts.positions("iterations", mc, outcome, B)
    assert (column, at_a, at_b, end_a, end_b) == ("iteration", 4, 4, 3, 3)
    with pytest.raises(ConfigError, match="no token budget"):
        contrasts.positions("tokens", mc, outcome, B)
    # a token budget reads the same runs at B tokens, as before
    assert contrasts.budget_row(mc, 5000) == 1 and contrasts.budget_row(mc, B) == 2


@pytest.mark.parametrize("changes, key", [
    ({"budget": {"iterations": 5, "tokens": 600}}, "budget.iterations"),
    ({"budget": {"iterations": 0}}, "budget.iterations"),
    ({"budget": {"iterations": 2}}, "evaluation.per_budget"),
    ({"analysis": {"base": "outcome", "bases": ["tokens"]}}, "analysis.bases[0]"),
    ({"plan": {"primary": [{"id": "T", "a": "mc_k1", "b": "outcome"}]}}, "plan.primary[0].basis"),
    ({"analysis": {"base": "outcome", "metrics": ["acc_greedy"]}}, "analysis.metrics[0]"),
    ({"evaluation": {"alignment": {"arms": ["nope"]}}}, "evaluation.alignment.arms[0]"),
    ({"evaluation": {"alignment": {"arms": ["mc_k1"], "seeds": [9]}}}, "evaluation.alignment.seeds[0]"),
    ({"gradient_tests": {"batches": 2}}, "gradient_tests"),
])
def test_a_bad_equal_iteration_config_names_its_key(changes, key):
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["budget"] = {"iterations": 5}
    cfg["arms"]["mc_k1"] = {"credit": MC}
    for block, value in changes.items():
        cfg[block] = {**cfg.get(block, {}), **value}
    if changes.get("budget", {}).get("iterations") == 2:
        cfg["evaluation"] = {"samples": 2, "per_budget": 4}
    with pytest.raises(ConfigError) as error:
        studies.validate(cfg)
    assert f"config key {key}:" in str(error.value)
    assert len(str(error.value).splitlines()) == 1  # one clear message, not a cascade


def test_acc_greedy_is_a_metric_where_the_study_evaluates_greedily():
    cfg = _study(evaluation={"greedy": True}, analysis={"base": "outcome", "metrics": ["acc_greedy"]})
    assert cfg["analysis"]["metrics"] == ["acc_greedy"]
