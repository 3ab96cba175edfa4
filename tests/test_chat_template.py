"""`model.chat_template`: the chat template's keyword arguments reach every rendered prompt, are part of
the run's config hash, and are set in every Qwen3 and Llama-3.2 paper file. The tokenizer here is local
(the tiny one) with a Jinja template that branches on `enable_thinking` and `date_string` the way Qwen3's
and Llama-3.2's do."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT
from mcgrpo import studies
from mcgrpo.core import config as study_config
from mcgrpo.train.rollout import Prompter
from mcgrpo.train.trainer import Trainer

# As Llama-3.2's template: today's date unless date_string is given; as Qwen3's: an empty thought
# block after the generation prompt when enable_thinking is false.
BRANCHING = (
    "{{ bos_token }}{% if date_string is not defined %}{% set date_string = strftime_now('%d %b %Y') %}"
    "{% endif %}<|system|>Today Date: {{ date_string }}<|end|>"
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
ARGS = {"enable_thinking": False, "date_string": "26 Jul 2024"}


@pytest.fixture
def branching(tiny):
    model, tokenizer = tiny
    tokenizer.chat_template = BRANCHING
    return model, tokenizer


def rendered(prompter: Prompter, question: str = "2+3") -> str:
    return prompter.tokenizer.decode(list(prompter(question)))


def test_the_arguments_reach_the_template(branching):
    _, tokenizer = branching
    plain, fixed = rendered(Prompter(tokenizer)), rendered(Prompter(tokenizer, chat_template=ARGS))
    assert "<think>" not in plain and "Today Date: 26 Jul 2024" not in plain
    assert fixed == "<bos><|system|>Today Date: 26 Jul 2024<|end|><|user|>2+3<|end|><|assistant|><think>\n\n</think>\n\n"


def test_every_prompt_of_a_run_comes_from_the_configured_prompter(study, branching, world):
    model, tokenizer = branching
    pool, evals = world
    study = {**study, "model": {**study["model"], "chat_template": ARGS}}
    trainer = Trainer(study_config.run_config(studies.validate(study), "outcome", 1), model, tokenizer, pool,
                      evals, None)
    # rollouts, continuations (credit context), evaluation and critic features share this one prompter
    assert trainer.evaluator.prompter is trainer.view.prompter is trainer.prompter
    assert rendered(trainer.prompter).endswith("<|assistant|><think>\n\n</think>\n\n")
    log = trainer.run(max_iterations=1)
    assert log.iterations


def test_the_arguments_are_in_the_config_hash(study):
    hashes = {study_config.config_hash(study_config.run_config(studies.validate(
        {**study, "model": {**study["model"], **extra}}), "outcome", 1))
        for extra in ({}, {"chat_template": {"enable_thinking": False}}, {"chat_template": {"enable_thinking": True}})}
    assert len(hashes) == 3


def test_a_bad_argument_is_refused_naming_the_key(study):
    with pytest.raises(study_config.ConfigError, match=r"model\.chat_template"):
        studies.validate({**study, "model": {**study["model"], "chat_template": {"enable_thinking": [1]}}})


@pytest.mark.parametrize("path", sorted((ROOT / "config" / "studies" / "paper").glob("*.yaml")), ids=lambda p: p.stem)
def test_paper_files_set_the_template_of_their_model(path: Path):
    model = yaml.safe_load(path.read_text())["model"]
    expected = {"qwen3": {"enable_thinking": False}, "llama": {"date_string": "26 Jul 2024"}}
    family = next((f for f in expected if model["name"].startswith(f)), None)
    assert model.get("chat_template") == expected.get(family)


def test_every_prompter_of_the_package_is_built_from_the_study():
    """Only `study_prompter` constructs a Prompter: a stage that built its own would drop the study's
    chat-template arguments (gradients.py once did: a Qwen3 gradient test in thinking mode)."""
    import ast
    package = ROOT / "workflow" / "mcgrpo"
    direct = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text())
        owners = {id(node): f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for node in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Prompter":
                direct.append((path.relative_to(package).as_posix(), owners.get(id(node))))
    assert direct == [("train/rollout.py", "study_prompter")]


def test_the_gradient_tests_render_the_studys_template(study, branching, world, monkeypatch):
    from mcgrpo.train import gradients
    model, tokenizer = branching
    pool, _ = world
    cfg = studies.validate({**study, "model": {**study["model"], "chat_template": ARGS},
                            "gradient_tests": {"batches": 2}})
    seen = {}

    def spy(*args, **kw):  # the probe itself is tested in test_gradients.py: here only its prompter is read
        seen["prompter"] = args[9]
        return pd.DataFrame(columns=["arm", "batch", "measure", "value"])
    monkeypatch.setattr(gradients, "probe", spy)
    gradients.run(cfg, model, tokenizer, pool)
    assert rendered(seen["prompter"]).endswith("<|assistant|><think>\n\n</think>\n\n")
    assert "Today Date: 26 Jul 2024" in rendered(seen["prompter"])
