"""The library code a run computes and counts with, held as a plugin found it: no plugin may patch it globally.

Research code patches libraries for the whole process (`import unsloth`, liger-kernel's
`apply_liger_kernel_to_qwen2()` replace classes of transformers' modeling modules; `torch.nn.functional.softmax =
mine`; an mcgrpo function replaced). Done by a plugin's import, build or call, that has the rest of its arm's run
compute, or count, with other code than the arms it is compared with: a verdict silently about other code. So
mcgrpo.train.contract holds each of them in `held()`, and refuses what `Held.changed` names.

Watched (`watched`): every loaded module of mcgrpo; torch, torch.nn.functional, torch.nn.modules.*, numpy; and
transformers' modeling modules (`transformers.modeling_*`, `transformers.models.*.modeling_*`), its activations,
masking and attention integrations; in each, the module's namespace and that of every class defined in it in Python
whose attributes can be set (`Qwen2Attention.forward`, `torch.Tensor`'s methods). What counts as a patch there: code (a
function, builtin, class, module, method descriptor or decorated function: `_code`) replaced or deleted, or a new name
that hides one (a builtin, which a module's functions look up after its own names; a base class's attribute, for a
class: `torch.Tensor.softmax = f` hides TensorBase's). A new name that hides nothing is allowed: libraries register
new things as they run (a submodule bound to its package as it is imported, transformers' lazy attributes, a cache),
and no code written before it names it. A constant rebound (`budget.ROUND = 1`) is not seen (mcgrpo and torch rebind
globals of their own as they run: a worker, a count), nor a patch through a reference of its own (an entry of a
dict such as `ALL_ATTENTION_FUNCTIONS`, a function a module imported by name: `from torch import softmax`).

Cost: the namespaces are copied once and compared by identity at C speed (`dict ==`); a block compares them before
and after (docs/plugins.md gives the numbers), copying again only a namespace that changed.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import importlib.abc
import itertools
import sys
import types
from typing import Any, Iterator, Mapping

from mcgrpo.core import clock

WATCHED = frozenset({"mcgrpo", "torch", "torch.nn.functional", "numpy", "transformers.activations",
                     "transformers.masking_utils", "transformers.pytorch_utils"})
WATCHED_UNDER = ("mcgrpo.", "torch.nn.modules.")
LIBRARIES = frozenset({"mcgrpo", "torch", "transformers", "numpy"})  # the packages of WATCHED (every run imports them)
CACHES = frozenset({"__slotnames__"})  # what Python itself caches on a class as it runs (copyreg, as it pickles)
_CODE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type, staticmethod,
         classmethod, property, functools.partial, types.MethodDescriptorType, types.WrapperDescriptorType,
         types.ClassMethodDescriptorType)
_GONE = object()


def watched(name: str) -> bool:
    """Whether the module named `name` is one whose code a run computes or counts with (module docstring)."""
    if name in WATCHED or name.startswith(WATCHED_UNDER):
        return True
    last = name.rpartition(".")[2]  # a model's modeling module, and the attention kernels it calls by name
    return name.startswith("transformers.") and (last.startswith("modeling_") or (
        name.startswith("transformers.integrations.") and "attention" in last))


class Space:
    """A module's namespace, or a class's: what a patch rebinds. `owner` is how messages name it."""
    __slots__ = ("owner", "live", "bases")

    def __init__(self, owner: str, live: Mapping, bases: tuple = ()):
        self.owner, self.live, self.bases = owner, live, bases

    def hidden(self, name: str) -> Any:
        """What a new `name` here hides: a base class's attribute, or for a module the builtin (_GONE: nothing)."""
        if not self.bases:
            return vars(builtins).get(name, _GONE)
        return next((vars(base)[name] for base in self.bases if name in vars(base)), _GONE)


def _spaces(module: types.ModuleType) -> list[Space]:
    """The namespaces of `module`: its own, and those of the classes it defines in Python (torch.Tensor, nn.Module,
    a model's layers; not one made in C, such as torch.DispatchKey, whose methods are compiled: fewer to compare)
    whose attributes can be set (an immutable type, such as torch.FloatTensor, cannot be patched)."""
    out = [Space(module.__name__, vars(module))]
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__ and not value.__flags__ & (1 << 8) and any(
                isinstance(getattr(v, "__func__", v), types.FunctionType) for v in vars(value).values()):
            out.append(Space(f"{value.__module__}.{value.__qualname__}", value.__dict__, value.__mro__[1:]))
    return out


_modules: dict[str, tuple[types.ModuleType, list[Space]]] = {}  # name -> (module, its spaces), as last found
_found_at = -1  # len(sys.modules) when _modules was last brought up to date
_spaces_now: list[Space] = []  # of every watched module, in the order of _modules; their live namespaces, and
_lives: list[Mapping] = []  # each as last taken: kept side by side, compared as two lists at C speed
_copies: list[dict | None] = []


def _watched_spaces() -> list[Space]:
    """The spaces of every watched module loaded now; sys.modules is searched again only where it grew or shrank."""
    global _found_at
    if len(sys.modules) != _found_at:
        loaded = {name: module for name, module in list(sys.modules.items())
                  if isinstance(module, types.ModuleType) and watched(name)}
        ready = {name: module for name, module in loaded.items()  # not one whose classes are not all defined yet
                 if not getattr(getattr(module, "__spec__", None), "_initializing", False)}
        kept = {name: _modules[name] for name in ready if _modules.get(name, (None,))[0] is ready[name]}
        _modules.clear()
        _modules.update({name: kept.get(name) or (module, _spaces(module)) for name, module in ready.items()})
        copies = dict(zip(_spaces_now, _copies))
        _spaces_now[:] = [space for _, spaces in _modules.values() for space in spaces]
        _lives[:] = [space.live for space in _spaces_now]
        _copies[:] = [copies.get(space) for space in _spaces_now]
        _found_at = len(sys.modules) if len(ready) == len(loaded) else -1
    return _spaces_now


class Taken:
    """The watched namespaces (`spaces`, their `lives`) and a copy of each as it was taken (`copies`)."""
    __slots__ = ("spaces", "lives", "copies")

    def __init__(self, spaces: list[Space], lives: list[Mapping], copies: list[dict]):
        self.spaces, self.lives, self.copies = spaces, lives, copies


def taken() -> Taken:
    """Each watched space with a copy of it as it is now: the copy last taken where it is unchanged since."""
    spaces = _watched_spaces()
    if not _same(_copies, _lives):  # at C speed where nothing changed: each value equal by identity
        for i, (copy, live) in enumerate(zip(_copies, _lives)):
            if copy is None or not _same(copy, live):
                _copies[i] = dict(live)
    return Taken(list(spaces), list(_lives), list(_copies))


def _same(copy, live) -> bool:
    try:
        return copy == live
    except Exception:  # a value whose == raises (a numpy array rebound): compared one by one
        return False


class Held:
    """The watched code as a block found it, and each watched module that the block imported first, as that module's
    own code left it (`_Recorder`): so that a patch of a module the block itself imported is seen too."""

    def __init__(self):
        self.before, self.first = taken(), {}  # first: owner -> (space, copy)

    def changed(self) -> str:
        """The first patch made since, in words ('' where none): 'torch.log_softmax from A to B'."""
        before = self.before
        taken = () if _same(before.copies, before.lives) else zip(before.spaces, before.copies)
        for space, copy in itertools.chain(taken, self.first.values()):
            said = "" if _same(copy, space.live) else _patch(space, copy, space.live)
            if said:
                return said
        return ""

    def own(self, space: Space, names: set[str]) -> None:
        """Take `names` of `space` as they are now: what a library's module set as it was imported."""
        where = next((i for i, s in enumerate(self.before.spaces) if s.owner == space.owner), None)
        if where is not None:  # matched by name: a space is found afresh each time its module is
            self.before.copies[where] = _owned(self.before.copies[where], space, names)
        if space.owner in self.first:
            self.first[space.owner] = space, _owned(self.first[space.owner][1], space, names)


def _owned(copy: dict, space: Space, names: set[str]) -> dict:
    """`copy` with `names` as `space` has them now (a new dict: taken() shares its copies, never edited in place)."""
    copy = dict(copy)
    for name in names:
        copy.pop(name, None)
        if name in space.live:
            copy[name] = space.live[name]
    return copy


_holding: list[Held] = []  # the blocks in progress, innermost last


@contextlib.contextmanager
def held() -> Iterator[Held]:
    """A block (a plugin's import, build or call) whose patches of the watched code `Held.changed` names after it."""
    with clock.checking():  # no stage's time (clock.checking)
        watch = Held()
    if not _holding:
        sys.meta_path.insert(0, _RECORDER)
    _holding.append(watch)
    try:
        yield watch
    finally:
        del _holding[next(i for i, h in enumerate(_holding) if h is watch)]
        if not _holding and _RECORDER in sys.meta_path:
            sys.meta_path.remove(_RECORDER)


def _patch(space: Space, was: dict, now: Mapping) -> str:
    for name, old in was.items():
        new = now.get(name, _GONE)
        if new is not old and (_code(old) or _code(new)) and not _submodule(space, name, new):
            return f"{space.owner}.{name} from {_said(old)} to {_said(new, old)}"
    for name in now.keys() - was.keys() - CACHES:
        hidden = space.hidden(name)
        if hidden is not _GONE:
            source = "the builtin" if not space.bases else "inherited"
            return f"{space.owner}.{name} from {_said(hidden)} ({source}) to {_said(now[name], hidden)}"
    return ""


def _code(value) -> bool:
    return isinstance(value, _CODE) or (callable(value) and hasattr(value, "__wrapped__"))  # functools.cache's


def _submodule(space: Space, name: str, value) -> bool:
    """Whether `value` is the submodule that the import system binds to its package as it imports it."""
    return isinstance(value, types.ModuleType) and value.__name__ == f"{space.owner}.{name}"


def _said(value, other=_GONE) -> str:
    """A value as a message names it: its qualified name, where it was defined where `other` is named alike."""
    if value is _GONE:
        return "deleted"
    if isinstance(value, types.ModuleType):
        return f"module {value.__name__}"
    name, module = getattr(value, "__qualname__", None), getattr(value, "__module__", None)
    if not isinstance(name, str):
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    said = f"{module}.{name}" if isinstance(module, str) else name
    code = getattr(value, "__code__", None)
    if other is not _GONE and said == _said(other) and code is not None:
        said += f" (another function, defined at {code.co_filename}:{code.co_firstlineno})"
    return said


class _Recorder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path while a block runs: each module of a watched library (LIBRARIES) imported then is found
    by the finders after it, as always, and loaded through `_Recording`, which takes what its own code did."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in LIBRARIES or self not in sys.meta_path:
            return None
        for finder in sys.meta_path[sys.meta_path.index(self) + 1:]:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Recording(spec.loader)
        return spec


_importing = [0]  # how deep in the imports of watched libraries' modules a block is


class _Recording(importlib.abc.Loader):
    """A library module's loader, which then puts the loader it wraps back in its place (module.__loader__, its
    spec's loader: nothing of this remains once the module is loaded), and takes, for each block in progress, what
    the module's own code did: a watched module as that code left it (Held.first); and what the import of a library
    module changed in the watched code as the library's own (Held.own: torch._dynamo, imported with transformers,
    wraps torch.manual_seed), the same whichever code imported that module (the job's own, as it loads the model,
    in every arm). Code other than the library's that runs inside such an import (a post-import hook) is not told
    apart from it."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec) if hasattr(self.loader, "create_module") else None

    def exec_module(self, module):
        spec, outer = module.__spec__, not _importing[0]
        before = {space: dict(space.live) for space in _watched_spaces()} if outer and _holding else {}
        _importing[0] += 1
        try:
            self.loader.exec_module(module)
        finally:
            _importing[0] -= 1
            spec.loader = self.loader
            if vars(module).get("__loader__") is self:  # past a __setattr__ of its own (torch's config modules)
                vars(module)["__loader__"] = self.loader
        for space, copy in before.items():
            if not _same(copy, space.live):
                names = {n for n in {*copy, *space.live} if copy.get(n, _GONE) is not space.live.get(n, _GONE)}
                for watch in _holding:
                    watch.own(space, names)
        loaded = sys.modules.get(spec.name, module)  # a package that put another object there (transformers' lazy)
        if watched(spec.name) and isinstance(loaded, types.ModuleType):
            for space in _spaces(loaded):
                copy = dict(space.live)
                for watch in _holding:
                    watch.first[space.owner] = space, copy

    def __getattr__(self, name):  # get_source, is_package, get_resource_reader...: the wrapped loader's
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)


_RECORDER = _Recorder()
