"""A plugin's side effects on the process's global state (issue 49, third audit): what a credit rule, selector or
verifier leaves changed in torch, numpy, the working folder, sys.path or os.environ reaches the rest of its arm's
run and nothing of the arms it is compared with, so a call (or a build) that leaves one changed stops the run,
named. What the run draws at random it draws from generators of its own, so a plugin that reseeds or consumes the
global ones changes nothing; the tests below hold both."""

from __future__ import annotations

import copy
import os
import random
import re
import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from conftest import SMALL_STUDY, edited_study
from mcgrpo import api, studies
from mcgrpo.core import config as study_config
from mcgrpo.core.budget import Budget
from mcgrpo.core.errors import PluginError
from mcgrpo.train import gradients
from mcgrpo.train.models.tiny import build_model
from mcgrpo.train.trainer import Trainer

HERE = __name__  # the plugins are named by dotted path: 'test_plugin_globals:Changes'


def outcome(rollouts, ctx) -> list[np.ndarray]:
    return api.per_token(api.group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps), rollouts)


CHANGES = {  # what a plugin might do to the process, for its own computation, and leave so
    "flash": lambda: torch.backends.cuda.enable_flash_sdp(False),
    "benchmark": lambda: setattr(torch.backends.cudnn, "benchmark", True),
    "reduced": lambda: setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False),
    "device": lambda: torch.set_default_device("meta"),
    "anomaly": lambda: torch.autograd.set_detect_anomaly(True),
    "seterr": lambda: np.seterr(all="raise"),
    "chdir": lambda: os.chdir(os.path.dirname(os.getcwd())),
    "path": lambda: sys.path.insert(0, "/plugin/vendor"),
    "environ": lambda: os.environ.update(OMP_NUM_THREADS="7"),
    "onednn": lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "bf16"),  # bf16 matmuls on the CPU
}
SAID = {
    "flash": r"torch.backends.cuda.flash_sdp_enabled\(\) from True to False",
    "benchmark": r"torch.backends.cudnn.benchmark from False to True",
    "reduced": r"torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction from True to False",
    "device": r"torch's default device from cpu to meta",
    "anomaly": r"torch's anomaly detection from False to True",
    "seterr": r"numpy's error handling \(np.seterr\)\['divide'\] from 'warn' to 'raise'",
    "chdir": r"the working folder \(os.chdir\) from .+ to .+",
    "path": r"sys.path from \d+ entries to \d+, '/plugin/vendor' put before its entries",
    "environ": r"os.environ\['OMP_NUM_THREADS'\] from .+ to '7'",
    "onednn": r"torch.backends.mkldnn.matmul.fp32_precision from none to bf16",
}


@dataclass
class Changes:
    """Outcome-only credit, but each call makes the change named `what` (CHANGES) to the process and leaves it."""
    what: str = "flash"

    def __call__(self, rollouts, ctx):
        CHANGES[self.what]()
        return api.Credit(outcome(rollouts, ctx))


@dataclass(kw_only=True)
class ChangesWhenBuilt(api.StreamSelector):
    """A selector whose build makes the change named `what`: at the run's start, before any call."""
    what: str = "flash"

    def __post_init__(self):
        CHANGES[self.what]()


@dataclass
class ChangesWhenRebuilt:
    """Outcome-only credit with a state_dict: the run builds it afresh at each checkpoint (to check that state_dict
    restores it), and that second build turns flash attention off, mid-run."""
    builds = 0

    def __post_init__(self):
        type(self).builds += 1
        if type(self).builds == 2:
            torch.backends.cuda.enable_flash_sdp(False)

    def __call__(self, rollouts, ctx):
        return api.Credit(outcome(rollouts, ctx))

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def judges_under_raise(text, reference):
    """The default verdict, computed under np.seterr(all='raise') and left so."""
    np.seterr(all="raise")
    return api.is_correct(text, reference)


@pytest.fixture
def process():
    """The process's global state put back after a test whose plugin changes it."""
    saved = (torch.backends.cuda.flash_sdp_enabled(), torch.backends.cudnn.benchmark,
             torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction, torch.get_default_device(),
             torch.is_anomaly_enabled(), np.geterr(), os.getcwd(), list(sys.path), dict(os.environ),
             torch.backends.mkldnn.matmul.fp32_precision)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # set, as a job's is: the plugins below change it
    yield
    flash, benchmark, reduced, device, anomaly, errors, cwd, path, environ, onednn = saved
    torch.backends.mkldnn.matmul.fp32_precision = onednn
    torch.backends.cuda.enable_flash_sdp(flash)
    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = reduced
    torch.set_default_device(device)
    torch.autograd.set_detect_anomaly(anomaly)
    np.seterr(**errors)
    os.chdir(cwd)
    sys.path[:] = path
    os.environ.clear()
    os.environ.update(environ)


def _trainer(arm: dict, tiny, world, evals=None, budget=600, name="bad") -> Trainer:
    cfg = studies.validate(edited_study(arms={"outcome": {}, name: arm}))
    model, tokenizer = tiny
    return Trainer(study_config.run_config(cfg, name, 1), model, tokenizer, world[0], evals, budget, arm=name)


def _stopped(arm: dict, tiny, world, **run) -> tuple[str, Trainer | None]:
    """The one line a run of arm bad stops with (its build or its training), and the trainer where it was built."""
    trainer = None
    with pytest.raises(PluginError) as err:
        trainer = _trainer(arm, tiny, world)
        trainer.run(**run)
    assert "\n" not in str(err.value)
    return str(err.value), trainer


@pytest.mark.parametrize("what", list(CHANGES))
def test_a_credit_rule_that_leaves_the_process_changed_is_named(what, tiny, world, process):
    """Each change reaches every later rollout, update and evaluation of this arm's run, and nothing of the arms it is
    compared with: the run stops at the call, before the update, naming the plugin, the setting and its values."""
    name = f"{HERE}:Changes"
    message, trainer = _stopped({"credit": {name: {"what": what}}}, tiny, world, max_iterations=2)
    assert re.match(re.escape(f"credit rule '{name}' (arms.bad.credit) in training arm bad seed 1, iteration 0: it "
                              "changed ") + SAID[what] + re.escape(" and left it so; allowed: its inputs as it was "
                                                                   "given them"), message), message
    assert message.endswith("(docs/plugins.md)") and "the process's global state as it found it" in message
    assert trainer.log.iterations == [] and trainer.updates == 0


def test_turning_flash_attention_off_changes_what_the_tiny_model_computes(tiny, process):
    """Why the kernels' flags are held (not only speed): on the CPU, the tiny model's logits move with it."""
    model, _ = tiny
    ids = torch.arange(40).reshape(2, 20) % 50
    with torch.no_grad():
        on = model(input_ids=ids).logits
        torch.backends.cuda.enable_flash_sdp(False)
        off = model(input_ids=ids).logits
    assert not torch.equal(on, off)


def test_a_selector_whose_build_leaves_the_process_changed_is_named(tiny, world, process):
    name = f"{HERE}:ChangesWhenBuilt"
    message, trainer = _stopped({"selection": {name: {"what": "environ"}}}, tiny, world, max_iterations=1)
    assert message.startswith(f"selector '{name}' (arms.bad.selection): building it changed "
                              "os.environ['OMP_NUM_THREADS'] from "), message
    assert trainer is None  # refused as the run is built, before any training


def test_a_plugin_rebuilt_at_a_checkpoint_cannot_change_the_rest_of_the_run(tiny, world, tmp_path, process):
    """A plugin with a state_dict is built afresh at every checkpoint (contract.restored): that build, mid-run, is held
    as its first is."""
    name = f"{HERE}:ChangesWhenRebuilt"
    ChangesWhenRebuilt.builds = 0
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": {"credit": {name: {}}}}))
    model, tokenizer = tiny
    trainer = Trainer(study_config.run_config(cfg, "bad", 1), model, tokenizer, world[0], world[1], 600,
                      checkpoint_dir=str(tmp_path), arm="bad")
    with pytest.raises(PluginError) as err:
        trainer.run(max_iterations=1)
    # the first checkpoint, after evaluation 0, before iteration 0 (which the message calls after iteration -1)
    assert str(err.value).startswith(f"credit rule '{name}' (arms.bad.credit) in training arm bad seed 1, "
                                     "checkpoint after iteration -1: building it changed "
                                     "torch.backends.cuda.flash_sdp_enabled() from True to False and left it so; "
                                     "allowed: "), err.value
    assert torch.backends.cuda.flash_sdp_enabled() is False and trainer.log.iterations == []  # at the first checkpoint


def test_a_verifier_that_leaves_numpy_raising_is_named(tiny, world, process):
    name = f"{HERE}:judges_under_raise"
    message, _ = _stopped({"recipe": {"reward_verifier": name}}, tiny, world, max_iterations=1)
    assert message.startswith(f"verifier '{name}' (arms.bad.recipe.reward_verifier) in training arm bad seed 1, "
                              "iteration 0: it changed numpy's error handling (np.seterr)['divide'] from 'warn' to "
                              "'raise' and left it so"), message


@dataclass
class Imports:
    """Appends a folder to sys.path and sets a variable no one had set: what a library imported in a call may do
    (scikit-learn sets KMP_* defaults as a built-in rule first fits), allowed."""
    def __call__(self, rollouts, ctx):
        if "/plugin/appended" not in sys.path:
            sys.path.append("/plugin/appended")
        os.environ.setdefault("MCGRPO_TEST_PLUGIN_DEFAULT", "1")
        return api.Credit(outcome(rollouts, ctx))


def test_appending_to_sys_path_or_adding_a_variable_is_allowed(tiny, world, process):
    os.environ.pop("MCGRPO_TEST_PLUGIN_DEFAULT", None)
    trainer = _trainer({"credit": {f"{HERE}:Imports": {}}}, tiny, world)
    assert len(trainer.run(max_iterations=2).iterations) == 2


# What the run draws at random is drawn from generators of its own: a plugin that reseeds or consumes the global
# ones (Python's, numpy's, torch's) changes nothing the run computes.

def _draws() -> None:
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    random.random(), np.random.rand(3), torch.rand(3)


@dataclass
class Reseeds:
    draws: bool = True

    def __call__(self, rollouts, ctx):
        if self.draws:
            _draws()
        return api.Credit(outcome(rollouts, ctx))


@dataclass(kw_only=True)
class ReseedingSelector(api.StreamSelector):
    """The stream's order, drawing from every global generator on each call where it `draws`."""
    draws: bool = True

    def select(self, iteration, view):
        if self.draws:
            _draws()
        chosen = self.stream.candidates(iteration, self.per_iteration)
        return api.Selection(chosen, chosen)


def reseeding_verifier(text, reference):
    _draws()
    return api.is_correct(text, reference)


def quiet_verifier(text, reference):
    return api.is_correct(text, reference)


def _untimed(frame):
    return frame.drop(columns=[c for c in frame.columns if c.startswith(("t_", "cpu_", "train_", "eval_seconds"))])


def test_plugins_that_draw_from_the_global_generators_train_and_evaluate_as_those_that_do_not(tiny, world):
    """A credit rule, a selector and a verifier that each reseed and consume every global generator: the run's
    rollouts, updates, evaluations and samples are those of the same run without them."""
    model, tokenizer = tiny
    arms = {arm: {"credit": {f"{HERE}:Reseeds": {"draws": draws}},
                  "selection": {f"{HERE}:ReseedingSelector": {"draws": draws}},
                  "recipe": {"reward_verifier": f"{HERE}:{arm}_verifier"}}
            for arm, draws in (("quiet", False), ("reseeding", True))}
    cfg = studies.validate(edited_study(arms={"outcome": {}, **arms}))
    frames = {}
    for seed, arm in enumerate(arms):
        torch.manual_seed(seed)  # and whatever state the generators start the run in
        trainer = Trainer(study_config.run_config(cfg, arm, 1), copy.deepcopy(model), tokenizer, world[0], world[1],
                          600, arm=arm)
        frames[arm] = trainer.run(max_iterations=3).frames()
    for table in ("iterations", "evals", "samples"):
        assert _untimed(frames["reseeding"][table]).equals(_untimed(frames["quiet"][table])), table


@dataclass
class Quiet:
    def __call__(self, rollouts, ctx):
        return api.Credit(outcome(rollouts, ctx))


@dataclass
class Draws:
    """Outcome-only credit that draws from torch's global generator at each call, as any torch code might."""
    def __call__(self, rollouts, ctx):
        torch.rand(3)
        return api.Credit(outcome(rollouts, ctx))


def _alignment(rule: str, tokenizer, world):
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["budget"] = {"iterations": 4}
    cfg["arms"]["mine"] = {"credit": {f"{HERE}:{rule}": {}}}
    cfg["evaluation"] = {**cfg.get("evaluation", {}), "alignment": {
        "arms": ["mine"], "every": 1, "batches": 1, "reference": {"k": 1, "cuts": 2}, "space": "lora",
        "lora": {"rank": 2, "alpha": 4, "targets": ["q_proj", "v_proj"]},
        "controls": {"mc": {"monte_carlo": {"k": 1, "prompt_value": 0.5}}}}}
    cfg = studies.validate(cfg)
    model = build_model(tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=96,
                        seed=0)
    trainer = Trainer(study_config.run_config(cfg, "mine", 1), model, tokenizer, world[0], None,
                      Budget(4, "iterations"), arm="mine")
    return trainer.run().frames()["alignment"]


def test_a_rule_that_draws_from_torchs_generator_leaves_the_alignment_along_training_as_it_was(tiny, world):
    """The alignment along training measures LoRA adapters, whose A matrices peft draws from torch's global generator:
    a rule that drew from it moved the subspace from one measurement to the next, and the alignment with it. Here the
    policy never moves (the untrained model is rewarded 0 everywhere, so outcome-only's updates are 0): every
    measurement is the same, a drawing rule's as a quiet one's."""
    quiet, draws = (_alignment(rule, tiny[1], world) for rule in ("Quiet", "Draws"))
    mc = quiet.query("arm == 'mc' and measure == 'alignment'")["value"]
    assert mc.notna().all() and mc.nunique() == 1  # the same at every iteration
    assert draws.equals(quiet)


def test_the_lora_space_is_drawn_from_its_seed_and_leaves_the_global_generator_alone(tiny):
    model, tokenizer = tiny
    adapters, states = [], []
    for before in (0, 1):
        torch.manual_seed(before)  # whatever drew from the global generator before
        state = torch.get_rng_state()
        policy = copy.deepcopy(model)
        params = gradients.parameter_space(policy, "lora", {"rank": 2, "alpha": 4, "targets": ["q_proj"]}, seed=3)
        adapters.append(torch.cat([p.detach().reshape(-1) for p in params]))
        states.append(torch.equal(torch.get_rng_state(), state))
    other = gradients.parameter_space(copy.deepcopy(model), "lora", {"rank": 2, "alpha": 4, "targets": ["q_proj"]},
                                      seed=4)
    assert torch.equal(adapters[0], adapters[1]) and all(states)
    assert not torch.equal(adapters[0], torch.cat([p.detach().reshape(-1) for p in other]))


@dataclass
class Records:
    """Keeps what it was handed, to read its types."""
    def __call__(self, rollouts, ctx):
        self.handed = rollouts
        return api.Credit(outcome(rollouts, ctx))


def test_the_rows_a_plugin_is_handed_cannot_be_edited_in_place(tiny, world):
    """The contract compares the rollouts' lists by their items (contract._snapshot): sound because each item is
    immutable, a prompt a tuple of ids, a completion a frozen Completion of a tuple of tokens, a text a str. A list
    or an array among them could be edited in place unseen."""
    trainer = _trainer({"credit": {f"{HERE}:Records": {}}}, tiny, world)
    trainer.run(max_iterations=1)
    handed = trainer.credit.handed
    assert all(type(p) is tuple and all(type(t) is int for t in p) for p in handed.prompts)
    assert all(type(c.tokens) is tuple and type(c.logprobs) is tuple for c in handed.completions)
    assert all(type(t) is str for t in handed.texts)
    with pytest.raises(AttributeError):
        handed.completions[0].tokens = ()
