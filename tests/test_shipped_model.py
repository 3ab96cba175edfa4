"""The shipped warm-started tiny model: the default study's own (it cannot drift from config/config.yaml), copied
byte for byte where a study's model and task match it, and never used where they do not."""

import copy
import hashlib
import json
from pathlib import Path

import yaml

from conftest import ROOT, SMALL_STUDY
from mcgrpo import cli, studies, tiny_model
from mcgrpo.core import layout
from mcgrpo.core.config import config_hash
from mcgrpo.train.models import shipped

DEFAULT = ROOT / "config" / "config.yaml"


def _default_spec() -> dict:
    return layout.warm_start_spec(studies.load(DEFAULT))


def test_the_shipped_checkpoint_is_the_default_studys_model():
    """Its recorded spec is the default study's model and task blocks, and its hash names the study's model folder
    in the run store: editing config/config.yaml's model block without `make tiny-model --write` fails here."""
    built = shipped.record()
    spec = _default_spec()
    assert built["spec"]["model"] == spec["model"] and built["spec"] == spec
    assert built["hash"] == config_hash(spec)
    assert layout.model_path(studies.load(DEFAULT)).name == built["model_folder"] == f"tiny-{built['hash'][:12]}"
    assert shipped.matches(spec)


def test_the_shipped_files_are_the_recorded_ones_and_small():
    built = shipped.record()
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(built["files"])
    for name, digest in built["files"].items():
        assert hashlib.sha256((shipped.FOLDER / name).read_bytes()).hexdigest() == digest, name
    size = sum(p.stat().st_size for p in shipped.FOLDER.iterdir())
    assert size < 8_000_000, f"the shipped checkpoint is {size} bytes"
    assert json.loads((shipped.FOLDER / "config.json").read_text())["hidden_size"] == spec_tiny()["hidden_size"]


def spec_tiny() -> dict:
    return _default_spec()["model"]["tiny"]


def test_warm_start_copies_the_shipped_checkpoint_byte_for_byte(tmp_path, capsys):
    """No data is read and nothing trains: the default spec's warm start is the shipped files."""
    out = tmp_path / "model"
    assert cli.main(["warm-start", "--model-json", json.dumps(_default_spec()), "--data", str(tmp_path / "none"),
                     "--out", str(out)]) == 0
    assert "shipped checkpoint" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == sorted([*shipped.record()["files"], shipped.BUILT_FROM])
    for p in out.iterdir():
        assert p.read_bytes() == (shipped.FOLDER / p.name).read_bytes()


def test_a_one_key_change_is_not_the_shipped_model():
    """Anything the store's model hash covers (the model block, and the task block) misses the shipped one."""
    spec = _default_spec()
    for block, key in (("model", "warm_start"), ("task", "seed")):
        other = copy.deepcopy(spec)
        other[block][key] = {**other[block][key], "steps": 1499} if block == "model" else other[block][key] + 1
        assert not shipped.matches(other)


def test_another_model_block_still_warm_starts(tmp_path):
    """A small study's tiny model is trained, not copied: its own size, other bytes."""
    cfg = studies.validate(copy.deepcopy(SMALL_STUDY))
    spec = layout.warm_start_spec(cfg)
    data, out = tmp_path / "data", tmp_path / "model"
    assert cli.main(["prepare-data", "--task-json", json.dumps(cfg["task"]), "--out", str(data)]) == 0
    assert cli.main(["warm-start", "--model-json", json.dumps(spec), "--data", str(data), "--out", str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 32
    assert json.loads((out / shipped.BUILT_FROM).read_text())["files"] == shipped.describe(out, spec, 1)["files"]
    assert (out / "model.safetensors").read_bytes() != (shipped.FOLDER / "model.safetensors").read_bytes()


def test_make_tiny_model_says_when_the_study_is_not_the_shipped_ones(tmp_path, capsys):
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump(SMALL_STUDY))
    assert tiny_model.main(["--config", str(config)]) == 0
    assert "not the warm start of" in capsys.readouterr().out


def test_differences_name_the_files_whose_bytes_differ():
    a = {"files": {"model.safetensors": "1", "config.json": "2"}}
    b = {"files": {"model.safetensors": "9", "config.json": "2", "tokenizer.json": "3"}}
    assert shipped.differences(a, b) == ["model.safetensors", "tokenizer.json"]
    assert shipped.differences(a, a) == []


def _warm_started(tmp_path, seed_change: int = 0) -> tuple[dict, Path]:
    """The default study (its warm-start seed moved by `seed_change`) with its model folder in the store as the
    warm_start rule writes it (the shipped copy; another seed warm-starts into the same folder layout)."""
    cfg = studies.load(DEFAULT)
    cfg["results_dir"] = str(tmp_path / "results")
    cfg["model"]["warm_start"]["seed"] += seed_change
    out = layout.model_path(cfg)
    shipped.copy_to(out)  # the shipped files and their record, as warm-start copies them
    if seed_change:  # a folder of another key: its record says so, as its warm start's would
        built = {**shipped.record(out), "hash": config_hash(layout.warm_start_spec(cfg)), "model_folder": out.name}
        (out / shipped.BUILT_FROM).write_text(json.dumps(built))
    return cfg, out


def test_a_warm_started_model_folder_swapped_or_replaced_is_refused_naming_the_file(tmp_path):
    """results/_shared/models/<name>-<key>/ holding another warm start's folder (copied over it, e.g. another
    base's seed), or a file replaced after the warm start (another checkpoint's weights renamed into it): before,
    every run trained from it started from other weights than its config's warm start, all alike, so holding the runs
    to each other said nothing. The folder keeps its warm start's record (built_from.json: the spec's hash and each
    file's sha256), and loading it holds it to that record."""
    import shutil

    import pytest
    from mcgrpo.core.errors import IntegrityError
    from mcgrpo.train import models
    from mcgrpo.train.models.tiny import build_model, build_tokenizer
    cfg, out = _warm_started(tmp_path)
    assert json.loads((out / shipped.BUILT_FROM).read_text())["model_folder"] == out.name
    models.load(out, "cpu")  # its own files: loads
    _, other = _warm_started(tmp_path / "b", seed_change=1)
    shutil.rmtree(out)
    shutil.copytree(other, out)
    with pytest.raises(IntegrityError, match=rf"{out / shipped.BUILT_FROM}: written by the warm start of "
                                             rf"{other.name}, but filed as {out.name}: copied from another warm "
                                             rf"start's folder.*allowed: .*move {out} away and rerun the workflow"):
        models.load(out, "cpu")
    shutil.rmtree(out)
    _warm_started(tmp_path)
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=5), tokenizer, tmp_path / "another")
    shutil.copyfile(tmp_path / "another" / "model.safetensors", out / "model.safetensors")
    with pytest.raises(IntegrityError, match=rf"{out / 'model.safetensors'}: its sha256 is \w{{12}}, but "
                                             rf"{out / shipped.BUILT_FROM} records \w{{12}}, as the warm start wrote "
                                             rf"it: replaced since"):
        models.load(out, "cpu")
