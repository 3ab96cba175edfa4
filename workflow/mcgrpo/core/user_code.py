"""The user's own code that a source file reaches through its imports, found without running it, and its hashes.

A run's identity holds the source of the plugin or TRL script it uses; what that source imports of the user's other
code (a helper module beside it, a second package of theirs, installed editable or on PYTHONPATH) changes what the
run computes as much, so it is part of the identity too (mcgrpo.core.plugins, mcgrpo.core.trl_config).

Found statically: each file is parsed (never imported: planning must not run the user's code, nor import TRL), every
`import x` / `from x import y` in it (at module level or inside a function) gives its top-level name, resolved with
`importlib.util.find_spec`, which for a top-level name runs the finders without importing (an editable install's
finder hook and a .pth path resolve alike). A name is user code unless it is the standard library's, a built-in, or
a package installed from an index (its version says what it is, as torch's does). So a module on the Python path
that no distribution installed is user code, and so is a distribution installed from a folder, a VCS or a wheel
file (PEP 610's direct_url.json: `pip install -e .`, `pip install my_rewards-0.1.0-py3-none-any.whl`), wherever it
lies: the same package editable on the submitting machine and built into an image as a wheel is followed in both,
so a run's identity is the same in either (docs/plugins.md, "On the cluster and in the images"). User code is hashed
whole (a package's every file, its data files too; a module's file) and its own imports followed in turn (a source's:
a sourceless .pyc or a .so is hashed, not parsed).
Not seen: a dynamic import (`importlib.import_module(name)`, `__import__`) of a name outside the packages hashed, a
data file the code reads from outside its package (beside a bare module, a path of its own), and a name
that does not resolve here (its import fails at run time by itself). Relative imports stay within their own package,
which is hashed whole already.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path
from typing import Iterable

# mcgrpo's own code is no user code: run.json records it (git_sha, versions.mcgrpo_code, which the alike check
# compares), and a run's identity leaves it out so that an edit of the workflow does not retrain every run
NOT_USER_CODE = frozenset({"mcgrpo"})


# What Python imports a module from: its source (.py), a sourceless .pyc (a wheel built without sources), an extension
# module (.so): each is the package's code, which an edit or a rebuild with the same version changes
MODULE_SUFFIXES = tuple(importlib.machinery.all_suffixes())


def package_files(roots: Iterable[Path]) -> list[tuple[str, Path]]:
    """Every file of a package's folders (several: a namespace package), by its path relative to the folder's parent
    (the name it is imported by), sorted: a helper module of the package is as much its code as any, and so is a data
    file beside them (a JSON of weights the code reads, at import or in a call), which no import names. Left out: the
    caches Python writes itself (__pycache__), which come and go with imports, not with edits, and hidden files (an
    editor's swap file, .DS_Store), which come and go with the tools that look at the folder."""
    return sorted((str(f.relative_to(root.parent)), f) for root in roots for f in Path(root).rglob("*")
                  if f.is_file() and not _cache_or_hidden(f.relative_to(root).parts))


def is_module(name: str) -> bool:
    """Whether a file is one Python imports a module from (else data the code may read at any time)."""
    return name.endswith(MODULE_SUFFIXES)


def _cache_or_hidden(parts: tuple[str, ...]) -> bool:
    return "__pycache__" in parts or any(part.startswith(".") for part in parts)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read once per process while its size and mtime stay."""
    return _read(path)[0]


def reached(files: Iterable[Path], skip: Iterable[str] = ()) -> dict[str, str]:
    """Top-level name -> sha256 of every user-code module or package the files import, transitively (each once);
    `skip`: names not followed (the caller's own package, hashed by it already). Empty where there is none."""
    seen, found = set(skip) | NOT_USER_CODE, {}
    todo = [name for f in files for name in _read(Path(f))[1]]
    while todo:
        top = todo.pop()
        if top in seen:
            continue
        seen.add(top)
        entries = files_of(top)
        if entries:
            found[top] = _digest(entries)
            todo += [name for _, f in entries for name in _read(f)[1]]
    return dict(sorted(found.items()))


def files_of(top: str) -> list[tuple[str, Path]]:
    """The files of user-code package `top` (package_files), or its module's own file; [] where `top` is no user
    code (the standard library, a package installed from an index)."""
    places = _user_locations(top)
    folders = [p for p in places if p.is_dir()]
    return package_files(folders) if folders else [(p.name, p) for p in places[:1] if p.is_file()]


def _digest(entries: list[tuple[str, Path]]) -> str:
    digest = hashlib.sha256()
    for name, path in entries:
        digest.update(f"{name}\0{file_sha256(path)}\0".encode())
    return digest.hexdigest()


def _user_locations(top: str) -> list[Path]:
    """Where top-level module `top` lies, if it is user code: its package's folders (but any in the standard
    library), or its file; [] for the standard library, a built-in or frozen module, a package installed from an
    index, or no module at all."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec (__main__ of some runs)
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations is not None:
        places = [Path(p) for p in spec.submodule_search_locations]
    elif spec.has_location and spec.origin:
        places = [Path(spec.origin)]
    else:  # built in, frozen
        return []
    places = [p for p in places if not _in_stdlib(p)]
    return [] if not places or _from_an_index(top) else places


def _from_an_index(top: str) -> bool:
    """Whether every distribution that installs `top` came from an index: none has a direct_url.json (PEP 610),
    which pip writes for an install from a folder (editable or not), a VCS or an archive file."""
    dists = _distributions(tuple(sys.path)).get(top, [])
    return bool(dists) and all(_direct_url(d) is None for d in dists)


@functools.lru_cache(maxsize=4)
def _distributions(path: tuple[str, ...]) -> dict[str, list[str]]:
    """Top-level name -> the distributions that install it, on `path` (sys.path: read again where it changed);
    a quarter of a second to read, so once per process."""
    return importlib.metadata.packages_distributions()


@functools.lru_cache(maxsize=None)
def _direct_url(dist: str) -> str | None:
    try:
        return importlib.metadata.distribution(dist).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def _stdlib() -> tuple[Path, ...]:
    """The standard library's folders (its site-packages are not in them)."""
    paths = sysconfig.get_paths()
    return tuple(Path(os.path.realpath(paths[k])) for k in ("stdlib", "platstdlib") if k in paths)


def _in_stdlib(path: Path) -> bool:
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(folder) and "site-packages" not in real.relative_to(folder).parts[:1]
               and "dist-packages" not in real.relative_to(folder).parts[:1] for folder in _stdlib())


def _read(path: Path) -> tuple[str, frozenset[str]]:
    """A file's sha256 and the top-level names it imports, cached by (path, size, mtime_ns): planning a study of many
    runs reads each file once, and an edit (which moves its size or mtime) is read again."""
    stat = path.stat()
    return _parsed(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _parsed(path: str, size: int, mtime_ns: int) -> tuple[str, frozenset[str]]:
    data = Path(path).read_bytes()
    return hashlib.sha256(data).hexdigest(), _imported(data) if path.endswith(".py") else frozenset()


def _imported(source: bytes) -> frozenset[str]:
    """The top-level names a module's source imports, absolute imports only (a relative one stays in its package)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # its import fails at run time by itself; its bytes are hashed all the same
        return frozenset()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return frozenset(names)
