"""Load and save a policy model with its tokenizer (Hugging Face format, hub id or GGUF file via
a model reference), and build the tiny one."""

from __future__ import annotations

from pathlib import Path
from mcgrpo.core.errors import MissingFile

# torch and transformers are imported where used: config validation imports models.sources,
# and must stay light enough for every Snakemake parse.


def device():
    import torch
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load(path: str | Path, on=None):
    """(model, tokenizer) from a folder in Hugging Face format, or from a model reference
    (`<name>.json`, written by the pipeline for a model with a source); fp32 master weights."""
    path = Path(path)
    if path.suffix == ".json":
        from mcgrpo.core import store
        from mcgrpo.train.models import sources
        return sources.load(store.read_json(path)["source"], on or device())
    import sys

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not sys.stderr.isatty():  # a rule's log: no redrawn "Loading weights" bar among the progress lines
        transformers.utils.logging.disable_progress_bar()
    if not (path / "config.json").exists():
        raise MissingFile(f"{path}: no model here (config.json missing); was the warm_start rule run?")
    from mcgrpo.train.models import shipped
    shipped.held(path)  # a warm start's folder: the files it wrote, never another's copied in
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(on or device())
    return model, tokenizer


def held_to_source(path: str | Path, source: dict | None) -> None:
    """Refuse a model reference (`<name>.json`, resolve_model's) that names another source than the run's
    model.source: one left from an earlier config (a run trained by hand, which no rule re-resolves) or edited
    would have the run load another model than its run.json says."""
    path = Path(path)
    if path.suffix != ".json":
        return
    from mcgrpo.core import store
    from mcgrpo.core.errors import IntegrityError
    reference = store.read_json(path)
    named = reference.get("source") if isinstance(reference, dict) else None
    if named != source:
        raise IntegrityError(f"{path}: resolves model.source {named!r}, but the run's config has model.source "
                             f"{source!r}: the reference was written for an earlier config, or edited; allowed: the "
                             f"reference of this config (rerun the workflow: its resolve_model writes it)")


def fingerprint(model, tokenizer) -> str:
    """sha256 of the weights and tokenizer a run starts from, as loaded (names, dtypes, shapes and bytes of every
    tensor; the vocabulary and chat template): a model folder saved over, or a hub model without a revision
    updated in the cache, between two runs of one study gives them other values (mcgrpo.core.run_data). One
    tensor at a time on the CPU: a large model's weights are never copied whole."""
    import hashlib
    import json

    import torch
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().to("cpu").contiguous().view(-1)
        digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    digest.update(json.dumps([sorted(tokenizer.get_vocab().items()), getattr(tokenizer, "chat_template", None)],
                             default=str).encode())
    return digest.hexdigest()


def save(model, tokenizer, path: str | Path) -> Path:
    """Write the model folder next to its destination, then rename it into place."""
    from mcgrpo.core.store import atomic
    with atomic(path, directory=True) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return Path(path)
