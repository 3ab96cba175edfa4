"""The training blocks' rules that the JSON Schema cannot express: model shape, selectors, credit rules and
update options against the recipe, and every plugin an arm names (installed, its protocol, its options), checked
before any job runs (one line per problem, naming the key)."""

from __future__ import annotations

from mcgrpo.core import plugins
from mcgrpo.core.config import config_hash, run_config
from mcgrpo.core.errors import ConfigError
from mcgrpo.core import trl_config, warmup
from mcgrpo.train.credit import problems as credit_problems


def problems(cfg: dict) -> list[str]:
    recipe, tiny = cfg["recipe"], cfg["model"]["tiny"]
    found = []
    if tiny["hidden_size"] % tiny["num_heads"]:
        found.append(f"config key model.tiny.hidden_size: {tiny['hidden_size']} is not divisible by "
                     f"model.tiny.num_heads ({tiny['num_heads']})")
    pool = cfg["task"]["pool"]["size"]  # None: every qualifying problem of a file, counted by prepare-data
    for arm, spec in cfg["arms"].items():
        for kind, name, options, key in plugins.uses(spec, recipe, f"arms.{arm}"):
            if kind != "credit":  # credit blocks: below, with the calibration's and the controls'
                found += plugins.check(kind, name, options, key)
        for name, rule in (spec.get("selection") or {}).items():
            if name not in plugins.BUILTIN["selection"]:
                continue
            if "candidates" in rule and not rule["keep"] <= recipe["prompts_per_iteration"] <= rule["candidates"]:
                found.append(f"config key arms.{arm}.selection.{name}: needs keep ({rule['keep']}) <= "
                             f"recipe.prompts_per_iteration ({recipe['prompts_per_iteration']}) <= "
                             f"candidates ({rule['candidates']})")
            elif pool is not None and rule.get("candidates", 0) > pool:
                found.append(f"config key arms.{arm}.selection.{name}.candidates: {rule['candidates']} candidates "
                             f"cannot be drawn from a pool of {pool} (task.pool.size); allowed: at most {pool}")
            else:
                found += _selects_nothing(f"arms.{arm}.selection.{name}", name, rule, recipe["prompts_per_iteration"])
                found += _never_chooses(cfg, arm)
    credits = {f"arms.{arm}.credit": spec.get("credit", {}) for arm, spec in cfg["arms"].items()}
    credits["budget.calibration_credit"] = cfg["budget"]["calibration_credit"]
    tests = cfg.get("gradient_tests") or {}
    credits.update({f"gradient_tests.controls.{name}": c for name, c in tests.get("controls", {}).items()})
    along = cfg["evaluation"].get("alignment") or {}
    credits.update({f"{plugins.ALIGNMENT_CONTROLS}.{name}": c for name, c in along.get("controls", {}).items()})
    found += gradient_test_problems(cfg, tests) + alignment_problems(cfg, along) + verifier_problems(cfg)
    found += [p for key, credit in credits.items() for p in credit_problems(key, credit, recipe, cfg["task"])]
    found += same_arms(cfg) + trl_config.problems(cfg)
    batch = recipe["prompts_per_iteration"] * recipe["group_size"]
    for arm, spec in cfg["arms"].items():
        if (spec.get("update") or {}).get("minibatches", 1) > batch:
            found.append(f"config key arms.{arm}.update.minibatches: {spec['update']['minibatches']} minibatches "
                         f"cannot be cut from {batch} completions; allowed: at most {batch}")
    return found


FILTERS = warmup.FILTERS  # Filter: candidates, keep, target


def _selects_nothing(key: str, name: str, rule: dict, per_iteration: int) -> list[str]:
    """A filter that cannot choose is the prompt stream, or its random control, under another name: with as many
    candidates as prompts per iteration it trains every candidate, which are the stream's own next prompts; with keep
    0 (a predicting filter) it keeps none for its prediction and draws them all at random, as random_choice does."""
    if name not in FILTERS:
        return []
    if rule["candidates"] == per_iteration:
        return [f"config key {key}.candidates: {per_iteration} candidates for recipe.prompts_per_iteration "
                f"({per_iteration}) leaves nothing to choose: the arm trains every candidate, the prompt stream's own "
                f"next prompts, as an arm without selection does; allowed: more than {per_iteration}"]
    if rule["keep"] == 0 and name != "random_choice":
        return [f"config key {key}.keep: 0 keeps no candidate for its prediction and draws all "
                f"{per_iteration} at random, as random_choice does; allowed: 1 to {per_iteration}, or random_choice"]
    return []


def _never_chooses(cfg: dict, arm: str) -> list[str]:
    """In an equal-iteration study every run is read after B = budget.iterations iterations (before: the count bases
    at the smaller count), so a filter whose warm-up lasts B iterations or more never trains on a prompt it chose
    before any reading: the arm is the prompt stream under its name, and its contrasts would read the stream (or the
    predictor's overhead, at equal time) as the filter's effect. A token budget's iterations are known only after
    training: there the analysis says so (mcgrpo.analysis.informative)."""
    iterations, spec = cfg["budget"].get("iterations"), warmup.of(cfg, arm)
    if iterations is None or spec is None or spec.acted(iterations):
        return []
    most = (iterations - 1) * spec.per_iteration
    return [f"config key {spec.key}: {spec.prompts} prompts of warm-up take the stream's first {spec.iterations} "
            f"iteration{'' if spec.iterations == 1 else 's'} of {spec.per_iteration} prompts "
            f"(recipe.prompts_per_iteration) as they come, and every run is read after {iterations} iteration"
            f"{'' if iterations == 1 else 's'} (budget.iterations): the filter would never train on a prompt it chose "
            f"before the readings, and every contrast with arm {arm} would read the prompt stream as its effect; "
            f"allowed: at most {most} (so that at least the last of the {iterations} iterations trains on prompts it "
            f"chose), or budget.iterations above {spec.iterations}"]


def verifier_problems(cfg: dict) -> list[str]:
    """verifier.rule math_verify needs its package before any job runs, not at the first reward."""
    import importlib.util
    if (cfg.get("verifier") or {}).get("rule") == "math_verify" and importlib.util.find_spec("math_verify") is None:
        return ["config key verifier.rule: math_verify needs the math-verify package, which is not installed: "
                "pip install 'mcgrpo[math]' (or 'math-verify>=0.7'); allowed without it: whole_box, paper"]
    return []


def gradient_test_problems(cfg: dict, tests: dict) -> list[str]:
    """The gradient tests measure arms by their credit rule on fixed batches: named arms must exist and differ
    from the controls' names, and an arm that selects its prompts has no credit of its own to measure."""
    arms, found = cfg["arms"], []
    for i, arm in enumerate(tests.get("arms", [])):
        if arm not in arms:
            found.append(f"config key gradient_tests.arms[{i}]: {arm!r} is not an arm; allowed: {', '.join(arms)}")
        elif arms[arm].get("selection"):
            found.append(f"config key gradient_tests.arms[{i}]: arm {arm!r} selects prompts, which fixed batches "
                         f"cannot measure; allowed: arms without a selection block")
        elif own := _own_verifier(cfg, arm):
            found.append(f"config key gradient_tests.arms[{i}]: arm {arm!r} is rewarded by its own verifier "
                         f"({own}), and the gradient tests measure every arm on the same "
                         f"rollouts, rewarded by the study's ({_study_verifier(cfg)!r}): its measures would be of a "
                         f"reward it does not train on; allowed: arms rewarded by recipe.reward_verifier (measure "
                         f"this one along training: evaluation.alignment)")
    found += _control_names("gradient_tests", tests, arms)
    if tests.get("enabled", True) and tests and cfg["budget"].get("iterations") is not None:
        found.append("config key gradient_tests: its prediction sets per-token efficiency beside the equal-tokens "
                     "contrast, which an equal-iteration study (budget.iterations) does not have; allowed: leave it "
                     "out and measure alignment along training with evaluation.alignment")
    return found


def _study_verifier(cfg: dict) -> str:
    return (cfg.get("recipe") or {}).get("reward_verifier", "default")


def _own_verifier(cfg: dict, arm: str) -> str:
    """'<its key>: <name>' of the verifier an arm's own recipe rewards it by (plugins.reward_verifier), where it is
    not the study's; '' elsewhere."""
    name, key = plugins.reward_verifier(cfg["arms"][arm], cfg.get("recipe") or {}, f"arms.{arm}")
    return f"{key}: {name!r}" if key != plugins.STUDY_VERIFIER and name != _study_verifier(cfg) else ""


def _control_names(key: str, block: dict, arms: dict) -> list[str]:
    found = [f"config key {key}.controls.{name}: the name is taken by an arm; allowed: a name that is not an arm's"
             for name in block.get("controls", {}) if name in arms or name == "outcome"]
    return found + _shuffled_values(key, block, arms)


def _shuffled_values(key: str, block: dict, arms: dict) -> list[str]:
    """A shuffled Monte-Carlo control permutes the measured arm's own credit (paper 3.1, H.3): its V(prompt)
    (`prompt_value`) must be the measured Monte-Carlo arms', or it shuffles another credit's magnitudes."""
    measured = {(arms[a].get("credit") or {})["monte_carlo"].get("prompt_value") for a in block.get("arms", [])
                if a in arms and "monte_carlo" in (arms[a].get("credit") or {})}
    found = []
    for name, control in block.get("controls", {}).items():
        inner = (control or {}).get("shuffled") or {}
        if "monte_carlo" in inner and measured and inner["monte_carlo"].get("prompt_value") not in measured:
            allowed = ", ".join("absent (the group mean)" if v is None else str(v) for v in sorted(measured, key=str))
            found.append(f"config key {key}.controls.{name}.shuffled.monte_carlo.prompt_value: "
                         f"{inner['monte_carlo'].get('prompt_value')} is not the measured arms' V(prompt), so the "
                         f"control would shuffle another credit; allowed: {allowed}")
    return found


def alignment_problems(cfg: dict, along: dict) -> list[str]:
    """The gradient tests along training measure a run's own credit rule at its policy: the arms must exist and
    not select prompts (fixed batches cannot measure a selector), the seeds must be the study's."""
    if not along:
        return []
    arms, key, found = cfg["arms"], "config key evaluation.alignment", []
    for i, arm in enumerate(along["arms"]):
        if arm not in arms:
            found.append(f"{key}.arms[{i}]: {arm!r} is not an arm; allowed: {', '.join(arms)}")
        elif arms[arm].get("selection"):
            found.append(f"{key}.arms[{i}]: arm {arm!r} selects prompts, which fixed batches cannot measure; "
                         f"allowed: arms without a selection block")
    found += [f"{key}.seeds[{i}]: {seed} is not a seed of the study; allowed: {', '.join(map(str, cfg['seeds']))}"
              for i, seed in enumerate(along.get("seeds") or []) if seed not in cfg["seeds"]]
    return found + _control_names("evaluation.alignment", along, arms)


def same_arms(cfg: dict) -> list[str]:
    """An arm that trains exactly what an earlier arm trains (its runs would be the same stored runs, and the
    contrast between them zero by construction; or, written another way, other runs of the same training, whose
    contrast is noise that an equivalence or non-inferiority test would confirm) is a name, not an arm. Compared
    as trained (`trained`): an absent credit block is outcome-only, an option left at its default is the same
    option written out, an arm's recipe keys are compared merged into the recipe, and being measured along
    training (evaluation.alignment) trains nothing."""
    seen: dict[str, str] = {}
    unmeasured = {**cfg, "evaluation": {k: v for k, v in cfg["evaluation"].items() if k != "alignment"}}
    found = []
    for arm in cfg["arms"]:
        try:
            run = run_config(unmeasured, arm, cfg["seeds"][0])
            written = {k: v for k, v in run["arm_config"].items() if k != "recipe"}
            run["arm_config"] = trained(written, run["recipe"]["completion_limit"])
        except ConfigError:  # a plugin that does not load: `problems` names it (plugins.check)
            continue
        other = seen.setdefault(config_hash(run), arm)
        if other != arm:
            found.append(f"config key arms.{arm}: trains exactly what arms.{other} trains (the same credit, "
                         f"selection, lr, update and recipe{_written_apart(cfg, arm, other)}); "
                         f"allowed: arms that differ in what they train")
    return found


def trained(spec: dict, limit: int) -> dict:
    """An arm's block (less its recipe) as it trains: the credit rule and selector with every option at its
    default written out (outcome-only where there is no credit block, no selector where the selection block is
    empty, and without the options it never reads), Monte-Carlo and critic cuts as the positions they give at the
    completion limit `limit`, and the learning rate's scale and schedule at their defaults where not given."""
    out = {**spec, "credit": _trained_credit(spec.get("credit"), limit), "lr": {**LR, **(spec.get("lr") or {})}}
    selection = {name: {k: v for k, v in _with_defaults("selection", name, options, "selection").items()
                        if (name, k) not in UNUSED} for name, options in (spec.get("selection") or {}).items()}
    return {**out, "selection": selection} if selection else {k: v for k, v in out.items() if k != "selection"}


LR = {"scale": 1.0, "schedule": "constant"}  # an arm without an lr block trains at the recipe's lr, constant
UNUSED = {("random_choice", "keep"), ("random_choice", "target")}  # the control draws uniformly: neither is read
CUT_RULES = ("monte_carlo", "critic")  # built-ins whose cuts give their positions where none are given


def _trained_credit(block: dict | None, limit: int) -> dict:
    from mcgrpo.train.credit.monte_carlo import cut_positions
    (name, options), = (block or {"outcome": {}}).items()
    if name == "shuffled":
        return {name: _trained_credit(options, limit)}
    options = _with_defaults("credit", name, options, "credit")
    if name in CUT_RULES:
        cuts = options.pop("cuts", None)
        options["positions"] = options.get("positions") or cut_positions(limit, cuts)
    return {name: options}


def _with_defaults(kind: str, name: str, options: dict | None, key: str) -> dict:
    return {**plugins.defaults(plugins.load(kind, name, key)), **(options or {})}


def _written_apart(cfg: dict, arm: str, other: str) -> str:
    """Where two arms that train the same are written apart: '; written apart only in <keys>, which as given change
    nothing they train' (the alignment measurement among them); '' where they are written alike."""
    mine, theirs = ({k: v for k, v in cfg["arms"][a].items() if k != "description"} for a in (arm, other))
    keys = [f"arms.{arm}.{k}" for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
    measured = (cfg["evaluation"].get("alignment") or {}).get("arms") or []
    if (arm in measured) != (other in measured):
        keys.append("evaluation.alignment.arms (a measurement along training)")
    return f"; written apart only in {', '.join(keys)}, which as given change nothing they train" if keys else ""
