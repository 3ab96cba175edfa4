"""Plugins (mcgrpo.core.plugins): found by entry point or 'module:Name', checked before any job, part of a run's
identity; the built-ins keep every run's hash."""

import ast
import copy
import sys

import numpy as np
import pytest

from conftest import ROOT, edited_study
from mcgrpo import studies
from mcgrpo.core import config as study_config, plugins
from mcgrpo.core.errors import ConfigError
from mcgrpo.train import credit as credit_rules, selection

TEMPLATE = ROOT / "examples" / "my-intervention"

RULE = '''
from dataclasses import dataclass
from mcgrpo.api import Credit, group_advantages, per_token

@dataclass
class StepBonus:
    weight: float
    mode: str = "any"

    def __call__(self, rollouts, ctx):
        steps = [float(t.count("=")) for t in rollouts.texts]
        shaped = rollouts.rewards + self.weight * np.minimum(steps, 1.0)
        return Credit(per_token(group_advantages(rollouts.grouped(shaped), ctx.advantage_eps), rollouts))

class NotARule:
    def __init__(self, weight: float = 1.0):
        self.weight = weight

def lenient(text, reference):
    return reference in text

def two_way(text):
    return True
'''


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A package `my_rewards` installed the way pip lays one out (a dist-info with entry points) on sys.path."""
    (tmp_path / "my_rewards").mkdir()
    (tmp_path / "my_rewards" / "__init__.py").write_text("")
    (tmp_path / "my_rewards" / "step.py").write_text("import numpy as np\n" + RULE)
    (tmp_path / "my_rewards" / "broken.py").write_text("import numpy as np\n1 / 0\n")
    info = tmp_path / "my_rewards-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-rewards\nVersion: 1.2.3\n")
    (info / "top_level.txt").write_text("my_rewards\n")
    (info / "RECORD").write_text("my_rewards/__init__.py,,\nmy_rewards/step.py,,\nmy_rewards/broken.py,,\n")
    (info / "entry_points.txt").write_text(
        "[mcgrpo.credit]\nstep_bonus = my_rewards.step:StepBonus\nnot_a_rule = my_rewards.step:NotARule\n"
        "broken = my_rewards.broken:Rule\n[mcgrpo.verifier]\nlenient = my_rewards.step:lenient\n"
        "one_argument = my_rewards.step:two_way\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for cached in (plugins.entry_points, plugins._distributions):
        cached.cache_clear()
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("my_rewards")]:
        del sys.modules[name]
    for cached in (plugins.entry_points, plugins._distributions):
        cached.cache_clear()


def _also_installed(root, distribution: str, entry_points: str) -> None:
    """Another distribution on `root` (on sys.path) declaring `entry_points` (entry_points.txt text), a package of its
    own name beside it; the registry read afresh."""
    package = distribution.replace("-", "_")
    (root / package).mkdir()
    (root / package / "__init__.py").write_text("import numpy as np\n" + RULE)
    info = root / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "top_level.txt").write_text(f"{package}\n")
    (info / "entry_points.txt").write_text(entry_points)
    plugins.entry_points.cache_clear()


@pytest.mark.parametrize("arm, declares, said", [
    ({"credit": {"step_bonus": {"weight": 1.0}}},
     "[mcgrpo.credit]\nstep_bonus = other_rewards:StepBonus\n",
     "config key arms.mine.credit: 'step_bonus' is declared by 2 installed distributions (my-rewards: "
     "my_rewards.step:StepBonus; other-rewards: other_rewards:StepBonus), and which one a study gets would depend on "
     "the order of sys.path; allowed: one entry point of that name in group 'mcgrpo.credit'"),
    ({"credit": {"monte_carlo": {}}},
     "[mcgrpo.credit]\nmonte_carlo = other_rewards:StepBonus\n",
     "config key arms.mine.credit: 'monte_carlo' is a built-in credit rule and declared by an installed "
     "distribution too (other-rewards: other_rewards:StepBonus); allowed: one entry point of that name in group "
     "'mcgrpo.credit', none with a built-in's name"),
    ({"recipe": {"reward_verifier": "strict"}}, "[mcgrpo.verifier]\nstrict = other_rewards:lenient\n",
     "config key arms.mine.recipe.reward_verifier: 'strict' is a built-in verifier and declared by an installed "
     "distribution too (other-rewards: other_rewards:lenient)"),
])
def test_a_name_two_plugins_declare_is_refused_naming_both(installed, arm, declares, said):
    """Two installed distributions declaring one name (or one declaring a built-in's name): a study naming it would
    train whichever the registry reads last (or the built-in, while the user means their own rule), and the run's
    identity would not say they collide. Refused by key, naming both; a name only one declares still loads."""
    _also_installed(installed, "other-rewards", declares)
    with pytest.raises(ConfigError) as err:
        studies.validate(_with_arm(arm))
    assert said in str(err.value)
    assert plugins.load("credit", "not_a_rule", "k").distribution == "my-rewards"


def _with_arm(arm: dict, **changes) -> dict:
    return edited_study(arms={"outcome": {}, "mine": arm}, **changes)


def test_default_study_run_hashes_are_unchanged():
    """Built-ins add nothing to a run's config: every run of the default study keeps its store folder (the hashes
    of main's default study, whose calibration-credit default moved them before the plugins came)."""
    cfg = studies.load(ROOT / "config" / "config.yaml")
    hashes = {f"{a}/{s}": study_config.config_hash(study_config.run_config(cfg, a, s))[:16]
              for a, s in study_config.runs(cfg)}
    assert hashes == {
        "outcome/1": "5157c352d51c62c0", "outcome/2": "f09ad32f57047062", "outcome/3": "e8b7f731f584b69b",
        "outcome/4": "176ecd9caf582a12", "mc_k4/1": "5ba9756fdb81561c", "mc_k4/2": "830b64eab2b133fc",
        "mc_k4/3": "8ff6485aeba23d88", "mc_k4/4": "e43e991e4a2b38c1", "filter/1": "db279fe8a6f3fb7e",
        "filter/2": "ffc8a0c6791c55bd", "filter/3": "f9f7db47ef0d33ba", "filter/4": "c75014b4b9d57287",
        "random/1": "4a335e99ea96c9d6", "random/2": "bc99be285bced0b1", "random/3": "07d0f0c3b3966d0e",
        "random/4": "f54152ec22e70f68"}
    assert study_config.config_hash(study_config.calibration_config(cfg))[:16] == "5ba9756fdb81561c"
    assert study_config.config_hash(study_config.gradient_tests_config(cfg))[:16] == "2cf924cb73f64a3b"


def test_an_installed_plugin_is_used_by_name_and_recorded_in_the_run(installed):
    cfg = studies.validate(_with_arm({"credit": {"step_bonus": {"weight": 0.5}}}))
    run = study_config.run_config(cfg, "mine", 1)
    (identity,) = run["plugins"]
    assert identity["name"] == "step_bonus" and identity["distribution"] == "my-rewards"
    assert identity["version"] == "1.2.3" and len(identity["source_sha256"]) == 64
    assert "plugins" not in study_config.run_config(cfg, "outcome", 1)
    rule = credit_rules.build(cfg["arms"]["mine"]["credit"])
    assert (rule.weight, rule.mode) == (0.5, "any")


def test_a_plugin_option_written_at_its_default_is_the_same_arm(installed):
    """Its runs would be other runs of the same training: the contrast of the two is noise (tests/test_same_contrast.py)."""
    twice = edited_study(arms={"outcome": {}, "mine": {"credit": {"step_bonus": {"weight": 0.5}}},
                               "spelled": {"credit": {"step_bonus": {"weight": 0.5, "mode": "any"}}}})
    with pytest.raises(ConfigError, match="config key arms.spelled: trains exactly what arms.mine trains .*written "
                                          "apart only in arms.spelled.credit"):
        studies.validate(twice)
    other = copy.deepcopy(twice)
    other["arms"]["spelled"]["credit"]["step_bonus"]["mode"] = "all"
    assert set(studies.validate(other)["arms"]) == {"outcome", "mine", "spelled"}
    assert plugins.defaults(plugins.load("credit", "step_bonus", "arms.mine.credit")) == {"mode": "any"}


def test_a_dotted_path_needs_no_packaging(installed):
    cfg = studies.validate(_with_arm({"credit": {"my_rewards.step:StepBonus": {"weight": 1.0}}}))
    (identity,) = study_config.run_config(cfg, "mine", 1)["plugins"]
    assert identity["name"] == "my_rewards.step:StepBonus" and identity["version"] == "1.2.3"  # its package's


def test_editing_a_helper_module_of_the_plugins_package_changes_the_run_identity(installed):
    """The rule's module imports a helper of its own package: an edit there changes what the rule computes, so it
    makes new runs too (the version of an editable install does not move)."""
    (installed / "my_rewards" / "helpers.py").write_text("CAP = 1.0\n")
    step = installed / "my_rewards" / "step.py"
    step.write_text(step.read_text().replace("np.minimum(steps, 1.0)", "np.minimum(steps, CAP)")
                    .replace("import numpy as np\n", "import numpy as np\nfrom my_rewards.helpers import CAP\n", 1))
    cfg = studies.validate(_with_arm({"credit": {"step_bonus": {"weight": 0.5}}}))
    before = study_config.config_hash(study_config.run_config(cfg, "mine", 1))
    (installed / "my_rewards" / "helpers.py").write_text("CAP = 2.0\n")
    assert study_config.config_hash(study_config.run_config(cfg, "mine", 1)) != before


def test_editing_the_plugin_changes_the_run_identity(installed):
    cfg = studies.validate(_with_arm({"credit": {"step_bonus": {"weight": 0.5}}}))
    before = study_config.config_hash(study_config.run_config(cfg, "mine", 1))
    source = installed / "my_rewards" / "step.py"
    source.write_text(source.read_text().replace("np.minimum(steps, 1.0)", "np.minimum(steps, 2.0)"))
    after = study_config.config_hash(study_config.run_config(cfg, "mine", 1))
    assert before != after
    assert study_config.config_hash(study_config.run_config(cfg, "outcome", 1)) == \
        study_config.config_hash(study_config.run_config(studies.validate(_with_arm({"credit": {"rloo": {}}})), "outcome", 1))


@pytest.mark.parametrize("arm, changes, message", [
    ({"credit": {"step_bonu": {"weight": 1.0}}}, {},
     "config key arms.mine.credit: 'step_bonu' is not installed; installed credit rules: outcome, rloo, monte_carlo"),
    ({"credit": {"step_bonus": {"weight": "high"}}}, {},
     "config key arms.mine.credit.step_bonus.weight: 'high' is not allowed for 'step_bonus'; allowed: float"),
    ({"credit": {"step_bonus": {"weight": 1.0, "wieght": 2}}}, {},
     "config key arms.mine.credit.step_bonus: unknown option 'wieght' of credit rule 'step_bonus'; allowed: "
     "weight (float), mode (str)"),
    ({"credit": {"step_bonus": {}}}, {},
     "config key arms.mine.credit.step_bonus: option 'weight' of 'step_bonus' is required (float)"),
    ({"credit": {"not_a_rule": {}}}, {},
     "config key arms.mine.credit: 'not_a_rule' (my_rewards.step.NotARule) does not satisfy the credit protocol "
     "(mcgrpo.api): it lacks __call__"),
    ({"credit": {"shuffled": {"step_bonus": {"weight": True}}}}, {},
     "config key arms.mine.credit.shuffled.step_bonus.weight: True is not allowed"),
    ({"credit": {"no_such_module:Rule": {}}}, {},
     "config key arms.mine.credit: 'no_such_module:Rule' is not importable"),
    ({"credit": {"my_rewards.step:StepBonnus": {}}}, {},
     "config key arms.mine.credit: 'my_rewards.step:StepBonnus': module 'my_rewards.step' defines no 'StepBonnus'"),
    ({"selection": {"skip_solvd": {}}}, {},
     "config key arms.mine.selection: 'skip_solvd' is not installed; installed selectors: critic_filter"),
    ({"recipe": {"reward_verifier": "one_argument"}}, {},
     "config key arms.mine.recipe.reward_verifier: 'one_argument' (my_rewards.step.two_way) does not satisfy the "
     "verifier protocol"),
    ({}, {"budget__calibration_credit": {"step_bonus": {"weight": "1"}}},
     "config key budget.calibration_credit.step_bonus.weight: '1' is not allowed"),
])
def test_hostile_plugin_configs_fail_before_any_job_naming_the_key(installed, arm, changes, message):
    with pytest.raises(ConfigError) as err:
        studies.validate(_with_arm(arm, **changes))
    assert message in str(err.value)


def test_an_entry_point_that_fails_to_import_keeps_its_traceback(installed):
    """A bug in the plugin is not a config error: its own exception, with a note naming the plugin."""
    with pytest.raises(ZeroDivisionError) as err:
        studies.validate(_with_arm({"credit": {"broken": {}}}))
    assert any("importing the credit plugin 'broken'" in note for note in err.value.__notes__)
    assert "my_rewards/broken.py" in "".join(str(f.path) for f in err.traceback)


def test_an_option_typed_by_a_type_checking_import_keeps_its_traceback_naming_the_plugin(installed):
    """An option annotated with a type imported only for the type checker cannot be read when the study is checked:
    the plugin's bug, its NameError kept, with a note naming the plugin and what its annotations must do."""
    (installed / "my_rewards" / "typed.py").write_text(
        "from __future__ import annotations\nfrom dataclasses import dataclass\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from my_types import Mode\n\n@dataclass\nclass Typed:\n    mode: Mode | None = None\n"
        "    def __call__(self, rollouts, ctx):\n        return None\n")
    with pytest.raises(NameError) as err:
        studies.validate(_with_arm({"credit": {"my_rewards.typed:Typed": {}}}))
    assert err.value.__notes__ == [
        "mcgrpo: the error above was raised reading the option types of the credit plugin 'my_rewards.typed:Typed' "
        "(my_rewards.typed.Typed): a plugin's annotations must name types its module defines or imports when it runs "
        "(not only under `if TYPE_CHECKING:`)"]


def test_a_verifier_plugin_is_the_training_reward(installed):
    from mcgrpo import api
    cfg = studies.validate(edited_study(recipe__reward_verifier="lenient"))
    assert study_config.run_config(cfg, "outcome", 1)["plugins"][0]["name"] == "lenient"
    problems, texts = [{"question": "1+1", "answer": "2"}], ["22 apples", "\\boxed{3}"]
    assert api.rollouts_of(problems, texts, 2, "lenient").rewards.tolist() == [1.0, 0.0]  # '2' is in '22 apples'
    assert api.rollouts_of(problems, texts, 2).rewards.tolist() == [0.0, 0.0]  # the default reads 22


def test_a_selector_plugin_is_built_with_the_stream(installed, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TEMPLATE / "src"))
    picker = selection.build({"selection": {"my_intervention.selection:SkipSolved": {"candidates": 4}}},
                             pool_size=20, seed=3, per_iteration=2)
    first = picker.select(0, None)
    assert len(first.candidates) == 4 and first.chosen.tolist() == first.candidates[:2].tolist()
    picker.observe(0, first, np.array([1.0, 0.5]), None)
    assert picker.state_dict() == {"solved": [int(first.chosen[0])]}


def test_the_template_imports_only_the_public_api():
    """A plugin reaches mcgrpo through mcgrpo.api alone: the rest may change under it."""
    files = sorted(TEMPLATE.rglob("*.py"))
    assert files
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.startswith("mcgrpo") or name == "mcgrpo.api", f"{path}: imports {name}"


def test_the_templates_own_tests_pass_with_its_source_on_the_path():
    """The fast tier's run of the template (tests/test_template.py, slow, installs it into a fresh venv): its own
    tests, its package on the path, nothing installed and no network."""
    import os
    import subprocess
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TEMPLATE / "src"), str(ROOT / "workflow")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(TEMPLATE / "tests")],
                          cwd=TEMPLATE, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout


def test_the_public_api_is_light_and_complete():
    code = ("import sys, mcgrpo.api as a\n"
            "missing = [n for n in a.__all__ if not hasattr(a, n)]\n"
            "print(missing, 'torch' in sys.modules)")
    import subprocess
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "workflow"), "PATH": ""}).stdout
    assert out.strip() == "[] False"


def test_plugin_options_come_from_the_declaration(installed, monkeypatch):
    plugin = plugins.load("credit", "step_bonus", "arms.x.credit")
    assert {k: (getattr(t, "__name__", t), req) for k, (t, req) in plugins.options(plugin).items()} == \
        {"weight": ("float", True), "mode": ("str", False)}
    monkeypatch.syspath_prepend(str(TEMPLATE / "src"))
    skip = plugins.load("selection", "my_intervention.selection:SkipSolved", "arms.x.selection")
    assert set(plugins.options(skip)) == {"candidates"}  # not the stream, per_iteration, seed the workflow passes

