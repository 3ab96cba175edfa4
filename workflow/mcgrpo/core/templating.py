"""No code from a config: Snakemake's YAML templating is refused unless the command line opts in.

Snakemake 9 renders a config file with YTE when its top level says `__use_yte__: true`, and rendering runs the
file's `?` expressions and `__definitions__` as Python while Snakemake reads the file, before the Snakefile
(`snakemake.settings.types.ConfigSettings` loads every `--configfile` while parsing the command line). A study
file from a colleague, or a pull request that CI dry-runs, could then run anything. So `install` wraps
Snakemake's config-file loader with `refuse`; the workflow's own profile (profiles/default, which Snakemake
reads before any config file) installs it, and the Snakefile calls `refuse` again on every file, where the
profile was skipped (`--workflow-profile none`: too late to stop the code, not too late to stop every job).

The opt-in is the command line's, never the file's: `--config allow_templates=true`. YTE is the only templating
Snakemake applies to config files; `!!python/...` tags never run (Snakemake's YAML loader constructs no object,
the project's reader refuses them).
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from mcgrpo.core.errors import ConfigError, stopping

OPT_IN = "allow_templates"  # the config key that opts in, given on the command line only
MARKER = "__use_yte__"  # what turns YTE on in a file (YTE reads it at the top level only)
_YES = re.compile(rf"{OPT_IN}=(?:true|True|TRUE|yes|1)")


def is_template(doc: Any) -> bool:
    """The parsed file asks for YTE (any value: `__use_yte__: false` has no business in a study either)."""
    return isinstance(doc, dict) and MARKER in doc


def refuse(path: str | Path, doc: Any, allowed: bool) -> None:
    """Raise ConfigError naming `path` where its content is a template and the command line did not opt in."""
    if is_template(doc) and not allowed:
        raise ConfigError(
            f"{path}: config key {MARKER}: Snakemake's YAML templating (YTE) runs the file's Python expressions "
            f"while it reads the config, so a study file could run any command (even under `snakemake -n`); "
            f"allowed: a plain YAML study. To render a template you trust, opt in on the command line: "
            f"--config {OPT_IN}=true")


def opted_in(argv: Sequence[str]) -> bool:
    """`--config ... allow_templates=true` (or `-C`, or `--config=allow_templates=true`) on this command line."""
    in_config = False
    for word in argv:
        if word in ("--config", "-C"):
            in_config = True
            continue
        if word.startswith("--config="):
            in_config, word = True, word.removeprefix("--config=")
        elif word.startswith("-"):
            in_config = False
        if in_config and _YES.fullmatch(word):
            return True
    return False


def install(argv: Sequence[str] | None = None) -> None:
    """Wrap Snakemake's config-file loader in this process: a template is refused before YTE renders it, unless
    `argv` (default the process's) opts in. Idempotent."""
    from snakemake.common import configfile

    allowed = opted_in(sys.argv[1:] if argv is None else argv)
    original = getattr(configfile._load_configfile, "__wrapped__", configfile._load_configfile)

    @functools.wraps(original)
    def load(configpath_or_obj, filetype="Config"):
        if filetype == "Config" and isinstance(configpath_or_obj, (str, Path)) and not allowed:
            from mcgrpo.core import config  # a strict, safe YAML reader: never renders, never constructs objects
            with stopping():  # Snakemake would print its frames around the message
                refuse(configpath_or_obj, config.read(configpath_or_obj), allowed)
        return original(configpath_or_obj, filetype)

    configfile._load_configfile = load
