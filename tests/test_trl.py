"""TRL's GRPOTrainer under the protocol (mcgrpo.integrations.trl, docs/trl.md).

Fast tier (no TRL needed): the ledger's token accounting against hand-computed cases (the budget crossing, the B/k
evaluation points, a reward that charges continuations), the TRL arm's GRPOConfig and identity. Slow tier (TRL
installed: `make test-trl` runs this file with .venv-bench's python): real TRL runs of the tiny model through the
train job, their store, counts, stopping point and `check-store`.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT, SMALL_STUDY
from mcgrpo import api, studies
from mcgrpo.core import config as study_config
from mcgrpo.core.ledger import Ledger, counting
from mcgrpo.core import trl_config

SCHEMA_RECIPE = study_config.schema()["properties"]["recipe"]["properties"]
EXAMPLE = ROOT / "examples" / "trl-dense-reward" / "dense_reward.py"


def _study(**arms) -> dict:
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["arms"] = {"outcome": {}, "trl": {"trainer": {"trl": {}}}, **arms}
    return studies.validate(cfg)


def _iterations(ledger: Ledger, spends: list[dict[str, int]]) -> list[tuple[int, list[int], bool]]:
    """(what B counts, evaluation points, done) after each iteration of `spends` (kind -> tokens)."""
    out = []
    for spend in spends:
        for kind, tokens in spend.items():
            ledger.charge(tokens, kind)
        points = ledger.end_iteration()
        out.append((ledger.spent, points, ledger.done))
    return out


def test_a_run_stops_at_the_first_boundary_that_reaches_B_evaluated_at_each_crossing():
    """B = 600, 4 evaluations per B: points at 150, 300, 450, 600 tokens, each read at the first boundary at or
    after it; the run stops at the boundary that reaches 600 (690), not before it (498) nor after."""
    steps = _iterations(Ledger(600, "tokens", 4), [{"rollout": t} for t in (164, 175, 159, 192)])
    assert steps == [(164, [1], False), (339, [2], False), (498, [3], False), (690, [4], True)]


def test_reaching_B_exactly_stops_and_no_point_lies_past_the_horizon():
    ledger = Ledger(100, "tokens", 4, horizon=2)
    assert _iterations(ledger, [{"rollout": 100}, {"rollout": 99}, {"rollout": 1}]) == [
        (100, [1, 2, 3, 4], False), (199, [5, 6, 7], False), (200, [8], True)]
    assert _iterations(Ledger(100, "tokens", 4), [{"rollout": 100}]) == [(100, [1, 2, 3, 4], True)]
    assert _iterations(Ledger(100, "tokens", 4), [{"rollout": 250}]) == [(250, [1, 2, 3, 4], True)]  # not 5..10


def test_a_reward_that_charges_continuations_spends_B_and_crosses_several_points_at_once():
    """A dense reward's continuations count toward B like rollouts (the nearest wrong count, rollouts only,
    would not stop this run at its second iteration)."""
    ledger = Ledger(100, "tokens", 4)
    with counting(ledger):
        ledger.charge(30, "rollout")
        api.charge(50)  # what a reward function calls while TRL trains
        assert ledger.end_iteration() == [1, 2, 3] and not ledger.done
        ledger.charge(10, "rollout")
        api.charge(12)
        assert ledger.end_iteration() == [4] and ledger.done
    assert ledger.tokens == {"rollout": 40, "continuation": 62, "discarded": 0} and ledger.total == 102


def test_an_equal_iteration_study_counts_iterations_whatever_was_generated():
    ledger = Ledger(5, "iterations", 4)
    steps = _iterations(ledger, [{"rollout": 1000}] * 5)
    assert steps == [(1, [], False), (2, [1], False), (3, [2], False), (4, [3], False), (5, [4], True)]
    assert ledger.iterations_at_most(64) == 5


def test_charge_outside_a_run_or_of_no_count_is_refused():
    with pytest.raises(RuntimeError, match="no run is counting"):
        api.charge(3)
    ledger = Ledger(10, "tokens", 1)
    for bad in (-1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="an int >= 0"):
            ledger.charge(bad)
    with pytest.raises(ValueError, match="allowed: rollout, continuation, discarded"):
        ledger.charge(1, "prompt")
    with counting(ledger), pytest.raises(RuntimeError, match="already counting"):
        with counting(Ledger(10, "tokens", 1)):
            pass


def test_the_step_count_given_to_trl_reaches_B_even_at_one_token_per_completion():
    assert Ledger(600, "tokens", 4).iterations_at_most(8) == 75
    assert Ledger(601, "tokens", 4).iterations_at_most(8) == 76
    assert Ledger(600, "tokens", 4, horizon=1.5).iterations_at_most(8) == 113


def test_the_grpo_config_is_the_recipe_mapped_key_by_key():
    cfg = _study()
    cfg["arms"]["trl"]["lr"] = {"scale": 2.0}
    run = study_config.run_config(cfg, "trl", 1)
    args = trl_config.grpo_arguments(run, "/tmp/x", 75, on_gpu=False)
    r = run["recipe"]
    assert args["per_device_train_batch_size"] == 2 * 4 and args["num_generations"] == 4
    assert (args["max_completion_length"], args["learning_rate"], args["max_grad_norm"]) == (24, 2 * r["lr"], 1.0)
    assert (args["adam_beta1"], args["adam_beta2"], args["adam_epsilon"]) == (0.9, 0.999, 1e-8)
    assert (args["beta"], args["num_iterations"], args["steps_per_generation"], args["seed"]) == (0.0, 1, 1, 1)
    assert args["use_cpu"] and not args["bf16"] and args["max_steps"] == 75


def test_every_recipe_key_has_its_mapping_written_down():
    assert set(trl_config.RECIPE) == set(SCHEMA_RECIPE)
    page = (ROOT / "docs" / "trl.md").read_text()
    assert all(f"`{key}`" in page for key in SCHEMA_RECIPE)


def test_an_advantage_epsilon_trl_cannot_take_is_refused_by_key():
    """TRL divides by the group's std + 1e-4, whatever the recipe says: at advantage_eps 0.1 the mcgrpo arms'
    advantages shrink wherever a group's std is near 0.1, the TRL arm's do not. Before, the study trained both and
    compared them as one recipe; an epsilon at most TRL's own differs only where a std is near 0 (docs/trl.md)."""
    from mcgrpo.core.errors import ConfigError
    cfg = copy.deepcopy(SMALL_STUDY)
    cfg["arms"] = {"outcome": {}, "trl": {"trainer": {"trl": {}}}}
    cfg["recipe"]["advantage_eps"] = 0.1
    with pytest.raises(ConfigError, match=r"config key recipe.advantage_eps: 0.1 with TRL arm\(s\) 'trl': GRPOTrainer "
                                          r"divides by the group's std \+ 0.0001 .*allowed: at most 0.0001"):
        studies.validate(cfg)
    cfg["recipe"]["advantage_eps"] = 1e-4
    studies.validate(cfg)


def test_a_trl_runs_identity_names_trls_version_and_its_scripts_hash(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text("def trainer(setup):\n    return None\n")
    cfg = _study(mine={"trainer": {"trl": {"script": str(script)}}})
    default, mine = (study_config.run_config(cfg, arm, 1) for arm in ("trl", "mine"))
    assert default["trl"] == {"version": trl_config.TRL_VERSION, "script_sha256": None}
    assert "trl" not in study_config.run_config(cfg, "outcome", 1)
    before = study_config.config_hash(mine)
    script.write_text("def trainer(setup):\n    return 1\n")
    assert study_config.config_hash(study_config.run_config(cfg, "mine", 1)) != before


def test_the_extra_and_the_bench_pin_the_same_trl():
    pins = (ROOT / "bench" / "requirements-trl.txt").read_text()
    assert f"trl=={trl_config.TRL_VERSION}\n" in pins
    assert f'trl = ["trl=={trl_config.TRL_VERSION}"]' in (ROOT / "pyproject.toml").read_text()


def test_a_script_without_a_trainer_function_is_named(tmp_path):
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import _script_trainer
    script = tmp_path / "mine.py"
    script.write_text("def build(setup):\n    return None\n")
    with pytest.raises(ConfigError, match=r"mine.py: defines no function trainer\(setup\)"):
        _script_trainer(str(script))


@pytest.mark.parametrize("edit, named", [("mine.py", "the script"), ("my_trl_helper.py", "module my_trl_helper")])
def test_a_script_or_its_helper_edited_after_the_run_was_planned_is_refused(world, tiny, tmp_path, monkeypatch,
                                                                           edit, named):
    """The script imports a helper module of the user's (on the Python path): an edit of either after planning stops
    the job, naming what changed, rather than training with code its run's identity does not name."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun
    monkeypatch.syspath_prepend(str(tmp_path))
    script = tmp_path / "mine.py"
    script.write_text("from my_trl_helper import VALUE\n\ndef trainer(setup):\n    return None\n")
    (tmp_path / "my_trl_helper.py").write_text("VALUE = 1\n")
    run = study_config.run_config(_study(mine={"trainer": {"trl": {"script": str(script)}}}), "mine", 1)
    (tmp_path / edit).write_text((tmp_path / edit).read_text() + "# edited\n")
    with pytest.raises(ConfigError, match=f"edited since the workflow planned this run: {named} \\(sha256 "):
        TRLRun(run, *tiny, *world, 600, tmp_path).build(None)


def test_a_trl_arm_where_trl_is_missing_says_how_to_install_it(world, tiny, tmp_path):
    import importlib.util
    if importlib.util.find_spec("trl") is not None:
        pytest.skip("trl is installed here")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun
    with pytest.raises(ConfigError, match=r"pip install 'mcgrpo\[trl\]'"):
        TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 600, tmp_path)


# -- slow tier: real TRL runs ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two TRL runs of the tiny model through `mcgrpo train` (the default trainer and the example's dense reward,
    which charges its continuations), B = 600 tokens, in a run store; their folders by arm."""
    pytest.importorskip("trl")
    from mcgrpo import data
    from mcgrpo.core import layout, store
    from mcgrpo.core.budget import budget_table
    from mcgrpo.train import models
    from mcgrpo.train.models.tiny import build_model, build_tokenizer
    root = tmp_path_factory.mktemp("trl")
    cfg = _study(dense={"trainer": {"trl": {"script": str(EXAMPLE)}}})
    data.write(*data.build(cfg["task"]), root / "data", "")
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=0), tokenizer, root / "model")
    store.write_parquet(budget_table("tiny", [], 600, "config"), root / "budget.parquet")
    runs = {}
    for arm in ("trl", "dense"):
        out = root / "runs" / layout.run_key(cfg, arm, 1)
        done = subprocess.run([sys.executable, "-m", "mcgrpo", "train", "--run-json",
                               json.dumps(study_config.run_config(cfg, arm, 1)), "--model", str(root / "model"),
                               "--data", str(root / "data"), "--budget", str(root / "budget.parquet"),
                               "--out", str(out)], env={"PYTHONPATH": str(ROOT / "workflow"), "PATH": ""},
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        (root / f"{arm}.log").write_text(done.stderr)  # what the train job's log holds
        runs[arm] = out
    return cfg, root, runs


def _frames(folder: Path) -> dict:
    from mcgrpo.core import store
    return {k: store.read_contract(folder / f"{k}.parquet", k) for k in ("iterations", "evals", "samples", "prompts")}


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["trl", "dense"])
def test_a_trl_run_stops_at_B_evaluated_at_every_point_and_stored_as_mcgrpo_stores(trained, arm):
    from mcgrpo.core import manifest, store
    cfg, _, runs = trained
    frames = _frames(runs[arm])
    it, ev = frames["iterations"], frames["evals"]
    tokens = it["tokens_total"].tolist()
    assert tokens[-1] >= 600 > (tokens[-2] if len(tokens) > 1 else 0)  # the first boundary that reaches B
    assert (it["tokens_total"] == it[["tokens_rollout", "tokens_continuation", "tokens_discarded"]].sum(axis=1)).all()
    assert it["updates"].tolist() == list(range(1, len(it) + 1)) and it["iteration"].tolist() == list(range(len(it)))
    assert sorted(ev["eval_index"].unique()) == list(range(cfg["evaluation"]["per_budget"] + 1))
    before = [0, *tokens]  # each point k read at the first boundary at or after k B / 4
    for k in range(1, 5):
        at = next(t for t in tokens if t >= k * 600 // 4)
        assert ev.loc[ev["eval_index"] == k, "tokens_total"].iloc[0] == at, (k, before)
    assert len(frames["samples"]) == 5 * 6 * cfg["evaluation"]["samples"]
    assert {"correct_whole_box", "correct_paper"} <= set(pd_columns(runs[arm] / "samples.parquet"))
    assert (frames["prompts"].groupby("iteration").size() == cfg["recipe"]["prompts_per_iteration"]).all()
    record = store.read_json(runs[arm] / "run.json")
    assert record["versions"]["trl"] == "1.16.0" and record["config"]["trl"]["version"] == "1.16.0"
    assert [attempt["stack"]["trl"] for attempt in record["attempts"]] == ["1.16.0"]  # what it trained with
    assert record["clock"]["train_seconds"] == pytest.approx(it["train_seconds"].iloc[-1])
    assert manifest.problems(runs[arm]) == []
    if arm == "dense":
        assert (it["tokens_continuation"].diff().fillna(it["tokens_continuation"]) > 0).all()
    else:
        assert (it["tokens_continuation"] == 0).all()


def pd_columns(path: Path) -> list[str]:
    import pyarrow.parquet as pq
    return pq.read_schema(path).names


@pytest.mark.slow
def test_check_store_is_clean_on_trl_runs(trained):
    _, root, _ = trained
    done = subprocess.run([sys.executable, "-m", "mcgrpo", "check-store", "--store", str(root / "runs")],
                          env={"PYTHONPATH": str(ROOT / "workflow"), "PATH": ""}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_rollout_count_equals_trls_own_log_and_its_prompts_are_mcgrpos(world, tiny, tmp_path):
    """In process: per step, the rollout tokens counted equal TRL's own logged mean completion length x P x G, and
    the prompt tokens TRL generated from are the ones mcgrpo's Prompter renders for the stream's problems."""
    pytest.importorskip("trl")
    from mcgrpo.integrations.trl import TRLRun
    from mcgrpo.train.rollout import study_prompter
    cfg = _study()
    run = study_config.run_config(cfg, "trl", 1)
    model, tokenizer = tiny
    pool, evals = world
    trl_run = TRLRun(run, model, tokenizer, pool, evals, 300, tmp_path)
    seen, build = [], trl_run.build

    def spying(setup):
        trainer = build(setup)
        tokenize = trainer._tokenize_prompts
        trainer._tokenize_prompts = lambda prompts: (out := tokenize(prompts), seen.append(out[0]))[0]
        trl_run.trainer = trainer
        return trainer
    trl_run.build = spying
    log = trl_run.run()
    history = [h for h in trl_run.trainer.state.log_history if "loss" in h]
    per_step = [row["tokens_rollout"] for row in log.iterations]
    per_step = [b - a for a, b in zip([0, *per_step], per_step)]
    assert per_step == [round(h["completions/mean_length"] * 8) for h in history]
    prompter = study_prompter(tokenizer, run)
    rows = trl_run.setup().dataset
    questions = pool.set_index("problem_id")["question"]
    assert [list(ids) for ids in seen[0]] == [list(prompter(questions[p])) for p in rows["problem_id"][:2]
                                              for _ in range(4)]


@pytest.mark.slow
def test_a_stop_request_ends_a_trl_run_at_the_next_step_and_it_does_not_resume(world, tiny, tmp_path):
    """Preemption: the run stops at the next step boundary (Interrupted: the train job records the attempt and exits
    75); a TRL run keeps no checkpoint of its own, so the next attempt trains it from step 0 (docs/trl.md)."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import Interrupted
    from mcgrpo.integrations.trl import TRLRun
    run = study_config.run_config(_study(), "trl", 1)
    model, tokenizer = tiny
    trl_run = TRLRun(run, model, tokenizer, world[0], world[1], 600, tmp_path)
    trl_run.stop_requested = True
    with pytest.raises(Interrupted, match="after iteration 0"):
        trl_run.run()
    assert trl_run.next_iteration == 1 and trl_run.resumed_at is None
    assert not any(tmp_path.rglob("*.pt")) and not any(tmp_path.rglob("*.safetensors"))


@pytest.mark.slow
@pytest.mark.parametrize("key", ["steps_per_generation", "num_iterations", "gradient_accumulation_steps"])
def test_the_protocol_refuses_a_trainer_whose_steps_are_not_iterations(world, tiny, tmp_path, key):
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import Protocol, TRLRun, default_trainer
    run = study_config.run_config(_study(), "trl", 1)
    trl_run = TRLRun(run, *tiny, *world, 600, tmp_path)
    setup = trl_run.setup()
    setup.args.per_device_train_batch_size = 4  # two steps' worth of one generated batch of 2 x 4
    setattr(setup.args, key, 2)
    if key == "steps_per_generation":
        setup.args.generation_batch_size = 8
    with pytest.raises(ConfigError, match=f"GRPOConfig {key}: 2; allowed: 1"):
        Protocol(run, 600, tiny[1], world[1]).attach(default_trainer(setup))


@pytest.mark.slow
def test_a_deprecation_is_shown_once_in_the_train_log_not_at_every_step(trained):
    """transformers warns of gradient_checkpointing_enable at every step TRL generates: once is enough."""
    _, root, _ = trained
    log = (root / "trl.log").read_text()
    assert log.count("FutureWarning: `gradient_checkpointing_enable` is deprecated") == 1, log[-3000:]


def _user_config(tmp_path, **changes):
    """A GRPOConfig as a user writes one (TRL's defaults), of the recipe's batch and limit."""
    from trl import GRPOConfig
    return GRPOConfig(**{"output_dir": str(tmp_path / "mine"), "max_steps": 20, "per_device_train_batch_size": 8,
                         "num_generations": 4, "max_completion_length": 24, "use_cpu": True, "report_to": "none",
                         **changes})


@pytest.mark.slow
def test_a_users_own_grpo_config_is_refused_by_key_before_the_first_step(world, tiny, tmp_path):
    """TRL's defaults decay the learning rate linearly, shuffle the prompts, take the dapo loss and keep dropout:
    each breaks the comparison with the study's other arms, and each is named, before any step; a max_steps under
    the protocol's bound (the run would end before B) too."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import Protocol, TRLRun, default_trainer
    run = study_config.run_config(_study(), "trl", 1)
    setup = TRLRun(run, *tiny, *world, 600, tmp_path).setup()
    setup.args = _user_config(tmp_path)
    trainer = default_trainer(setup)
    with pytest.raises(ConfigError) as refused:
        Protocol(run, 600, tiny[1], world[1]).attach(trainer)
    said = str(refused.value)
    for part in ("GRPOConfig lr_scheduler_type: 'linear'; allowed: 'constant'", "GRPOConfig shuffle_dataset: True; "
                 "allowed: False", "GRPOConfig loss_type: 'dapo'; allowed: 'dr_grpo'",
                 "GRPOConfig disable_dropout: False; allowed: True"):
        assert part in said, said
    assert "\n" not in said and trainer.state.global_step == 0
    setup.args = _user_config(tmp_path, max_steps=3, **{k: v for k, v in trl_config.FIXED.items()
                                                         if k in ("lr_scheduler_type", "shuffle_dataset", "loss_type",
                                                                  "disable_dropout", "top_k", "beta")})
    with pytest.raises(ConfigError, match=r"^GRPOConfig max_steps: 3; allowed: at least 75 "):
        Protocol(run, 600, tiny[1], world[1]).attach(default_trainer(setup))


@pytest.mark.slow
def test_chat_template_arguments_of_the_scripts_own_are_refused_by_key(world, tiny, tmp_path):
    """GRPOTrainer renders every prompt with chat_template_kwargs: other ones (a model's thinking mode switched) feed
    the arm other prompts than the study's other arms, the same rows of the stream rendered otherwise. Before, only
    recorded in run.json (trl_settings.differ_from_recipe), the run trained and compared as the study's prompts."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import Protocol, TRLRun, default_trainer
    run = study_config.run_config(_study(), "trl", 1)
    setup = TRLRun(run, *tiny, *world, 600, tmp_path).setup()
    setup.args.chat_template_kwargs = {"enable_thinking": True}
    with pytest.raises(ConfigError, match=r"^GRPOConfig chat_template_kwargs: \{'enable_thinking': True\}; allowed: "
                                          r"None, as the recipe maps it"):
        Protocol(run, 600, tiny[1], world[1]).attach(default_trainer(setup))
    setup.args.chat_template_kwargs = None
    trainer = default_trainer(setup)
    trainer.chat_template_kwargs = {"enable_thinking": True}  # the trainer's own copy, set after building it
    with pytest.raises(ConfigError, match=r"^GRPOTrainer chat_template_kwargs: \{'enable_thinking': True\}; allowed: "
                                          r"\{\}, as its args say"):
        Protocol(run, 600, tiny[1], world[1]).attach(trainer)


@pytest.mark.slow
def test_a_setting_the_protocol_allows_to_differ_is_recorded(world, tiny, tmp_path):
    """Another learning rate is the user's intervention: trained, and listed with the recipe's in run.json's block."""
    pytest.importorskip("trl")
    from mcgrpo.integrations.trl import TRLRun, default_trainer
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)

    def faster(setup):
        setup.args.learning_rate = 5e-4
        return default_trainer(setup)
    trl_run.build = faster
    trl_run.run()
    assert trl_run.record == {"trl_settings": {"differ_from_recipe": {"learning_rate": {"trainer": 5e-4,
                                                                                         "recipe": 1e-4}}},
                              "uncharged_tokens_counted": 0}


@pytest.mark.slow
@pytest.mark.parametrize("body, said", [
    ("    raise ValueError('no reward set up')", r"mine.py:2: trainer\(setup\) raised ValueError: no reward set up$"),
    ("    return None", r"mine.py: trainer\(setup\) returned NoneType; allowed: a trl.GRPOTrainer$"),
])
def test_a_script_whose_trainer_fails_is_one_line_naming_it(world, tiny, tmp_path, body, said):
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun
    script = tmp_path / "mine.py"
    script.write_text(f"def trainer(setup):\n{body}\n")
    run = study_config.run_config(_study(mine={"trainer": {"trl": {"script": str(script)}}}), "mine", 1)
    trl_run = TRLRun(run, *tiny, *world, 600, tmp_path)
    with pytest.raises(ConfigError, match=said):
        trl_run.run()


UNCHARGED = """
import torch
from trl import GRPOTrainer
GENERATED = []


def trainer(setup):
    model, tokenizer = setup.model, setup.tokenizer
    setup.generated = GENERATED

    def continued(completions, answer, **_):
        context = torch.tensor([[tokenizer.bos_token_id or 1] * 3], device=model.device)
        out = model.generate(context, attention_mask=torch.ones_like(context), do_sample=True, max_new_tokens=5,
                             min_new_tokens=5, pad_token_id=tokenizer.pad_token_id)
        GENERATED.append(out.shape[1] - 3)  # generated, never charged
        return setup.reward(completions=completions, answer=answer)

    return GRPOTrainer(model=model, reward_funcs=[continued], args=setup.args, train_dataset=setup.dataset,
                       processing_class=tokenizer)
"""


@pytest.mark.slow
def test_tokens_a_reward_generates_with_the_policy_without_charging_are_counted_and_warned_of(world, tiny, tmp_path,
                                                                                            capsys):
    pytest.importorskip("trl")
    trl_run, log, generated = _run_with_reward_generating(UNCHARGED, world, tiny, tmp_path)
    continuation = [row["tokens_continuation"] for row in log.iterations]
    assert generated and continuation[-1] == sum(generated) == trl_run.record["uncharged_tokens_counted"]
    assert capsys.readouterr().err.count("a reward function generated") == 1


@pytest.mark.slow
@pytest.mark.parametrize("where, charges", [("callback", False), ("callback", True), ("build", False)])
def test_tokens_the_scripts_other_code_generates_with_the_policy_are_counted_once(world, tiny, tmp_path, capsys,
                                                                                   where, charges):
    """A callback of the script's that samples with the policy between steps (a look at its completions, a
    continuation of its own), or trainer(setup) sampling with it before returning the trainer (here through a PEFT
    wrapper, whose generate calls the model's): its tokens count toward B, charged by it (mcgrpo.api.charge) or not,
    once. Before, uncounted: a callback's 20 tokens a step left steps 1-2 stored at 164 and 333 tokens."""
    pytest.importorskip("trl")
    from transformers import TrainerCallback
    from mcgrpo.integrations.trl import TRLRun, default_trainer
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)
    made = []

    def sample(model):
        context = torch.tensor([[1, 5, 6]])
        out = model.generate(input_ids=context, attention_mask=torch.ones_like(context), do_sample=True,
                             max_new_tokens=20, min_new_tokens=20, pad_token_id=0)
        made.append(out.shape[1] - 3)
        if charges:
            api.charge(made[-1])

    class Sampler(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            sample(model)

    def build(setup):
        if where == "build":
            from peft import LoraConfig, get_peft_model
            setup.model = get_peft_model(setup.model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
            sample(setup.model)
        trainer = default_trainer(setup)
        if where == "callback":
            trainer.add_callback(Sampler())
        return trainer
    if where == "build":
        pytest.importorskip("peft")
    trl_run.build = build
    log = trl_run.run()
    expected = [20 * (i + 1) if where == "callback" else 20 for i in range(len(log.iterations))]
    assert made and [row["tokens_continuation"] for row in log.iterations] == expected
    assert trl_run.record["uncharged_tokens_counted"] == (0 if charges else sum(made))
    said = "the script's code (trainer(setup), its callbacks, its trainer's methods) generated"
    assert capsys.readouterr().err.count(said) == (0 if charges else 1)


def _run_with_reward_generating(script_text: str, world, tiny, tmp_path):
    """Runs arm mine with this TRL script; returns the run, its log and the tokens its reward generated, as the
    script's setup recorded them."""
    from mcgrpo.integrations.trl import TRLRun
    script = tmp_path / "reward_generates.py"
    script.write_text(script_text)
    run = study_config.run_config(_study(mine={"trainer": {"trl": {"script": str(script)}}}), "mine", 1)
    trl_run = TRLRun(run, *tiny, *world, 300, tmp_path)
    setups, setup = [], trl_run.setup
    trl_run.setup = lambda: (made := setup(), setups.append(made))[0]
    log = trl_run.run()
    return trl_run, log, setups[0].generated


def _tampered(attribute: str, value):
    """A trainer(setup) that builds the recipe's GRPOTrainer, then sets one of the trainer's own copies of its
    settings (`attribute`, a dotted path under the trainer), leaving setup.args as the recipe's."""
    from mcgrpo.integrations.trl import default_trainer

    def build(setup):
        trainer = default_trainer(setup)
        *path, last = attribute.split(".")
        owner = trainer
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, last, value)
        return trainer
    return build


@pytest.mark.slow
@pytest.mark.parametrize("attribute, value, said", [
    ("num_iterations", 2, "num_iterations: 2; allowed: 1"),
    ("temperature", 2.0, "temperature: 2.0; allowed: 1.0"),
    ("generation_config.temperature", 2.0, "generation_config.temperature: 2.0; allowed: 1.0"),
    ("generation_config.max_new_tokens", 8, "generation_config.max_new_tokens: 8; allowed: 24"),
    ("generation_config.do_sample", False, "generation_config.do_sample: False; allowed: True"),
    ("loss_type", "grpo", "loss_type: 'grpo'; allowed: 'dr_grpo'"),
    ("reward_weights", torch.tensor([-1.0]), "reward_weights: [-1.0]; allowed: [1.0]"),  # the reward negated
    ("entropy_coef", 0.5, "entropy_coef: 0.5; allowed: 0.0"),  # an entropy bonus in the loss
    ("multi_objective_aggregation", "normalize_then_sum", "multi_objective_aggregation: 'normalize_then_sum'; "
     "allowed: 'sum_then_normalize'"),
])
def test_a_trainer_whose_own_copy_of_a_setting_differs_from_its_args_is_refused(world, tiny, tmp_path, attribute,
                                                                                 value, said):
    """GRPOTrainer copies its GRPOConfig into attributes of its own when it is built, and samples and steps by those:
    a script that sets one after building (trainer.num_iterations = 2 takes two updates per generated batch, a
    hotter generation_config samples otherwise) while setup.args stays the recipe's is refused before any step."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)
    trl_run.build = _tampered(attribute, value)
    with pytest.raises(ConfigError, match=f"GRPOTrainer {re.escape(said)}"):
        trl_run.run()
    assert trl_run.next_iteration == 0


@pytest.mark.slow
@pytest.mark.parametrize("change, said", [
    ("trainer.generation_config.max_new_tokens = 48", "GRPOTrainer generation_config.max_new_tokens: 48; allowed: 24"),
    ("args.num_iterations = 2", "GRPOConfig num_iterations: 2; allowed: 1"),
    ("args.max_grad_norm = 1e-9", "GRPOConfig max_grad_norm: 1e-09, set after the trainer was built (1.0 then)"),
    ("trainer.processing_class.chat_template = '{{ messages[0][\"content\"] }}'",
     "GRPOTrainer tokenizer chat_template: changed since the trainer was built; allowed: setup.tokenizer as loaded"),
])
def test_a_setting_a_callback_changes_mid_run_is_refused_at_that_step(world, tiny, tmp_path, change, said):
    """A callback of the script's (a length curriculum, a schedule of its own) that changes what the trainer samples
    or how it steps after the protocol attached: refused at the step it changed in, the run not stored. A setting the
    trainer reads at every step (max_grad_norm), and the tokenizer's chat template, too: before, a clip set to 1e-9
    mid-run, or prompts rendered by another template from step 2 on, were stored with differ_from_recipe empty."""
    pytest.importorskip("trl")
    from transformers import TrainerCallback
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun, default_trainer
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)

    def build(setup):
        trainer = default_trainer(setup)

        class Curriculum(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                exec(change, {"trainer": trainer, "args": args})
        trainer.add_callback(Curriculum())
        return trainer
    trl_run.build = build
    with pytest.raises(ConfigError, match=f"^in step 1: {re.escape(said)}"):
        trl_run.run()


def _optimized(how: str):
    """A trainer(setup) that keeps setup.args the recipe's but steps otherwise: `sgd` an optimizer of its own,
    `decay` the args' Adam with a scheduler of its own that halves the learning rate every step, `callback` a
    callback that sets the learning rate before each step."""
    import torch
    from transformers import TrainerCallback
    from mcgrpo.integrations.trl import _trl

    class Faster(TrainerCallback):
        def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
            for group in optimizer.param_groups:
                group["lr"] = 0.5

    def build(setup):
        args, params = setup.args, list(setup.model.parameters())
        adam = torch.optim.AdamW(params, lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2),
                                 eps=args.adam_epsilon, weight_decay=0.0)
        given = {"sgd": (torch.optim.SGD(params, lr=0.5), None),
                 "decay": (adam, torch.optim.lr_scheduler.LambdaLR(adam, lambda step: 0.5 ** step))}.get(how)
        trainer = _trl().GRPOTrainer(model=setup.model, reward_funcs=[setup.reward], args=args,
                                     train_dataset=setup.dataset, processing_class=setup.tokenizer,
                                     **({"optimizers": given} if given else {}))
        if how == "callback":
            trainer.add_callback(Faster())
        return trainer
    return build


@pytest.mark.slow
@pytest.mark.parametrize("how, said", [
    ("sgd", "^GRPOTrainer optimizer: SGD; allowed: AdamW, as its args build it"),
    ("decay", r"^in step 1: GRPOTrainer optimizer lr: 5e-05; allowed: 0.0001, as its args build it"),
    ("callback", r"^before step 1: GRPOTrainer optimizer lr: 0.5; allowed: 0.0001, as its args build it"),
])
def test_an_optimizer_or_learning_rate_other_than_the_args_is_refused(world, tiny, tmp_path, how, said):
    """The args say Adam at a constant learning rate, and run.json records the args: a script that hands the trainer
    an optimizer or scheduler of its own, or sets the learning rate in a callback, steps otherwise. Refused before the
    step it would change (an optimizer given to the trainer when it attaches), or at the end of the step a scheduler
    changed it in, the run not stored. Before, trained with SGD at 0.5 (or at a learning rate of 0.5 the log recorded
    as 1e-4) and stored with differ_from_recipe empty."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)
    trl_run.build = _optimized(how)
    with pytest.raises(ConfigError, match=said) as refused:
        trl_run.run()
    assert "allowed: " in str(refused.value) and "setup.args" in str(refused.value)
    assert trl_run.protocol.updates == 0 and trl_run.protocol.log.iterations == []


@pytest.mark.slow
@pytest.mark.parametrize("when, said", [
    ("before", r"^GRPOTrainer model.generation_config.min_new_tokens: 24; allowed: None, the study's initial model's"),
    ("mid_run", r"^in step 1: GRPOTrainer model.generation_config.min_new_tokens: 24; allowed: None, the study's "),
])
def test_a_model_whose_generation_config_was_changed_is_refused(world, tiny, tmp_path, when, said):
    """transformers fills what the trainer's generation_config leaves unset from the model's own: a script that sets
    min_new_tokens on setup.model before building the trainer (or in a callback mid-run) samples every completion to
    the limit. Refused before any step, or at the step it changed in. Before, trained on completions of 24 tokens each
    (mean length 24.0 against 20.5 and 21.9 in steps 1-2) and stored with differ_from_recipe empty."""
    pytest.importorskip("trl")
    from transformers import TrainerCallback
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun, default_trainer
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)

    class Longer(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            model.generation_config.min_new_tokens = 24

    def build(setup):
        if when == "before":
            setup.model.generation_config.min_new_tokens = 24
        trainer = default_trainer(setup)
        if when == "mid_run":
            trainer.add_callback(Longer())
        return trainer
    trl_run.build = build
    with pytest.raises(ConfigError, match=said):
        trl_run.run()
    assert trl_run.protocol.log.iterations == []


TWICE = """
from trl import GRPOTrainer


class Twice(GRPOTrainer):
    # two updates in one step: the step's loss stepped, then the trainer's own step on a second one
    def training_step(self, model, inputs, num_items_in_batch=None):
        super().training_step(model, inputs, num_items_in_batch)
        self.optimizer.step()
        self.optimizer.zero_grad()
        return super().training_step(model, inputs, num_items_in_batch)


def trainer(setup):
    return Twice(model=setup.model, reward_funcs=[setup.reward], args=setup.args, train_dataset=setup.dataset,
                 processing_class=setup.tokenizer)
"""


REPLAY = """
from trl import GRPOTrainer


class Replay(GRPOTrainer):
    # trains every generated batch twice: a second step on the last step's completions
    def _prepare_inputs(self, batch):
        if getattr(self, "kept", None) is None:
            self.kept = super()._prepare_inputs(batch)
            return self.kept
        kept, self.kept = self.kept, None
        return kept


def trainer(setup):
    return Replay(model=setup.model, reward_funcs=[setup.reward], args=setup.args, train_dataset=setup.dataset,
                  processing_class=setup.tokenizer)
"""


@pytest.mark.slow
@pytest.mark.parametrize("script, said, recorded", [
    (TWICE, r"^in step 1: GRPOTrainer's optimizer stepped 2 times; allowed: once a step", 0),
    (REPLAY, r"^in step 2: GRPOTrainer trained on a batch of 8 completions, but generated 0 ", 1)],
    ids=["optimizer stepped twice", "a batch trained twice"])
def test_a_subclass_that_takes_two_updates_for_one_generated_batch_is_refused(world, tiny, tmp_path, script, said,
                                                                                recorded):
    """A GRPOTrainer subclass whose training_step steps the optimizer itself before the trainer does (before: stored
    as 1 update at 339 tokens while Adam had stepped twice), or that replays the last generated batch (sample reuse in
    code rather than num_iterations), takes two updates for one batch that the budget B pays for and the records
    count as one (equal-update contrasts read them): refused at the step that does it, nothing recorded of it."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun
    path = tmp_path / "subclass.py"
    path.write_text(script)
    run = study_config.run_config(_study(mine={"trainer": {"trl": {"script": str(path)}}}), "mine", 1)
    trl_run = TRLRun(run, *tiny, *world, 300, tmp_path)
    with pytest.raises(ConfigError, match=said):
        trl_run.run()
    assert len(trl_run.protocol.log.iterations) == recorded  # the steps before it


def _fed(which: str, eval_sets):
    """A trainer(setup) whose dataset is not the run's prompt stream: `reversed` the stream's rows in reverse, `held_out`
    the study's held-out problems (what every arm is evaluated on), in the stream's columns."""
    from datasets import Dataset
    from mcgrpo.integrations.trl import default_trainer

    def build(setup):
        if which == "reversed":
            setup.dataset = setup.dataset.select(range(len(setup.dataset) - 1, -1, -1))
        else:
            held = next(iter(eval_sets.values()))
            setup.dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": q}], "answer": str(a),
                                                "problem_id": str(p)} for q, a, p in
                                               zip(held["question"], held["answer"], held["problem_id"])] * 20)
        return default_trainer(setup)
    return build


@pytest.mark.slow
@pytest.mark.parametrize("which", ["reversed", "held_out"])
def test_a_trainer_fed_other_prompts_than_the_runs_stream_is_refused_at_its_first_step(world, tiny, tmp_path, which):
    """The arms of a study train on one prompt stream, in order (shuffle_dataset is refused for it): a script whose
    dataset is another order, or other problems (the held-out ones every arm is evaluated on), is refused at the first
    step it trains on a prompt the stream does not have there, before that step's update."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)
    trl_run.build = _fed(which, world[1])
    with pytest.raises(ConfigError, match=r"^in step 1: GRPOTrainer trained on prompt 0 of its batch "):
        trl_run.run()
    assert trl_run.protocol.updates == 0


@pytest.mark.slow
def test_tokens_a_reward_generates_after_switching_the_policy_to_eval_mode_are_counted(world, tiny, tmp_path, capsys):
    """A reward that samples with `model.eval()` (dropout off, as a generation often is) and leaves it so: the step was
    a training step all the same (TRL chose it by the mode at its start), and its tokens count toward B."""
    pytest.importorskip("trl")
    script = UNCHARGED.replace("        out = model.generate(", "        model.eval()\n        out = model.generate(")
    _, log, generated = _run_with_reward_generating(script, world, tiny, tmp_path)
    assert generated and log.iterations[-1]["tokens_continuation"] == sum(generated)
    assert all("reward_default" in row for row in log.iterations)


@pytest.mark.slow
def test_a_script_that_changes_the_runs_config_is_refused_before_any_step(world, tiny, tmp_path):
    """setup.run is the run's effective config, to read: a script that sets a value in it (here greedy evaluation,
    which the protocol's evaluation of this arm alone would then read: another yardstick than the other arms') is
    refused by key before any step, and the protocol's own config is not the one it was handed."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun, default_trainer
    run = study_config.run_config(_study(), "trl", 1)
    planned = copy.deepcopy(run)
    trl_run = TRLRun(run, *tiny, *world, 300, tmp_path)

    def cooler(setup):
        setup.run["evaluation"]["greedy"] = True
        return default_trainer(setup)
    trl_run.build = cooler
    with pytest.raises(ConfigError, match=r"^trainer\(setup\) changed setup.run: "
                                          r"evaluation.greedy True \(the run's: None\); allowed: setup.run read only"):
        trl_run.run()
    assert trl_run.protocol.run == planned and trl_run.next_iteration == 0


def _another_start(what: str):
    """A trainer(setup) that trains another initial policy than the study's: `model` a tiny model of another seed,
    `edited` the study's model with its weights changed in place, `tokenizer` the study's model with another
    tokenizer's chat template."""
    import torch
    from mcgrpo.integrations.trl import default_trainer
    from mcgrpo.train.models.tiny import build_model

    def build(setup):
        if what == "model":
            setup.model = build_model(setup.tokenizer, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                      max_positions=96, seed=1)
        elif what == "edited":
            with torch.no_grad():
                next(setup.model.parameters()).mul_(2.0)
        else:
            setup.tokenizer = copy.deepcopy(setup.tokenizer)
            setup.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        return default_trainer(setup)
    return build


@pytest.mark.slow
@pytest.mark.parametrize("what, said", [
    ("model", "model is not the study's initial policy"),
    ("edited", "model is not the study's initial policy"),
    ("tokenizer", "tokenizer is not the study's: its chat_template differs"),
])
def test_a_trainer_that_starts_from_another_policy_is_refused_before_any_step(world, tiny, tmp_path, what, said):
    """Every arm of a study trains the study's initial model, read by the study's tokenizer: a script that hands TRL
    another model (another checkpoint, weights changed) or another tokenizer compares another start, refused before
    the first step (the evaluation at step 0 included)."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)
    trl_run.build = _another_start(what)
    with pytest.raises(ConfigError, match=f"^trainer\\(setup\\) returned a GRPOTrainer whose {said}"):
        trl_run.run()
    assert trl_run.protocol.log.evals == []


@pytest.mark.slow
def test_a_callback_that_changes_the_policy_before_the_first_step_is_refused(world, tiny, tmp_path):
    """A callback's on_train_begin runs after trainer(setup) was checked and before the evaluation at step 0: one
    that changes the policy there (a warm-up of its own, weights edited) starts the arm elsewhere than the study's
    initial model, its time and tokens uncounted. Refused before step 0's evaluation. Before, trained and stored."""
    pytest.importorskip("trl")
    from transformers import TrainerCallback
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun, default_trainer

    class WarmUp(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            with torch.no_grad():
                next(model.parameters()).mul_(2.0)

    def build(setup):
        trainer = default_trainer(setup)
        trainer.add_callback(WarmUp())
        return trainer
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)
    trl_run.build = build
    with pytest.raises(ConfigError, match=r"^before step 1: the GRPOTrainer's callbacks \(on_train_begin\) changed 1 "
                                          r"of its model's parameters; allowed: the model as trainer\(setup\) returned"):
        trl_run.run()
    assert trl_run.protocol.log.evals == []


BEST_OF_TWO = """
from trl import GRPOTrainer


class BestOfTwo(GRPOTrainer):
    # draws every batch twice and keeps the second: the first draw's tokens were generated all the same
    def _generate_single_turn(self, *args, **kwargs):
        super()._generate_single_turn(*args, **kwargs)
        return super()._generate_single_turn(*args, **kwargs)


def trainer(setup):
    return BestOfTwo(model=setup.model, reward_funcs=[setup.reward], args=setup.args, train_dataset=setup.dataset,
                     processing_class=setup.tokenizer)
"""


@pytest.mark.slow
def test_tokens_the_policy_generates_in_a_step_but_the_step_discards_are_counted_and_warned_of(world, tiny, tmp_path,
                                                                                               capsys):
    """A subclass that samples more than it returns from _generate (best-of-n, rejection sampling): what the policy's
    generate made beyond the returned completions counts toward B as discarded tokens, as a selector's discarded
    groups do in mcgrpo's trainer."""
    pytest.importorskip("trl")
    from mcgrpo.integrations.trl import TRLRun
    script = tmp_path / "best_of_two.py"
    script.write_text(BEST_OF_TWO)
    run = study_config.run_config(_study(mine={"trainer": {"trl": {"script": str(script)}}}), "mine", 1)
    trl_run = TRLRun(run, *tiny, *world, 300, tmp_path)
    log = trl_run.run()
    first = log.iterations[0]
    assert first["tokens_discarded"] >= 2 * 4 and first["tokens_total"] == first["tokens_rollout"] + first[
        "tokens_discarded"]
    assert trl_run.record["uncharged_tokens_counted"] == log.iterations[-1]["tokens_discarded"]
    assert capsys.readouterr().err.count("generated more tokens than it returned") == 1


INJECTED = """
from trl import GRPOTrainer


class Demonstrated(GRPOTrainer):
    # a demonstration of 20 tokens and the end token in place of each batch's first completion
    def _generate_single_turn(self, *args, **kwargs):
        ids, logprobs = super()._generate_single_turn(*args, **kwargs)
        ids[0] = [7] * 20 + [2]
        return ids, logprobs


def trainer(setup):
    return Demonstrated(model=setup.model, reward_funcs=[setup.reward], args=setup.args, train_dataset=setup.dataset,
                        processing_class=setup.tokenizer)
"""


@pytest.mark.slow
def test_completions_the_policy_did_not_sample_are_refused(world, tiny, tmp_path):
    """A subclass that puts a completion of its own among the step's (a demonstration, an edited one) would have B
    count tokens nobody sampled and the step train on them as the policy's. Before, step 1 was stored at 170 rollout
    tokens, 164 of them sampled."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    from mcgrpo.integrations.trl import TRLRun
    script = tmp_path / "demonstrated.py"
    script.write_text(INJECTED)
    run = study_config.run_config(_study(mine={"trainer": {"trl": {"script": str(script)}}}), "mine", 1)
    trl_run = TRLRun(run, *tiny, *world, 300, tmp_path)
    with pytest.raises(ConfigError, match=r"^in step 1: GRPOTrainer's _generate returned 170 completion tokens, but "
                                          r"the policy's generate made 164 in it; allowed: the completions the policy"):
        trl_run.run()
    assert trl_run.protocol.log.iterations == []


@pytest.mark.slow
def test_a_setting_the_recipe_leaves_at_trls_default_is_recorded_when_changed(world, tiny, tmp_path):
    """Settings the recipe does not set (TRL's defaults: noise on the embeddings, training on the highest-entropy
    tokens only) change what an arm trains as much as the learning rate does: a script's change is listed in
    run.json's block beside the recipe's value, TRL's default."""
    pytest.importorskip("trl")
    from mcgrpo.integrations.trl import TRLRun, default_trainer
    trl_run = TRLRun(study_config.run_config(_study(), "trl", 1), *tiny, *world, 300, tmp_path)

    def noisier(setup):
        setup.args.neftune_noise_alpha = 5.0
        setup.args.top_entropy_quantile = 0.2
        return default_trainer(setup)
    trl_run.build = noisier
    trl_run.run()
    assert trl_run.record["trl_settings"]["differ_from_recipe"] == {
        "neftune_noise_alpha": {"trainer": 5.0, "recipe": None}, "top_entropy_quantile": {"trainer": 0.2, "recipe": 1.0}}
    json.dumps(trl_run.record)  # run.json holds it


# -- the process's global state: a script arm's code is held to it as a plugin is (docs/trl.md) ----------------------
def _precision_backends(torch) -> list:
    """torch.backends and its parts that hold a float32 precision of their own, outer before inner."""
    found = []
    for path in ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn", "mkldnn.matmul", "mkldnn.conv",
                 "mkldnn.rnn"):
        module = functools.reduce(lambda m, part: getattr(m, part, None), filter(None, path.split(".")),
                                  torch.backends)
        if hasattr(module, "fp32_precision"):
            found.append(module)
    return found


@pytest.fixture
def global_state():
    """Puts back after the test what a script under test sets and leaves set (torch's settings and flags, the working
    folder), so that the tests after it run as they would have."""
    import os
    import torch
    import numpy as np
    kept = (torch.get_default_dtype(), torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
            torch.get_float32_matmul_precision(), torch.backends.mkldnn.enabled, os.getcwd(), np.geterr(),
            torch.nn.functional.silu, torch.nn.functional.gelu)
    precisions = [(m, m.fp32_precision) for m in _precision_backends(torch)]  # torch >= 2.9, outer before inner
    yield
    torch.nn.functional.silu, torch.nn.functional.gelu = kept[7:]
    np.seterr(**kept[6])
    torch.set_default_dtype(kept[0])
    torch.set_num_threads(kept[1])
    torch.use_deterministic_algorithms(kept[2])
    torch.set_float32_matmul_precision(kept[3])  # sets every backend's fp32_precision ('ieee' for 'highest')
    for backend, precision in precisions:
        backend.fp32_precision = precision
    torch.backends.mkldnn.enabled = kept[4]
    os.chdir(kept[5])


GLOBAL_STATE = """
import os
import numpy as np
import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
{top}


class Mine(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        {on_train_begin}

    def on_train_end(self, args, state, control, **kwargs):
        {on_train_end}


def trainer(setup):
    def reward(completions, answer, **kwargs):
        {in_reward}
        return setup.reward(completions=completions, answer=answer)
    {in_trainer}
    return GRPOTrainer(model=setup.model, reward_funcs=[reward], args=setup.args, train_dataset=setup.dataset,
                       processing_class=setup.tokenizer, callbacks=[Mine()])
"""


def _script_arm(tmp_path, world, tiny, **code):
    """A TRLRun of arm mine, whose script (GLOBAL_STATE) runs `code` at its top, in trainer(setup), in its reward
    function and in its callback's on_train_begin and on_train_end (pass where not given)."""
    from mcgrpo.integrations.trl import TRLRun
    where = ("top", "in_trainer", "in_reward", "on_train_begin", "on_train_end")
    script = tmp_path / "mine.py"
    script.write_text(GLOBAL_STATE.format(**{w: code.get(w, "pass") for w in where}))
    run = study_config.run_config(_study(mine={"trainer": {"trl": {"script": str(script)}}}), "mine", 1)
    return TRLRun(run, *tiny, *world, 300, tmp_path / "run"), script


@pytest.mark.slow
@pytest.mark.parametrize("where, code, said", [
    ("top", "torch.backends.mkldnn.enabled = False",
     "importing it changed torch.backends.mkldnn.enabled from True to False and left it so"),
    ("in_trainer", "torch.set_default_dtype(torch.float64)",
     "trainer(setup) changed torch's default dtype from torch.float32 to torch.float64 and left it so"),
    ("in_trainer", "setup.args.full_determinism = True",  # a GRPOConfig of the script's that transformers applies
     "trainer(setup) changed torch's deterministic algorithms from False to True and left it so"),
    ("on_train_begin", "os.chdir(args.output_dir)", "before evaluating at step 0: trainer.trl.script {script}: its "
     "trainer (its callbacks, reward functions) changed the working folder (os.chdir) from "),
    ("in_reward", "torch.set_num_threads(torch.get_num_threads() + 1)", "in step 1: trainer.trl.script {script}: "
     "its trainer (its callbacks, reward functions) changed torch's threads from 1 to 2 and left it so"),
    ("in_reward", "torch.set_float32_matmul_precision('medium')",
     "changed torch's float32 matmul precision from highest to medium and left it so"),
    ("on_train_end", "np.seterr(all='ignore')", "after training: trainer.trl.script {script}: its trainer (its "
     "callbacks, reward functions) changed numpy's error handling (np.seterr)['divide'] from 'warn' to 'ignore'"),
    ("top", "torch.nn.functional.silu = lambda x, inplace=False: x * torch.sigmoid(x)",  # as unsloth or liger do
     "importing it patched torch.nn.functional.silu from torch.nn.functional.silu to "),
    ("in_reward", "torch.nn.functional.gelu = lambda x, approximate='none': x", "in step 1: trainer.trl.script "
     "{script}: its trainer (its callbacks, reward functions) patched torch.nn.functional.gelu from "),
])
def test_a_script_that_leaves_the_processs_global_state_changed_is_refused_naming_it(world, tiny, tmp_path,
                                                                                     global_state, where, code, said):
    """A TRL script arm is trained, and evaluated by mcgrpo, in the job's process: a setting its code leaves changed
    (at its import, in trainer(setup), in a callback or a reward function) would train and evaluate this arm otherwise
    than the arms it is compared with. Refused by the script's name, the setting and its two values, the run not
    stored."""
    pytest.importorskip("trl")
    from mcgrpo.core.errors import ConfigError
    trl_run, script = _script_arm(tmp_path, world, tiny, **{where: code})
    said = said.format(script=script)
    with pytest.raises(ConfigError, match=re.escape(said)) as refused:
        trl_run.run()
    assert str(script) in str(refused.value) and "allowed: " in str(refused.value)
    assert "try/finally" in str(refused.value) and "\n" not in str(refused.value)
    assert where == "on_train_end" or trl_run.next_iteration <= 1  # at the step it changed in, or before any


@pytest.mark.slow
def test_a_script_that_restores_what_it_sets_trains_to_B(world, tiny, tmp_path, global_state):
    """What a script's code sets for its own computation and restores (try/finally, a context manager), and an
    environment variable it adds, leave the run as the other arms': trained to B."""
    pytest.importorskip("trl")
    import torch
    threads = torch.get_num_threads()
    trl_run, _ = _script_arm(tmp_path, world, tiny, top="os.environ['MINE_ADDED'] = '1'", in_reward=(
        "threads = torch.get_num_threads()\n        torch.set_num_threads(threads + 1)\n        try:\n"
        "            pass\n        finally:\n            torch.set_num_threads(threads)"),
        on_train_begin="torch.set_grad_enabled(torch.is_grad_enabled())")
    log = trl_run.run()
    assert trl_run.protocol.ledger.done and log.iterations and torch.get_num_threads() == threads
