"""The user's own code that a source file reaches through its imports, found without running it, and its hashes.

A run's identity holds the source of the plugin or TRL script it uses; what that source imports of the user's other
code (a helper module beside it, a second package of theirs, installed editable or on PYTHONPATH) changes what the
run computes as much, so it is part of the identity too (mcgrpo.core.plugins, mcgrpo.core.trl_config).

Found statically: each file is parsed (never imported: planning must not run the user's code, nor import TRL), every
`import x` / `from x import y` in it (at module level or inside a function) gives its top-level name, resolved with
`importlib.util.find_spec`, which for a top-level name runs the finders without importing (an editable install's
finder hook and a .pth path resolve alike). A name is user code where it lies outside the interpreter's library
folders: the standard library and installed non-editable packages are not followed (a package's version says what
it is). User code is hashed whole (a package's every .py file, a module's file) and its own imports followed in turn.
Not seen: a dynamic import (`importlib.import_module(name)`, `__import__`), data files the code reads, and a name
that does not resolve here (its import fails at run time by itself). Relative imports stay within their own package,
which is hashed whole already.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import os
import site
import sysconfig
from pathlib import Path
from typing import Iterable

# mcgrpo's own code is no user code: run.json records it by git sha, and a run's identity leaves it out so that an
# edit of the workflow does not retrain every run
NOT_USER_CODE = frozenset({"mcgrpo"})


def package_files(roots: Iterable[Path]) -> list[tuple[str, Path]]:
    """Every .py file of a package's folders (several: a namespace package), by its path relative to the folder's
    parent (the name it is imported by), sorted: a helper module of the package is as much its code as any."""
    return sorted((str(f.relative_to(root.parent)), f) for root in roots for f in Path(root).rglob("*.py"))


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
        entries = _entries(_user_locations(top))
        if entries:
            found[top] = _digest(entries)
            todo += [name for _, f in entries for name in _read(f)[1]]
    return dict(sorted(found.items()))


def _entries(places: list[Path]) -> list[tuple[str, Path]]:
    """A package's files (its folders), or a module's own file."""
    folders = [p for p in places if p.is_dir()]
    return package_files(folders) if folders else [(p.name, p) for p in places[:1] if p.is_file()]


def _digest(entries: list[tuple[str, Path]]) -> str:
    digest = hashlib.sha256()
    for name, path in entries:
        digest.update(f"{name}\0{file_sha256(path)}\0".encode())
    return digest.hexdigest()


def _user_locations(top: str) -> list[Path]:
    """Where top-level module `top` lies, if it is user code: its package's folders outside the library folders, or
    its file; [] for the standard library, an installed package, a built-in or frozen module, or no module at all."""
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
    return [p for p in places if not _in_library(p)]


@functools.cache
def _library() -> tuple[Path, ...]:
    """The interpreter's library folders: the standard library's and those pip installs into (a user install's
    too)."""
    paths = sysconfig.get_paths()
    folders = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    folders |= set(site.getsitepackages()) | ({site.getusersitepackages()} if site.ENABLE_USER_SITE else set())
    return tuple(Path(os.path.realpath(f)) for f in folders)


def _in_library(path: Path) -> bool:
    real = Path(os.path.realpath(path))
    return any(real.is_relative_to(folder) for folder in _library())


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
