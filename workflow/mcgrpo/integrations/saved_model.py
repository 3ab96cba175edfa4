"""Which model an ingested TRL folder trained: each checkpoint's config.json, generation_config.json and saved
tokenizer against the study's.

Ingest evaluates every checkpoint as the arm's model with the study's tokenizer, beside the arms that start from the
study's initial model. A run of another model (another size or family, another vocabulary or chat template) would be
compared with them without a word, so its checkpoints say what they are: the architecture in config.json (every
field that defines the computation, not where or how it was saved: BOOKKEEPING) and, where TRL saved its processing
class into the checkpoint (it does into every one), the tokenizer's vocabulary, special tokens and chat template;
and the generation defaults the rollouts were sampled with (generation_config.json: `generation_differences`).
Only these small files are read, never weights; a tokenizer is loaded once per distinct set of its files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from mcgrpo.core.errors import DataError

# config.json fields that say how a model was saved or run, not what it computes
BOOKKEEPING = {"_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache", "output_attentions",
               "output_hidden_states", "return_dict"}
# what save_pretrained writes for a tokenizer (any one of them: the checkpoint holds a tokenizer)
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "tokenizer.model", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "chat_template.jinja",
                   "chat_template.json")
ABSENT = "<absent>"


def saved_model_differences(checkpoints: dict[int, Path], model, tokenizer) -> tuple[list[tuple[str, str]],
                                                                                   list[str]]:
    """((key, line) per difference, lines for run.json's ingested.unrecovered): each checkpoint's config.json
    against `model`'s config (key `model`), its saved tokenizer against `tokenizer` (key `tokenizer`). A checkpoint
    without config.json is refused (no model to evaluate); one without a tokenizer is said, not a difference."""
    found = config_differences(checkpoints, model, tokenizer)
    generation_found, generation_unsaid = generation_differences(checkpoints, model, tokenizer)
    tokenizer_found, unsaid = tokenizer_differences(checkpoints, tokenizer)
    return found + generation_found + tokenizer_found, generation_unsaid + unsaid


def config_differences(checkpoints: dict[int, Path], model, tokenizer) -> list[tuple[str, str]]:
    """(`model`, line) per config field whose value some checkpoints' config.json gives otherwise than the study's
    initial model (`model.config`); each distinct file read once, as transformers reads it (AutoConfig: its class's
    defaults filled in, older names brought to the current ones), as the study's model's was."""
    return _file_differences(checkpoints, checkpoints, "config.json", "model", _flat(_study_config(model)),
                             lambda path: _flat(_read_config(path)), tokenizer)


GENERATION = "generation_config.json"


def generation_differences(checkpoints: dict[int, Path], model, tokenizer) -> tuple[list[tuple[str, str]],
                                                                                    list[str]]:
    """((`generation_config`, line) per field some checkpoints' generation_config.json gives otherwise than the
    study's initial model's generation config, the line for checkpoints that saved none). transformers fills every
    sampling setting that TRL's GRPOTrainer leaves unset (min_p at the recipe's None, no_repeat_ngram_size,
    typical_p, suppress_tokens, ...) from the trained model's generation config, which save_pretrained writes into
    every checkpoint: a run of a model with other generation defaults sampled its rollouts otherwise than the
    study's arms, whatever training_args.bin says (transformers 5.24, TRL 1.16)."""
    saved = {step: path for step, path in checkpoints.items() if (path / GENERATION).is_file()}
    study = _generation(model.generation_config.to_dict())
    found = _file_differences(saved, checkpoints, GENERATION, "generation_config", study,
                              lambda path: _generation(_read_generation(path)), tokenizer)
    none = sorted(set(checkpoints) - set(saved))
    return found, [f"generation_config: {_named(none, checkpoints)} saved no {GENERATION} (save_pretrained writes "
                   f"one into every checkpoint: a folder copied without it), so that they sampled with the study's "
                   f"initial model's generation defaults is the user's word"] if none else []


def _generation(config: dict) -> dict:
    """A generation config's fields that say how it samples, not which transformers wrote it."""
    return {k: v for k, v in config.items() if k != "transformers_version" and not k.startswith("_")}


def _read_generation(path: Path) -> dict:
    """generation_config.json as transformers reads it (its defaults filled in)."""
    from transformers import GenerationConfig
    return _read_saved(path, GenerationConfig.from_pretrained, "the generation defaults the run sampled with")


def _file_differences(checkpoints: dict[int, Path], every: dict[int, Path], name: str, key: str, study: dict, read,
                      tokenizer) -> list[tuple[str, str]]:
    """(`key`, line) per field whose value some `checkpoints`' file `name` (each distinct file read once, by `read`)
    gives otherwise than `study`, the checkpoints named among `every`; TRL's own pad id is no difference."""
    by_file: dict[bytes, list[int]] = {}
    for step, checkpoint in sorted(checkpoints.items()):
        by_file.setdefault(_config_bytes(checkpoint / name, step), []).append(step)
    by_value: dict[tuple[str, str], list[int]] = {}
    for steps in by_file.values():
        saved = read(checkpoints[steps[0]] / name)
        for field in sorted(set(study) | set(saved)):
            value = saved.get(field, ABSENT)
            if value != study.get(field, ABSENT) and not _trl_pad(field, study.get(field, ABSENT), value, tokenizer):
                by_value.setdefault((field, repr(value)), []).extend(steps)
    return [(key, f"{field} {value} ({name} of {_named(steps, every)}); the study's initial model's "
                  f"{study.get(field, ABSENT)!r}") for (field, value), steps in by_value.items()]


def _study_config(model) -> dict:
    """The study's model's config as its config.json would say it: a model built in memory (the tiny one) names no
    architectures until save_pretrained writes its class."""
    config = model.config.to_dict()
    config["architectures"] = config.get("architectures") or [type(model).__name__]
    return config


def _trl_pad(name: str, study, saved, tokenizer) -> bool:
    """Whether `saved` is the pad id TRL itself gives a model whose config has none: GRPOTrainer mirrors its
    tokenizer's pad token (the eos token where there is none) onto the model's config."""
    if name.rsplit(".", 1)[-1] != "pad_token_id" or study not in (None, ABSENT):
        return False
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return saved == pad


def _config_bytes(path: Path, step: int) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found; allowed: every checkpoint as TRL saves it, with its config.json "
                        f"(the architecture of the model checkpoint-{step} holds, held to the study's initial "
                        f"model's: a checkpoint without it cannot be evaluated)") from None


def _read_config(path: Path) -> dict:
    """config.json as transformers reads it (no weights)."""
    from transformers import AutoConfig
    return _read_saved(path, AutoConfig.from_pretrained, "the model checkpoint-* holds, which ingest evaluates")


def _read_saved(path: Path, load, what: str) -> dict:
    """File `path` of a checkpoint as transformers' `load` (a from_pretrained of its folder) reads it, as a dict."""
    try:
        return load(path.parent).to_dict()
    except (OSError, ValueError, KeyError) as e:
        raise DataError(f"{path}: not read by transformers ({type(e).__name__}: {e}); allowed: a model's "
                        f"{path.name} as save_pretrained writes it ({what})") from e


def _flat(config: dict, prefix: str = "") -> dict:
    """{dotted field: value} of a config's fields, nested configs (rope_parameters, text_config) by field, the
    bookkeeping and private ones left out."""
    out = {}
    for key, value in config.items():
        if key in BOOKKEEPING or key.startswith("_"):
            continue
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def tokenizer_differences(checkpoints: dict[int, Path], tokenizer) -> tuple[list[tuple[str, str]], list[str]]:
    """((`tokenizer`, line) per property some checkpoints' saved tokenizer gives otherwise than the study's
    `tokenizer`: its vocabulary, special tokens, chat template; the line for checkpoints that saved none)."""
    groups: dict[str, list[int]] = {}
    none = []
    for step, checkpoint in sorted(checkpoints.items()):
        digest = _tokenizer_digest(checkpoint)
        if digest is None:
            none.append(step)
        else:
            groups.setdefault(digest, []).append(step)
    by_value: dict[tuple[str, str], tuple[str, list[int]]] = {}
    study = _tokenizer_properties(tokenizer)
    for steps in groups.values():
        for name, value, theirs in _compare(checkpoints[steps[0]], study):
            by_value.setdefault((name, value), (theirs, []))[1].extend(steps)
    found = [("tokenizer", f"{name} {value} (the tokenizer saved in {_named(steps, checkpoints)})"
                           + (f"; the study's tokenizer's {theirs}" if theirs else ""))
             for (name, value), (theirs, steps) in by_value.items()]
    unsaid = [f"tokenizer: {_named(none, checkpoints)} saved none (TRL saves its processing class into every "
              f"checkpoint: a folder copied without it), so that they trained with the study's tokenizer and chat "
              f"template is the user's word, checked only through the prompt tokens"] if none else []
    return found, unsaid


def _tokenizer_digest(checkpoint: Path) -> str | None:
    """sha256 of the tokenizer files a checkpoint holds (None: it holds none)."""
    paths = [checkpoint / name for name in TOKENIZER_FILES if (checkpoint / name).is_file()]
    paths += sorted((checkpoint / "additional_chat_templates").glob("*"))
    if not paths:
        return None
    digest = hashlib.sha256()
    for path in paths:
        digest.update(f"{path.name}\0".encode())
        digest.update(path.read_bytes() if path.is_file() else b"")
    return digest.hexdigest()


def _compare(checkpoint: Path, study: dict) -> list[tuple[str, str, str]]:
    """(property, the checkpoint's value, the study's) for each property of the tokenizer saved in `checkpoint`
    that is not the study's; one line naming why where it cannot be read (nothing of it could be checked)."""
    from transformers import AutoTokenizer
    try:  # the user's files: the tokenizers library raises a bare Exception on one it cannot parse, and whatever
        # is raised the tokenizer is unchecked: a difference, refused unless accepted
        loaded = AutoTokenizer.from_pretrained(checkpoint)
    except Exception as e:
        return [("tokenizer files", f"not read ({type(e).__name__}: {e}), so its vocabulary, special tokens and "
                                    f"chat template could not be held to the study's", "")]
    saved, out = _tokenizer_properties(loaded), []
    for name in ("bos_token", "eos_token", "unk_token", "pad_token", "special tokens"):
        ours, theirs = saved.get(name), study.get(name)
        if ours != theirs and not (name == "pad_token" and theirs is None and ours == saved.get("eos_token")):
            out.append((name, repr(ours), repr(theirs)))
    if saved["vocabulary"] != study["vocabulary"]:
        out.append(("vocabulary", *_vocabulary_values(saved["vocabulary"], study["vocabulary"])))
    if saved["chat_template"] != study["chat_template"]:
        out.append(("chat_template", *_template_values(saved["chat_template"], study["chat_template"])))
    return out


def _tokenizer_properties(tokenizer) -> dict:
    """What of a tokenizer decides the tokens a model is fed and trained on: its vocabulary (token: id), its named
    special tokens and the others, its chat template."""
    named = {k: str(v) for k, v in tokenizer.special_tokens_map.items() if isinstance(v, str)}
    return {**{k: named.get(k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")},
            "special tokens": sorted(set(map(str, tokenizer.all_special_tokens)) - set(named.values())),
            "vocabulary": dict(tokenizer.get_vocab()), "chat_template": tokenizer.chat_template}


def _vocabulary_values(saved: dict, study: dict) -> tuple[str, str]:
    """The two vocabularies in words: their sizes, how many tokens are not at the study's ids, one of them."""
    other = sorted((token for token, i in saved.items() if study.get(token) != i), key=saved.get)
    example = f", e.g. {other[0]!r} at {saved[other[0]]}, the study's {study.get(other[0])}" if other else ""
    missing = f", {len(set(study) - set(saved))} of the study's missing" if set(study) - set(saved) else ""
    return f"of {len(saved)} tokens, {len(other)} not at the study's ids{example}{missing}", f"{len(study)} tokens"


def _template_values(saved, study) -> tuple[str, str]:
    """The two chat templates around where they first differ (a template is too long to quote whole)."""
    if saved is None or study is None:
        return repr(_excerpt(saved, 0)), repr(_excerpt(study, 0))
    saved, study = str(saved), str(study)
    at = next((i for i, (a, b) in enumerate(zip(saved, study)) if a != b), min(len(saved), len(study)))
    return f"{_excerpt(saved, at)!r} at character {at}", repr(_excerpt(study, at))


def _excerpt(text, at: int, width: int = 40):
    """`text` from a little before `at`, `width` characters, '...' where cut; None stays None."""
    if text is None:
        return None
    start = max(0, at - 10)
    return ("..." if start else "") + text[start:start + width] + ("..." if start + width < len(text) else "")


def _named(steps: list[int], checkpoints: dict[int, Path]) -> str:
    """'every checkpoint', or the checkpoints named (a few, then how many more)."""
    if sorted(set(steps)) == sorted(checkpoints):
        return "every checkpoint"
    steps = sorted(set(steps))
    more = f" and {len(steps) - 5} more" if len(steps) > 5 else ""
    return f"checkpoint(s) {', '.join(map(str, steps[:5]))}{more}"
