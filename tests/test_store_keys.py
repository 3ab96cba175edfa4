"""The run store's keys are complete: every setting a stored file is computed from is part of the key it is filed
under (mcgrpo.core.layout), so that a study never reads data, a model, a B or a run made under another setting.

Each leaf of a study config that sets every kind of block is changed in turn; the key of every job that reads it
must change with it. The settings no stored file is computed from are an explicit allow-list, each with its reason.
"""

import copy
import json

import pytest

from conftest import ROOT, edited_study
from mcgrpo import data, studies
from mcgrpo.core import config as study_config, layout, plugins
from mcgrpo.core.errors import ConfigError

# Settings no store job reads, by key path prefix: changing one must leave every stored file where it is.
NOT_READ = {
    "study": "a name: the same run in two studies is one run",
    "results_dir": "where the store is, not what it holds",
    "arms.*.description": "free text (the schema: no part of any run's identity)",
    "resources": "what a job asks the scheduler for; a run records the hardware it ran on (run.json)",
    "containers": "the images jobs run in (one set per programme); a run records its versions (run.json)",
    "tracking": "where training reports; no part of what it trains",
    "analysis": "read by the analysis from the stored runs",
    "plan": "the preregistered plan, read by the analysis",
    "analysis_only": "how Snakemake is invoked",
    "allow_templates": "how Snakemake is invoked",
    "gradient_tests": "the gradient-test job's own config (its study's folder, not the store): "
                      "test_every_gradient_test_setting_changes_its_config",
}
# Blocks every training run reads whole (mcgrpo.core.config.run_config): a leaf of one changes every run's key.
EVERY_RUN = ("task", "model", "engine", "budget", "recipe", "verifier", "evaluation.sets", "evaluation.samples",
             "evaluation.per_budget", "evaluation.greedy", "evaluation.entropy_kl")

MC = {"monte_carlo": {"k": 2, "cuts": 3, "form": "centered_maxnorm", "alpha": 0.5, "reuse": True, "prompt_value": 0.5}}
RICH = edited_study(
    seeds=[1, 2],
    task__prompt="Q: {question}",
    task__eval_sets={"heldout": {"size": 6, "levels": [1, 2]}, "later": {"size": 4, "levels": [3]}},
    model__chat_template={"date_string": "26 Jul 2024"},
    budget={"tokens": None, "multiplier": 4, "round_to": 100, "calibration_iterations": 2, "calibration_seed": 2},
    verifier={"rule": "paper"},
    evaluation={"sets": ["heldout"], "samples": 2, "per_budget": 4, "greedy": True, "entropy_kl": True,
                "alignment": {"arms": ["mc_k2"], "every": 2, "batches": 2,
                              "controls": {"shuffled_mc": {"shuffled": MC}}}},
    arms={"outcome": {"description": "the base"},
          "mc_k2": {"credit": MC,
                    "lr": {"scale": 2.0, "schedule": "linear_decay"},
                    "update": {"epochs": 2, "minibatches": 2, "clip": 0.2}},
          # its own verifier: not an arm of the gradient tests, which reward by the study's
          "picked": {"selection": {"history_filter": {"candidates": 8, "keep": 2}},
                     "recipe": {"reward_verifier": "strict"}}},
    gradient_tests={"batches": 4, "arms": ["mc_k2"], "controls": {"shuffled_mc": {"shuffled": MC}},
                    "k_sweep": [1, 2]},
)


def _leaves(node, path=()):
    """(path, value) of every scalar in `node`, a list's items by index."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _leaves(value, (*path, i))
    else:
        yield path, node


def _enum_words(node) -> set[str]:
    """Every string a schema `enum` allows: a string leaf is tried with each."""
    found = set()
    if isinstance(node, dict):
        found |= {v for v in node.get("enum", []) if isinstance(v, str)}
        for value in node.values():
            found |= _enum_words(value)
    elif isinstance(node, list):
        for value in node:
            found |= _enum_words(value)
    return found


def _candidates(value):
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1, value + 2, value * 2, value + 3, value + 4]
    if isinstance(value, float):
        return [value / 2, value + 0.125, value * 1.5]
    if isinstance(value, str):
        return [f"{value}x" if "{question}" not in value else f"{value}!", *(w for w in WORDS if w != value)]
    return [100, 0.5, 3, {"hub": "org/model"}]  # null


def _set(cfg: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(cfg)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def _changed(path: tuple, value):
    """The study with leaf `path` changed to the first of its candidates the study's checks accept, or None."""
    for candidate in _candidates(value):
        try:
            return studies.validate(_set(BASE, path, candidate))
        except ConfigError:
            continue
    return None


def _keys(cfg: dict) -> dict:
    return {"data": layout.data_dir(cfg), "model": layout.model_path(cfg), "calibration": layout.calibration_key(cfg),
            **{f"run {arm}/{seed}": key for (arm, seed), key in layout.run_keys(cfg).items()}}


def _allowed(path: tuple) -> str | None:
    dotted = ".".join(map(str, path))
    for prefix, why in NOT_READ.items():
        head, _, tail = prefix.partition(".*.")
        if dotted == prefix or dotted.startswith(f"{prefix}.") or (
                tail and path[0] == head and len(path) > 2 and ".".join(map(str, path[2:])) == tail):
            return why
    return None


BASE = studies.validate(copy.deepcopy(RICH))
LEAVES = [path for path, _ in _leaves(BASE)]
# A string leaf is tried with every word a schema enum allows, every other string of the study, the evaluation sets'
# names and the built-in verifiers.
WORDS = sorted(_enum_words(study_config.schema()) | {v for _, v in _leaves(BASE) if isinstance(v, str)}
               | set(BASE["task"]["eval_sets"]) | {"default", "strict"})
# Leaves no single change of which passes the study's checks: each is part of a block every run hashes whole.
NOT_ALONE = {("task", "name"): "math and gsm8k need a data source (task.pool.path or hf) too"}


def test_the_rich_study_sets_every_kind_of_block():
    """What the leaf test below walks: every block a store job reads, each optional key a run can set included."""
    assert {path[0] for path in LEAVES} >= {"task", "model", "engine", "budget", "recipe", "verifier", "evaluation",
                                            "arms", "seeds", "gradient_tests"}
    assert ("evaluation", "alignment", "controls", "shuffled_mc", "shuffled", "monte_carlo", "k") in LEAVES


@pytest.mark.parametrize("path", [p for p in LEAVES if not _allowed(p) and p not in NOT_ALONE],
                         ids=lambda p: ".".join(map(str, p)))
def test_every_setting_a_store_job_reads_changes_its_key(path):
    """A leaf of the study changed: the key of each job that reads it changes (the data folder for the task, the
    warm-started model for the model and task, every run for the blocks every run reads whole, the arm's runs for
    an arm's settings). A leaf that changed no key would let a study read a file made under another setting."""
    value = dict(_leaves(BASE))[path]
    changed = _changed(path, value)
    assert changed is not None, f"{path}: no candidate value passes the study's checks; give the test one"
    before, after = _keys(BASE), _keys(changed)
    differ = {name for name in before if before[name] != after.get(name)} | set(after) - set(before)
    assert differ, f"config key {'.'.join(map(str, path))}: changed, and no store key changed"
    dotted = ".".join(map(str, path))
    if path[0] == "task":
        assert "data" in differ, f"config key {dotted}: the data folder's key did not change"
    if path[0] in ("task", "model"):
        assert "model" in differ, f"config key {dotted}: the warm-started model's key did not change"
    if any(dotted == block or dotted.startswith(f"{block}.") for block in EVERY_RUN):
        unchanged = sorted(name for name in before if name.startswith("run ") and name not in differ)
        assert not unchanged, f"config key {dotted}: changed, but not the key of {', '.join(unchanged)}"
    if path[0] == "arms":
        unchanged = sorted(name for name in before if name.startswith(f"run {path[1]}/") and name not in differ)
        assert not unchanged, f"config key {dotted}: changed, but not the key of {', '.join(unchanged)}"


@pytest.mark.parametrize("path", [p for p in LEAVES if p[0] == "gradient_tests"], ids=lambda p: ".".join(map(str, p)))
def test_every_gradient_test_setting_changes_its_config(path):
    """The gradient-test job is rerun when what it reads changes (its config is the rule's param)."""
    changed = _changed(path, dict(_leaves(BASE))[path])
    assert changed is not None
    assert study_config.gradient_tests_config(changed) != study_config.gradient_tests_config(BASE)


def test_the_allow_list_names_only_settings_the_store_jobs_never_read():
    """Changing an allow-listed leaf moves no stored file: the list is no place to hide a leak."""
    for path in [p for p in LEAVES if _allowed(p) and p[0] != "gradient_tests"]:
        changed = _changed(path, dict(_leaves(BASE))[path])
        if changed is None or path[0] == "results_dir":
            continue
        assert _keys(changed) == _keys(BASE), f"config key {'.'.join(map(str, path))} is allow-listed but moves files"


# task.eval_sets are built in order, each without the problems of the earlier ones.
ROWS = [{"problem": f"What is {i} plus {i}?", "solution": f"\\boxed{{{2 * i}}}", "level": "Level 3",
         "type": "Algebra"} for i in range(1, 41)]


def _math_task(tmp_path, names: tuple[str, str]) -> dict:
    """A math task whose sets are a sized draw and `further`, every problem left, in the order `names`."""
    (tmp_path / "tests.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS))
    (tmp_path / "pool.jsonl").write_text("\n".join(json.dumps({**r, "problem": r["problem"].replace("plus", "times")})
                                                   for r in ROWS))
    sets = {"heldout": {"path": str(tmp_path / "tests.jsonl"), "size": 5},
            "further": {"path": str(tmp_path / "tests.jsonl"), "size": None}}
    return {"name": "math", "seed": 1, "pool": {"path": str(tmp_path / "pool.jsonl"), "levels": [3], "size": 8},
            "eval_sets": {name: sets[name] for name in names}}


def test_evaluation_sets_are_built_in_the_configs_order_under_a_key_of_that_order(tmp_path):
    """`further` after `heldout` takes the 35 problems heldout left; before it, all 40, and heldout none. Every job
    gets its config as JSON with sorted keys (the prepare_data rule's --task-json), which built the sets
    alphabetically whatever the config said, under a key that did not tell the orders apart: two studies naming
    the sets in two orders shared one data folder, and every run on it."""
    task = _math_task(tmp_path, ("heldout", "further"))
    cfg = studies.validate(edited_study(task=task, evaluation__sets=["heldout"]))
    handed = json.loads(json.dumps(cfg["task"], sort_keys=True))  # what the rule passes
    prepared = data.prepare(study_config.validate_blocks({"task": handed}, ("task",), "--task-json")["task"])
    assert {name: len(s) for name, s in prepared.evals.items()} == {"heldout": 5, "further": 35}
    other = studies.validate(edited_study(task=_math_task(tmp_path, ("further", "heldout")),
                                          evaluation__sets=["heldout"]))
    assert layout.data_dir(cfg) != layout.data_dir(other)
    assert set(layout.run_keys(cfg).values()).isdisjoint(layout.run_keys(other).values())
    assert layout.calibration_key(cfg) != layout.calibration_key(other)


def test_alphabetical_evaluation_sets_keep_their_keys():
    """Sets named in alphabetical order, as the workflow built every study's: no eval_set_order, the hashes of old."""
    cfg = studies.validate(copy.deepcopy(RICH))
    assert "eval_set_order" not in cfg["task"]
    assert layout.data_dir(cfg).name == study_config.config_hash(
        {k: v for k, v in cfg["task"].items() if k != "eval_set_order"})[:12]
    unsorted = studies.validate(edited_study(task__eval_sets={"z": {"size": 3}, "a": {"size": 3}},
                                             evaluation__sets=["z"]))
    assert unsorted["task"]["eval_set_order"] == ["z", "a"]
    again = studies.validate(json.loads(json.dumps(unsorted, sort_keys=True)))  # a job's JSON, read back
    assert list(again["task"]["eval_sets"]) == ["z", "a"] and layout.run_keys(again) == layout.run_keys(unsorted)


def test_an_evaluation_set_order_that_is_not_the_sets_is_refused_by_key():
    with pytest.raises(ConfigError, match="config key task.eval_set_order: .* does not name each of task.eval_sets"):
        studies.validate(edited_study(task__eval_set_order=["heldout", "other"]))


def test_the_plugins_of_the_alignment_controls_are_part_of_the_measured_run(tmp_path, monkeypatch):
    """A run measured along training computes its controls' credit (alignment.parquet): editing a control's plugin
    makes another run, as editing its own arm's plugin does."""
    (tmp_path / "my_control.py").write_text("from mcgrpo.api import Credit\n\n\nclass Flat:\n"
                                            "    def __call__(self, rollouts, ctx):\n        return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    along = {"arms": ["outcome"], "controls": {"mine": {"my_control:Flat": {}}}}
    cfg = studies.validate(edited_study(evaluation__alignment=along))
    before = layout.run_keys(cfg)
    assert before[("outcome", 1)] != layout.run_keys(studies.validate(edited_study()))[("outcome", 1)]
    (tmp_path / "my_control.py").write_text((tmp_path / "my_control.py").read_text().replace("None", "0"))
    after = layout.run_keys(cfg)
    assert after[("outcome", 1)] != before[("outcome", 1)], "the control's plugin was edited, the run key stayed"
    assert after[("mc_k2", 1)] == before[("mc_k2", 1)]  # not measured: no control computed
    assert plugins.load("credit", "my_control:Flat", "k").source_sha256 in json.dumps(
        study_config.run_config(cfg, "outcome", 1))


def test_a_verifier_plugin_is_part_of_the_gradient_tests_with_no_arm_listed(tmp_path, monkeypatch):
    """Outcome-only, measured by every gradient test, is rewarded by the recipe's verifier: editing its plugin reruns
    the gradient tests even where no arm or control is listed (each of those carried it before)."""
    (tmp_path / "my_verifier.py").write_text("def lenient(text, reference):\n    return reference in text\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = studies.validate(edited_study(recipe__reward_verifier="my_verifier:lenient", gradient_tests={"batches": 2}))
    before = study_config.config_hash(study_config.gradient_tests_config(cfg))
    (tmp_path / "my_verifier.py").write_text("def lenient(text, reference):\n    return text.endswith(reference)\n")
    assert study_config.config_hash(study_config.gradient_tests_config(cfg)) != before


def _digest(cfg: dict) -> str:
    """The store keys of every file a study's jobs write (runs, calibration, data, model), and the gradient tests'
    config."""
    gradient = study_config.gradient_tests_config(cfg)
    keys = {"runs": {f"{a}/{s}": k for (a, s), k in layout.run_keys(cfg).items()},
            "calibration": layout.calibration_key(cfg), "data": layout.data_dir(cfg).name,
            "model": layout.model_path(cfg).name, "gradient": gradient and study_config.config_hash(gradient)}
    return study_config.config_hash(keys)[:12]


# The keys of main before the evaluation sets' order was part of them, but for S33 and S34: they name `further` (every
# problem left) after `heldout` and `level5`, and the workflow built it first (alphabetically), so a data folder
# under their old keys, if one was prepared, holds other sets than their config says.
SHIPPED = {
    "config/config.yaml": "c2ec5d66c15b",
    "config/studies/bases.yaml": "ba9bfacc5c73",
    "config/studies/dense.yaml": "e703337c97af",
    "config/studies/equal_iteration.yaml": "e3b05f8c52e9",
    "config/studies/selection.yaml": "2e4d77b9891b",
    "config/studies/smollm2-arith-cpu.yaml": "475537692651",
    "config/studies/smollm2-gsm8k-cpu.yaml": "4fc279ffa236",
    "config/studies/smollm2-gsm8k.yaml": "f11d364204c4",
    "config/studies/trl-dense.yaml": "2cb08b59e826",
    "config/studies/trl-vs-mcgrpo-2pt.yaml": "c3f463698298",
    "config/studies/trl-vs-mcgrpo-noclip.yaml": "73caa9271823",
    "config/studies/trl-vs-mcgrpo.yaml": "89cbf83cfbde",
    "config/studies/paper/g01_equal_iteration_qwen2.5-1.5b.yaml": "32f78efb0232",
    "config/studies/paper/s01_mc_reward_qwen2.5-1.5b.yaml": "88c64635b94e",
    "config/studies/paper/s01_mc_reward_qwen2.5-1.5b_gsm8k.yaml": "4f08452c68f0",
    "config/studies/paper/s01_mc_reward_qwen3-0.6b.yaml": "122e9d415be4",
    "config/studies/paper/s01_mc_reward_qwen3-1.7b.yaml": "2006d78ecaac",
    "config/studies/paper/s01_mc_reward_qwen3-4b.yaml": "3e136739f011",
    "config/studies/paper/s02_768_tokens_qwen2.5-1.5b.yaml": "be23329fa5a2",
    "config/studies/paper/s03_sample_reuse_qwen2.5-1.5b.yaml": "825107108d81",
    "config/studies/paper/s04_critic_qwen2.5-1.5b.yaml": "4f776226cb3d",
    "config/studies/paper/s04_pilots_group2_qwen2.5-1.5b.yaml": "de3ff8106c9e",
    "config/studies/paper/s04_pilots_group4_qwen2.5-1.5b.yaml": "3fae54c1c849",
    "config/studies/paper/s04_pilots_qwen2.5-1.5b.yaml": "b39376feeef5",
    "config/studies/paper/s05_critic_qwen3-0.6b.yaml": "f20525283876",
    "config/studies/paper/s05_critic_qwen3-1.7b.yaml": "ebe28086c9c8",
    "config/studies/paper/s05_critic_qwen3-4b.yaml": "62c36df19f65",
    "config/studies/paper/s06_critic_filter_qwen3-0.6b.yaml": "d6dd45147e59",
    "config/studies/paper/s06_critic_filter_qwen3-1.7b.yaml": "8e11d10c6f87",
    "config/studies/paper/s07_filters_qwen3-0.6b.yaml": "074d4efd155b",
    "config/studies/paper/s07_filters_qwen3-1.7b.yaml": "c1e4363d2070",
    "config/studies/paper/s07_filters_qwen3-4b.yaml": "50db701ab5cd",
    "config/studies/paper/s08_wider_pool_qwen3-0.6b.yaml": "28fc1fc07894",
    "config/studies/paper/s08_wider_pool_qwen3-1.7b.yaml": "296d71a70ba1",
    "config/studies/paper/s09_level_filter_qwen3-0.6b.yaml": "61dc4b863fbc",
    "config/studies/paper/s09_level_filter_qwen3-1.7b.yaml": "68cdf2955d3f",
    "config/studies/paper/s09_strict_reward_qwen3-4b.yaml": "02a4757004a5",
    "config/studies/paper/s10_target_0.7_qwen3-0.6b.yaml": "25d71cb3092d",
    "config/studies/paper/s10_target_0.7_qwen3-1.7b.yaml": "d44530666ffc",
    "config/studies/paper/s10_target_0.7_qwen3-4b.yaml": "dd2e11997d8d",
    "config/studies/paper/s11_random_choice_qwen3-0.6b.yaml": "8c7a445ade13",
    "config/studies/paper/s11_replication_qwen3-4b.yaml": "5ca1009862ef",
    "config/studies/paper/s12_random_choice_qwen3-0.6b.yaml": "829647cea5f7",
    "config/studies/paper/s13_random_choice_qwen3-1.7b.yaml": "046d4748884d",
    "config/studies/paper/s14_level5_qwen3-4b.yaml": "31cfe160300d",
    "config/studies/paper/s15_filter_qwen2.5-1.5b.yaml": "41707902e928",
    "config/studies/paper/s16_twice_budget_qwen3-0.6b.yaml": "4af7e24b435e",
    "config/studies/paper/s17_twice_budget_strict_qwen3-0.6b.yaml": "14b6257d1baa",
    "config/studies/paper/s18_strict_reward_level5_qwen3-4b.yaml": "e759b9c02fea",
    "config/studies/paper/s19_account_level5_qwen3-1.7b.yaml": "cdb17b01a6ca",
    "config/studies/paper/s20_replication_qwen2.5-1.5b.yaml": "c94a12fafdcf",
    "config/studies/paper/s21_account_levels12_qwen3-0.6b.yaml": "f0143739fffc",
    "config/studies/paper/s22_history_filter_qwen2.5-1.5b.yaml": "13c65ce47a31",
    "config/studies/paper/s23_lr2x_qwen3-0.6b.yaml": "165e724eed39",
    "config/studies/paper/s24_account_llama-3.2-3b.yaml": "b388b6c79a8a",
    "config/studies/paper/s25_fewer_continuations_qwen2.5-1.5b.yaml": "ca0ba2ab701f",
    "config/studies/paper/s26_critic_fresh_seeds_qwen2.5-1.5b.yaml": "21b6b7dfd1ee",
    "config/studies/paper/s27_account_llama-3.2-1b.yaml": "8e499dea088f",
    "config/studies/paper/s28_lr2x_qwen2.5-1.5b.yaml": "eb83e076414b",
    "config/studies/paper/s29_lr2x_strict_qwen3-0.6b.yaml": "9002f2369919",
    "config/studies/paper/s30_target_0.25_qwen3-0.6b.yaml": "9adeac47b199",
    "config/studies/paper/s31_target_0.25_qwen2.5-1.5b.yaml": "5b90c4afef94",
    "config/studies/paper/s32_lr_decay_qwen2.5-1.5b.yaml": "10e77b29241b",
    "config/studies/paper/s33_further_tests_qwen2.5-1.5b.yaml": "e77309248854",  # main: c6b35d42431e
    "config/studies/paper/s34_further_tests_qwen3-0.6b.yaml": "4cc06df8bea5",  # main: f81410d12c52
    "config/studies/paper/s35_equal_time_qwen2.5-1.5b.yaml": "b7dd13adba79",
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_shipped_studies_keep_their_store_keys(name, monkeypatch):
    """Every stored file of the default, shipped and paper studies keeps its key: no study retrains for this."""
    monkeypatch.chdir(ROOT)  # the paths a study names (a TRL script) are relative to the working directory
    cfg = studies.load(ROOT / name)
    cfg = study_config.base_study(cfg, cfg["bases"][0]) if cfg.get("bases") else cfg
    assert _digest(cfg) == SHIPPED[name]
