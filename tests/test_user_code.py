"""The user's code a plugin or TRL script imports is part of its runs' identity (mcgrpo.core.user_code): editing a
helper module beside it, or a second package of the user's, makes new runs; the standard library, installed packages
and mcgrpo add nothing, so every existing key stays."""

import importlib.abc
import json
import importlib.util
import os
import py_compile
import sys
import zipfile

import pytest

from conftest import ROOT, edited_study
from mcgrpo import cli, studies
from mcgrpo.core import config as study_config, plugins, trl_config, user_code
from mcgrpo.core.errors import ConfigError, PluginError

RULE = "class Flat:\n    def __call__(self, rollouts, ctx):\n        return None\n"
TEMPLATE = ROOT / "examples" / "my-intervention"


@pytest.fixture
def code(tmp_path, monkeypatch):
    """Write modules into a folder on sys.path (outside site-packages: the user's code), as `write(path, text)`;
    every module imported from it is forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)

    def write(path: str, text: str):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    yield write
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _identity(target: str) -> dict:
    return plugins.load("credit", target, "k").identity()


def test_a_bare_module_plugins_helper_beside_it_is_part_of_its_identity(code):
    code("my_credit.py", "import numpy\nfrom my_helpers import CAP\n" + RULE)
    code("my_helpers.py", "CAP = 1.0\n")
    cfg = studies.validate(edited_study(arms={"outcome": {}, "mine": {"credit": {"my_credit:Flat": {}}}}))
    before, key = _identity("my_credit:Flat"), study_config.config_hash(study_config.run_config(cfg, "mine", 1))
    assert set(before["user_code"]) == {"my_helpers"}
    code("my_helpers.py", "CAP = 2.0  # edited\n")
    after = _identity("my_credit:Flat")
    assert after["user_code"] != before["user_code"] and after["source_sha256"] == before["source_sha256"]
    assert study_config.config_hash(study_config.run_config(cfg, "mine", 1)) != key  # another run in the store


def test_a_second_package_is_followed_transitively(code):
    """The plugin's package imports the user's namespace package a, which imports b, which imports c: editing c
    changes the plugin's identity; the plugin's own package is not listed (its source_sha256 holds it)."""
    code("my_rules/__init__.py", "")
    code("my_rules/flat.py", "import a.tools\n" + RULE)
    code("a/tools.py", "from b import helper\n")  # a: a namespace package (no __init__.py)
    code("b/__init__.py", "from . import inner\n")  # relative: within b, hashed whole
    code("b/inner.py", "")
    code("b/helper.py", "import c\n")
    code("c.py", "X = 1\n")
    before = _identity("my_rules.flat:Flat")
    assert list(before["user_code"]) == ["a", "b", "c"]
    code("c.py", "X = 2  # edited\n")
    after = _identity("my_rules.flat:Flat")
    assert after["user_code"]["c"] != before["user_code"]["c"]
    assert {k: after["user_code"][k] for k in "ab"} == {k: before["user_code"][k] for k in "ab"}


WEIGHTED = """import json
from pathlib import Path

WEIGHT = json.loads((Path(__file__).parent / "weights.json").read_text())["weight"]


class Weighted:
    def __call__(self, rollouts, ctx):
        return None
"""


def test_a_data_file_of_the_plugins_package_is_part_of_its_identity(code, tmp_path):
    """A JSON of weights beside the module, which no import names: edited, the plugin rewards otherwise, so its runs
    are others; a second package's data file likewise. Python's caches and hidden files (an editor's swap file) are
    no edit of it."""
    code("my_weighted/__init__.py", "")
    code("my_weighted/rule.py", "import my_tables\n" + WEIGHTED)
    code("my_weighted/weights.json", '{"weight": 1.0}')
    code("my_tables/__init__.py", "")
    code("my_tables/levels.csv", "level,scale\n1,1.0\n")
    before = _identity("my_weighted.rule:Weighted")
    code("my_weighted/__pycache__/rule.cpython-311.pyc", "cached")
    code("my_weighted/.rule.py.swp", "swap")
    assert _identity("my_weighted.rule:Weighted") == before
    code("my_weighted/weights.json", '{"weight": 5.0}')
    after = _identity("my_weighted.rule:Weighted")
    assert after["source_sha256"] != before["source_sha256"] and after["user_code"] == before["user_code"]
    code("my_tables/levels.csv", "level,scale\n1,2.0\n")
    assert _identity("my_weighted.rule:Weighted")["user_code"]["my_tables"] != after["user_code"]["my_tables"]


def test_a_plugin_whose_data_file_was_edited_while_it_ran_is_not_stored(code):
    """A data file is read whenever the code reads it (a call may load it lazily): edited after the job checked the
    plugin, the run may have computed with the edited data, though no module of it was imported during the run. A
    plugin of modules alone, all imported when the job began, ran as checked."""
    code("my_weighted/__init__.py", "")
    code("my_weighted/rule.py", WEIGHTED)
    code("my_weighted/weights.json", '{"weight": 1.0}')
    code("my_plain.py", RULE)
    planned = plugins.identities([("credit", "my_weighted.rule:Weighted", {}, "k"), ("credit", "my_plain:Flat", {}, "k")])
    begun = set(sys.modules)
    code("my_plain.py", RULE + "# edited\n")
    assert plugins.edited_while_running(planned[1:], begun) == []
    code("my_weighted/weights.json", '{"weight": 5.0}')
    (words,) = plugins.edited_while_running(planned[:1], begun)
    assert words.startswith("credit plugin 'my_weighted.rule:Weighted': source_sha256 ")
    assert words.endswith("(data files, which it may read at any time: my_weighted/weights.json)")


class _EditableFinder(importlib.abc.MetaPathFinder):
    """What setuptools' editable install puts on sys.meta_path: a package found by name at its source folder,
    which is on no sys.path entry."""

    def __init__(self, name: str, folder):
        self.name, self.folder = name, folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.folder / "__init__.py",
                                                      submodule_search_locations=[str(self.folder)])


def test_a_package_installed_editable_through_a_finder_hook_is_followed(code, tmp_path, monkeypatch):
    elsewhere = tmp_path / "checkout" / "src" / "my_editable"
    elsewhere.mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("from my_editable.core import dense\n")
    (elsewhere / "core.py").write_text("def dense():\n    return 1.0\n")
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, _EditableFinder("my_editable", elsewhere)])
    code("my_uses_editable.py", "import my_editable\n" + RULE)
    before = _identity("my_uses_editable:Flat")["user_code"]
    (elsewhere / "core.py").write_text("def dense():\n    return 0.5  # edited\n")
    after = _identity("my_uses_editable:Flat")["user_code"]
    assert list(before) == ["my_editable"] and after != before


def test_an_import_inside_a_function_counts(code):
    code("my_lazy.py", "def helper():\n    from my_lazy_helpers import CAP\n    return CAP\n" + RULE)
    code("my_lazy_helpers.py", "CAP = 1.0\n")
    assert set(_identity("my_lazy:Flat")["user_code"]) == {"my_lazy_helpers"}


def _sourceless(code, tmp_path, path: str, text: str) -> None:
    """`path` compiled as a wheel built without sources installs it: its .pyc where its .py was, no .py."""
    code(path, text)
    py_compile.compile(str(tmp_path / path), cfile=str(tmp_path / (path + "c")), doraise=True)
    (tmp_path / path).unlink()
    importlib.invalidate_caches()


@pytest.mark.parametrize("module", ["my_compiled/flat.py", "my_compiled_flat.py"])
def test_a_sourceless_plugins_identity_changes_with_its_code(module, code, tmp_path):
    """A plugin installed without its .py files (a wheel of .pyc only, or one compiled to a .so) is identified by the
    files it runs: rebuilt with other code under the same version, its runs are new runs, not the old code's."""
    code("my_compiled/__init__.py", "")
    target = module.removesuffix(".py").replace("/", ".") + ":Flat"
    _sourceless(code, tmp_path, module, RULE)
    before = _identity(target)
    _sourceless(code, tmp_path, module, RULE + "SCALE = 2.0\n")
    assert _identity(target)["source_sha256"] != before["source_sha256"]


def test_a_plugin_without_a_readable_file_is_refused(tmp_path, monkeypatch):
    """A plugin imported from a zip archive has no file its identity could be read from: refused, named."""
    with zipfile.ZipFile(tmp_path / "rules.zip", "w") as archive:
        archive.writestr("my_zipped/__init__.py", "")
        archive.writestr("my_zipped/flat.py", RULE)
    monkeypatch.syspath_prepend(str(tmp_path / "rules.zip"))
    try:
        with pytest.raises(ConfigError) as err:
            _identity("my_zipped.flat:Flat")
    finally:
        for name in [m for m in sys.modules if m.startswith("my_zipped")]:
            del sys.modules[name]
    assert str(err.value).startswith("config key k: the credit plugin 'my_zipped.flat:Flat' (my_zipped.flat.Flat) "
                                     "has no module file that can be read")


def test_the_standard_library_installed_packages_mcgrpo_and_unknown_names_add_nothing(code):
    """The identity is today's dict exactly: the key of every existing study stays. A name that does not resolve
    is left out (its import fails at run time by itself), as is a dynamic import, which no parse can see."""
    code("my_plain.py", "import os, json\nimport numpy as np\nfrom dataclasses import dataclass\n"
         "from mcgrpo.api import Credit\nimport importlib\n"
         "def later():\n    import not_a_module_anywhere\n    return importlib.import_module('my_plain_dynamic')\n"
         + RULE)
    code("my_plain_dynamic.py", "")
    identity = _identity("my_plain:Flat")
    assert set(identity) == {"kind", "name", "distribution", "version", "source_sha256"}


def test_the_template_plugins_identity_is_unchanged(monkeypatch):
    """examples/my-intervention imports numpy, dataclasses and mcgrpo.api only: its runs keep their keys."""
    monkeypatch.syspath_prepend(str(TEMPLATE / "src"))
    try:
        identity = _identity("my_intervention.credit:BoxedBonus")
    finally:
        for name in [m for m in sys.modules if m.startswith("my_intervention")]:
            del sys.modules[name]
    assert set(identity) == {"kind", "name", "distribution", "version", "source_sha256"}


def test_a_trl_scripts_helper_is_part_of_its_identity_and_named_when_edited(code, tmp_path):
    code("my_script.py", "from trl import GRPOTrainer\nfrom my_rewards_lib import dense\n"
         "def trainer(setup):\n    return GRPOTrainer\n")
    code("my_rewards_lib/__init__.py", "def dense(texts):\n    return [1.0 for _ in texts]\n")
    block = {"script": str(tmp_path / "my_script.py")}
    planned = trl_config.identity(block)
    assert set(planned["user_code"]) == {"my_rewards_lib"}
    code("my_rewards_lib/__init__.py", "def dense(texts):\n    return [0.5 for _ in texts]\n")
    now = trl_config.identity(block)
    assert now["script_sha256"] == planned["script_sha256"] and now != planned
    (changed,) = trl_config.edited(planned, now)
    assert changed.startswith("module my_rewards_lib (sha256 ") and planned["user_code"]["my_rewards_lib"] in changed


def test_a_trl_script_importing_no_user_code_keeps_its_identity():
    """examples/trl-dense-reward imports torch, trl and mcgrpo.api only: its runs keep their keys."""
    script = ROOT / "examples" / "trl-dense-reward" / "dense_reward.py"
    assert set(trl_config.identity({"script": str(script)})) == {"version", "script_sha256"}


def test_an_edited_file_is_read_again(tmp_path):
    """The per-process cache is keyed by (path, size, mtime_ns): an edit of another size, or of the same size at
    another mtime, is hashed anew."""
    path = tmp_path / "m.py"
    path.write_text("import a\n")
    first = user_code.file_sha256(path)
    path.write_text("import a, b\n")
    assert user_code.file_sha256(path) != first
    second = user_code.file_sha256(path)
    stat = path.stat()
    path.write_text("import a, c\n")  # the same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert user_code.file_sha256(path) not in (first, second)


@pytest.mark.parametrize("verb", ["train", "calibrate", "gradient-tests"])
def test_a_job_whose_plugin_was_edited_after_planning_is_refused_naming_what_changed(code, tmp_path, capsys, verb):
    """A job queued for hours must not store an edited plugin's numbers under the identity it was planned with: the
    run's key would name the unedited plugin, beside whose runs it sits."""
    code("my_credit.py", "from my_helpers import CAP\n" + RULE)
    code("my_helpers.py", "CAP = 1.0\n")
    cfg = studies.validate(edited_study(arms={"outcome": {}, "mine": {"credit": {"my_credit:Flat": {}}}},
                                        gradient_tests={"enabled": True, "arms": ["mine"]}))
    planned = (study_config.gradient_tests_config(cfg) if verb == "gradient-tests"
               else study_config.run_config(cfg, "mine", 1))
    code("my_helpers.py", "CAP = 2.0  # edited while the job waited\n")
    files = ["--model", str(tmp_path / "m"), "--data", str(tmp_path / "d"), "--out", str(tmp_path / "o")]
    files += ["--budget", str(tmp_path / "b.parquet")] if verb == "train" else []
    assert cli.main([verb, "--run-json", json.dumps(planned), *files]) == 2
    err = capsys.readouterr().err
    assert "edited since the workflow planned this job: credit plugin 'my_credit:Flat': module my_helpers " in err
    assert f"(planned: {planned['plugins'][0]['user_code']['my_helpers']})" in err
    assert not (tmp_path / "o").exists()


LAZY = """from dataclasses import dataclass
from mcgrpo import api


@dataclass
class Lazy:
    def __call__(self, rollouts, ctx):
        import my_scale  # imported in the call, as research code imports a heavy helper
        advantages = api.group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps)
        return api.Credit(api.per_token(my_scale.SCALE * advantages, rollouts))
"""


@pytest.mark.parametrize("edited", [False, True])
def test_a_plugin_edited_while_its_run_trained_is_not_stored_where_it_imported_the_edit(code, tmp_path, capsys,
                                                                                          monkeypatch, edited):
    """The job checks a plugin as planned when it begins. A module the plugin imports inside a call reads its file
    then: edited in between (an author working on while a run trains), the run computed with the edited code under
    the identity of the planned one. Such a run is not stored; one whose plugin was not edited is."""
    from mcgrpo import data
    from mcgrpo.core import store
    from mcgrpo.core.budget import budget_table
    from mcgrpo.train import job, models
    from mcgrpo.train.models.tiny import build_model, build_tokenizer
    code("my_lazy.py", LAZY)
    code("my_scale.py", "SCALE = 1.0\n")
    cfg = studies.validate(edited_study(arms={"outcome": {}, "mine": {"credit": {"my_lazy:Lazy": {}}}}))
    data.write(*data.build(cfg["task"]), tmp_path / "data", "")
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=0), tokenizer, tmp_path / "model")
    store.write_parquet(budget_table("tiny", [], 600, "config"), tmp_path / "budget.parquet")
    planned = study_config.run_config(cfg, "mine", 1)
    assert "my_scale" in planned["plugins"][0]["user_code"]  # the import in the call is part of its identity
    sys.modules.pop("my_scale", None)  # planned by the workflow's process: the job imports it when first called
    trainer = job.mcgrpo_trainer

    def edit_once_begun(*args):  # the job has checked the plugin as planned; its first call is still to come
        if edited:
            code("my_scale.py", "SCALE = 2.0  # edited while the run trained\n")
        return trainer(*args)
    monkeypatch.setattr(job, "mcgrpo_trainer", edit_once_begun)
    out = tmp_path / "run"
    status = cli.main(["train", "--run-json", json.dumps(planned), "--model", str(tmp_path / "model"), "--data",
                       str(tmp_path / "data"), "--budget", str(tmp_path / "budget.parquet"), "--out", str(out)])
    assert (status, (out / "run.json").exists()) == ((2, False) if edited else (0, True))
    if edited:
        err = capsys.readouterr().err
        assert "edited while this run trained: credit plugin 'my_lazy:Lazy': module my_scale " in err
        assert "(imported during the run: my_scale): it may have computed with the edited code" in err


def test_a_plugin_edited_while_the_screen_measured_it_is_not_screened(code, tmp_path, capsys, monkeypatch):
    """The screen is one process, but minutes long: a module its plugin imports inside a call, edited meanwhile,
    would be measured as the edited code and written as the code whose identity the screen took. As a job's run,
    such a screen writes nothing."""
    from mcgrpo import data, screen
    from mcgrpo.core import layout
    from mcgrpo.train import gradients, models
    from mcgrpo.train.models.tiny import build_model, build_tokenizer
    code("my_lazy.py", LAZY)
    code("my_scale.py", "SCALE = 1.0\n")
    cfg = studies.validate(edited_study(results_dir=str(tmp_path / "results"),
                                        arms={"outcome": {}, "mine": {"credit": {"my_lazy:Lazy": {}}}}))
    data.write(*data.build(cfg["task"]), layout.data_dir(cfg), "")
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=0), tokenizer, layout.model_path(cfg))
    sys.modules.pop("my_scale", None)  # imported in the plugin's first call
    measured = gradients.run

    def edited_once_begun(*args, **kwargs):  # its identity taken, its first call still to come
        code("my_scale.py", "SCALE = 2.0  # edited while the screen measured\n")
        return measured(*args, **kwargs)
    monkeypatch.setattr(gradients, "run", edited_once_begun)
    with pytest.raises(PluginError, match=r"^edited while the screen measured: credit plugin 'my_lazy:Lazy': module "
                                          r"my_scale .*\(screen it again\)$"):
        screen.screen(cfg, "mine", batches=2, out=tmp_path / "screened", curve=None, log=lambda line: None)
    assert not (tmp_path / "screened").exists()


@pytest.mark.parametrize("label, key", [([], "--run-json"), (["--label", "s/mine"], "arms.mine.credit")])
def test_a_plugin_whose_module_sets_a_torch_flag_as_it_is_imported_is_refused_by_the_job(code, tmp_path, capsys,
                                                                                         label, key):
    """Research code often sets a torch flag at its module's top (allow_tf32, oneDNN off): imported first by the job,
    it would have the whole run compute under it, while the arms compared with it do not. The message names the
    plugin's config key where the rule's --label names the arm."""
    import torch
    code("my_fast.py", "import torch\ntorch.backends.mkldnn.enabled = False\n" + RULE)
    cfg = studies.validate(edited_study(arms={"outcome": {}, "mine": {"credit": {"my_fast:Flat": {}}}}))
    planned = study_config.run_config(cfg, "mine", 1)
    del sys.modules["my_fast"]  # planned by another process: the job imports it first
    torch.backends.mkldnn.enabled = True
    files = ["--model", str(tmp_path / "m"), "--data", str(tmp_path / "d"), "--out", str(tmp_path / "o"),
             "--budget", str(tmp_path / "b.parquet")]
    try:
        assert cli.main(["train", "--run-json", json.dumps(planned), *files, *label]) == 2
    finally:
        torch.backends.mkldnn.enabled = True
    assert (f"error: credit rule 'my_fast:Flat' ({key}): importing its module changed torch.backends.mkldnn.enabled "
            "from True to False and left it so; allowed: a module that changes none") in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("verb", [["screen", "--arm", "mine", "--batches", "2"], ["train", "--arm", "mine", "--seed", "1"]])
def test_a_plugin_whose_module_sets_a_torch_flag_as_it_is_imported_is_refused_by_hand_as_by_the_jobs(
        verb, code, tmp_path, capsys):
    """`mcgrpo screen` (and a train by hand, --config) first imports its plugins validating the study: the same check
    as the jobs', naming the key, else the screen's numbers would come from a process the jobs refuse to compute in."""
    import torch
    import yaml
    code("my_fast.py", "import torch\ntorch.backends.mkldnn.enabled = False\n" + RULE)
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(edited_study(results_dir=str(tmp_path / "results"),
                                                 arms={"outcome": {}, "mine": {"credit": {"my_fast:Flat": {}}}})))
    torch.backends.mkldnn.enabled = True
    try:
        assert cli.main([verb[0], "--config", str(study), *verb[1:], "--out", str(tmp_path / "o")]) == 2
        assert torch.backends.mkldnn.enabled is False  # imported, and refused: nothing computed under it
    finally:
        torch.backends.mkldnn.enabled = True
    assert ("error: credit rule 'my_fast:Flat' (arms.mine.credit): importing its module changed "
            "torch.backends.mkldnn.enabled from True to False and left it so; allowed: a module that changes none"
            ) in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_job_whose_plugins_are_as_planned_is_not_held_up(code):
    code("my_credit.py", "from my_helpers import CAP\n" + RULE)
    code("my_helpers.py", "CAP = 1.0\n")
    cfg = studies.validate(edited_study(arms={"outcome": {}, "mine": {"credit": {"my_credit:Flat": {}}}}))
    assert plugins.changed_since(study_config.run_config(cfg, "mine", 1)["plugins"]) == []


def _installed(site, name: str, direct_url: str | None) -> None:
    """A package installed into `site` as pip leaves it: its files and dist-info, with PEP 610's direct_url.json
    where it came from a folder or a wheel file, without where it came from an index."""
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text("def dense():\n    return 1.0\n")
    info = site / f"{name}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (info / "top_level.txt").write_text(f"{name}\n")
    if direct_url:
        (info / "direct_url.json").write_text(direct_url)


def test_the_users_package_is_followed_wherever_it_is_installed_and_an_index_package_is_not(code, tmp_path,
                                                                                               monkeypatch):
    """The same package editable on the submitting machine and built into an image as a wheel (installed into its
    site-packages) is followed in both, so the run's identity is the same in either; one from an index is the
    environment's, identified by its version as torch is."""
    site = tmp_path / "site-packages"
    _installed(site, "my_wheel_rewards", '{"url": "file:///opt/plugins/my_wheel_rewards-0.1.0-py3-none-any.whl", '
                                         '"archive_info": {}}')
    _installed(site, "some_index_lib", None)
    monkeypatch.syspath_prepend(str(site))
    code("my_uses_installed.py", "import my_wheel_rewards\nimport some_index_lib\n" + RULE)
    in_image = user_code.reached([tmp_path / "my_uses_installed.py"])  # parsed, nothing imported
    assert list(in_image) == ["my_wheel_rewards"]
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(site)])
    code("checkout/src/my_wheel_rewards/__init__.py", (site / "my_wheel_rewards" / "__init__.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path / "checkout" / "src"))  # the same package, editable on the host
    assert user_code.reached([tmp_path / "my_uses_installed.py"]) == in_image
