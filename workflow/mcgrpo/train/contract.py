"""What a plugin hands back is checked where it enters the trainer and the gradient tests.

A credit rule, a selector or a verifier runs inside the training loop, and what it returns decides the update and
what the budget B counts. Trusted, a NaN credit trains to NaN and still yields a confident verdict, credit one value
short fails deep inside the loss, and a rule that samples through `ctx.engine` but reports nothing breaks the
matched-compute comparison in silence. So every call into one goes through here: an exception, or an output that
breaks the contract of mcgrpo.api, stops the run at that iteration with one line naming the plugin, its config key,
where it ran (the training run or the gradient tests, and the iteration or batch) and what was wrong: a
`PluginError`, so the job exits with status 2, that line last in its log, and the run is never stored.

What is checked (docs/plugins.md, "What is checked at run time"):
- credit: a `Credit`, one row per completion of the batch, one finite real value per generated token of each (and
  of each extra training sequence, whose completion must be one that `ctx.engine` generated while the rule ran);
  `tokens_generated` a whole number, >= 0, and at least what the engines the rule was given (`ctx.engine`)
  generated while it ran, which the engine counts itself (engines.Counting);
- a selector: a `Selection` of pool indices; its groups one per chosen prompt, in order, of the recipe's group
  size; its discarded tokens a whole number >= 0, which with the kept groups' tokens covers what the engine
  generated; every row it trains on one its sampler returned, as it was returned (`sampled`);
- a verifier: a bool (or 0 / 1) for every completion, the same when one in RECHECKED is judged again (at once, and
  in its next batch);
- every call, and every build of one: the rollouts, arrays and Selections it was handed unchanged, the process's
  global state (torch's settings and kernel flags, numpy's error handling, the working folder, sys.path,
  os.environ: `settings`), the code a run computes with unpatched (mcgrpo.train.patches: torch's, transformers'
  modeling, mcgrpo's functions and classes), and ctx.engine's temperature and top_p as it found them; a credit rule's
  check_pool: the copy of the pool it was handed unchanged;
- at every checkpoint: a plugin without a state_dict of its own has the attributes it was built with, and one with
  a state_dict is restored by it (a fresh one loaded with it equals it): else a resumed run, which builds it afresh,
  would diverge from an uninterrupted one.
What a plugin is handed exposes only what mcgrpo.api documents: its engine (engines.Counting) samples through its
counted generate (no model, no sync), its prompter (rollout.PrompterView) renders and decodes, a selector's view
(policy.SelectorView) gives features and levels, not the model nor the pool.
A built-in that breaks the contract is a bug in mcgrpo: the same message, as a RuntimeError with its traceback.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import contextvars
import functools
import inspect
import numbers
import os
import pickle
import sys
import time
import traceback
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from mcgrpo.core import clock, plugins
from mcgrpo.core.errors import Interrupted, McgrpoError, PluginError
from mcgrpo.train import patches
from mcgrpo.train.engines.base import SETTINGS

_where: contextvars.ContextVar[str] = contextvars.ContextVar("mcgrpo_plugin_where", default="")


@contextlib.contextmanager
def during(what: str) -> Iterator[None]:
    """Name where plugins run inside the block ('training arm mine seed 1', then 'iteration 3'): nested blocks add
    to the outer one's words, and every message of this module says it."""
    outer = _where.get()
    token = _where.set(f"{outer}, {what}" if outer else what)
    try:
        yield
    finally:
        _where.reset(token)


@dataclass(frozen=True)
class Subject:
    """A plugin as the messages name it: its kind (credit, selection, verifier), its name as the config writes it
    and the config key that names it."""
    kind: str
    name: str
    key: str
    builtin: bool = False

    @classmethod
    def of(cls, kind: str, name: str, key: str) -> "Subject":
        return cls(kind, name, key, name in plugins.BUILTIN[kind])

    def __str__(self) -> str:
        return f"{plugins.WHAT[self.kind][:-1]} {self.name!r} ({self.key})"

    def _prefix(self) -> str:
        where = _where.get()
        return f"{self} in {where}" if where else str(self)

    def broken(self, what: str, allowed: str) -> Exception:
        """The error for an output that breaks the contract: a PluginError, or a bug where the rule is built in."""
        text = f"{self._prefix()}: {what}; allowed: {allowed}"
        return RuntimeError(f"{text} (a bug in mcgrpo's built-in)") if self.builtin else PluginError(text)

    def call(self, function: Callable, *args) -> Any:
        """`function(*args)`, its exception named (`_guarded`). A call that returns must leave what it was handed as it
        found it: the rollouts, arrays and Selections among `args`, ctx.engine's sampling settings and torch's global
        settings; the trainer goes on from them (the update, the budget, the selector, the logs, the other rules of
        the gradient tests, evaluation)."""
        with clock.checking():
            names = _parameters(function)
            before = _state(args, names)
        with patches.held() as code:
            out = self._guarded(function, *args)
        with clock.checking():
            changed = _changed(before, _state(args, names))
            if changed:
                raise self.broken(f"it changed {changed}", LEAVES)
            self._unpatched(code, "it")
        return out

    def built(self, factory: Callable, **options) -> Any:
        """`factory(**options)`: the plugin as the run builds it (when it starts, and afresh at each checkpoint where
        it has a state_dict), its exception named as a call's is (a check of its own options in __post_init__ is
        the usual one), refused where building it left the process's global state changed, as a call is (the run
        goes on from it)."""
        before = settings()
        with patches.held() as code:
            out = self._guarded(factory, **options)
        changed = setting_changed(before, settings())
        if changed:
            raise self.broken(f"building it changed {changed} and left it so", LEAVES)
        self._unpatched(code, "building it")
        return out

    def _unpatched(self, code: patches.Held, what: str) -> None:
        """Refuse a patch of the code a run computes with (mcgrpo.train.patches) that `what` left in place."""
        patched = code.changed()
        if patched:
            raise self.broken(f"{what} patched {patched} and left it so", PATCHED)

    def _guarded(self, function: Callable, *args, **options) -> Any:
        """`function(*args, **options)`; a plugin's exception becomes one line naming the plugin and where it was
        raised (the original chained as its cause, whose traceback the job prints first). mcgrpo's own errors, a
        preemption, and a built-in's exceptions pass as they are. Noted as running while it runs (`running`)."""
        _running.append((self._prefix(), time.monotonic()))
        try:
            return function(*args, **options)
        except (McgrpoError, Interrupted):
            raise
        except (Exception, SystemExit) as e:  # sys.exit() in a plugin would end the job as if it had finished
            if self.builtin:
                raise
            raise PluginError(f"{self._prefix()}: raised {type(e).__name__}: {_first_line(e)}{_origin(e)}") from e
        finally:
            _running.pop()


_running: list[tuple[str, float]] = []  # the plugin calls in progress, innermost last: (words, when it began)


def running() -> str:
    """The innermost plugin call in progress and how long it has run, in words ('' where none): what a job says when
    a stop signal comes during one (mcgrpo.train.job), since a call that never returns (a loop in a credit rule)
    would otherwise end at the job's time limit with no word of which plugin it was."""
    if not _running:
        return ""
    words, began = _running[-1]
    return f"{words} (running for {time.monotonic() - began:.0f} s)"


def imported(subject: Subject, load: Callable[[], Any]) -> Any:
    """`load()`, the first import of a plugin's module in a job, refused where the import left the process's global
    state changed: a module that sets a torch flag at its top (allow_tf32, a default dtype, oneDNN off), as research
    code does, would have the whole run compute under it while the arms it is compared with do not; and so is one that
    left the code patched (patches.held: a module the import imports first, such as the model's modeling module, which
    the job loads later, is taken as its own code left it). torch is imported first, so that its settings are read
    before the module's import as after it (a module that imports torch itself would otherwise set them unseen)."""
    import torch  # noqa: F401  (a job imports it within seconds anyway)
    before = settings()
    with patches.held() as code:  # also the modules its import imports first (transformers' modeling): as they ran
        out = load()
    changed = setting_changed(before, settings())
    if changed:
        raise subject.broken(f"importing its module changed {changed} and left it so", IMPORTED)
    subject._unpatched(code, "importing its module")
    return out


def imports_checked():
    """A block whose loads of plugins are each held to `imported`: where a verb's validation of its study config is
    its process's first import of the plugins (mcgrpo screen, train --config by hand), as a job's first import is
    (mcgrpo.cli.common._as_planned), so that what it measures comes from a process the jobs would accept."""
    return plugins.imports_checked(lambda kind, name, key, load: imported(Subject.of(kind, name, key), load))


IMPORTED = ("a module that changes none of the process's global state when it is imported (torch's settings and kernel "
            "flags, numpy's error handling, the working folder, sys.path but appending, os.environ but adding): set "
            "what a computation needs inside the call that needs it, and restore it there (docs/plugins.md)")


PATCHED = ("the code a run computes and counts with as it found it: the functions and classes of torch, "
           "torch.nn.functional, torch.nn's modules, numpy, transformers' modeling modules and mcgrpo, and their "
           "classes' methods (a global patch, as `import unsloth` or liger-kernel's apply_liger_kernel_to_* make, "
           "changes how this arm's policy computes or what its run counts, and nothing of the arms it is compared "
           "with): patch none, or only for a computation of the plugin's own, undone before it returns (try/finally)"
           " (docs/plugins.md)")


LEAVES = ("its inputs as it was given them (rollouts.problems, prompts, completions, texts, scores and rewards are "
          "read-only: copy one to change it, e.g. np.array(rollouts.rewards)), the process's global state as it found "
          "it: torch's settings (default dtype and device, grad mode, threads, deterministic algorithms, float32 "
          "matmul precision, anomaly detection) and kernels (torch.backends flags), numpy's error handling, the "
          "working folder, sys.path (appending is allowed) and os.environ (adding a variable is allowed): restore "
          "what it sets, e.g. with torch.no_grad(), np.errstate() or try/finally; and ctx.engine's temperature and "
          "top_p (restore what it sets for its own draws: the run samples its rollouts and evaluations with them) "
          "(docs/plugins.md)")
ROLLOUTS = ("problems", "group_size", "prompts", "completions", "texts", "scores", "rewards")


def settings() -> tuple:
    """The process's global state that the rest of a run computes with, or how fast ((name, value) pairs): torch's
    settings and its kernels' flags (none where torch is not imported, as in a plugin's own tests), numpy's error
    handling (np.seterr), the working folder (the run's files and checkpoints are relative paths), sys.path (what the
    run imports later: scikit-learn where a rule first fits) and os.environ (what the processes the run starts later
    inherit: the math-verify worker, restarted after a check overran). Read in tens of microseconds (environ by its
    raw dict, not decoded), a plugin call's cost next to its batch's."""
    torch = sys.modules.get("torch")
    return (*((name, _read(read)) for name, read in (_torch_readers(torch) if torch is not None else ())),
            ("numpy's error handling (np.seterr)", np.geterr()), ("the working folder (os.chdir)", os.getcwd()),
            ("sys.path", tuple(sys.path)), ("os.environ", dict(getattr(os.environ, "_data", None) or os.environ)))


class _Unreadable(str):
    """A setting whose reading raised, in words: torch's legacy get_float32_matmul_precision raises once a
    per-backend fp32_precision was set, a change that setting, read after it, names."""


def _read(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except RuntimeError as e:
        return _Unreadable(f"unreadable ({str(e)[:80]})")


@functools.cache
def _torch_readers(torch) -> tuple[tuple[str, Callable[[], Any]], ...]:
    """(name, getter) of each torch setting a plugin must leave as it found it, those this torch has: its defaults
    and modes, and the flags that pick its kernels (attention's, cuDNN's, reduced-precision matmul's, oneDNN's on the
    CPU), each of which changes the numbers a model computes (turning flash attention off changes the tiny model's
    logits on the CPU: tests/test_plugin_globals.py) or how fast. The paper says nothing of them: a run keeps
    torch's defaults and the recipe's threads."""
    backends, cuda = torch.backends, torch.backends.cuda

    def flag(module, name: str):
        return (lambda: getattr(module, name)) if hasattr(module, name) else None

    def precision(path: str):  # torch >= 2.9's per-backend float32 precision (torch.backends.mkldnn.matmul...)
        module = functools.reduce(lambda m, part: getattr(m, part, None), filter(None, path.split(".")), backends)
        return flag(module, "fp32_precision") if module is not None else None
    readers = [
        ("torch's default dtype", torch.get_default_dtype),
        ("torch's default device", getattr(torch, "get_default_device", None)),
        ("torch's grad mode", torch.is_grad_enabled), ("torch's threads", torch.get_num_threads),
        ("torch's deterministic algorithms", torch.are_deterministic_algorithms_enabled),
        ("torch's float32 matmul precision", torch.get_float32_matmul_precision),
        *((f"torch.backends.{path}{'.' if path else ''}fp32_precision", precision(path)) for path in
          ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn", "mkldnn.matmul", "mkldnn.conv",
           "mkldnn.rnn")),
        ("torch's anomaly detection", torch.is_anomaly_enabled),
        *((f"torch.backends.cuda.{name}()", getattr(cuda, name, None)) for name in
          ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled")),
        *((f"torch.backends.cuda.matmul.{name}", flag(cuda.matmul, name)) for name in
          ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")),
        *((f"torch.backends.cudnn.{name}", flag(backends.cudnn, name)) for name in
          ("enabled", "benchmark", "deterministic", "allow_tf32")),
        ("torch.backends.mkldnn.enabled", flag(backends.mkldnn, "enabled"))]
    return tuple((name, read) for name, read in readers if read is not None)


def setting_changed(before: tuple, after: tuple) -> str:
    """The first of two settings() that differ, in words: a mapping by its first key that differs, sys.path by
    what was put before or among its entries (appending is allowed: a library imported in a call may append its
    folder, and an entry put last shadows nothing imported before), os.environ by a variable changed or removed
    (one added is allowed: scikit-learn, imported where a built-in rule first fits, sets KMP_* defaults)."""
    for (name, was), (_, now) in zip(before, after):
        if was == now or name == "sys.path" and now[:len(was)] == was or isinstance(now, _Unreadable):
            continue
        if isinstance(was, dict):
            key = next((k for k in sorted({*was, *now}, key=str) if was.get(k) != now.get(k)
                        and not (name == "os.environ" and k not in was)), None)
            if key is not None:
                return (f"{name}[{_decoded(key)!r}] from {_decoded(was.get(key))!r} to "
                        f"{'unset' if key not in now else repr(_decoded(now[key]))}")
            continue
        if name == "sys.path":
            return f"sys.path from {len(was)} entries to {len(now)}, {_path_change(was, now)}"
        return f"{name} from {was} to {now}"
    return ""


def _decoded(value):
    return os.fsdecode(value) if isinstance(value, bytes) else value


def _path_change(was: tuple, now: tuple) -> str:
    """What a call did to sys.path besides appending: the first entry it put in or took out."""
    put = next((p for p in now if p not in was), None)
    return f"{put!r} put before its entries" if put is not None else \
        f"{next((p for p in was if p not in now), now[0] if now else '')!r} removed or moved"


def _sampling(args) -> tuple:
    """The sampling settings of the engine a credit rule is handed (ctx.engine: they reach the run's own engine, which
    samples every later rollout and evaluation of the arm with them), as (name, value) pairs."""
    return tuple((f"ctx.engine's {s}", getattr(a.engine, s, None)) for a in args if _has(a, "engine", "prompter")
                 for s in SETTINGS)  # None: an engine without it (the gradient tests' memo, a test's fake)


def _snapshot(rollouts) -> dict[str, Any]:
    """The rollouts' fields by value: lists by their (immutable) items, arrays by their bytes, the problem records
    (mutable dicts) by their repr. Cheap next to generating them."""
    def array(values) -> tuple:
        values = np.asarray(values)
        return values.dtype.str, values.shape, values.tobytes()
    return {"problems": repr(rollouts.problems), "group_size": rollouts.group_size,
            "prompts": list(rollouts.prompts), "completions": list(rollouts.completions),
            "texts": list(rollouts.texts), "rewards": array(rollouts.rewards),
            "scores": tuple(array(getattr(rollouts.scores, f)) for f in sorted(vars(rollouts.scores)))}


def _state(args, names: list[str]) -> tuple:
    names = [*names[:len(args)], *(f"argument {k + 1}" for k in range(len(names), len(args)))]
    return (settings() + _sampling(args), [_snapshot(a) for a in args if _has(a, *ROLLOUTS)],
            [_handed(name, a) for name, a in zip(names, args) if isinstance(a, np.ndarray) or _has(a, *SELECTED)])


def _parameters(function: Callable) -> list[str]:
    """The names of `function`'s parameters, what a message calls its arguments ('group_means')."""
    try:
        return [p.name for p in inspect.signature(function).parameters.values()]
    except (TypeError, ValueError):  # no signature (a builtin)
        return []


SELECTED = ("chosen", "candidates", "predicted", "features")  # a Selection's fields


def _handed(name: str, arg) -> tuple[str, dict[str, Any]]:
    """An array or a Selection a plugin is handed (observe's group means and the Selection trained), by value: the
    run logs both after the call (prompts.parquet, the groups' composition, the distinct prompts trained)."""
    def value(v) -> tuple | None:
        return None if v is None else (np.asarray(v).dtype.str, np.shape(v), np.asarray(v).tobytes())
    if isinstance(arg, np.ndarray):
        return name, {"": value(arg)}
    return name, {f: value(getattr(arg, f, None)) for f in SELECTED}


def _changed(before: tuple, after: tuple) -> str:
    """What differs between two _state()s, in words ('' where nothing does)."""
    (state, rollouts, handed), (state_now, rollouts_now, handed_now) = before, after
    if state and (changed := setting_changed(state, state_now)):
        return f"{changed} and left it so"
    return next((f"rollouts.{f} in place" for old, new in zip(rollouts, rollouts_now) for f in ROLLOUTS
                 if old[f] != new[f]), "") or next((f"{name}{'.' if f else ''}{f} in place" for (name, old), (_, new)
                                                     in zip(handed, handed_now) for f in old if old[f] != new[f]), "")


def sampled(subject: Subject, sample: Callable) -> tuple[Callable, Callable[[Any], None]]:
    """`sample` (a selector's sampler) as the selector is handed it, each group it returns snapshotted; and the
    check, after the call, of the groups the selector returned to train on: none of those it sampled changed in
    place (their problem records are the pool's, which every later iteration and the credit rule read), and every
    row it trains on is one its sampler returned, with that row's prompt, text, scores, reward and problem (a
    selector's own rows, or rewards it made up, would train on what neither the engine counted nor the verifier
    judged)."""
    handed, done = [], []

    def recorded(*args):
        if done:  # the count of what it sampled is read: a selector that kept it would sample uncounted tokens
            raise RuntimeError("the sample function of an earlier iteration, whose tokens are counted already: what "
                               "it sampled now would count toward no budget; allowed: sampling through the `sample` "
                               "of the call in progress (docs/plugins.md)")
        batch = sample(*args)
        handed.append((batch, _snapshot(batch)))
        return batch

    def check(batch) -> None:
        done.append(True)
        changed = _changed(((), [s for _, s in handed], []), ((), [_snapshot(b) for b, _ in handed], []))
        if changed:
            raise subject.broken(f"it changed {changed} (of groups it sampled)", LEAVES)
        rows = {id(b.completions[r]): (b, r) for b, _ in handed for r in range(len(b.completions))}
        for r, completion in enumerate(batch.completions):
            found = rows.get(id(completion))
            if found is None:
                raise subject.broken(f"it trains on row {r}, a completion its sampler never returned", SAMPLED)
            if not _same_row(batch, r, *found):
                raise subject.broken(f"it trains on row {r}, a completion its sampler returned, with another prompt, "
                                     "text, score, reward or problem than it had there", SAMPLED)
    return recorded, check


def _same_row(batch, r: int, handed, h: int) -> bool:
    """Whether row `r` of `batch` is row `h` of the sampled `handed`, field by field."""
    def fields(b, i: int) -> tuple:
        return (b.prompts[i], b.texts[i], float(b.rewards[i]), b.problems[i // b.group_size]["problem_id"],
                *(bool(getattr(b.scores, f)[i]) for f in sorted(vars(b.scores))))
    return batch.group_size == handed.group_size and fields(batch, r) == fields(handed, h)


SAMPLED = ("rows its sampler returned, as it returned them: whole groups chosen with Rollouts.take and joined with "
           "Rollouts.join, never made up or re-rewarded (docs/plugins.md)")


def _has(obj, *fields: str) -> bool:
    """Whether `obj` has the fields of the type the contract names (read by field, so that this module imports
    none of the types whose producers it checks)."""
    return all(hasattr(obj, f) for f in fields)


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else ""
    return line if len(line) <= 300 else line[:297] + "..."


def _origin(error: Exception) -> str:
    """' (at file:line, in function)': the frame that raised."""
    frames = traceback.extract_tb(error.__traceback__)
    return f" (at {frames[-1].filename}:{frames[-1].lineno}, in {frames[-1].name})" if frames else ""


CREDIT = ("a Credit with one finite value per generated token of every completion of the batch (and of each extra "
          "sequence), and tokens_generated an int >= 0 counting every token it sampled (docs/plugins.md)")


def credit(subject: Subject, out, rollouts, engine):
    """The credit rule's output `out` for `rollouts`, checked against `engine`, the counted engine it was given
    (engines.Counting): what it generated and handed out while the rule ran, its count read now and closed (a rule
    that kept it would sample uncounted tokens with it in a later call)."""
    engine.close()
    if not _has(out, "tokens", "tokens_generated", "sequences"):
        raise subject.broken(f"it returned {type(out).__name__}, not a Credit", CREDIT)
    n = len(rollouts.completions)
    if not isinstance(out.tokens, (list, tuple)) or len(out.tokens) != n:
        rows = len(out.tokens) if hasattr(out.tokens, "__len__") else type(out.tokens).__name__
        raise subject.broken(f"credit for {rows} completions, the batch has {n}", CREDIT)
    if (unsampled := sequences_problem(out.sequences, engine)):
        raise subject.broken(unsampled, SEQUENCES)
    problem = next((p for r, (values, c) in enumerate(zip(out.tokens, rollouts.completions))
                    if (p := values_problem(values, len(c), f"completion {r}"))), "")
    problem = problem or next((p for s, seq in enumerate(out.sequences)
                               if (p := values_problem(seq.credit, len(seq.completion), f"extra sequence {s}"))), "")
    problem = problem or tokens_problem(out.tokens_generated, engine.generated, "Credit.tokens_generated",
                                        f"ctx.engine generated {engine.generated} tokens while the rule ran")
    if problem:
        raise subject.broken(problem, CREDIT)
    if (unloggable := stats_problem(out.stats)):
        raise subject.broken(unloggable, STATS)
    return _held(out)


def _held(out):
    """The Credit as it was checked, held apart from the rule: its values copied (float64, the loss's own cast) and
    its stats a dict of their own. A rule may return a list it refills at its next call (a buffer of its module, shared
    by its instances): the gradient tests call every rule on a batch before they take any gradient, so an arm would be
    measured with the next rule's credit; a run logs the stats after the selector's observe, as they were checked."""
    held = copy.copy(out)
    for name, value in (("tokens", [np.array(v, dtype=np.float64) for v in out.tokens]),
                        ("sequences", [_with_credit(seq) for seq in out.sequences]), ("stats", dict(out.stats))):
        object.__setattr__(held, name, value)  # a frozen dataclass of the rule's own too
    return held


def _with_credit(sequence):
    """An extra sequence with its context and credit copied, its completion the object the engine handed out."""
    held = copy.copy(sequence)
    object.__setattr__(held, "context", copy.copy(sequence.context))
    object.__setattr__(held, "credit", np.array(sequence.credit, dtype=np.float64))
    return held


STATS = ("Credit.stats a dict of names (str) to numbers (an int or a float; NaN where there is none this iteration, "
         "float(x) for a bool): a column each of iterations.parquet (docs/plugins.md)")


def stats_problem(stats) -> str:
    """What is wrong with a credit rule's stats as columns of iterations.parquet ('' where nothing is): a text, a
    bool, an array or None beside numbers in a column cannot be written, and the run writes it when it ends, after
    its whole budget was spent."""
    if not isinstance(stats, dict):
        return f"Credit.stats is {type(stats).__name__}, not a dict"
    return next((f"Credit.stats[{name!r}] is {value!r} ({type(value).__name__}), not a number"
                 if isinstance(name, str) else f"Credit.stats has the name {name!r} ({type(name).__name__}), not a str"
                 for name, value in stats.items() if not isinstance(name, str) or isinstance(value, (bool, np.bool_))
                 or not isinstance(value, (int, float, np.integer, np.floating))), "")


SEQUENCES = ("extra sequences (Credit.sequences) whose completion is one that ctx.engine.generate returned while "
             "the rule ran, as it returned it: their tokens count toward the budget B (docs/plugins.md)")


def sequences_problem(sequences, engine) -> str:
    """What is wrong with a credit rule's extra training sequences: each must train on a completion `engine`
    generated (and counted) during the call, the object it handed out; '' where nothing is."""
    if not isinstance(sequences, (list, tuple)):
        return f"Credit.sequences is {type(sequences).__name__}, not a list of TrainingSequence"
    handed = engine.handed_out() if sequences else set()
    return next((f"its extra sequence {s} trains on a completion ctx.engine did not generate while it ran "
                 f"(tokens never generated count nothing toward B)"
                 for s, seq in enumerate(sequences) if id(getattr(seq, "completion", None)) not in handed), "")


def values_problem(values, length: int, what: str) -> str:
    """What is wrong with `values` as the credit of `what`, `length` tokens long ('' where nothing is)."""
    try:
        given = np.asarray(values)
        array = np.asarray(given, dtype=np.float64) if _real(given) else None
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a torch tensor that requires grad
        return f"the credit of {what} is {type(values).__name__}, not numbers (a numpy array, a list of floats)"
    if array is None:  # the cast the loss makes would drop an imaginary part, or parse text as numbers
        return f"the credit of {what} is {given.dtype}, not real numbers (floats, ints or bools)"
    if array.ndim != 1 or len(array) != length:
        return f"{what} has {length} tokens, its credit {array.size} values" + (
            "" if array.ndim == 1 else f" in shape {array.shape}")
    bad = np.flatnonzero(~np.isfinite(array))
    if len(bad):
        return (f"the credit of {what} is {array[bad[0]]} at token {bad[0]} ({len(bad)} of its {length} values "
                f"not finite)")
    return ""


def _real(array: np.ndarray) -> bool:
    """Whether an array holds real numbers: bools, ints or floats, or Python objects that are (a Fraction)."""
    return array.dtype.kind in "biuf" or (array.dtype.kind == "O" and
                                           all(isinstance(v, numbers.Real) for v in array.ravel()))


def tokens_problem(reported, least: int, field: str, generated: str) -> str:
    """What is wrong with a plugin's count `reported` of tokens it generated, where the engine's own count says it is
    at least `least` (`generated`: that count in words); '' where nothing is."""
    if isinstance(reported, (bool, np.bool_)) or not isinstance(reported, (int, np.integer)):
        return f"{field} is {reported!r}, not a whole number of tokens"
    if reported < 0:
        return f"{field} is {reported}, a negative count"
    if reported < least:
        return f"{field} is {int(reported)}, but {generated}: every generated token counts toward the budget B"
    return ""


SELECTION = ("a Selection of pool indices (numpy arrays of ints): candidates, each with its predicted success, and "
             "chosen among them (at least one trained, at most recipe.prompts_per_iteration), its groups (a Rollouts) "
             "one per chosen prompt, in its order, with the recipe's group size, and discarded tokens an int >= 0 that "
             "with the kept groups' tokens covers every token generated (docs/plugins.md)")


def selection(subject: Subject, out, pool_size: int, per_iteration: int):
    """A selector's Selection, checked: its candidates and chosen prompts are pool indices, the chosen among the
    candidates (where it names any) and at most `per_iteration` of them (more would train on a larger batch than the
    recipe's, at fewer updates per token than the arms it is compared with), one predicted success per candidate.
    prompts.parquet logs each candidate by its index, with its prediction (iterations.parquet their means)."""
    if not _has(out, "candidates", "chosen", "predicted"):
        raise subject.broken(f"select returned {type(out).__name__}, not a Selection", SELECTION)
    problem = _indices_problem(out.candidates, "candidates", pool_size) or \
        _indices_problem(out.chosen, "chosen prompts", pool_size)
    if problem:
        raise subject.broken(problem, SELECTION)
    candidates, chosen = out.candidates, out.chosen
    if len(chosen) > per_iteration:
        raise subject.broken(f"it chose {len(chosen)} prompts, more than recipe.prompts_per_iteration "
                             f"({per_iteration})", SELECTION)
    if len(candidates) and (unlisted := _unlisted(chosen, candidates)):
        raise subject.broken(unlisted, SELECTION)
    predicted = np.asarray(out.predicted)
    if predicted.shape != candidates.shape or not _real(predicted):
        raise subject.broken(f"its predicted successes are {predicted.dtype} in shape {predicted.shape}, for "
                             f"{len(candidates)} candidates", SELECTION)
    return out


def _unlisted(chosen: np.ndarray, candidates: np.ndarray) -> str:
    """The first chosen prompt that is not among the candidates, as often as it is chosen ('' where none): each group
    trained is logged on a candidate's row of prompts.parquet, one group a row."""
    drawn = collections.Counter(candidates.tolist())
    over = next(((j, n) for j, n in collections.Counter(chosen.tolist()).items() if n > drawn[j]), None)
    if over is None:
        return ""
    j, n = over
    return (f"it chose prompt {j} {n} times, more often than its {len(candidates)} candidates hold it ({drawn[j]})"
            if drawn[j] else f"it chose prompt {j}, not one of its {len(candidates)} candidates")


def _indices_problem(values, what: str, pool_size: int) -> str:
    """What is wrong with `values` as a Selection's pool indices ('' where nothing is): a numpy array of ints, each
    in the pool (a negative index would log another problem than the one trained)."""
    if not isinstance(values, np.ndarray) or values.ndim != 1 or (
            values.size and not np.issubdtype(values.dtype, np.integer)):
        shape = f"{values.dtype} in shape {values.shape}" if isinstance(values, np.ndarray) else type(values).__name__
        return f"its {what} are {shape}, not a numpy array of pool indices"
    outside = values[(values < 0) | (values >= pool_size)]
    return f"its {what} hold {int(outside[0])}, outside the pool of {pool_size}" if len(outside) else ""


def groups(subject: Subject, out, group_size: int, pool: list[dict], per_iteration: int, engine_generated: int):
    """A selector's `generate` output (groups, discarded tokens, final Selection), checked against what the engine
    generated for it and against the pool's records (`pool`): group g is of chosen prompt g, so that what is logged,
    observed and counted of each prompt is its own group's."""
    if not (isinstance(out, tuple) and len(out) == 3):
        raise subject.broken(f"generate returned {type(out).__name__}, not (groups, discarded tokens, Selection)",
                             SELECTION)
    batch, discarded, chosen = out
    selection(subject, chosen, len(pool), per_iteration)
    if not len(chosen.chosen):  # an iteration that generates nothing would never reach the budget
        raise subject.broken("it trained on no prompt", SELECTION)
    if not _has(batch, "problems", "group_size", "completions", "rewards"):
        raise subject.broken(f"generate returned groups of type {type(batch).__name__}, not Rollouts", SELECTION)
    if len(batch.problems) != len(chosen.chosen) or batch.group_size != group_size or \
            len(batch.completions) != len(batch.problems) * group_size:
        raise subject.broken(f"{len(batch.problems)} groups of {batch.group_size} ({len(batch.completions)} "
                             f"completions) for {len(chosen.chosen)} chosen prompts, group size {group_size}",
                             SELECTION)
    other = next(((g, j) for g, (record, j) in enumerate(zip(batch.problems, chosen.chosen.tolist()))
                  if record["problem_id"] != pool[j]["problem_id"]), None)
    if other:
        g, j = other
        raise subject.broken(f"its group {g} is of problem {batch.problems[g]['problem_id']!r}, but its chosen prompt "
                             f"{g} is pool index {j}, problem {pool[j]['problem_id']!r}", SELECTION)
    kept = batch.n_tokens
    problem = tokens_problem(discarded, engine_generated - kept, "its count of discarded tokens",
                             f"the engine generated {engine_generated} tokens for its groups, {kept} of them kept")
    if problem:
        raise subject.broken(problem, SELECTION)
    return out


RESUMABLE = ("state_dict() -> dict and load_state_dict(state) that save and restore every attribute it changes "
             "across iterations (a cache a resumed run rebuilds alike kept off the instance, e.g. in a functools.cache "
             "of its module), or no state kept on it (docs/plugins.md)")


def unsaved_state(plugin) -> dict[str, Any] | None:
    """The attributes of a plugin that cannot save its state for a resume (no state_dict of its own: a selector's
    inherited one saves nothing), by value (pickled, or their repr where pickle cannot): what `resumable` compares
    at each checkpoint with the same taken when it was built. None where the plugin saves its state."""
    method = getattr(plugin, "state_dict", None)
    if method is not None and not getattr(method, "saves_nothing", False):
        return None
    attributes = getattr(plugin, "__dict__", None)
    return {name: _by_value(value) for name, value in
            (attributes.items() if attributes is not None else [("its slots", plugin)])}


def _by_value(value) -> bytes | str:
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # a lambda, a lock, a class of a function's own: its repr
        return repr(value)


def resumable(subject: Subject, plugin, built: dict[str, Any] | None, rebuild: Callable[[], Any] | None = None) -> None:
    """Refuse, as a checkpoint is about to be written, a plugin whose attributes changed since it was built
    (`built`: its unsaved_state then) but which cannot save them: a run resumed from that checkpoint would build it
    afresh and go on differently from the run uninterrupted, in silence. One that saves its state must restore it
    all (`restored`, where `rebuild` builds it afresh as a resumed run does)."""
    if built is None:
        if rebuild is not None:
            restored(subject, plugin, rebuild)
        return
    now = unsaved_state(plugin)
    changed = sorted(name for name in {*built, *now} if built.get(name) != now.get(name))
    if changed:
        raise subject.broken(f"its attribute{'s' if len(changed) > 1 else ''} {', '.join(changed)} changed since it "
                             f"was built, but it has no state_dict: a run resumed from this checkpoint would start "
                             f"it afresh and diverge from the run uninterrupted", RESUMABLE)


def restored(subject: Subject, plugin, rebuild: Callable[[], Any]) -> None:
    """Refuse a plugin whose state_dict leaves out what it changed: built afresh (`rebuild`, as a resumed run builds
    it) and loaded with its state_dict() through pickle (as a resume reads the checkpoint), it must equal the live one
    in every attribute the live one has (`same`; one only loading sets, as a count kept with getattr(self, name, 0),
    is not compared: the live one takes it when it first sets it). Run at checkpoints only: a state_dict and a build."""
    fresh = rebuild()
    subject.call(fresh.load_state_dict, _copied(subject, subject.call(plugin.state_dict)))
    live, loaded = attributes(plugin), attributes(fresh)
    lost = sorted(n for n in live if n not in loaded or not same(live[n], loaded[n]))
    if lost:
        raise subject.broken(f"its attribute{'s' if len(lost) > 1 else ''} {', '.join(lost)} "
                             f"{'are' if len(lost) > 1 else 'is'} not restored by its state_dict (built afresh and "
                             f"loaded with what state_dict() returned, it differs there): a run resumed from this "
                             f"checkpoint would diverge from the run uninterrupted", RESUMABLE)


def _copied(subject: Subject, state):
    """`state` as a resume reads it back (pickled, as torch.save writes it), sharing nothing with the live plugin;
    refused, named, where pickle cannot write or read it back: the checkpoint could not hold it either."""
    try:
        return pickle.loads(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as e:
        raise subject.broken(f"its state_dict() cannot be written to a checkpoint and read back ({type(e).__name__}: "
                             f"{_first_line(e)})", RESUMABLE) from e


POOL = ("a check of the pool it is handed that reads it and raises where the pool does not suit the rule (a copy, "
        "deep: the trainer rewards every rollout against the pool's answers after it) (docs/plugins.md)")


def pool_checked(subject: Subject, check: Callable, pool, where: str) -> None:
    """A credit rule's `check_pool(pool, where)`, run on a deep copy of the pool (its steps' lists too), refused where
    it edited that copy: the run builds its problem records, answers and steps, from the pool after it."""
    handed = pickle.loads(pickle.dumps(pool, protocol=pickle.HIGHEST_PROTOCOL))
    subject.call(check, handed, where)
    changed = _frame_changed(pool, handed)
    if changed:
        raise subject.broken(f"its check_pool changed {changed} in place", POOL)


def _frame_changed(was, now) -> str:
    """Where the frame `now` differs from `was`, in words ('' where it does not)."""
    if list(was.columns) != list(now.columns) or not was.index.equals(now.index):
        return "the pool's columns or rows"
    for column in (c for c in was.columns if not _equals(was[c], now[c])):  # a fast pass, then value by value
        row = next((r for r, (a, b) in enumerate(zip(was[column], now[column])) if not same(a, b)), None)
        if row is not None or was[column].dtype != now[column].dtype:
            return f"the pool's column {column!r}" + (f" (row {row})" if row is not None else "")
    return ""


def _equals(was, now) -> bool:
    """pandas' vectorized equality of two columns (False where it cannot tell: an array in a cell)."""
    try:
        return bool(was.dtype == now.dtype and was.equals(now))
    except (TypeError, ValueError):
        return False


def same(a, b, _seen: set | None = None) -> bool:
    """Whether `a` and `b` are equal by value: arrays and tensors by dtype, shape and elements (NaN equal to NaN),
    containers element by element, generators by their state, other objects attribute by attribute. What the checks
    of a plugin's state compare: `==` alone raises on arrays and compares objects by identity."""
    seen = set() if _seen is None else _seen
    if a is b or (id(a), id(b)) in seen:
        return True
    if type(a) is not type(b):
        return False
    seen.add((id(a), id(b)))
    for kind, equal in _equalities("torch" in sys.modules):
        if isinstance(a, kind):
            return equal(a, b, seen)
    if inspect.isroutine(a):
        return getattr(a, "__code__", a) == getattr(b, "__code__", b)
    if hasattr(a, "__dict__") or hasattr(a, "__slots__"):
        return same(attributes(a), attributes(b), seen)
    try:
        return bool(a == b)
    except Exception:  # an object whose == is not a bool
        return _by_value(a) == _by_value(b)


@functools.cache
def _equalities(torch_imported: bool) -> list[tuple[type, Callable]]:
    """(type, equality) for the values `same` does not compare by ==: numbers with NaN, containers, arrays,
    generators, tensors where torch is imported (made once either way)."""
    import collections
    import random
    out = [(float, lambda a, b, s: a == b or (a != a and b != b)),
           ((str, bytes, int, type(None)), lambda a, b, s: a == b),
           ((list, tuple, collections.deque), lambda a, b, s: len(a) == len(b) and all(
               same(x, y, s) for x, y in zip(a, b))),
           (dict, lambda a, b, s: a.keys() == b.keys() and all(same(a[k], b[k], s) for k in a)),
           ((set, frozenset), lambda a, b, s: a == b),
           (np.ndarray, lambda a, b, s: a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
               a, b, equal_nan=a.dtype.kind in "fc")),
           (np.generic, lambda a, b, s: same(np.asarray(a), np.asarray(b), s)),
           (np.random.Generator, lambda a, b, s: same(a.bit_generator.state, b.bit_generator.state, s)),
           (random.Random, lambda a, b, s: a.getstate() == b.getstate())]
    torch = sys.modules.get("torch") if torch_imported else None
    if torch is not None:
        out += [(torch.Tensor, _same_tensor), (torch.Generator, lambda a, b, s: torch.equal(a.get_state(),
                                                                                            b.get_state()))]
    return out


def _same_tensor(a, b, seen) -> bool:
    a, b = a.detach().cpu(), b.detach().cpu()
    return a.dtype == b.dtype and a.shape == b.shape and bool(((a == b) | (a != a) & (b != b)).all())


def attributes(obj) -> dict[str, Any]:
    """An object's attributes by name: its __dict__, and its slots."""
    found = dict(getattr(obj, "__dict__", {}))
    slots = [n for cls in type(obj).__mro__ for n in _slots(cls) if n not in ("__dict__", "__weakref__")]
    found.update((n, getattr(obj, n)) for n in slots if hasattr(obj, n))
    return found


def _slots(cls: type) -> tuple[str, ...]:
    slots = cls.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


VERDICT = ("True or False (or 1 / 0) for every completion, the same each time for the same (text, reference): "
           "(text, reference) -> bool, drawing nothing at random and reading no clock nor state it changes "
           "(docs/plugins.md)")
RECHECKED = 8  # one completion in this many (at least one a batch) is judged twice
# per verifier, one (text, reference, verdict) of the last batch it judged, judged again at the start of the next:
# a verifier whose state drifts between batches (a count of its calls, a mode it switches) gives it another verdict
_last_judged: dict[Subject, tuple[str, Any, float]] = {}


def verdicts(subject: Subject, judge: Callable[[str, str], Any], texts, answers) -> np.ndarray:
    """A verifier's verdict on each (text, reference), as floats 1.0 / 0.0, each checked to be a bool. Every
    RECHECKED-th completion, from an offset the batch's first text picks, is judged a second time at once, and the last
    of them again at the start of the verifier's next batch: refused where two verdicts differ, since a verifier that
    draws at random or drifts with state of its own would make rewards noise that no one is told of.
    The batch is one call (`Subject.call`): what it must leave as it found it is read once, not at every verdict
    (576 reads a 512-completion batch, 10 ms an iteration)."""
    return subject.call(_judged, subject, judge, list(texts), list(answers))


def _judged(subject: Subject, judge: Callable[[str, str], Any], texts: list[str], answers: list) -> np.ndarray:
    if subject in _last_judged:
        text, answer, was = _last_judged[subject]
        _same_verdict(subject, was, _verdict(subject, judge, text, answer, "a completion of its last batch"),
                      "a completion of its last batch judged again in this one", text, answer)
    out = []
    offset = zlib.crc32(texts[0].encode()) % min(RECHECKED, len(texts)) if texts else 0
    for r, (text, answer) in enumerate(zip(texts, answers)):
        out.append(_verdict(subject, judge, text, answer, f"completion {r}"))
        if r % RECHECKED == offset:
            again = _verdict(subject, judge, text, answer, f"completion {r}")
            _same_verdict(subject, out[-1], again, f"completion {r} judged again", text, answer)
            _last_judged[subject] = text, answer, again
    return np.array(out, dtype=np.float64)


def _same_verdict(subject: Subject, was: float, now: float, what: str, text: str, answer) -> None:
    if now != was:
        raise subject.broken(f"it returned {bool(was)}, then {bool(now)} for {what} (text {_short(text)}, reference "
                             f"{answer!r})", VERDICT)


def _verdict(subject: Subject, judge: Callable[[str, str], Any], text: str, answer: str, what: str) -> float:
    verdict = judge(text, answer)  # a plugin's exception is named by the batch's call
    if not isinstance(verdict, (bool, np.bool_, int, np.integer)) or verdict not in (0, 1):
        raise subject.broken(f"it returned {verdict!r} for {what}, not a bool", VERDICT)
    return float(bool(verdict))


def _short(text: str) -> str:
    """A completion's text for a one-line message: its repr, the middle cut past 120 characters."""
    return repr(text if len(text) <= 120 else f"{text[:60]}...{text[-57:]}")
