"""What a GRPOTrainer under the protocol is held to: the recipe's settings, its own copies of them, the optimizer its
args build, the model's generation defaults, its tokenizer and the policy it starts from.

`mcgrpo.integrations.trl.Protocol` reads these when it attaches and before and after every step: a script, a
callback or a reward function that changes one trains otherwise than the GRPOConfig the protocol checked and
run.json records, so each function here says, one line per setting, what differs and what is allowed (docs/trl.md,
"What the protocol does to a GRPOTrainer"). Read only: nothing here changes the trainer.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import torch

from mcgrpo.core.errors import ConfigError
from mcgrpo.core.trl_config import NOT_SETTINGS, SAMPLING


# GRPOConfig settings that a GRPOTrainer under the protocol must keep as the recipe maps them: the count (one
# optimizer step on one generated batch of P x G), the prompt stream (in order, rendered with the recipe's chat
# template arguments: other ones render other prompts, e.g. a model's thinking mode), the loss and what the policy
# samples (docs/trl.md, "A TRL arm"). Any other setting may differ, and is recorded.
KEPT = ("per_device_train_batch_size", "num_generations", "max_completion_length", "temperature", "top_p", "top_k",
        "lr_scheduler_type", "warmup_steps", "loss_type", "shuffle_dataset", "disable_dropout", "chat_template_kwargs")
ONE_BATCH = ("steps_per_generation", "num_iterations", "gradient_accumulation_steps")


def _value(args, key: str):
    value = getattr(args, key, None)
    value = getattr(value, "value", value)  # an enum (lr_scheduler_type) by its value
    return 0 if key == "top_k" and value is None else 0.0 if key == "warmup_ratio" and value is None else value


def _differs(found, expected) -> bool:
    if isinstance(found, (int, float)) and isinstance(expected, (int, float)) and not isinstance(found, bool):
        return not np.isclose(float(found), float(expected), rtol=1e-9, atol=0.0)
    return found != expected


def refusals(args, recipe: dict, bound: int) -> list[str]:
    """What a GRPOTrainer's `args` may not differ in from the recipe's GRPOConfig `recipe`, one line per key; and
    a max_steps under the protocol's bound (the run would end before B)."""
    wrong = [f"GRPOConfig {key}: {_value(args, key)}; allowed: 1 (an iteration of the protocol is one optimizer "
             f"step on one generated batch)" for key in ONE_BATCH if _value(args, key) != 1]
    wrong += [f"GRPOConfig {key}: {_value(args, key)!r}; allowed: {recipe.get(key)!r}, as the recipe maps it (the "
              f"arms of a study are compared on the same batch, prompts in order and as rendered, loss and sampling; "
              f"docs/trl.md)" for key in KEPT if _differs(_value(args, key), recipe.get(key))]
    wrong += [f"GRPOConfig {key}: {_value(args, key)!r}; allowed: {expected!r} (TRL's default; the recipe samples "
              f"with it)" for key, expected in SAMPLING.items() if hasattr(args, key)
              and _differs(_value(args, key), expected)]
    if 0 < args.max_steps < bound:
        wrong.append(f"GRPOConfig max_steps: {args.max_steps}; allowed: at least {bound} (the steps to horizon x B "
                     f"at one token per completion) or setup.args's: the protocol stops the run at B")
    return wrong


# GRPOTrainer's own copies of GRPOConfig settings, made when it is built and read by its steps instead of `args`
# (trl 1.16's GRPOTrainer.__init__): its attribute -> the GRPOConfig key it copies
COPIES = {**{key: key for key in ("num_generations", "max_completion_length", "temperature", "top_p", "top_k", "min_p",
                                   "repetition_penalty", "use_vllm", "loss_type", "scale_rewards", "num_iterations",
                                   "importance_sampling_level", "mask_truncated_completions", "top_entropy_quantile",
                                   "shuffle_dataset", "beta", "multi_objective_aggregation",
                                   "off_policy_mask_threshold", "entropy_coef", "use_adaptive_entropy",
                                   "use_transformers_continuous_batching")},
          "epsilon_low": "epsilon"}
COPIED = ("GRPOTrainer copies its GRPOConfig when it is built and samples and steps by the copy: set it in the "
          "GRPOConfig (setup.args) before building the trainer, never on the trainer")


def copies_differing(trainer) -> list[str]:
    """The trainer's own copies of its settings (COPIES, epsilon_high, the reward weights and the generation_config
    it samples with) that differ from its `args`, one line each: a script that sets trainer.num_iterations,
    trainer.reward_weights or trainer.generation_config.temperature after building it trains otherwise than the args
    the protocol checks and run.json records. entropy_coef is TRL's to change where use_adaptive_entropy is set."""
    args = trainer.args
    given = list(args.reward_weights or [])
    expected = {**{name: getattr(args, key, None) for name, key in COPIES.items()
                   if not (name == "entropy_coef" and args.use_adaptive_entropy)},
                "epsilon_high": args.epsilon if args.epsilon_high is None else args.epsilon_high,
                "chat_template_kwargs": args.chat_template_kwargs or {},
                "reward_weights": _float32(given + [1.0] * (len(trainer.reward_funcs) - len(given)))}  # 1: TRL's
    found = {name: getattr(trainer, name, None) for name in expected} | {"reward_weights": _float32(
        trainer.reward_weights)}
    if not trainer.use_vllm:  # vLLM samples with the copies above; transformers with the generation_config
        expected |= {f"generation_config.{k}": v for k, v in _generation_config(trainer).items()}
        found |= {f"generation_config.{k}": v for k, v in trainer.generation_config.to_dict().items()}
    return [f"GRPOTrainer {name}: {found.get(name)!r}; allowed: {expected.get(name)!r}, as its args say ({COPIED})"
            for name in sorted({*expected, *found}) if _differs(found.get(name), expected.get(name))]


DEFAULTED = ("transformers samples by it wherever the trainer's generation_config leaves a setting unset "
             "(min_new_tokens, no_repeat_ngram_size, ...): the model's generation_config as loaded, sampling set in "
             "the GRPOConfig (setup.args), which the protocol checks and run.json records")


def sampling_defaults(model) -> dict:
    """The model's own generation_config, as a dict: the defaults transformers fills what a generate call's
    generation_config leaves unset from."""
    return model.generation_config.to_dict()


def defaults_differing(trainer, kept: dict) -> list[str]:
    """The trainer's model's generation_config where it differs from `kept` (the study's initial model's, read
    before the script ran), one line per setting: a script that sets min_new_tokens or no_repeat_ngram_size on the
    model, before building the trainer or in a callback, samples otherwise than the args say, and nothing else
    records it."""
    found = sampling_defaults(trainer.accelerator.unwrap_model(trainer.model))
    return [f"GRPOTrainer model.generation_config.{key}: {found.get(key)!r}; allowed: {kept.get(key)!r}, the study's "
            f"initial model's ({DEFAULTED})" for key in sorted({*found, *kept})
            if _differs(found.get(key), kept.get(key))]


OPTIMIZED = ("set optim, learning_rate, adam_beta1, adam_beta2, adam_epsilon and weight_decay in the GRPOConfig "
             "(setup.args), where run.json records them; never an optimizer or learning rate of the trainer's own "
             "(optimizers=, a subclass's create_optimizer, a callback that sets param_groups' lr)")


def optimizer_differing(trainer) -> list[str]:
    """The optimizer the trainer steps with, once it has one (given as optimizers=, else built at train()), where it
    is not the one its args build (Trainer.get_optimizer_cls_and_kwargs: optim's class, learning_rate, Adam's
    settings; weight_decay or 0 by parameter group), one line per setting: the recipe's schedule is constant, so
    every step's learning rate is the args' too. An optimizer of the script's, or a learning rate a callback sets,
    would train otherwise than the args the protocol checks and run.json records, with the log's learning rate the
    scheduler's, not the one stepped with."""
    optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate's wrapper: what it steps
    if optimizer is None:
        return []
    cls, kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, trainer.model)
    if type(optimizer) is not cls:
        return [f"GRPOTrainer optimizer: {type(optimizer).__name__}; allowed: {cls.__name__}, as its args build it "
                f"({OPTIMIZED})"]
    wrong = {}
    for group in optimizer.param_groups:
        expected = {**kwargs, "weight_decay": group.get("weight_decay") if group.get("weight_decay") == 0.0
                    else trainer.args.weight_decay}
        wrong |= {key: group[key] for key, value in expected.items() if key in group and _differs(group[key], value)
                  and key not in wrong}
    return [f"GRPOTrainer optimizer {key}: {value!r}; allowed: {kwargs.get(key, trainer.args.weight_decay)!r}, as "
            f"its args build it ({OPTIMIZED})" for key, value in wrong.items()]


def _float32(values) -> list[float]:
    """Reward weights as GRPOTrainer holds them (float32), as a list."""
    return torch.as_tensor(values, dtype=torch.float32).tolist()


def _generation_config(trainer) -> dict:
    """The generation_config GRPOTrainer builds from its args (trl 1.16, without vLLM), as a dict."""
    from transformers import GenerationConfig
    args, tokenizer = trainer.args, trainer._tokenizer
    return GenerationConfig(max_new_tokens=args.max_completion_length, do_sample=True,
                            pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                            eos_token_id=trainer.eos_token_ids, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
                            cache_implementation=args.cache_implementation, **(args.generation_kwargs or {}),
                            disable_compile=True).to_dict()


def settings_differing(args, recipe: dict) -> dict:
    """Every other setting of `recipe` (key -> value: the recipe's GRPOConfig, all of it where `settings` made it,
    TRL's defaults included) that `args` changes: key -> {trainer, recipe} (run.json)."""
    return {key: {"trainer": _plain(_value(args, key)), "recipe": _plain(expected)} for key, expected in recipe.items()
            if key not in NOT_SETTINGS and key not in KEPT and key not in ONE_BATCH and not key.startswith("_")
            and _differs(_value(args, key), expected)}


def settings_changed(args, kept: dict) -> list[str]:
    """The GRPOConfig settings of `args` changed since the protocol attached (`kept`: settings()), one line each: the
    trainer reads some at every step (max_grad_norm), while run.json records them as they were when it attached, so a
    callback or reward function that sets one mid-run trains otherwise than the record says."""
    now = settings(args)
    return [f"GRPOConfig {key}: {short(now.get(key))}, set after the trainer was built ({short(value)} then); allowed: "
            f"the GRPOConfig as the trainer was built with it (setup.args, where run.json records a change)"
            for key, value in kept.items() if _differs(now.get(key), value)]


def settings(args) -> dict:
    """Every setting of a GRPOConfig, key -> value (its own copy): what the recipe's GRPOConfig says, where it sets a
    key and where it leaves TRL's default (neftune_noise_alpha, top_entropy_quantile, use_vllm, ...), each of which
    changes what an arm trains as much as the learning rate does."""
    return {f.name: copy.deepcopy(_value(args, f.name)) for f in dataclasses.fields(args) if f.init}


def _plain(value):
    """`value` as run.json can hold it: itself where JSON has it, else its repr (an AcceleratorConfig)."""
    return value if isinstance(value, (type(None), bool, int, float, str, list, dict)) else repr(value)


def initial(model, tokenizer) -> tuple[torch.Tensor, dict]:
    """What a run starts from, to hold a script's GRPOTrainer to: the model's logits on a fixed input (a wrapper that
    leaves its outputs as they were, as PEFT's LoRA does at the start, gives the same) and what the tokenizer reads
    and writes prompts by (vocabulary, chat template, special tokens)."""
    training, ids = model.training, torch.arange(1, 17, device=model.device)[None] % model.config.vocab_size
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float().cpu()
    model.train(training)
    return logits, reading(tokenizer)


def reading(tokenizer) -> dict:
    """What a tokenizer reads and writes prompts by: its vocabulary, chat template and special tokens."""
    return {"vocabulary": tokenizer.get_vocab(), "chat_template": getattr(tokenizer, "chat_template", None),
            **{f"{t}_token_id": getattr(tokenizer, f"{t}_token_id", None) for t in ("bos", "eos", "pad")}}


def tokenizer_differing(trainer, kept: dict) -> list[str]:
    """The trainer's tokenizer where it reads otherwise than `kept` (the study's, as same_start checked it), one line
    per key: a callback or reward function that sets its chat template mid-run renders the stream's prompts
    otherwise than every other arm's."""
    now = reading(trainer.processing_class)
    return [f"GRPOTrainer tokenizer {key}: changed since the trainer was built; allowed: setup.tokenizer as loaded "
            f"(the study's, which every arm's prompts and evaluation are read by)" for key in kept
            if now[key] != kept[key]]


def weights(model) -> torch.Tensor:
    """Each parameter's sum (accumulated in float64, no copy of the weights), on the CPU: what a change of them in
    place changes."""
    with torch.no_grad():
        return torch.stack([p.sum(dtype=torch.float64) for p in model.parameters()]).cpu()


def same_start(trainer, start: tuple[torch.Tensor, dict]) -> None:
    """Refuse a GRPOTrainer that starts from another policy than the study's initial model `start` (initial(): taken
    before the script ran): another model, a checkpoint, weights the script changed, or another tokenizer would make
    the contrasts compare another start, not the intervention."""
    logits, tokenizer = start
    model = trainer.accelerator.unwrap_model(trainer.model)
    now, read = initial(model, trainer.processing_class)
    if now.shape != logits.shape or not torch.allclose(now, logits, rtol=1e-3, atol=1e-4):
        apart = f"by up to {float((now - logits).abs().max()):.3g}" if now.shape == logits.shape else "in shape"
        raise ConfigError(f"trainer(setup) returned a GRPOTrainer whose model is not the study's initial policy (its "
                          f"logits on a fixed input differ {apart}); allowed: setup.model as loaded (a wrapper that "
                          f"leaves its outputs as they were, as PEFT's LoRA does at the start, is fine)")
    differs = next((key for key in tokenizer if read[key] != tokenizer[key]), None)
    if differs:
        raise ConfigError(f"trainer(setup) returned a GRPOTrainer whose tokenizer is not the study's: its {differs} "
                          f"differs; allowed: setup.tokenizer as loaded (the study's, which every arm's prompts and "
                          f"evaluation are read by)")


def short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
