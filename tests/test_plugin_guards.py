"""A plugin cannot corrupt a verdict (issue 49): what a credit rule, selector or verifier returns is checked where it
enters the trainer and the gradient tests, and every token the engines it is handed generate is counted by them.
Each rule below breaks one part of the contract; the real trainer runs it on the tiny model and must stop at that
iteration with one line naming the plugin, its config key, the run, the iteration and what was wrong."""

from __future__ import annotations

import json
import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from conftest import edited_study
from mcgrpo import api, studies
from mcgrpo.core import config as study_config
from mcgrpo.core.errors import PluginError
from mcgrpo.train.trainer import Trainer

HERE = __name__  # the rules are named by dotted path: 'test_plugin_guards:NanCredit'


def outcome(rollouts, ctx) -> list[np.ndarray]:
    return api.per_token(api.group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps), rollouts)


@dataclass
class NanCredit:
    def __call__(self, rollouts, ctx):
        tokens = outcome(rollouts, ctx)
        tokens[1][0] = np.nan
        return api.Credit(tokens)


@dataclass
class ShortCredit:
    def __call__(self, rollouts, ctx):
        tokens = outcome(rollouts, ctx)
        tokens[2] = tokens[2][:-1]
        return api.Credit(tokens)


@dataclass
class OneCompletionFewer:
    def __call__(self, rollouts, ctx):
        return api.Credit(outcome(rollouts, ctx)[:-1])


@dataclass
class TensorWithGrad:
    def __call__(self, rollouts, ctx):
        import torch
        return api.Credit([torch.tensor(values, requires_grad=True) for values in outcome(rollouts, ctx)])


@dataclass
class ComplexCredit:
    """Credit with an imaginary part: numpy's cast to float64 would drop it, with a warning lost in the job's log."""
    def __call__(self, rollouts, ctx):
        return api.Credit([values + 1j for values in outcome(rollouts, ctx)])


@dataclass
class TextCredit:
    """Credit as text ('0.5'): numpy parses it as a number where a cast is asked, so the loss would too."""
    def __call__(self, rollouts, ctx):
        return api.Credit([values.astype(str) for values in outcome(rollouts, ctx)])


@dataclass
class Raising:
    def __call__(self, rollouts, ctx):
        rollouts.problems[0]["hints"]  # a field the pool does not have
        return api.Credit(outcome(rollouts, ctx))


@dataclass
class Exits:
    """Ends the process as a script would: `sys.exit()` is a SystemExit, which `except Exception` lets pass, and the
    job would exit with status 0, its run never written, as if it had finished."""
    def __call__(self, rollouts, ctx):
        __import__("sys").exit()


@dataclass
class NegativeTokens:
    def __call__(self, rollouts, ctx):
        return api.Credit(outcome(rollouts, ctx), tokens_generated=-5000)


@dataclass
class Probes:
    """Samples a continuation of each group's first completion through ctx.engine; reports it when `report`."""
    report: bool = False

    def __call__(self, rollouts, ctx):
        starts = [rollouts.prompts[p * rollouts.group_size] for p in range(len(rollouts.problems))]
        seeds = [api.stable_seed(*ctx.seed, "probe", p) for p in range(len(starts))]
        sampled = sum(len(c) for c in ctx.engine.generate(starts, [4] * len(starts), seeds))
        self.sampled = getattr(self, "sampled", 0) + sampled
        return api.Credit(outcome(rollouts, ctx), tokens_generated=sampled if self.report else 0)


@dataclass(kw_only=True)
class OutsideThePool(api.StreamSelector):
    def select(self, iteration, view):
        return api.Selection(np.array([0]), np.array([0, 10_000]))


@dataclass(kw_only=True)
class HidesDiscarded(api.StreamSelector):
    """Generates its groups twice and keeps the second, saying it discarded nothing."""

    def generate(self, iteration, selection, sample):
        sample(selection.chosen, 0)
        return sample(selection.chosen, 1), 0, selection


@dataclass
class ShapesInPlace:
    """Adds a bonus to the rewards it was handed (a `+=` on rollouts.rewards), not to a copy."""
    def __call__(self, rollouts, ctx):
        shaped = rollouts.rewards
        shaped += 0.5
        return api.Credit(api.per_token(api.group_advantages(rollouts.grouped(shaped), ctx.advantage_eps), rollouts))


@dataclass
class SortsCompletions:
    """Sorts the completions (and so their credit) by length: the prompts no longer match them."""
    def __call__(self, rollouts, ctx):
        rollouts.completions.sort(key=len)
        return api.Credit(outcome(rollouts, ctx))


@dataclass
class EditsProblems:
    def __call__(self, rollouts, ctx):
        rollouts.problems[0]["answer"] = "0"
        return api.Credit(outcome(rollouts, ctx))


@dataclass
class Float64:
    """Switches torch to float64 (for a precise computation of its own) and leaves it so."""
    def __call__(self, rollouts, ctx):
        import torch
        torch.set_default_dtype(torch.float64)
        return api.Credit(outcome(rollouts, ctx))


@dataclass
class Threads:
    def __call__(self, rollouts, ctx):
        import torch
        torch.set_num_threads(torch.get_num_threads() + 1)
        return api.Credit(outcome(rollouts, ctx))


@dataclass
class Cools:
    """Samples its own draws cooler by setting ctx.engine's temperature, and leaves it so: the engine it wraps is the
    run's, which samples every later rollout and every evaluation of this arm with it."""
    def __call__(self, rollouts, ctx):
        ctx.engine.temperature = 0.1
        return api.Credit(outcome(rollouts, ctx))


@dataclass
class Reseeds:
    """Reseeds and consumes every global generator: the run draws from none of them, so it trains as outcome."""
    def __call__(self, rollouts, ctx):
        import random
        import torch
        random.seed(0), np.random.seed(0), torch.manual_seed(0)
        random.random(), np.random.rand(3), torch.rand(3)
        return api.Credit(outcome(rollouts, ctx))


@dataclass
class Huge:
    """Finite in float64, past float32's range: the update would turn every weight to NaN."""
    def __call__(self, rollouts, ctx):
        return api.Credit([values * 1e300 + 1e300 for values in outcome(rollouts, ctx)])


@dataclass
class StatsOverB:
    """Logs a stat under the run's own column of the tokens counted toward B."""
    def __call__(self, rollouts, ctx):
        return api.Credit(outcome(rollouts, ctx), stats={"tokens_total": 0.0, "my_share": 0.5})


@dataclass(kw_only=True)
class Doubles(api.StreamSelector):
    """Trains on twice the recipe's prompts per iteration: a larger batch, fewer updates per token."""
    def select(self, iteration, view):
        chosen = self.stream.candidates(iteration, 2 * self.per_iteration)
        return api.Selection(chosen, chosen)


@dataclass(kw_only=True)
class TrainsOnNothing(api.StreamSelector):
    """Keeps no group: an iteration that generates nothing never reaches the budget."""
    def select(self, iteration, view):
        return api.Selection(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def says_yes(text, reference):
    return "yes"


def _trainer(arm: dict, tiny, world, **changes) -> Trainer:
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": arm}, **changes))
    model, tokenizer = tiny
    pool, _ = world
    return Trainer(study_config.run_config(cfg, "bad", 1), model, tokenizer, pool, None, 600, arm="bad")


def _failure(arm: dict, tiny, world, **changes) -> tuple[str, Trainer]:
    trainer = _trainer(arm, tiny, world, **changes)
    with pytest.raises(PluginError) as err:
        trainer.run(max_iterations=2)
    message = str(err.value)
    assert "\n" not in message  # one line on the terminal
    return message, trainer


CREDIT = "credit rule '{name}' (arms.bad.credit) in training arm bad seed 1, iteration 0: "


def _selector_named(selector: str, options: dict, tiny, world, said: str, allowed: str) -> Trainer:
    """Runs arm bad with the selector of this module, asserting the one line that names it, what it did and what is
    allowed; returns the trainer for what it must not have done."""
    name = f"{HERE}:{selector}"
    message, trainer = _failure({"selection": {name: options}}, tiny, world)
    assert message.startswith(f"selector '{name}' (arms.bad.selection) in training arm bad seed 1, iteration 0: it "
                              f"{said}; allowed: {allowed}"), message
    return trainer


@pytest.mark.parametrize("rule, what", [
    ("NanCredit", r"the credit of completion 1 is nan at token 0 \(1 of its \d+ values not finite\)"),
    ("ShortCredit", r"completion 2 has (\d+) tokens, its credit (\d+) values"),
    ("OneCompletionFewer", r"credit for 7 completions, the batch has 8"),
    ("NegativeTokens", r"Credit.tokens_generated is -5000, a negative count"),
    ("TensorWithGrad", r"the credit of completion 0 is Tensor, not numbers \(a numpy array, a list of floats\)"),
    ("ComplexCredit", r"the credit of completion 0 is complex128, not real numbers"),
    ("TextCredit", r"the credit of completion 0 is <U\d+, not real numbers"),
    ("Raising", r"iteration 0: raised KeyError: 'hints' \(at .*test_plugin_guards.py:\d+, in __call__\)$"),
    ("Exits", r"iteration 0: raised SystemExit:  \(at .*test_plugin_guards.py:\d+, in __call__\)$"),
])
def test_a_credit_rule_that_breaks_its_contract_stops_the_run_naming_it(rule, what, tiny, world):
    name = f"{HERE}:{rule}"
    message, trainer = _failure({"credit": {name: {}}}, tiny, world)
    assert message.startswith(CREDIT.format(name=name)), message
    found = __import__("re").search(what, message)
    assert found, message
    if rule == "ShortCredit":
        assert int(found[1]) == int(found[2]) + 1
    if rule not in ("Raising", "Exits"):
        assert message.endswith("(docs/plugins.md)") and "allowed: a Credit with one finite value" in message
    assert trainer.log.iterations == [] and trainer.tokens_total == 0  # nothing of iteration 0 was recorded


@dataclass
class ChecksItsWeight:
    """Checks its own option as it is built, as a dataclass's __post_init__ does: only when the run builds it."""
    weight: float = -1.0

    def __post_init__(self):
        if self.weight < 0:
            raise ValueError(f"weight must be >= 0, got {self.weight}")

    def __call__(self, rollouts, ctx):
        return api.Credit(outcome(rollouts, ctx))


def test_a_plugin_that_raises_as_it_is_built_is_named(tiny, world):
    with pytest.raises(PluginError) as err:
        _trainer({"credit": {f"{HERE}:ChecksItsWeight": {}}}, tiny, world)
    assert __import__("re").match(rf"credit rule '{HERE}:ChecksItsWeight' \(arms.bad.credit\): raised ValueError: "
                                  r"weight must be >= 0, got -1.0 \(at .*test_plugin_guards.py:\d+, in __post_init__\)$",
                                  str(err.value)), str(err.value)
    assert isinstance(err.value.__cause__, ValueError)  # its traceback, printed first by the job


def test_tokens_sampled_through_ctx_engine_and_not_reported_are_refused(tiny, world):
    message, trainer = _failure({"credit": {f"{HERE}:Probes": {}}}, tiny, world)
    assert trainer.credit.sampled > 0
    assert message.startswith(CREDIT.format(name=f"{HERE}:Probes") + "Credit.tokens_generated is 0, but ctx.engine "
                              f"generated {trainer.credit.sampled} tokens while the rule ran: every generated token "
                              "counts toward the budget B; allowed: ")


def test_tokens_sampled_through_ctx_engine_and_reported_count_toward_the_budget(tiny, world):
    trainer = _trainer({"credit": {f"{HERE}:Probes": {"report": True}}}, tiny, world)
    log = trainer.run(max_iterations=2)
    assert log.iterations[-1]["tokens_continuation"] == trainer.credit.sampled > 0
    assert trainer.ledger.total == log.iterations[-1]["tokens_total"] == trainer.tokens_total


def test_a_selector_that_chooses_outside_the_pool_is_named(tiny, world):
    message, _ = _failure({"selection": {f"{HERE}:OutsideThePool": {}}}, tiny, world)
    assert message.startswith(f"selector '{HERE}:OutsideThePool' (arms.bad.selection) in training arm bad seed 1, "
                              f"iteration 0: its chosen prompts hold 10000, outside the pool of {len(world[0])}; "
                              "allowed: ")


def test_a_selector_that_hides_generated_groups_is_named(tiny, world):
    message, _ = _failure({"selection": {f"{HERE}:HidesDiscarded": {}}}, tiny, world)
    found = __import__("re").search(r"iteration 0: its count of discarded tokens is 0, but the engine generated (\d+) "
                                    r"tokens for its groups, (\d+) of them kept: every generated token counts", message)
    assert found and int(found[1]) > int(found[2]) > 0, message


def test_a_verifier_that_does_not_return_a_bool_is_named(tiny, world):
    message, _ = _failure({"recipe": {"reward_verifier": f"{HERE}:says_yes"}}, tiny, world)
    assert message.startswith(f"verifier '{HERE}:says_yes' (arms.bad.recipe.reward_verifier) in training arm bad seed "
                              "1, iteration 0: it returned 'yes' for completion 0, not a bool; allowed: True or False")


def test_a_verifier_the_study_sets_is_named_by_the_studys_key(tiny, world):
    """Each message names the key in force: the recipe's where no arm sets its own (above: the arm's)."""
    message, _ = _failure({"credit": {"rloo": {}}}, tiny, world, recipe__reward_verifier=f"{HERE}:says_yes")
    assert message.startswith(f"verifier '{HERE}:says_yes' (recipe.reward_verifier) in training arm bad seed 1, "
                              "iteration 0: it returned 'yes' for completion 0"), message


def yes_to_marked(text, reference):
    """The default verdict, but 'yes' for a text ending in the mark JudgesMarked appends."""
    return "yes" if text.endswith("#") else api.is_correct(text, reference)


class JudgesMarked:
    """Outcome-only credit that also judges its texts marked, as a rule judges its continuations (api.rewards)."""

    def __call__(self, rollouts, ctx):
        answers = [p["answer"] for p in rollouts.problems for _ in range(rollouts.group_size)]
        api.rewards([t + "#" for t in rollouts.texts], answers, ctx)
        return api.Credit(api.per_token(api.group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps),
                                        rollouts))


def test_a_verifier_a_credit_rule_judges_with_is_named_by_the_arms_key(tiny, world):
    message, _ = _failure({"credit": {f"{HERE}:JudgesMarked": {}},
                           "recipe": {"reward_verifier": f"{HERE}:yes_to_marked"}}, tiny, world)
    assert message.startswith(f"verifier '{HERE}:yes_to_marked' (arms.bad.recipe.reward_verifier) in training arm bad "
                              "seed 1, iteration 0: it returned 'yes' for completion 0"), message


def test_the_alignment_along_training_names_the_arms_verifier_by_the_arms_key(tiny, world):
    """The probes along training reward with the run's recipe, the arm's own verifier: named by the arm's key too."""
    along = {"arms": ["bad"], "every": 1, "batches": 1, "reference": {"k": 1, "cuts": 2}, "space": "lora",
             "lora": {"rank": 2, "alpha": 4, "targets": ["q_proj", "v_proj"]},
             "controls": {"mine": {f"{HERE}:JudgesMarked": {}}}}
    trainer = _trainer({"recipe": {"reward_verifier": "strict"}}, tiny, world, evaluation={"alignment": along})
    assert trainer.verifier_key == trainer.along.verifier_key == "arms.bad.recipe.reward_verifier"
    # and a control's credit by the control's key
    assert trainer.along.subjects["mine"].key == "evaluation.alignment.controls.mine"


def test_a_trl_arms_reward_names_its_verifier_by_the_arms_key():
    from mcgrpo.integrations.trl import study_reward
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": {"recipe": {"reward_verifier": f"{HERE}:says_yes"}}}))
    with pytest.raises(PluginError, match=r"^verifier '[^']+' \(arms.bad.recipe.reward_verifier\): it returned 'yes'"):
        study_reward(study_config.run_config(cfg, "bad", 1), "bad")(["\\boxed{1}"], ["1"])


def _gradient_tests_failure(rule: str, tiny, world) -> str:
    """The PluginError's line where arm `bad`, credited by this module's `rule`, runs the gradient tests (2 batches)."""
    from mcgrpo import screen
    from mcgrpo.train import gradients
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": {"credit": {f"{HERE}:{rule}": {}}}}))
    run = study_config.gradient_tests_config(screen.screen_config(cfg, "bad", batches=2))
    with pytest.raises(PluginError) as err:
        gradients.run(run, *tiny, world[0])
    return str(err.value)


@dataclass
class SamplesAnother:
    """Samples its draws from a model of its own by syncing it into ctx.engine: the gradient tests' engine samples every
    later batch's rollouts with what it was last synced to (the trainer re-syncs its own each iteration)."""
    def __call__(self, rollouts, ctx):
        from mcgrpo.train.models.tiny import build_model, build_tokenizer
        ctx.engine.sync(build_model(build_tokenizer(), hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                                    max_positions=96, seed=7))
        return api.Credit(outcome(rollouts, ctx))


def test_a_credit_rule_cannot_swap_the_model_the_engine_samples_from(tiny, world):
    line = _gradient_tests_failure("SamplesAnother", tiny, world)
    assert line.startswith(f"credit rule '{HERE}:SamplesAnother' (arms.bad.credit) in the gradient tests, batch 0: "
                           "raised AttributeError: the engine a plugin is handed (ctx.engine) has no attribute 'sync'"), line


def test_the_gradient_tests_check_the_same_before_any_linear_algebra(tiny, world):
    """screen and the gradient-test step run train/gradients.py: the same line, at the batch it broke on."""
    assert _gradient_tests_failure("NanCredit", tiny, world).startswith(f"credit rule '{HERE}:NanCredit' (arms.bad.credit) in the gradient tests, "
                                     "batch 0: the credit of completion 1 is nan at token 0 (1 of its ")


@pytest.mark.parametrize("rule, line", [
    ("NanCredit", "the credit of completion 1 is nan at token 0"),
    ("Raising", "raised KeyError: 'hints' (at "),
])
def test_a_failed_run_is_not_stored_and_its_line_ends_the_log(rule, line, tmp_path, capsys):
    """`mcgrpo train`, as the train rule runs it: exit 2, the plugin's line last on stderr, no run.json, no
    manifest: the workflow never reads the run as finished. A plugin that raised keeps its traceback above it."""
    from mcgrpo import data
    from mcgrpo.cli import main
    from mcgrpo.core import store
    from mcgrpo.core.budget import budget_table
    from mcgrpo.train import models
    from mcgrpo.train.models.tiny import build_model, build_tokenizer
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": {"credit": {f"{HERE}:{rule}": {}}}}))
    data.write(*data.build(cfg["task"]), tmp_path / "data", "")
    tokenizer = build_tokenizer()
    models.save(build_model(tokenizer, 32, 1, 2, 64, 96, seed=0), tokenizer, tmp_path / "model")
    store.write_parquet(budget_table("tiny", [], 600, "config"), tmp_path / "budget.parquet")
    out = tmp_path / "run"
    status = main(["train", "--run-json", json.dumps(study_config.run_config(cfg, "bad", 1)), "--model",
                   str(tmp_path / "model"), "--data", str(tmp_path / "data"), "--budget", str(tmp_path / "budget.parquet"),
                   "--out", str(out), "--label", "mini/bad"])
    assert status == 2
    err = capsys.readouterr().err.strip()
    last = err.splitlines()[-1]
    assert last.startswith(f"mcgrpo train: error: credit rule '{HERE}:{rule}' (arms.bad.credit) in training arm "
                           f"bad seed 1, iteration 0: {line}"), last
    if rule == "Raising":
        traceback = err[err.index("Traceback (most recent call last):"):]
        assert 'rollouts.problems[0]["hints"]' in traceback and "\nKeyError: 'hints'\n" in traceback
    assert not (out / "run.json").exists() and not list(out.glob("*manifest*"))


def test_the_templates_sampling_rule_trains_with_its_tokens_counted(tiny, world, monkeypatch):
    """examples/my-intervention's halfway_probe, the runnable example of docs/plugins.md: it samples through
    ctx.engine, decodes and scores with mcgrpo.api, and reports its tokens, which the engine counted too."""
    from conftest import ROOT
    from mcgrpo.train import engines
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "my-intervention" / "src"))
    trainer = _trainer({"credit": {"my_intervention.probe:HalfwayProbe": {"k": 2}}}, tiny, world)

    class Synced(engines.Counting):  # the run's own engine, counted: the trainer syncs it (a plugin's cannot)
        __slots__ = ()

        def sync(self, model) -> None:
            self._engine.sync(model)
    trainer.engine = counting = Synced(trainer.engine)
    log = trainer.run(max_iterations=2)
    last = log.iterations[-1]
    assert last["tokens_continuation"] > 0 and counting.generated == last["tokens_total"]
    assert sum(row["probe_tokens"] for row in log.iterations) == last["tokens_continuation"]


def test_a_problem_is_plain_python_in_a_run_as_in_rollouts_of(world):
    from mcgrpo.train.rollout import problem_records
    record = problem_records(world[0])[0]
    assert isinstance(record["steps"], list) and all(isinstance(s, str) for s in record["steps"])
    assert set(api.Problem.__annotations__) >= set(record)


@pytest.fixture
def torch_settings():
    """torch's global settings put back after a test whose rule changes them."""
    import torch
    saved = torch.get_default_dtype(), torch.get_num_threads()
    yield
    torch.set_default_dtype(saved[0])
    torch.set_num_threads(saved[1])


@pytest.mark.parametrize("rule, what", [
    ("ShapesInPlace", "it changed rollouts.rewards in place"),
    ("SortsCompletions", "it changed rollouts.completions in place"),
    ("EditsProblems", "it changed rollouts.problems in place"),
    ("Float64", "it changed torch's default dtype from torch.float32 to torch.float64 and left it so"),
    ("Threads", r"it changed torch's threads from (\d+) to (\d+) and left it so"),
    ("Cools", r"it changed ctx.engine's temperature from 1.0 to 0.1 and left it so"),
])
def test_a_credit_rule_that_changes_what_it_was_handed_or_torchs_settings_is_named(rule, what, tiny, world,
                                                                                  torch_settings):
    """What the rule is handed goes on to the update, the budget and the selector, and torch's settings to the rest
    of the run: a rule that changes them stops the run, named, before the update."""
    name = f"{HERE}:{rule}"
    message, trainer = _failure({"credit": {name: {}}}, tiny, world)
    assert __import__("re").match(__import__("re").escape(CREDIT.format(name=name)) + what + "; allowed: its inputs "
                                  "as it was given them", message), message
    assert trainer.log.iterations == [] and trainer.updates == 0


def test_a_rule_that_changes_the_rollouts_in_the_gradient_tests_is_named_before_the_other_rules_see_them(tiny, world):
    """In the gradient tests every rule and the reference gradient read the same batch after it."""
    assert _gradient_tests_failure("ShapesInPlace", tiny, world).startswith(f"credit rule '{HERE}:ShapesInPlace' (arms.bad.credit) in the gradient tests, "
                                     "batch 0: it changed rollouts.rewards in place; allowed: ")


def test_a_rule_that_reseeds_the_global_generators_trains_as_outcome_does(tiny, world):
    """The trainer draws from none of the global generators (every draw is seeded per request): a rule that
    reseeds or consumes them changes nothing of the run's sampling or updates."""
    model, tokenizer = tiny
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": {"credit": {f"{HERE}:Reseeds": {}}}}))
    runs = {}
    for arm in ("outcome", "bad"):
        trainer = Trainer(study_config.run_config(cfg, arm, 1), __import__("copy").deepcopy(model), tokenizer,
                          world[0], None, 600, arm=arm)
        runs[arm] = [(row["tokens_total"], row["loss"], row["grad_norm"]) for row in trainer.run(3).iterations]
    assert runs["outcome"] == runs["bad"]


def test_credit_that_overflows_the_update_stops_the_run_before_the_weights_turn_nan(tiny, world):
    message, trainer = _failure({"credit": {f"{HERE}:Huge": {}}}, tiny, world)
    assert message.startswith(CREDIT.format(name=f"{HERE}:Huge") + "the update its credit drives has gradient norm "), message
    assert __import__("re").search(r"its largest \|credit\| is [\d.]+e\+300\); allowed: credit whose update is "
                                   "finite", message), message
    assert trainer.updates == 0 and all(bool(p.isfinite().all()) for p in trainer.model.parameters())


def test_a_stat_named_as_a_column_of_the_run_is_refused(tiny, world):
    """iterations.parquet's tokens_total is the run's count of B: a rule's stat may not overwrite it."""
    message, trainer = _failure({"credit": {f"{HERE}:StatsOverB": {}}}, tiny, world)
    assert message.startswith(CREDIT.format(name=f"{HERE}:StatsOverB") + "its stats name tokens_total, which the run "
                              "logs itself; allowed: stats named apart from the columns of iterations.parquet"), message
    assert trainer.log.iterations == []


@dataclass
class LogsAStat:
    """Logs a stat that is not a number on iteration 0 and a float after: iterations.parquet cannot hold both in a
    column, and the run writes it only when it ends, its budget spent."""
    first: str = "text"

    def __call__(self, rollouts, ctx):
        value = {"text": "n/a", "bool": True}[self.first] if ctx.iteration == 0 else 0.5
        return api.Credit(outcome(rollouts, ctx), stats={"my_stat": value})


@pytest.mark.parametrize("first, said", [("text", "'n/a' (str)"), ("bool", "True (bool)")])
def test_a_stat_that_is_not_a_number_is_refused_where_it_is_returned(first, said, tiny, world):
    message, trainer = _failure({"credit": {f"{HERE}:LogsAStat": {"first": first}}}, tiny, world)
    assert message.startswith(CREDIT.format(name=f"{HERE}:LogsAStat") + f"Credit.stats['my_stat'] is {said}, not a "
                              "number; allowed: Credit.stats a dict of names (str) to numbers"), message
    assert trainer.log.iterations == []


@pytest.mark.parametrize("rule, what", [
    ("Doubles", "it chose 4 prompts, more than recipe.prompts_per_iteration (2)"),
    ("TrainsOnNothing", "it trained on no prompt"),
])
def test_a_selector_that_changes_the_batch_size_is_named(rule, what, tiny, world):
    message, _ = _failure({"selection": {f"{HERE}:{rule}": {}}}, tiny, world)
    assert message.startswith(f"selector '{HERE}:{rule}' (arms.bad.selection) in training arm bad seed 1, "
                              f"iteration 0: {what}; allowed: a Selection of pool indices"), message


@dataclass(kw_only=True)
class Logs(api.StreamSelector):
    """Trains on the stream's prompts, but reports them to the log as `how` says: prompts.parquet logs each candidate
    by its index (a negative one names another problem) and iterations.parquet the means of the predictions."""
    how: str = "lists"

    def select(self, iteration, view):
        drawn = self.stream.candidates(iteration, self.per_iteration)
        first = np.repeat(drawn[:1], 2)
        return {"lists": api.Selection(drawn.tolist(), drawn.tolist()),
                "negative": api.Selection(np.append(drawn, -1), drawn),
                "unlisted": api.Selection(drawn[:1], drawn),
                "twice": api.Selection(drawn, first),
                "drawn_twice": api.Selection(first, first),
                "short": api.Selection(drawn, drawn, np.array([0.5]))}[self.how]

    def observe(self, iteration, selection, group_means, view):
        OBSERVED.append(group_means.tolist())


OBSERVED: list = []


def odd_length(text, reference):
    """A verdict that varies from completion to completion, so that two groups of one prompt differ in mean reward."""
    return len(text) % 2 == 1


@pytest.mark.parametrize("how, what", [
    ("negative", "its candidates hold -1, outside the pool of 64"),
    ("unlisted", r"it chose prompt \d+, not one of its 1 candidates"),
    ("twice", r"it chose prompt \d+ 2 times, more often than its 2 candidates hold it \(1\)"),
    ("short", r"its predicted successes are float64 in shape \(1,\), for 2 candidates"),
])
def test_a_selector_that_would_misreport_its_candidates_is_named(how, what, tiny, world):
    message, _ = _failure({"selection": {f"{HERE}:Logs": {"how": how}}}, tiny, world)
    assert __import__("re").match(f"selector '{HERE}:Logs' \\(arms.bad.selection\\) in training arm bad seed 1, "
                                  f"iteration 0: {what}; allowed: a Selection of pool indices", message), message


def test_a_prompt_drawn_twice_logs_each_of_its_groups_on_a_row_of_its_own(tiny, world):
    """A stream that crosses an epoch's end can draw one prompt twice, built-ins' included: each of its rows in
    prompts.parquet is paired with a group of its own, in training order, not both with the last one's mean."""
    OBSERVED.clear()
    log = _trainer({"selection": {f"{HERE}:Logs": {"how": "drawn_twice"}}, "recipe": {"reward_verifier":
                    f"{HERE}:odd_length"}}, tiny, world).run(max_iterations=2)
    logged = [[row["group_mean_reward"] for row in log.prompts if row["iteration"] == i] for i in range(2)]
    assert logged == OBSERVED and any(a != b for a, b in OBSERVED), OBSERVED


def test_a_selection_of_lists_trains_as_one_of_arrays(tiny, world):
    log = _trainer({"selection": {f"{HERE}:Logs": {"how": "lists"}}}, tiny, world).run(max_iterations=2)
    assert [row["chosen"] for row in log.prompts] == [True] * 4


# What a plugin is handed exposes only what mcgrpo.api documents: sampling goes through the counted generate.

@dataclass
class SamplesThrough:
    """Samples a continuation of each group's first completion through `route` (what it reaches from ctx), which
    no engine counts: ctx.engine's model or wrapped engine, or the model behind ctx.features."""
    route: str = "ctx.engine.model"

    def __call__(self, rollouts, ctx):
        import torch
        source = eval(self.route, {"ctx": ctx})
        sampler = source.model if self.route.endswith("__self__") else source
        prompt = torch.tensor([list(rollouts.prompts[0])])
        sampler.generate(prompt, max_new_tokens=4) if hasattr(sampler, "config") else sampler.generate(
            [rollouts.prompts[0]], [4], [0])
        return api.Credit(outcome(rollouts, ctx))


@pytest.mark.parametrize("route, what", [
    ("ctx.engine.model", "the engine a plugin is handed (ctx.engine) has no attribute 'model'"),
    ("ctx.engine.engine", "the engine a plugin is handed (ctx.engine) has no attribute 'engine'"),
    ("ctx.features.__self__", "'function' object has no attribute '__self__'"),
])
def test_a_credit_rule_cannot_sample_around_the_counted_engine(route, what, tiny, world):
    """A rule that reached the model (or the engine ctx.engine wraps) would sample tokens nothing counts toward B."""
    name = f"{HERE}:SamplesThrough"
    message, trainer = _failure({"credit": {name: {"route": route}}}, tiny, world)
    assert message.startswith(CREDIT.format(name=name) + f"raised AttributeError: {what}"), message
    if "ctx.engine" in what:
        assert "allowed: generate(prompts, limits, seeds), temperature, top_p (docs/plugins.md)" in message


KEPT: list = []  # what a plugin kept of an earlier call, out of its attributes (which a checkpoint would compare)


@dataclass
class KeepsItsEngine:
    """Keeps ctx.engine and samples with the kept one in the next call, reporting what the new ctx.engine counted."""
    def __call__(self, rollouts, ctx):
        if KEPT:
            KEPT[0].generate([rollouts.prompts[0]], [8], [api.stable_seed(*ctx.seed)])
        KEPT[:] = [ctx.engine]
        return api.Credit(outcome(rollouts, ctx), tokens_generated=ctx.engine.generated)


@dataclass(kw_only=True)
class KeepsItsSampler(api.StreamSelector):
    """Keeps the sample function and draws one more group with the kept one in the next iteration, discarded."""
    def generate(self, iteration, selection, sample):
        if KEPT:
            KEPT[0](selection.chosen[:1], 1)
        KEPT[:] = [sample]
        return sample(selection.chosen, 0), 0, selection


@pytest.mark.parametrize("arm, said", [
    ({"credit": {f"{HERE}:KeepsItsEngine": {}}}, f"credit rule '{HERE}:KeepsItsEngine' (arms.bad.credit) in training "
     "arm bad seed 1, iteration 1: raised RuntimeError: this engine served an earlier call, whose tokens are counted "
     "already: what it generated now would count toward no budget"),
    ({"selection": {f"{HERE}:KeepsItsSampler": {}}}, f"selector '{HERE}:KeepsItsSampler' (arms.bad.selection) in "
     "training arm bad seed 1, iteration 1: raised RuntimeError: the sample function of an earlier iteration, whose "
     "tokens are counted already: what it sampled now would count toward no budget"),
])
def test_an_engine_kept_from_an_earlier_call_samples_nothing_uncounted(arm, said, tiny, world):
    KEPT.clear()
    message, trainer = _failure(arm, tiny, world)
    assert message.startswith(said), message
    assert trainer.updates == 1


@dataclass
class Rewords:
    """Probes with a prompt of its own by setting the template of ctx.prompter, the run's Prompter, which renders every
    later rollout's and evaluation's prompt."""
    def __call__(self, rollouts, ctx):
        ctx.prompter.template = "Answer briefly: {question}"
        return api.Credit(outcome(rollouts, ctx))


def test_a_credit_rule_cannot_change_how_the_run_renders_prompts(tiny, world):
    name = f"{HERE}:Rewords"
    message, trainer = _failure({"credit": {name: {}}}, tiny, world)
    assert message.startswith(CREDIT.format(name=name) + "raised AttributeError: ctx.prompter has no attribute "
                              "'template'; allowed: prompter(question), prompter.decode(tokens)"), message
    assert trainer.prompter.template == "{question}"


def test_the_counted_engine_passes_the_sampling_settings_through(tiny):
    from mcgrpo.train import engines
    model, tokenizer = tiny
    engine = engines.build("hf", model, tokenizer, temperature=1.0, top_p=1.0)
    counted = engines.Counting(engines.Counting(engine))
    with engines.sampling(counted, temperature=0.5, top_p=0.9):
        assert (engine.temperature, engine.top_p) == (counted.temperature, counted.top_p) == (0.5, 0.9)
    assert (engine.temperature, engine.top_p) == (1.0, 1.0)
    out = counted.generate([[1, 2]], [3], [0])
    assert counted.generated == len(out[0]) and counted.handed_out() == {id(out[0])}
    with pytest.raises(AttributeError, match="no attribute 'generated_tokens'"):
        counted.generated_tokens = 0


@dataclass(kw_only=True)
class ViewReader(api.StreamSelector):
    """Reads `what` of its view in select: the model (to sample with), or the pool's records (to edit one)."""
    what: str = "model"

    def select(self, iteration, view):
        if self.what == "model":
            view.model.generate
        else:
            view.problems[0]["answer"] = "0"
        return super().select(iteration, view)


@pytest.mark.parametrize("what", ["model", "problems"])
def test_a_selectors_view_gives_features_and_levels_only(what, tiny, world):
    """The model's generate would sample uncounted tokens; the pool's records are what the run rewards against."""
    name = f"{HERE}:ViewReader"
    message, trainer = _failure({"selection": {name: {"what": what}}}, tiny, world)
    assert message.startswith(f"selector '{name}' (arms.bad.selection) in training arm bad seed 1, iteration 0: "
                              f"raised AttributeError: a selector's view (PolicyView) has no attribute '{what}'; "
                              "allowed: features(indices), levels(indices) (docs/plugins.md)"), message
    assert trainer.problems[0]["answer"] != "0"


@dataclass(kw_only=True)
class EditsItsGroups(api.StreamSelector):
    """Edits a problem record of the groups it sampled: the pool's own record, which the credit rule and every later
    iteration read."""
    def generate(self, iteration, selection, sample):
        batch = sample(selection.chosen, 0)
        batch.problems[0]["answer"] = "0"
        return batch, 0, selection


@dataclass(kw_only=True)
class TrainsOthers(api.StreamSelector):
    """Generates groups for other prompts than the Selection it returns says it trained: `shifted` an off-by-one
    (pool index j - 1; -1 is the pool's last problem), `reversed` the chosen prompts in another order. prompts.parquet,
    observe and the count of distinct prompts would credit each group's reward to another problem."""
    how: str = "shifted"

    def generate(self, iteration, selection, sample):
        indices = selection.chosen - 1 if self.how == "shifted" else selection.chosen[::-1]
        return sample(indices, 0), 0, selection


@pytest.mark.parametrize("how", ["shifted", "reversed"])
def test_a_selector_whose_groups_are_not_of_its_chosen_prompts_is_named(how, tiny, world):
    name = f"{HERE}:TrainsOthers"
    message, trainer = _failure({"selection": {name: {"how": how}}}, tiny, world)
    found = __import__("re").search(r"iteration 0: its group 0 is of problem '([^']+)', but its chosen prompt 0 is "
                                    r"pool index (\d+), problem '([^']+)'; allowed: a Selection", message)
    assert found and found[1] != found[3] == world[0]["problem_id"][int(found[2])], message
    assert trainer.updates == 0


@dataclass(kw_only=True)
class ObservesInPlace(api.StreamSelector):
    """Learns from the trained groups, editing what observe is handed: `rescales` the group means to [-1, 1], `reverses`
    the chosen prompts, `replaces` the Selection's chosen prompts. The run logs both after observe (prompts.parquet, the
    groups' composition, the distinct prompts trained)."""
    how: str = "rescales"

    def observe(self, iteration, selection, group_means, view):
        if self.how == "rescales":
            group_means *= 2.0
            group_means -= 1.0
        elif self.how == "reverses":
            selection.chosen[:] = selection.chosen[::-1].copy()
        else:
            selection.chosen = selection.candidates[:0]


@pytest.mark.parametrize("how, what", [("rescales", "group_means in place"),
                                       ("reverses", "selection.chosen in place"),
                                       ("replaces", "selection.chosen in place")])
def test_a_selector_that_edits_what_observe_is_handed_is_named(how, what, tiny, world):
    trainer = _selector_named("ObservesInPlace", {"how": how}, tiny, world, f"changed {what}", "its inputs")
    assert trainer.log.iterations == []


def test_a_selector_that_edits_the_groups_it_sampled_is_named(tiny, world):
    trainer = _selector_named("EditsItsGroups", {}, tiny, world,
                              "changed rollouts.problems in place (of groups it sampled)", "its inputs")
    assert trainer.updates == 0


@dataclass(kw_only=True)
class MakesUpRows(api.StreamSelector):
    """Returns groups of its own making from what it sampled: `rewards` every reward flipped (groups of mixed rewards
    made without the verifier), `copies` each completion a copy (rows the engine never handed out)."""
    what: str = "rewards"

    def generate(self, iteration, selection, sample):
        import copy as copying
        batch = sample(selection.chosen, 0)
        if self.what == "rewards":
            made = dataclasses.replace(batch, rewards=1.0 - batch.rewards)
        else:
            made = dataclasses.replace(batch, completions=[copying.copy(c) for c in batch.completions])
        return made, 0, selection


@pytest.mark.parametrize("what, why", [("rewards", "a completion its sampler returned, with another prompt, text, "
                                                   "score, reward or problem than it had there"),
                                       ("copies", "a completion its sampler never returned")])
def test_a_selector_that_trains_on_rows_it_made_up_is_named(what, why, tiny, world):
    trainer = _selector_named("MakesUpRows", {"what": what}, tiny, world, f"trains on row 0, {why}",
                              "rows its sampler returned")
    assert trainer.updates == 0


# Extra training sequences are completions ctx.engine generated, and so counted toward B.

@dataclass
class ExtraSequences:
    """Trains besides the rollouts on each group's first prompt followed by `what`: its own continuation (sampled
    through ctx.engine), a copy of one, or the problem's reference answer (never generated)."""
    what: str = "sampled"

    def __call__(self, rollouts, ctx):
        from mcgrpo.train.credit import TrainingSequence
        starts = [rollouts.prompts[p * rollouts.group_size] for p in range(len(rollouts.problems))]
        sampled = ctx.engine.generate(starts, [4] * len(starts), [api.stable_seed(*ctx.seed, p)
                                                                  for p in range(len(starts))])
        if self.what == "copied":
            sampled = [api.Completion(c.tokens, c.finished) for c in sampled]
        if self.what == "reference":
            sampled = [api.Completion(tuple(map(ord, p["answer"])), True) for p in rollouts.problems]
        return api.Credit(outcome(rollouts, ctx), tokens_generated=ctx.engine.generated, sequences=[
            TrainingSequence(tuple(s), c, np.ones(len(c))) for s, c in zip(starts, sampled)])


@pytest.mark.parametrize("what", ["copied", "reference"])
def test_extra_sequences_never_generated_are_refused(what, tiny, world):
    name = f"{HERE}:ExtraSequences"
    message, trainer = _failure({"credit": {name: {"what": what}}}, tiny, world)
    assert message.startswith(CREDIT.format(name=name) + "its extra sequence 0 trains on a completion ctx.engine did "
                              "not generate while it ran (tokens never generated count nothing toward B); allowed: "
                              "extra sequences (Credit.sequences) whose completion is one that ctx.engine.generate "
                              "returned while the rule ran"), message
    assert trainer.updates == 0


def test_extra_sequences_the_rule_sampled_train_and_count(tiny, world):
    trainer = _trainer({"credit": {f"{HERE}:ExtraSequences": {}}}, tiny, world)
    log = trainer.run(max_iterations=2)
    assert log.iterations[-1]["tokens_continuation"] > 0


# A plugin that keeps state across iterations saves it, or a resumed run would diverge from the uninterrupted one.

@dataclass
class Counts:
    """Counts its calls (state kept on the rule), saving the count where `saves`."""
    def __call__(self, rollouts, ctx):
        self.calls = getattr(self, "calls", 0) + 1
        return api.Credit(outcome(rollouts, ctx))


@dataclass
class CountsSaved(Counts):
    def state_dict(self):
        return {"calls": getattr(self, "calls", 0)}

    def load_state_dict(self, state):
        self.calls = state["calls"]


@dataclass(kw_only=True)
class Remembers(api.StreamSelector):
    """Learns from the groups it trained (how many it saw), and has no state_dict."""
    seen: int = 0

    def observe(self, iteration, selection, group_means, view):
        self.seen += len(group_means)


def _checkpointed(arm: dict, tiny, world, tmp_path) -> Trainer:
    """The trainer of `arm`, checkpointing, asked to stop (a preemption) during its first iteration (no budget: no
    evaluation is due after it, the stop writes the checkpoint; the start's, before any iteration, is written too)."""
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": arm}))
    trainer = Trainer(study_config.run_config(cfg, "bad", 1), tiny[0], tiny[1], world[0], None, None,
                      checkpoint_dir=str(tmp_path), arm="bad")
    trainer.stop_requested = True
    return trainer


def _refused_at_checkpoint(kind: str, name: str, said: str, tiny, world, tmp_path) -> None:
    """Runs arm bad with this module's plugin `name` as its `kind`, checkpointing: it must stop at the checkpoint after
    iteration 0 with the one line naming it and saying `said`, before that checkpoint is written."""
    trainer = _checkpointed({kind: {f"{HERE}:{name}": {}}}, tiny, world, tmp_path)
    with pytest.raises(PluginError) as err:
        trainer.run(max_iterations=2)
    what = "credit rule" if kind == "credit" else "selector"
    assert str(err.value).startswith(f"{what} '{HERE}:{name}' (arms.bad.{kind}) in training arm bad seed 1, checkpoint "
                                     f"after iteration 0: its {said}: a run resumed from this checkpoint would "), str(err.value)
    assert "; allowed: state_dict() -> dict and load_state_dict(state) that save and restore" in str(err.value)
    assert [p.name for p in tmp_path.glob("ckpt-*.pt")] == ["ckpt-00000000.pt"]  # the start's only, as built


@dataclass
class SavesALock(CountsSaved):
    """Saves a lock it made in its first call with its count: no checkpoint can hold a lock."""
    def __call__(self, rollouts, ctx):
        self.lock = __import__("threading").Lock()
        return super().__call__(rollouts, ctx)

    def state_dict(self):
        return {**super().state_dict(), "lock": getattr(self, "lock", None)}


def test_a_state_dict_no_checkpoint_can_hold_is_refused_naming_the_plugin(tiny, world, tmp_path):
    trainer = _checkpointed({"credit": {f"{HERE}:SavesALock": {}}}, tiny, world, tmp_path)
    with pytest.raises(PluginError) as err:
        trainer.run(max_iterations=2)
    assert str(err.value).startswith(f"credit rule '{HERE}:SavesALock' (arms.bad.credit) in training arm bad seed 1, "
                                     "checkpoint after iteration 0: its state_dict() cannot be written to a checkpoint "
                                     "and read back (TypeError: cannot pickle '_thread.lock' object); allowed: "
                                     "state_dict() -> dict"), str(err.value)


@pytest.mark.parametrize("kind, name, changed", [
    ("credit", "Counts", "attribute calls"), ("selection", "Remembers", "attribute seen")])
def test_a_plugin_whose_state_changed_but_cannot_be_saved_is_refused_at_the_checkpoint(kind, name, changed, tiny,
                                                                                       world, tmp_path):
    _refused_at_checkpoint(kind, name, f"{changed} changed since it was built, but it has no state_dict", tiny, world,
                           tmp_path)


@pytest.mark.parametrize("arm", [{"credit": {f"{HERE}:CountsSaved": {}}}, {"credit": {"shuffled": {"critic": {}}}},
                                 {"credit": {"path_penalty": {"anneal_below": 1.0}}},
                                 {"selection": {"critic_filter": {"keep": 1, "candidates": 4}}},
                                 {"selection": {"history_filter": {"keep": 1, "candidates": 4}}},
                                 {"selection": {"dynamic_sampling": {}}}])
def test_a_plugin_that_saves_its_state_checkpoints(arm, tiny, world, tmp_path):
    from mcgrpo.core.errors import Interrupted
    trainer = _checkpointed(arm, tiny, world, tmp_path)
    with pytest.raises(Interrupted):
        trainer.run(max_iterations=2)
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.pt")) == ["ckpt-00000000.pt", "ckpt-00000001.pt"]


def test_a_shuffled_rule_saves_its_inner_rules_state():
    from mcgrpo.train import credit as credit_rules
    shuffled = credit_rules.build({"shuffled": {"critic": {}}})
    assert shuffled.state_dict() == shuffled.rule.state_dict() and shuffled.state_dict()["rows"] == []
    assert not hasattr(credit_rules.build({"shuffled": {"monte_carlo": {}}}), "state_dict")


# A plugin's options are its own: what it does to them never reaches the run's config, recorded and hashed.

@dataclass
class Appends:
    """Keeps a running list in the list option it was given (appends to self.weights each call)."""
    weights: list[int] = dataclasses.field(default_factory=list)

    def __call__(self, rollouts, ctx):
        self.weights.append(len(self.weights))
        return api.Credit(outcome(rollouts, ctx))


@dataclass(kw_only=True)
class AppendsSelector(api.StreamSelector):
    weights: list[int] = dataclasses.field(default_factory=list)

    def observe(self, iteration, selection, group_means, view):
        self.weights.append(iteration)

    def state_dict(self):
        return {"weights": list(self.weights)}

    def load_state_dict(self, state):
        self.weights = list(state["weights"])


@pytest.mark.parametrize("kind, name", [("credit", "Appends"), ("selection", "AppendsSelector")])
def test_a_plugin_that_edits_its_options_in_place_leaves_the_runs_config_as_written(kind, name, tiny, world):
    """The run's config (run.json's config and config_hash, the checkpoints' identity) is what the study wrote: the
    plugin is built with its own copy of its options."""
    import copy
    from mcgrpo.core.config import config_hash
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": {kind: {f"{HERE}:{name}": {"weights": [1, 2]}}}}))
    run = study_config.run_config(cfg, "bad", 1)
    written, hashed = copy.deepcopy(run), config_hash(run)
    trainer = Trainer(run, *tiny, world[0], None, 600, arm="bad")
    trainer.run(max_iterations=2)
    assert len(getattr(trainer, "credit" if kind == "credit" else "selector").weights) == 4
    assert run == written and config_hash(run) == hashed


@dataclass
class EditsThePool:
    """Its check_pool edits the pool it is handed: `answer` rewrites a problem's answer, `steps` appends to a problem's
    list of reference steps (an object in the frame, which a shallow copy of the pool would share)."""
    what: str = "answer"

    def check_pool(self, pool, where):
        if self.what == "answer":
            pool.loc[pool.index[0], "answer"] = "0"
        else:
            pool["steps"].iloc[0].append("0")

    def __call__(self, rollouts, ctx):
        return api.Credit(outcome(rollouts, ctx))


@pytest.mark.parametrize("what", ["answer", "steps"])
def test_a_credit_rules_check_pool_cannot_edit_the_training_pool(what, tiny, world):
    """The trainer rewards every rollout against the pool's answers after check_pool: an edit is refused, named, and
    never reaches the pool."""
    import pickle
    pool = pickle.loads(pickle.dumps(world[0]))  # the session's pool stays as built whatever happens here
    name = f"{HERE}:EditsThePool"
    cfg = studies.validate(edited_study(arms={"outcome": {}, "bad": {"credit": {name: {"what": what}}}}))
    with pytest.raises(PluginError) as err:
        Trainer(study_config.run_config(cfg, "bad", 1), *tiny, pool, None, 600, arm="bad")
    assert str(err.value) == (f"credit rule '{name}' (arms.bad.credit): its check_pool changed the pool's column "
                              f"{what!r} (row 0) in place; allowed: {api_pool_allowed()}"), str(err.value)
    assert pool.equals(world[0]) and pool["steps"].iloc[0] == world[0]["steps"].iloc[0] != [*world[0]["steps"].iloc[0], "0"]


def api_pool_allowed() -> str:
    from mcgrpo.train import contract
    return contract.POOL


# A plugin's state_dict restores all it keeps: built afresh and loaded with it, it equals the live one.

@dataclass
class CountsPartly(CountsSaved):
    """Saves its count of calls, not the rewards it has summed (an array it grows each call)."""
    def __call__(self, rollouts, ctx):
        self.summed = np.append(getattr(self, "summed", np.zeros(0)), rollouts.rewards.sum())
        return super().__call__(rollouts, ctx)


@dataclass(kw_only=True)
class RemembersPartly(Remembers):
    """Saves how many groups it saw, not the last iteration it observed."""
    last: int = -1

    def observe(self, iteration, selection, group_means, view):
        super().observe(iteration, selection, group_means, view)
        self.last = iteration

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.seen = state["seen"]


@pytest.mark.parametrize("kind, name, lost", [("credit", "CountsPartly", "summed"),
                                              ("selection", "RemembersPartly", "last")])
def test_a_plugin_whose_state_dict_does_not_restore_it_is_refused_at_the_checkpoint(kind, name, lost, tiny, world,
                                                                                     tmp_path):
    _refused_at_checkpoint(kind, name, f"attribute {lost} is not restored by its state_dict (built afresh and loaded "
                           "with what state_dict() returned, it differs there)", tiny, world, tmp_path)


# A verifier's verdict depends on (text, reference) alone: a sample of each batch is judged twice.

CALLS, COIN, DRIFT = [0], __import__("random").Random(0), [0]


def flips(text, reference):
    """Alternates its verdict from call to call (a verifier whose verdict drifts with its own state)."""
    CALLS[0] += 1
    return CALLS[0] % 2 == 0


def coin(text, reference):
    """Draws its verdict at random."""
    return COIN.random() < 0.5


def drifts(text, reference):
    """Rejects everything for its first 9 calls (a batch of 8 completions and one judged again), then accepts
    everything: a mode switched between batches, never within one."""
    DRIFT[0] += 1
    return DRIFT[0] > 9


def test_a_verifier_whose_verdict_drifts_between_batches_is_named(tiny, world):
    DRIFT[0] = 0
    name = f"{HERE}:drifts"
    message, trainer = _failure({"recipe": {"reward_verifier": name}}, tiny, world)
    assert __import__("re").match(
        rf"verifier '{name}' \(arms.bad.recipe.reward_verifier\) in training arm bad seed 1, iteration 1: it returned False, "
        r"then True for a completion of its last batch judged again in this one \(text .*, reference '[^']+'\); "
        r"allowed: True or False", message), message
    assert trainer.updates == 1  # the first batch's rewards trained, none judged after the switch


@pytest.mark.parametrize("verifier", ["flips", "coin"])
def test_a_verifier_whose_verdict_varies_for_the_same_text_is_named(verifier, tiny, world):
    COIN.seed(0)
    name = f"{HERE}:{verifier}"
    message, trainer = _failure({"recipe": {"reward_verifier": name}}, tiny, world)
    found = __import__("re").match(
        rf"verifier '{name}' \(arms.bad.recipe.reward_verifier\) in training arm bad seed 1, iteration (\d+): it returned "
        r"(True|False), then (True|False) for completion (\d+) judged again \(text .*, reference '[^']+'\); allowed: "
        r"True or False \(or 1 / 0\) for every completion, the same each time for the same \(text, reference\)",
        message)
    assert found and found[2] != found[3], message
    assert trainer.updates == int(found[1])  # nothing trained on the noisy rewards of that iteration


def test_same_compares_a_plugins_attributes_by_value():
    """What the checkpoint compares: arrays, tensors, generators and objects by value, NaN equal to NaN."""
    import collections
    import torch
    from mcgrpo.train.contract import same
    nan = np.array([1.0, np.nan])
    assert same(nan, nan.copy()) and not same(nan, nan.astype(np.float32)) and not same(nan, np.array([1.0, 2.0]))
    assert same(torch.tensor([np.nan, 1.0]), torch.tensor([np.nan, 1.0])) and not same(torch.ones(2), torch.zeros(2))
    assert same(np.random.default_rng(3), np.random.default_rng(3))
    assert not same(np.random.default_rng(3), np.random.default_rng(4))
    assert same(collections.deque([(0, nan)]), collections.deque([(0, nan.copy())]))
    assert not same(collections.deque([1]), [1]) and same({"a": float("nan")}, {"a": float("nan")})
    loop = CountsPartly()
    loop.me, loop.summed = loop, nan
    twin = CountsPartly()
    twin.me, twin.summed = twin, nan.copy()
    assert same(loop, twin) and not same(loop, CountsPartly())


class SignalledInside:
    """Outcome-only credit during whose call the job gets SIGUSR1, as a call that never returns gets SLURM's signal
    before its time limit."""

    def __call__(self, rollouts, ctx):
        import os
        import signal
        os.kill(os.getpid(), signal.SIGUSR1)
        return api.Credit(api.per_token(api.group_advantages(rollouts.grouped(rollouts.rewards), ctx.advantage_eps),
                                        rollouts))


def test_a_stop_signal_during_a_plugin_call_names_the_call_in_the_jobs_log(tiny, world, capsys):
    """A train job stops at its iteration's end; a call that never returns never reaches it, and the job's log must
    say which plugin call it was waiting on."""
    import signal
    from mcgrpo.core.errors import Interrupted
    from mcgrpo.train import job
    trainer = _trainer({"credit": {f"{HERE}:SignalledInside": {}}}, tiny, world)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        job.Stops.catch().trainer = trainer
        with pytest.raises(Interrupted):
            trainer.run(max_iterations=3)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert (f"mcgrpo: SIGUSR1 caught during a plugin call, credit rule '{HERE}:SignalledInside' (arms.bad.credit) in "
            f"training arm bad seed 1, iteration 0 (running for 0 s): the run checkpoints and stops once that call "
            f"returns") in capsys.readouterr().err
    assert trainer.next_iteration == 1  # the call returned: it stopped at that iteration's end


HUNG = """
import os, signal
from mcgrpo.train import contract, job
def hangs():
    os.kill(os.getpid(), signal.SIGTERM)
    while True:
        pass
with job.named_when_stopped():
    contract.Subject.of("credit", "my_rules:Loops", "arms.mine.credit").call(hangs)
"""


def test_a_job_without_a_trainer_names_the_plugin_call_it_is_ended_during(tmp_path):
    """The gradient tests, calibration or a screen (no checkpoint to write) end on the signal as before, their log
    naming the plugin call that was running: here one that never returns."""
    import signal
    import subprocess
    import sys
    from conftest import ROOT
    done = subprocess.run([sys.executable, "-c", HUNG], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT / "workflow"), "PATH": "/usr/bin:/bin"})
    from mcgrpo.cli import train as verbs
    assert all(hasattr(getattr(verbs, v), "__wrapped__") for v in ("calibrate", "gradient_tests", "screen"))
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert ("mcgrpo: SIGTERM caught during a plugin call, credit rule 'my_rules:Loops' (arms.mine.credit) (running "
            "for 0 s): the job ends") in done.stderr


_BUFFER: list = []  # one list that every Buffered instance fills and returns


@dataclass
class Buffered:
    """Returns the same module-level list at every call, refilled: a credit kept by reference is another call's."""
    bonus: float = 0.0

    def __call__(self, rollouts, ctx):
        _BUFFER[:] = [values + self.bonus * (np.arange(len(values)) == 0) for values in outcome(rollouts, ctx)]
        return api.Credit(_BUFFER)


def test_a_credit_returned_by_reference_and_refilled_by_a_later_call_is_measured_as_returned(tiny, world):
    """The gradient tests call every rule on a batch before they take its gradients: a rule whose Credit holds a list
    it refills at its next call (a module's buffer) would have each arm measured with the last arm's credit. What
    is checked is what is measured: an arm's rows are as where it is measured alone."""
    from mcgrpo.train import gradients
    arms = {"outcome": {}, **{f"b{k}": {"credit": {f"{HERE}:Buffered": {"bonus": float(k)}}} for k in (1, 5)}}

    def measured(*measured_arms):
        cfg = studies.validate(edited_study(arms=arms, gradient_tests={"batches": 2, "arms": list(measured_arms)}))
        table = gradients.run(study_config.gradient_tests_config(cfg), *tiny, world[0])
        return table[table.arm == "b1"].reset_index(drop=True)
    alone, beside = measured("b1"), measured("b1", "b5")
    assert np.allclose(alone.value, beside.value, equal_nan=True), (alone, beside)
