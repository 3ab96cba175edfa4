"""The alike check: each seed's two paired runs made under one stack and, at equal time, timed on one machine; and
run.json recording the versions that decide a run's numbers (vLLM's, math-verify's) only where the run used them.
The runs are test_robustness's constructed ones (a trails the base at B in every seed); their run.json records are
given beside them as study_runs.records gives them."""

import copy
import sys
import types

import pandas as pd
import pytest

from mcgrpo import studies
from mcgrpo.analysis import alike, robustness, summary
from mcgrpo.analysis.contrasts import build, name
from mcgrpo.analysis.drift import drift_table
from mcgrpo.analysis.runs import evals_frame
from mcgrpo.core import config as study_config, store
from test_robustness import B, SEEDS, a_trails, study

STACK = {"mcgrpo": "0.9.0", "torch": "2.13.0+cpu", "transformers": "5.24.0", "python": "3.11.7"}
CPU = {"device": "cpu", "gpu": None, "cpu": "AMD EPYC", "threads": 1}
H100 = {"device": "cuda:0", "gpu": "NVIDIA H100 80GB HBM3", "cpu": "Intel Xeon", "threads": 8}


def made(versions=None, hardware=None, **changes) -> dict:
    """A run.json as write_run writes it, less what the check does not read; a key given None is left out."""
    record = {"versions": {**STACK, **(versions or {})}, "hardware": hardware or CPU, **changes}
    return {k: v for k, v in record.items() if v is not None}


def records(**different) -> dict:
    """{(arm, seed): run.json} of every run, alike but for `different`: {'a<seed>' or 'base<seed>': run.json}."""
    return {(arm, seed): different.get(f"{arm}{seed}", made()) for arm in ("a", "base") for seed in SEEDS}


def checked(made_by, basis="tokens", direction="less"):
    runs = study(a_trails)
    plan = {(name("a", "base"), basis, "acc_default", "test"): {"id": "T1", "label": "secondary",
                                                                 "direction": direction}}
    contrasts, _ = build(runs, [("a", "base", basis, "acc_default", "test")], B, 0.02, plan, resamples=500)
    row = robustness.table(contrasts, runs, drift_table(evals_frame(runs)), B, records=made_by).iloc[0]
    assert bool(contrasts["confirmed"].iloc[0])  # every test below reads a confirmed verdict
    return contrasts.iloc[0], row


def test_a_pair_made_under_different_torch_versions_makes_a_confirmed_verdict_fragile():
    contrast, row = checked(records(a3=made({"torch": "2.11.0+cu130"})))
    assert row["alike_holds"] == False and row["alike_compared"] == 4  # noqa: E712 (pandas' boolean NA)
    words = "seed 3's runs were made under different stacks (a: torch 2.11.0+cu130; base: torch 2.13.0+cpu)"
    assert row["alike_unlike"] == words and row["robustness"] == f"fragile: {words}"
    assert summary.judged(contrast, row["robustness"]) == f"confirmed, but fragile: {words}"
    assert robustness.alike_cell(row) == words


def test_stacks_and_machines_that_differ_between_seeds_but_not_within_a_pair_keep_the_verdict_robust():
    old = made({"torch": "2.11.0+cu130", "transformers": "5.17.0"}, H100)
    _, row = checked(records(a0=old, base0=old, a1=old, base1=old), basis="time")
    assert row["alike_holds"] == True and row["robustness"] == "robust"  # noqa: E712
    assert robustness.alike_cell(row) == "4 pairs alike"


def test_a_machine_difference_fails_an_equal_time_contrast_and_not_an_equal_token_one():
    on_a_gpu = records(a1=made(hardware=H100))
    _, timed = checked(on_a_gpu, basis="time")
    assert timed["robustness"] == ("fragile: seed 1's runs were timed on different machines "
                                   "(a: NVIDIA H100 80GB HBM3; base: CPU (AMD EPYC), 1 thread)")
    _, counted = checked(on_a_gpu, basis="tokens")
    assert counted["alike_holds"] == True and counted["robustness"] == "robust"  # noqa: E712


def test_many_seeds_that_differ_are_named_with_one_example_and_each_kind_once():
    differ = {f"a{seed}": made({"transformers": "5.17.0"}) for seed in (0, 2, 3)}
    _, row = checked(records(**differ, base1=made(hardware={**CPU, "threads": 2})), basis="time")
    assert row["robustness"] == (
        "fragile: the runs of seeds 0, 2, 3 were made under different stacks (seed 0: a: transformers 5.17.0; "
        "base: transformers 5.24.0); seed 1's runs were timed on different machines (a: CPU (AMD EPYC), 1 thread; "
        "base: CPU (AMD EPYC), 2 threads)")


def test_the_same_gpu_on_another_host_names_the_key_that_differs():
    assert alike.unlike(made(hardware=H100), made(hardware={**H100, "cpu": "AMD EPYC"}), timed=True) == (
        True, ("machine", "NVIDIA H100 80GB HBM3 (cpu Intel Xeon)", "NVIDIA H100 80GB HBM3 (cpu AMD EPYC)"))


def test_runs_that_record_no_versions_or_hardware_leave_the_check_unapplied_never_failed():
    older = {"config": {"seed": 3}}  # a run.json from before versions and hardware were recorded
    _, row = checked(records(a3=older), basis="time")
    assert row["alike_compared"] == 3 and row["alike_holds"] == True  # noqa: E712 (the other seeds are read)
    _, row = checked({run: older for run in records()}, basis="time")
    assert row["alike_compared"] == 0 and pd.isna(row["alike_holds"]) and row["robustness"] == "robust"
    assert robustness.alike_cell(row) == "not recorded"
    _, row = checked(None)  # run.json not read at all
    assert pd.isna(row["alike_holds"]) and row["alike_unlike"] == "" and row["robustness"] == "robust"


def test_a_version_only_one_run_records_is_the_arm_not_the_stack():
    """vLLM's version on the vllm arm's run only (its base ran the hf engine): the engine is the intervention."""
    assert alike.unlike(made({"vllm": "0.11.0"}), made(), timed=False) == (True, None)
    assert alike.unlike(made({"vllm": "0.11.0"}), made({"vllm": "0.10.2"}), timed=False) == (
        True, ("stack", "vllm 0.11.0", "vllm 0.10.2"))


def test_a_pair_made_by_different_mcgrpo_code_is_unlike():
    """The store key holds the config, not the code that trained it: a run kept from before an upgrade of mcgrpo,
    paired with one made after it, compares two trainers."""
    assert alike.unlike(made({"mcgrpo_code": "1a2b3c4d5e6f"}), made({"mcgrpo_code": "9f8e7d6c5b4a"}), timed=False) == (
        True, ("stack", "mcgrpo_code 1a2b3c4d5e6f", "mcgrpo_code 9f8e7d6c5b4a"))


def test_mcgrpos_code_hash_moves_with_its_training_code_not_its_analysis(tmp_path):
    for path, text in {"__init__.py": "", "train/loss.py": "SCALE = 1\n", "analysis/tables.py": "WIDTH = 1\n"}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    before = store.package_sha256(tmp_path)
    (tmp_path / "analysis" / "tables.py").write_text("WIDTH = 2\n")  # reads stored runs, trains none
    assert store.package_sha256(tmp_path) == before
    (tmp_path / "train" / "loss.py").write_text("SCALE = 2\n")
    assert store.package_sha256(tmp_path) != before and len(before) == 12


def test_pythons_and_mcgrpos_own_versions_are_not_compared():
    assert alike.unlike(made({"python": "3.12.1", "mcgrpo": "1.0.0"}), made(), timed=False) == (True, None)


def test_an_ingested_runs_machine_is_unknown_its_times_are_trls_on_another():
    ingested = made(hardware=H100, ingested={"folder": "trl-out"})
    assert alike.unlike(ingested, made(), timed=True) == (True, None)


# -- an ingested run: the stack its TRL folder records as having trained it --------------------------------------------

CARD = {"trl": "1.16.0", "transformers": "5.24.0", "torch": "2.13.0+cpu"}  # as ingest reads TRL 1.16's model card


def ingested(card=None, **checkpoints) -> dict:
    """run.json of an ingested run evaluated under STACK (its versions), its folder recording `checkpoints`
    ({'checkpoint-2': transformers_version of its config.json}) and its model card's versions (`card`, CARD's
    changed; False: no card), as ingest records them (ingested.trained_with)."""
    files = {f"{name}/config.json": {"transformers": version} for name, version in checkpoints.items()}
    if card is not False:
        files["README.md"] = {**CARD, **(card or {})}
    return made(ingested={"folder": "trl-out", "trained_with": files})


def test_an_ingested_run_trained_under_another_torch_than_its_pairs_is_unlike_though_evaluated_under_its():
    """Its run.json's versions are the stack that evaluated its checkpoints, its pair's: before, the pair read alike
    though TRL's card in its folder says it trained under torch 2.11. The words name the file the version is from."""
    old = ingested({"torch": "2.11.0+cu130", "transformers": "5.17.0"}, **{"checkpoint-2": "5.17.0"})
    contrast, row = checked(records(a3=old))
    words = ("seed 3's runs were made under different stacks (a: torch 2.11.0+cu130 in README.md; base: torch "
             "2.13.0+cpu)")
    assert row["alike_unlike"] == words and row["robustness"] == f"fragile: {words}"
    assert alike.unlike(made(), ingested(card=False, **{"checkpoint-2": "5.17.0"}), timed=False) == (
        True, ("stack", "transformers 5.24.0", "transformers 5.17.0 in checkpoint-2/config.json"))


def test_two_ingested_runs_trained_under_different_trl_are_unlike():
    assert alike.unlike(ingested(), ingested({"trl": "1.14.0"}), timed=False) == (
        True, ("stack", "trl 1.16.0 in README.md", "trl 1.14.0 in README.md"))
    assert alike.unlike(ingested(), ingested(), timed=True) == (True, None)


def test_an_ingested_run_whose_checkpoints_were_saved_under_different_transformers_is_unlike_its_pair():
    """A run resumed under another stack: its earlier checkpoint's config.json names the transformers that saved it.
    Unlike even beside a pair that disagrees the same way, as a run resumed under another torch is."""
    resumed = ingested(**{"checkpoint-2": "5.17.0", "checkpoint-4": "5.24.0"})
    words = ("transformers 5.17.0 in checkpoint-2/config.json, transformers 5.24.0 in checkpoint-4/config.json, "
             "transformers 5.24.0 in README.md")
    assert alike.unlike(resumed, made(), timed=False) == (True, ("stack", words, "transformers 5.24.0"))
    assert alike.unlike(made(), resumed, timed=False) == (True, ("stack", "transformers 5.24.0", words))
    assert alike.unlike(resumed, resumed, timed=False) == (True, ("stack", words, "transformers 5.24.0 in README.md"))
    card_says_other = ingested({"transformers": "5.25.0"}, **{"checkpoint-2": "5.24.0"})  # the last save's stack
    assert alike.unlike(card_says_other, made(), timed=False)[1] == (
        "stack", "transformers 5.24.0 in checkpoint-2/config.json, transformers 5.25.0 in README.md",
        "transformers 5.24.0")


def test_an_ingested_run_whose_folder_records_nothing_reads_as_before_its_evaluating_stack_compared():
    for silent in (made(ingested={"folder": "trl-out"}), made(ingested={"folder": "trl-out", "trained_with": {}})):
        assert alike.unlike(silent, made(), timed=False) == (True, None)
        evaluated_elsewhere = {**silent, "versions": {**STACK, "torch": "2.11.0+cu130"}}
        assert alike.unlike(evaluated_elsewhere, made(), timed=False) == (
            True, ("stack", "torch 2.11.0+cu130", "torch 2.13.0+cpu"))


def test_the_evaluating_stack_is_still_compared_where_the_folder_records_the_training_one():
    """Its evaluations were sampled and scored under run.json's versions: another torch there is another stack."""
    evaluated_elsewhere = {**ingested(), "versions": {**STACK, "torch": "2.11.0+cu130"}}
    assert alike.unlike(evaluated_elsewhere, made(), timed=False) == (
        True, ("stack", "torch 2.11.0+cu130", "torch 2.13.0+cpu"))


@pytest.mark.parametrize("card, pair, alike_", [
    ("2.13.0", "2.13.0+cu130", True),        # a PyPI CUDA wheel: TRL's card gives its distribution's version
    ("2.13.0", "2.11.0+cu130", False),
    ("2.13.0+cpu", "2.13.0+cu130", False),   # both name their build: the full strings
])
def test_a_card_that_names_no_torch_build_is_compared_by_its_release(card, pair, alike_):
    """Evaluated under the pair's torch: only the card's differs."""
    found = alike.unlike({**ingested({"torch": card}), "versions": {**STACK, "torch": pair}}, made({"torch": pair}),
                         timed=False)
    assert found == (True, None if alike_ else ("stack", f"torch {card} in README.md", f"torch {pair}"))


# -- what run.json records ---------------------------------------------------------------------------------------------

BASE_KEYS = {"mcgrpo", "mcgrpo_code", "torch", "transformers", "python"}  # what every run.json records


def _written(tmp_path, tiny, engine="hf", math_verify=None) -> dict:
    """run.json of a run written by the train job's writer, its one evaluation's samples scored by math-verify
    (`math_verify`: the verdicts) or not (null, as without the package)."""
    from mcgrpo.train.job import write_run
    from mcgrpo.train.trainer import RunLog
    from conftest import SMALL_STUDY
    cfg = studies.validate({**copy.deepcopy(SMALL_STUDY), "engine": {"name": engine}})
    samples = pd.DataFrame({"eval_index": [0, 0], "correct_math_verify": pd.array(math_verify or [None, None],
                                                                                  dtype="boolean")})
    log = RunLog(iterations=[{"iteration": 0, "train_seconds": 1.0, "train_cpu_seconds": 1.0}], samples=[samples])
    write_run(tmp_path / "run", study_config.run_config(cfg, "outcome", 1), 100, log, tiny[0], {})
    return store.read_json(tmp_path / "run" / "run.json")


def test_a_run_that_used_neither_vllm_nor_math_verify_keeps_exactly_its_keys(tmp_path, tiny):
    assert set(_written(tmp_path, tiny)["versions"]) == BASE_KEYS


def test_a_vllm_engine_runs_json_names_vllms_version(tmp_path, tiny, monkeypatch):
    vllm = types.ModuleType("vllm")  # vLLM does not install here: the module as the engine left it imported
    vllm.__version__ = "0.11.0"
    monkeypatch.setitem(sys.modules, "vllm", vllm)  # and gone after the test, for tests that look for vLLM
    versions = _written(tmp_path, tiny, engine="vllm")["versions"]
    assert versions["vllm"] == "0.11.0" and set(versions) == BASE_KEYS | {"vllm"}


def test_a_trl_arm_that_generated_with_vllm_names_vllms_version(tmp_path, tiny, monkeypatch):
    """A TRL arm whose GRPOConfig says use_vllm: TRL imported vLLM to generate, on mcgrpo's hf engine setting."""
    from mcgrpo.train.job import stack
    vllm = types.ModuleType("vllm")
    vllm.__version__ = "0.11.0"
    run = {"engine": {"name": "hf"}, "trl": {"version": "1.16.0"}}
    assert "vllm" not in stack(run)
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    assert stack(run)["vllm"] == "0.11.0" and "vllm" not in stack({"engine": {"name": "hf"}})


def test_math_verifys_version_is_recorded_where_it_scored_the_evaluations(tmp_path, tiny, monkeypatch):
    info = tmp_path / "site" / "math_verify-0.8.0.dist-info"  # the package's metadata, as pip installs it
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: math-verify\nVersion: 0.8.0\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    versions = _written(tmp_path, tiny, math_verify=[True, False])["versions"]
    assert versions["math_verify"] == "0.8.0" and set(versions) == BASE_KEYS | {"math_verify"}
    # installed but not scoring (its column null): no key
    assert set(_written(tmp_path / "again", tiny)["versions"]) == BASE_KEYS


@pytest.mark.parametrize("hardware, words", [(CPU, "CPU (AMD EPYC), 1 thread"), (H100, "NVIDIA H100 80GB HBM3")])
def test_machine_words_are_the_figures(hardware, words):
    assert alike.machine_words(hardware) == words


# -- a run resumed under another stack or on another machine -----------------------------------------------------------

def attempt(number, resumed_at=None, iterations=10, stack=None, machine=None) -> dict:
    """An attempts.json entry as the train job records it: what it trained with, where it resumed and stopped."""
    return {"attempt": number, "resumed_at": resumed_at, "iterations": iterations,
            "stack": {**STACK, **(stack or {})}, "machine": machine or CPU}


def test_a_run_resumed_under_another_torch_makes_its_pair_unlike_though_its_run_json_names_one():
    """run.json's versions are the last attempt's: a run preempted and resumed after an image rebuild trained under
    two stacks, and its pair (made under the last one) read alike."""
    resumed = made(attempts=[attempt(1, None, 6, {"torch": "2.11.0+cu130"}), attempt(2, 6, 18)])
    contrast, row = checked(records(a2=resumed))
    words = ("seed 2's runs were made under different stacks (a: torch 2.11.0+cu130 in attempt 1, torch 2.13.0+cpu "
             "in attempt 2; base: torch 2.13.0+cpu)")
    assert row["alike_unlike"] == words and row["robustness"] == f"fragile: {words}"
    flipped = alike.unlike(made(), resumed, timed=False)  # the base's run resumed: the words keep the arms' order
    assert flipped == (True, ("stack", "torch 2.13.0+cpu",
                              "torch 2.11.0+cu130 in attempt 1, torch 2.13.0+cpu in attempt 2"))


def test_a_run_resumed_on_another_gpu_fails_equal_time_only():
    resumed = made(hardware=H100, attempts=[attempt(1, None, 6), attempt(2, 6, 18, machine=H100)])
    _, timed = checked(records(a1=resumed), basis="time")
    assert timed["robustness"] == ("fragile: seed 1's runs were timed on different machines (a: CPU (AMD EPYC), 1 "
                                   "thread in attempt 1, NVIDIA H100 80GB HBM3 in attempt 2; base: CPU (AMD EPYC), "
                                   "1 thread)")
    _, counted = checked(records(a1=resumed), basis="tokens")
    assert counted["robustness"] == "robust"


def test_attempts_that_trained_nothing_the_run_kept_are_not_its_stack():
    """An attempt stopped before its first checkpoint, and one that wrote a finished run again from its last
    checkpoint, computed none of the run's numbers: another stack there changes nothing."""
    other = {"torch": "2.11.0+cu130"}
    lost = made(attempts=[attempt(1, None, None, other), attempt(2, None, 18)])
    rewritten = made(versions=other, attempts=[attempt(1, None, 18), attempt(2, 18, 18, other)])
    for run in (lost, rewritten):
        assert alike.unlike(run, made(), timed=True) == (True, None)
    assert alike.unlike(rewritten, made(other), timed=False) == (  # the stack that trained it, not run.json's
        True, ("stack", "torch 2.13.0+cpu", "torch 2.11.0+cu130"))


@pytest.mark.parametrize("starts, ends, kept", [
    ([None], [18], [1]),
    ([None, 6], [6, 18], [1, 2]),            # resumed from attempt 1's checkpoint
    ([None, 6, 6], [9, 6, 18], [1, 3]),      # attempt 2 stopped before its first checkpoint
    ([None, None], [5, 18], [2]),            # a TRL run: every attempt starts again from step 0
    ([None, 18], [18, 18], [1]),             # a finished run written again from its last checkpoint
    ([None, 6], [6, None], [1, 2]),          # the last attempt's end unrecorded (killed): kept
])
def test_the_attempts_a_run_kept(starts, ends, kept):
    attempts = [{"attempt": n + 1, "resumed_at": s, "iterations": e} for n, (s, e) in enumerate(zip(starts, ends))]
    assert [a["attempt"] for a in alike.kept(attempts)] == kept
