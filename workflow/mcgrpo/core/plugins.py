"""Plugins: credit rules, selectors and verifiers found by name, from the package itself or from any installed one.

One registry per kind: the built-in table below merged with the entry points of the kind's group
(`mcgrpo.credit`, `mcgrpo.selection`, `mcgrpo.verifier`), so that a rule from another package is used exactly
as a built-in one is (`credit: {step_bonus: {weight: 0.5}}`). A name with a colon is a dotted path,
`module:Name`, imported as it is (quick work without packaging). The built-ins are a table, not entry points
of mcgrpo's own distribution, so that they never depend on how (or whether) mcgrpo was installed.

A plugin's options are its declaration's typed parameters (a dataclass's fields): each is checked with
pydantic in strict mode before any job. A plugin's identity (name, distribution version, sha256 of its
module's source, and of the user's other code that source imports: mcgrpo.core.user_code) joins the effective
config of every run that uses it (mcgrpo.core.config.run_config), so that editing the plugin retrains instead of
reusing stale runs. Kept free of heavy imports: validation
imports the plugin's module, not torch.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import sys
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from mcgrpo.core import user_code
from mcgrpo.core.errors import ConfigError

GROUPS = {"credit": "mcgrpo.credit", "selection": "mcgrpo.selection", "verifier": "mcgrpo.verifier"}
WHAT = {"credit": "credit rules", "selection": "selectors", "verifier": "verifiers"}
_C, _S = "mcgrpo.train.credit", "mcgrpo.train.selection"
BUILTIN = {  # name -> module:factory; their options are checked by the study schema (config.schema.yaml)
    "credit": {"outcome": f"{_C}:outcome_rule", "rloo": f"{_C}:rloo_rule",
               "monte_carlo": f"{_C}.monte_carlo:MonteCarlo", "critic": f"{_C}.critic:Critic",
               "length": f"{_C}.length:Length", "process": f"{_C}.process:Process",
               "path_penalty": f"{_C}.path_penalty:PathPenalty", "implicit": f"{_C}.controls:Implicit",
               "shuffled": f"{_C}.controls:shuffled_rule"},
    "selection": {name: f"{_S}:{name}" for name in
                  ("critic_filter", "history_filter", "level_filter", "random_choice", "dynamic_sampling")},
    "verifier": {"default": "mcgrpo.core.verify:default_verifier", "strict": "mcgrpo.core.verify:strict_verifier"},
}
# What the workflow passes a selector besides its options (not options: a config cannot set them)
CONTEXT = {"credit": (), "selection": ("stream", "per_iteration", "seed"), "verifier": ()}
# What each kind's object must have (checked on the object a plugin's factory returns, and on a verifier)
PROTOCOL = {"credit": ("__call__",), "selection": ("select", "generate", "observe", "state_dict", "load_state_dict"),
            "verifier": ("__call__",)}


@dataclass(frozen=True)
class Plugin:
    kind: str
    name: str
    factory: Callable[..., Any]
    builtin: bool
    distribution: str | None  # the installed distribution that provides it (None: a bare module)
    version: str | None
    source_sha256: str | None  # of the module that defines the factory
    user_code: dict[str, str] = dataclasses.field(default_factory=dict)  # what that source imports of the user's

    def identity(self) -> dict:
        """What a run's config hash includes: editing the plugin or the user's code it imports, or upgrading its
        package, makes a new run. The imported code only where there is any: every other run keeps its key."""
        return {"kind": self.kind, "name": self.name, "distribution": self.distribution, "version": self.version,
                "source_sha256": self.source_sha256, **({"user_code": self.user_code} if self.user_code else {})}


@functools.cache
def entry_points(kind: str) -> dict[str, list[importlib.metadata.EntryPoint]]:
    """The installed entry points of a kind, by name, each with every distribution that declares it (read once per
    process): a name two declare is refused where a study uses it (`load`), never settled by the order of sys.path."""
    found: dict[str, list[importlib.metadata.EntryPoint]] = {}
    for ep in importlib.metadata.entry_points(group=GROUPS[kind]):
        found.setdefault(ep.name, []).append(ep)
    return found


def installed(kind: str) -> list[str]:
    """Every name a config may use for a kind: the built-ins, then the installed plugins."""
    return [*BUILTIN[kind], *(n for n in sorted(entry_points(kind)) if n not in BUILTIN[kind])]


def _missing(kind: str, name: str, key: str, why: str) -> ConfigError:
    return ConfigError(f"config key {key}: {why}; installed {WHAT[kind]}: {', '.join(installed(kind))} "
                       f"(a plugin is a package declaring the entry point group {GROUPS[kind]!r}, or a "
                       f"'module:Name' path)")


def _ambiguous(kind: str, name: str, key: str, declared: list) -> ConfigError:
    """A name that more than one plugin answers to (two distributions' entry points, or a built-in's and one):
    whichever ran, the study's author could not tell, and the run's identity would not say they collide."""
    by = "; ".join(sorted(f"{ep.dist.name if ep.dist else '?'}: {ep.value}" for ep in declared))
    what = (f"is a built-in {WHAT[kind][:-1]} and declared by an installed distribution too ({by})"
            if name in BUILTIN[kind] else f"is declared by {len(declared)} installed distributions ({by}), and "
            f"which one a study gets would depend on the order of sys.path")
    return ConfigError(f"config key {key}: {name!r} {what}; allowed: one entry point of that name in group "
                       f"{GROUPS[kind]!r}, none with a built-in's name (rename or uninstall the others, then pip "
                       f"install -e again)")


def _import(target: str, what: str, key: str, kind: str) -> Any:
    """The object at 'module:Name'. A module that raises on import is a bug in it: its traceback is kept,
    with a note saying which plugin was being loaded; a name the module does not define is a config error."""
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:
        e.add_note(f"mcgrpo: the error above was raised importing {what} ({target}): a bug in the plugin")
        raise
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise _missing(kind, target, key, f"{target!r}: module {module_name!r} defines no {attr!r}")
        obj = getattr(obj, part)
    return obj


def _module_exists(module_name: str) -> bool:
    try:
        return importlib.util.find_spec(module_name) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _source(factory: Any) -> tuple[str, list[tuple[str, Path]]] | None:
    """The code the plugin runs: its top-level name and files, every module file of the top-level package whose
    module defines `factory` (a helper module it imports is part of the plugin as much as the module that names it),
    or that module's own file where it is in no package. None where it has no file on disk."""
    module = inspect.getmodule(factory)
    if not getattr(module, "__file__", None):  # an interactive or built-in module: no file on disk
        return None
    source = Path(module.__file__)  # its source, or what it runs without one (a sourceless .pyc, a .so)
    top = module.__name__.partition(".")[0]
    roots = [Path(r) for r in getattr(sys.modules.get(top), "__path__", None) or []]
    # a package's folders (several: a namespace package), else the module's own file
    return top, user_code.package_files(roots) if roots else [(source.name, source)]


def _source_sha256(files: list[tuple[str, Path]]) -> str | None:
    """sha256 of the plugin's files, by their relative paths and bytes, read now (an edit shows at once); None where
    there are none to read (a package imported from a zip archive)."""
    if not files:
        return None
    digest = hashlib.sha256()
    try:
        for name, path in files:
            digest.update(f"{name}\0{len(data := path.read_bytes())}\0".encode() + data)
    except OSError:
        return None
    return digest.hexdigest()


def _identified(kind: str, name: str, factory: Any, dist: str | None, key: str) -> Plugin:
    """A plugin that is not built in, with what identifies it: its version, its source's sha256 and the user's
    other code that source reaches (beyond its own package, hashed whole already). A plugin whose code cannot be
    read is refused: its runs' identity could not tell it from the same plugin edited."""
    version = importlib.metadata.version(dist) if dist else None
    source = _source(factory)
    digest = _source_sha256(source[1]) if source else None
    if digest is None:
        raise ConfigError(f"config key {key}: the {kind} plugin {name!r} ({_qualname(factory)}) has no module file "
                          f"that can be read, so its runs' identity could not tell it from the plugin edited; allowed: "
                          f"a plugin imported from files (installed with pip, or a folder on PYTHONPATH), not one "
                          f"defined interactively or imported from a zip archive")
    top, files = source
    reached = user_code.reached([path for _, path in files], skip=[top])
    return Plugin(kind, name, factory, False, dist, version, digest, reached)


# Where a verb sets one (`imports_checked`), what every load of a plugin that is not built in goes through
_import_check: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("mcgrpo_import_check", default=None)


@contextlib.contextmanager
def imports_checked(check: Callable[[str, str, str, Callable[[], Plugin]], Plugin]) -> Iterator[None]:
    """Inside the block, each `load` of a plugin that is not built in is made as `check(kind, name, key, load)`: a
    verb whose config's validation is its process's first import of the plugins (mcgrpo screen) holds that import
    to what a job holds its own to (contract.imported), without this module importing torch."""
    token = _import_check.set(check)
    try:
        yield
    finally:
        _import_check.reset(token)


def load(kind: str, name: str, key: str) -> Plugin:
    """The plugin a config names at `key`; ConfigError naming the key, the plugin and the installed ones when
    there is none of that name."""
    check = _import_check.get()
    if check is None or name in BUILTIN[kind]:
        return _load(kind, name, key)
    return check(kind, name, key, lambda: _load(kind, name, key))


def _load(kind: str, name: str, key: str) -> Plugin:
    declared = entry_points(kind).get(name, []) if ":" not in name else []
    if len(declared) > int(name not in BUILTIN[kind]):
        raise _ambiguous(kind, name, key, declared)
    if name in BUILTIN[kind]:
        return Plugin(kind, name, _import(BUILTIN[kind][name], f"the built-in {name}", key, kind), True, None, None, None)
    if ":" in name:
        module_name, _, attr = name.partition(":")
        if not attr or not _module_exists(module_name):
            raise _missing(kind, name, key, f"{name!r} is not importable (no module {module_name!r} on the "
                                            f"Python path, or no ':Name' after it)")
        factory = _import(name, f"the {kind} plugin {name!r}", key, kind)  # the module exists: what it raises is its bug
        top = module_name.split(".")[0]
        dist = (_distributions().get(top) or [None])[0]
    else:
        if not declared:
            raise _missing(kind, name, key, f"{name!r} is not installed")
        ep, = declared
        factory = _import(ep.value, f"the {kind} plugin {name!r} (entry point of {ep.dist.name if ep.dist else '?'})",
                          key, kind)
        dist = ep.dist.name if ep.dist else None
    return _identified(kind, name, factory, dist, key)


def options(plugin: Plugin) -> dict[str, tuple[Any, bool]]:
    """A plugin's declared options: name -> (type, required), from the factory's typed parameters."""
    factory = plugin.factory
    target = factory.__init__ if inspect.isclass(factory) and not dataclasses.is_dataclass(factory) else factory
    try:
        hints = typing.get_type_hints(target)
    except Exception as e:  # an annotation that names what the module does not define when it runs: its bug
        e.add_note(f"mcgrpo: the error above was raised reading the option types of the {plugin.kind} plugin "
                   f"{plugin.name!r} ({_qualname(factory)}): a plugin's annotations must name types its module "
                   f"defines or imports when it runs (not only under `if TYPE_CHECKING:`)")
        raise
    if dataclasses.is_dataclass(factory):
        fields = {f.name: f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                  for f in dataclasses.fields(factory) if f.init}
    else:
        fields = {p.name: p.default is inspect.Parameter.empty
                  for p in inspect.signature(target).parameters.values()
                  if p.name != "self" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return {n: (hints.get(n, Any), required) for n, required in fields.items() if n not in CONTEXT[plugin.kind]}


def defaults(plugin: Plugin) -> dict[str, Any]:
    """A plugin's options that have a default, by their config names (`lambda`, not `lam`), with that default:
    the options a config may leave out and still build the same object (a built-in's included)."""
    factory = plugin.factory
    if dataclasses.is_dataclass(factory):
        found = {f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
                 for f in dataclasses.fields(factory) if f.init and not (
                     f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)}
    else:
        target = factory.__init__ if inspect.isclass(factory) else factory
        found = {p.name: p.default for p in inspect.signature(target).parameters.values()
                 if p.name != "self" and p.default is not inspect.Parameter.empty
                 and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    return {("lambda" if n == "lam" else n): v for n, v in found.items() if n not in CONTEXT[plugin.kind]}


def problems(plugin: Plugin, given: dict | None, key: str) -> list[str]:
    """What is wrong with the options a config gives a plugin (not a built-in: the schema checks those)."""
    from pydantic import TypeAdapter, ValidationError
    declared, given = options(plugin), dict(given or {})
    where, found = f"config key {key}.{plugin.name}", []
    allowed = ", ".join(f"{n} ({_type_name(t)})" for n, (t, _) in declared.items()) or "none"
    for name in given:
        if _option(name) not in declared:
            found.append(f"{where}: unknown option {name!r} of {WHAT[plugin.kind][:-1]} {plugin.name!r}; "
                         f"allowed: {allowed}")
    for name, (hint, required) in declared.items():
        value = given.get("lambda" if name == "lam" else name, _ABSENT)
        if value is _ABSENT:
            if required:
                found.append(f"{where}: option {name!r} of {plugin.name!r} is required ({_type_name(hint)})")
            continue
        try:
            TypeAdapter(hint).validate_python(value, strict=True)
        except ValidationError as e:
            reason = e.errors()[0]["msg"]
            found.append(f"{where}.{name}: {value!r} is not allowed for {plugin.name!r}; allowed: "
                         f"{_type_name(hint)} ({reason})")
    return found


def protocol_problems(plugin: Plugin, key: str) -> list[str]:
    """A credit rule or selector is a class whose instances have its kind's methods (mcgrpo.api); a verifier
    is a function of (text, reference)."""
    factory, where = plugin.factory, f"config key {key}: {plugin.name!r} ({_qualname(plugin.factory)})"
    if plugin.kind == "verifier":
        try:
            inspect.signature(factory).bind("text", "reference")
        except (TypeError, ValueError):
            return [f"{where} does not satisfy the verifier protocol (mcgrpo.api.Verifier): expected a function "
                    f"of (text, reference) returning bool"]
        return []
    if not inspect.isclass(factory):
        return [f"{where} does not satisfy the {plugin.kind} protocol (mcgrpo.api): expected a class, built with "
                f"the options as keyword arguments, got {type(factory).__name__}"]
    lacking = [m for m in PROTOCOL[plugin.kind] if not any(m in vars(c) for c in factory.__mro__[:-1])]
    if lacking:
        return [f"{where} does not satisfy the {plugin.kind} protocol (mcgrpo.api): it lacks {', '.join(lacking)}"]
    return []


_ABSENT = object()


def _option(name: str) -> str:
    return "lam" if name == "lambda" else name  # `lambda` is a Python keyword: the rules take it as `lam`


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def check(kind: str, name: str, given: dict | None, key: str) -> list[str]:
    """Every problem with a config's use of a plugin at `key`: not installed, not the kind's protocol, options
    that its declaration does not allow (a built-in's options are the schema's to check)."""
    try:
        plugin = load(kind, name, key)
    except ConfigError as e:
        return [str(e)]
    if plugin.builtin:
        return []
    return protocol_problems(plugin, key) or (problems(plugin, given, key) if kind != "verifier" else [])


def uses(arm: dict, recipe: dict, key: str) -> list[tuple[str, str, dict, str]]:
    """(kind, name, options, key) of every plugin an arm (its credit block, selection block and the recipe's
    reward verifier) names, a shuffled rule's inner rule included."""
    found, credit, where = [], arm.get("credit") or {}, f"{key}.credit"
    while credit:
        (name, options), = credit.items()
        found.append(("credit", name, options or {}, where))
        credit, where = (options or {}, f"{where}.shuffled") if name == "shuffled" else ({}, where)
    found += [("selection", name, options or {}, f"{key}.selection") for name, options in
              (arm.get("selection") or {}).items()]
    verifier, where = reward_verifier(arm, recipe, key)
    return found + [("verifier", verifier, {}, where)]


STUDY_VERIFIER = "recipe.reward_verifier"


def reward_verifier(arm: dict, recipe: dict, key: str) -> tuple[str, str]:
    """(name, config key) of the verifier that rewards an arm (`key`: the arm's, arms.<arm>): its own recipe's
    where it sets one, else the recipe's (a run's merged recipe holds either, but not which key set it). Every
    message about the verifier names this key, the one the user must edit."""
    own = (arm.get("recipe") or {}).get("reward_verifier")
    return (own, f"{key}.recipe.reward_verifier") if own else (recipe.get("reward_verifier", "default"), STUDY_VERIFIER)


ALIGNMENT_CONTROLS = "evaluation.alignment.controls"


def run_uses(arm: str, spec: dict, recipe: dict, evaluation: dict) -> list[tuple[str, str, dict, str]]:
    """uses() of one run: its arm's (`spec`, keyed arms.<arm>), then those of the credit controls it measures along
    training (its resolved evaluation block's alignment controls, keyed evaluation.alignment.controls.<name>: they
    compute credit in the run as its arm does), each plugin once, under the first key that names it. The run's
    identity (run_config), its job's messages and the probes along training all read this one list."""
    found = uses(spec, recipe, f"arms.{arm}")
    for name, control in ((evaluation.get("alignment") or {}).get("controls") or {}).items():
        named = {u[:2] for u in found}  # (kind, name)
        found += [u for u in uses({"credit": control}, recipe, f"{ALIGNMENT_CONTROLS}.{name}") if u[:2] not in named]
    return found


def identities(used: list[tuple[str, str, dict, str]]) -> list[dict]:
    """The identity of every plugin (not built-in) among `used` (uses(), run_uses()): what a run's config hash
    includes. A plugin that does not load is named by its key."""
    return [load(kind, name, key).identity() for kind, name, _, key in used if name not in BUILTIN[kind]]


def changed_since(planned: list[dict]) -> list[str]:
    """What differs now of each plugin a job was planned with (run["plugins"]: their identities when the workflow
    planned it), in words. A job can wait in a queue for hours while its author edits the plugin: run as it is now,
    it would store the edited plugin's numbers under the unedited one's identity, beside that one's runs."""
    changed = []
    for was in planned:
        now = _flat(load(was["kind"], was["name"], f"the planned {was['kind']} plugin {was['name']!r}").identity())
        before = _flat(was)
        differ = [f"{k} {now.get(k, 'not imported')} (planned: {before.get(k, 'not imported')})"
                  for k in {**before, **now} if now.get(k) != before.get(k)]
        if differ:
            changed.append(f"{was['kind']} plugin {was['name']!r}: {', '.join(differ)}")
    return changed


def edited_while_running(planned: list[dict], before: set[str]) -> list[str]:
    """changed_since's words for each planned plugin edited since, where the plugins' code may have read an edited
    file during the job: a module of it first imported after `before` (the names in sys.modules when the job began)
    read its file then, and a data file of its packages (a JSON of weights) is read whenever the code reads it, under
    the identity the job checked when it began. A plugin whose code is all modules imported when the job began ran
    as checked, whatever its files say at the end: no words."""
    changed = changed_since(planned)
    if not changed:
        return []
    tops, data = _code(planned)  # once: every module imported since is looked up in tops
    late = sorted(m for m in set(sys.modules) - before if m.partition(".")[0] in tops)
    read = (f"imported during the run: {', '.join(late)}" if late else
            f"data files, which it may read at any time: {', '.join(data)}" if data else "")
    return [f"{words} ({read})" for words in changed] if read else []


def _code(planned: list[dict]) -> tuple[set[str], list[str]]:
    """The top-level names of the planned plugins' code (each one's own package or module, and the user code it
    imports: its identity's user_code), and the files of that code that are no modules (data it reads)."""
    tops, files = set(), []
    for was in planned:
        plugin = load(was["kind"], was["name"], f"the planned {was['kind']} plugin {was['name']!r}")
        own, own_files = _source(plugin.factory)
        others = [m.partition(".")[0] for m in was.get("user_code") or {}]
        tops |= {own, *others}
        files += own_files + [entry for top in others for entry in user_code.files_of(top)]
    return tops, sorted({name for name, _ in files if not user_code.is_module(name)})


def _flat(identity: dict) -> dict:
    """An identity with each module of its user code a key of its own ('module my_helpers'), to name what changed."""
    return {**{k: v for k, v in identity.items() if k != "user_code"},
            **{f"module {m}": d for m, d in (identity.get("user_code") or {}).items()}}
