"""A plugin that patches the code a run computes or counts with (mcgrpo.train.patches): research code replaces
library functions for the whole process (`import unsloth`, liger-kernel's `apply_liger_kernel_to_qwen2()`,
`torch.nn.functional.softmax = mine`), which, done by one arm's plugin, has that arm's policy compute, or its run
count, with other code than the arms it is compared with. A call, build or import that leaves one so stops the run,
named; a patch undone before the call returns, or a new name that hides nothing, is allowed."""

from __future__ import annotations

import functools
import importlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

from conftest import ROOT, edited_study
from mcgrpo import api, cli, studies
from mcgrpo.core import config as study_config
from mcgrpo.core.errors import PluginError
from mcgrpo.core.ledger import Ledger
from mcgrpo.train import loss, trainer as trainer_module
from mcgrpo.train.trainer import Trainer

HERE = __name__
GONE = object()
ORIGINAL_LOG_SOFTMAX = torch.log_softmax
ORIGINAL_LOSS = trainer_module.backward_policy_loss


def halved(x, dim=-1, **kwargs):
    return ORIGINAL_LOG_SOFTMAX(x / 2, dim=dim, **kwargs)


def tensor_softmax(self, dim=-1, **kwargs):
    return torch.softmax(self * 2, dim=dim, **kwargs)


@functools.wraps(ORIGINAL_LOSS)
def counted_loss(*args, **kwargs):  # named as the function it wraps: the message says where each was defined
    return ORIGINAL_LOSS(*args, **kwargs)


PATCHES = {  # what a plugin might do to the code, and leave so; what the message says of it
    "replaced": (lambda: setattr(torch, "log_softmax", halved),
                 "torch.log_softmax from torch._VariableFunctionsClass.log_softmax to test_plugin_patches.halved"),
    "added over": (lambda: setattr(torch.Tensor, "softmax", tensor_softmax),
                   "torch.Tensor.softmax from TensorBase.softmax (inherited) to "
                   "test_plugin_patches.tensor_softmax"),
    "deleted": (lambda: delattr(Ledger, "charge"),
                "mcgrpo.core.ledger.Ledger.charge from mcgrpo.core.ledger.Ledger.charge to deleted"),
    "builtin hidden": (lambda: setattr(loss, "max", lambda *args: 0),
                       "mcgrpo.train.loss.max from builtins.max (the builtin) to test_plugin_patches.<lambda>"),
    "wrapped": (lambda: setattr(trainer_module, "backward_policy_loss", counted_loss),
                "mcgrpo.train.trainer.backward_policy_loss from mcgrpo.train.loss.backward_policy_loss to "
                "mcgrpo.train.loss.backward_policy_loss (another function, defined at " + __file__),
}
PATCHED = [(torch, "log_softmax"), (torch.Tensor, "softmax"), (Ledger, "charge"), (loss, "max"),
           (trainer_module, "backward_policy_loss"), (torch, "mcgrpo_test_registered")]


@pytest.fixture
def code():
    """The attributes the plugins below patch, put back after the test."""
    saved = [(owner, name, vars(owner).get(name, GONE)) for owner, name in PATCHED]
    yield
    for owner, name, value in saved:
        if value is GONE:
            if name in vars(owner):
                delattr(owner, name)
        else:
            setattr(owner, name, value)


def outcome(rollouts, ctx) -> list:
    return api.per_token(api.group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps), rollouts)


@dataclass
class Patches:
    """Outcome-only credit, but its first call makes the patch named `what` (PATCHES) and leaves it."""
    what: str = "replaced"

    def __call__(self, rollouts, ctx):
        PATCHES[self.what][0]()
        return api.Credit(outcome(rollouts, ctx))


@dataclass(kw_only=True)
class PatchesWhenBuilt(api.StreamSelector):
    def __post_init__(self):
        PATCHES["replaced"][0]()


@dataclass
class PatchesWithin:
    """Patches torch.log_softmax for a computation of its own and restores it (try/finally), and registers a new
    name that hides nothing: both allowed."""
    def __call__(self, rollouts, ctx):
        torch.mcgrpo_test_registered = halved
        torch.log_softmax = halved
        try:
            torch.log_softmax(torch.zeros(3), dim=-1)
        finally:
            torch.log_softmax = ORIGINAL_LOG_SOFTMAX
        return api.Credit(outcome(rollouts, ctx))


def _trainer(arm: dict, tiny, world) -> Trainer:
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": arm}))
    model, tokenizer = tiny
    return Trainer(study_config.run_config(cfg, "bad", 1), model, tokenizer, world[0], None, 600, arm="bad")


@pytest.mark.parametrize("what", list(PATCHES))
def test_a_credit_rule_that_leaves_the_code_patched_is_named(what, tiny, world, code):
    """Each patch reaches every later rollout, update or count of this arm's run and nothing of the arms it is
    compared with: the run stops at the call, before the update, naming the attribute and its two values."""
    name = f"{HERE}:Patches"
    trainer = _trainer({"credit": {name: {"what": what}}}, tiny, world)
    with pytest.raises(PluginError) as err:
        trainer.run(max_iterations=2)
    message = str(err.value)
    assert message.startswith(f"credit rule '{name}' (arms.bad.credit) in training arm bad seed 1, iteration 0: it "
                              f"patched {PATCHES[what][1]}"), message
    assert "and left it so; allowed: the code a run computes and counts with as it found it" in message
    assert "undone before it returns (try/finally) (docs/plugins.md)" in message and "\n" not in message
    assert trainer.log.iterations == [] and trainer.updates == 0


def test_a_selector_whose_build_patches_the_code_is_named(tiny, world, code):
    name = f"{HERE}:PatchesWhenBuilt"
    with pytest.raises(PluginError, match=re.escape(
            f"selector '{name}' (arms.bad.selection): building it patched torch.log_softmax from "
            "torch._VariableFunctionsClass.log_softmax to test_plugin_patches.halved and left it so; allowed: ")):
        _trainer({"selection": {name: {}}}, tiny, world)


def test_a_patch_undone_within_the_call_and_a_new_name_are_allowed(tiny, world, code):
    trainer = _trainer({"credit": {f"{HERE}:PatchesWithin": {}}}, tiny, world)
    assert len(trainer.run(max_iterations=2).iterations) == 2
    assert torch.log_softmax is ORIGINAL_LOG_SOFTMAX and torch.mcgrpo_test_registered is halved


MODELING = "transformers.models.qwen2.modeling_qwen2"
RULE = "\nclass Flat:\n    def __call__(self, rollouts, ctx):\n        return None\n"


@pytest.fixture
def first_import(tmp_path, monkeypatch):
    """A folder on sys.path for a plugin's module, and MODELING as a job finds it: not imported yet (the job imports
    the plugin before it loads the model). Every module imported meanwhile is forgotten, MODELING put back."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before, modeling = set(sys.modules), sys.modules.pop(MODELING, None)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]
    if modeling is not None:
        sys.modules[MODELING] = modeling


def test_a_plugin_whose_import_patches_a_modeling_module_it_imports_first_is_refused_by_the_job(first_import, capsys):
    """What liger-kernel's apply_liger_kernel_to_qwen2() does, at the top of a plugin's module: the modeling module
    is imported first by that import (the job has not loaded the model yet), so it is taken as its own code left it,
    and the patch after that is named."""
    (first_import / "my_liger.py").write_text(
        f"import importlib\nmodeling = importlib.import_module({MODELING!r})\n"
        "class FastNorm(modeling.Qwen2RMSNorm):\n    pass\nmodeling.Qwen2RMSNorm = FastNorm\n" + RULE)
    cfg = studies.validate(edited_study(arms={"outcome": {}, "mine": {"credit": {"my_liger:Flat": {}}}}))
    planned = study_config.run_config(cfg, "mine", 1)
    del sys.modules["my_liger"]  # planned by another process: the job imports it first
    sys.modules.pop(MODELING, None)
    files = ["--model", str(first_import / "m"), "--data", str(first_import / "d"), "--out",
             str(first_import / "o"), "--budget", str(first_import / "b.parquet")]
    assert cli.main(["train", "--run-json", json.dumps(planned), *files, "--label", "s/mine"]) == 2
    assert (f"error: credit rule 'my_liger:Flat' (arms.mine.credit): importing its module patched {MODELING}."
            f"Qwen2RMSNorm from {MODELING}.Qwen2RMSNorm to my_liger.FastNorm and left it so; allowed: the code a run "
            "computes and counts with as it found it") in capsys.readouterr().err
    assert importlib.import_module(MODELING).Qwen2RMSNorm.__module__ == "my_liger"  # patched; refused, not run
    assert not (first_import / "o").exists()


FRESH = """
import sys
from mcgrpo.core.errors import PluginError
from mcgrpo.train import contract
sys.path.insert(0, {folder!r})
subject = contract.Subject("credit", "my_plain:Flat", "arms.mine.credit")
contract.imported(subject, lambda: __import__("my_plain"))
print("torch._dynamo" in sys.modules, "transformers.models.llama.modeling_llama" in sys.modules)
try:
    contract.imported(subject, lambda: __import__("my_patching"))
except PluginError as e:
    print(e)
"""


def test_in_a_fresh_process_what_a_library_does_to_itself_as_it_is_imported_is_not_a_plugins_patch(tmp_path):
    """A job imports its plugin first, before transformers: a plugin that imports a modeling module brings in
    torch._dynamo, whose import wraps torch.manual_seed, as every arm's job does as it loads its model; that is the
    library's own, not the plugin's. A patch after it, in a module the same import imported first, is named."""
    modeling = "transformers.models.llama.modeling_llama"
    (tmp_path / "my_plain.py").write_text(f"import {modeling}\n" + RULE)
    (tmp_path / "my_patching.py").write_text(f"import {modeling} as m\nm.rotate_half = abs\n" + RULE)
    done = subprocess.run([sys.executable, "-c", FRESH.format(folder=str(tmp_path))], capture_output=True,
                          text=True, cwd=tmp_path, env={"PYTHONPATH": str(ROOT / "workflow"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, refused = done.stdout.strip().splitlines()
    assert loaded == "True True"
    assert refused.startswith(f"credit rule 'my_plain:Flat' (arms.mine.credit): importing its module patched "
                              f"{modeling}.rotate_half from {modeling}.rotate_half to builtins.abs and left it so")
