"""The tiny model in Hugging Face format, and the warm start's imperfect targets."""

import numpy as np
import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mcgrpo.train import models
from mcgrpo.train.models.warm_start import misboxed, training_pairs, unboxed, warm_start
from mcgrpo.core.verify import verify


def test_saved_tiny_model_loads_through_auto_classes(tiny, tmp_path):
    model, tokenizer = tiny
    models.save(model, tokenizer, tmp_path / "tiny")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "tiny")
    tok = AutoTokenizer.from_pretrained(tmp_path / "tiny")
    text = tok.apply_chat_template([{"role": "user", "content": "3+4*(5-2)"}], add_generation_prompt=True,
                                   tokenize=False)
    assert text == "<bos><|user|>3+4*(5-2)<|end|><|assistant|>"
    ids = tok(text, add_special_tokens=False).input_ids
    assert len(ids) == 3 + len("3+4*(5-2)") + 1  # one token per character, one per special marker
    solution = "5-2=3,4*3=12,3+12=15 \\boxed{15}"
    assert tok.decode(tok(solution, add_special_tokens=False).input_ids) == solution
    with torch.no_grad():
        x = torch.tensor([ids])
        torch.testing.assert_close(loaded(input_ids=x).logits, model(input_ids=x).logits)


def test_load_names_a_missing_model(tmp_path):
    try:
        models.load(tmp_path / "nothing")
    except FileNotFoundError as e:
        assert "config.json missing" in str(e) and "warm_start" in str(e)
    else:
        raise AssertionError("expected FileNotFoundError")


def test_imperfect_targets_split_the_verifiers():
    solution, steps = "5-2=3,4*3=12,3+12=15 \\boxed{15}", ["3", "12", "15"]
    v = verify(unboxed(solution), "15")
    assert (v.default, v.strict, v.boxed) == (True, False, False)
    wrong = misboxed(solution, steps, np.random.default_rng(0))
    assert wrong.startswith("5-2=3,4*3=12,3+12=15 \\boxed{") and wrong != solution
    assert not verify(wrong, "15").default
    assert misboxed("3+4=7 \\boxed{7}", ["7"], np.random.default_rng(0)) == "3+4=7 \\boxed{7}"


def test_training_pairs_mix_targets_at_the_given_shares():
    corpus = pd.DataFrame({"question": ["5-2*4+1"] * 4000, "solution": ["2*4=8,5-8=-3,-3+1=-2 \\boxed{-2}"] * 4000,
                           "steps": [["8", "-3", "-2"]] * 4000})
    targets = [t for _, t in training_pairs(corpus, 0.25, 0.2, np.random.default_rng(1))]
    kinds = pd.Series(["unboxed" if "boxed" not in t else "solved" if t.endswith("{-2}") else "misboxed"
                       for t in targets]).value_counts(normalize=True)
    assert abs(kinds["unboxed"] - 0.25) < 0.03 and abs(kinds["misboxed"] - 0.2) < 0.03


def test_warm_start_lowers_the_supervised_loss(world):
    pool, _ = world
    tiny = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64, "max_positions": 96}
    args = dict(batch_size=16, lr=3e-3, unboxed_share=0.25, misboxed_share=0.2, seed=0)
    from mcgrpo.train.models.warm_start import sft_step
    from mcgrpo.train.rollout import Prompter
    scores = []
    for steps in (0, 60):
        model, tok = warm_start(pool, tiny, steps=steps, **args)
        p = Prompter(tok)
        batch = [(p(q), tuple(tok(s, add_special_tokens=False).input_ids) + (tok.eos_token_id,))
                 for q, s in zip(pool["question"][:32], pool["solution"][:32])]
        with torch.no_grad():
            scores.append(float(sft_step(model, batch, tok.pad_token_id)))
    assert scores[1] < scores[0] - 1.0
