"""Were the two runs of each seed's pair made alike? The alike check of mcgrpo.analysis.robustness.

The run store is keyed by a run's effective config, not by the software that ran it nor the machine
(docs/store-integrity.md): a study may pair a run made months ago under another torch with one made today, or a
run timed on an H100 node with one timed on a CPU node, and the paired difference then measures the stacks or the
machines beside the intervention. For every seed a contrast pairs, this compares the two runs' run.json:
- the stack, on every basis: mcgrpo's own code and the versions of STACK (mcgrpo.train.job.versions records
  them), as full strings ("2.13.0+cpu" and "2.13.0+cu130" are different builds);
- the machine, on the time bases only: run.json's hardware, MACHINE. A count basis (tokens, updates, iterations)
  reads no clock; another machine's rounding moves a run as another seed does, which the test counts as noise
  (the paper is silent on mixed machines: this rule is the workflow's).
A run is first held to itself: each attempt records what it trained with (mcgrpo.train.job, attempts.json), and a
run resumed under another stack or on another machine (a preempted job requeued onto another node, or after its
image was rebuilt) is unlike its pair whatever run.json's versions, the last attempt's, say. Only the attempts whose
training the run kept are read (kept()).
Pairing is what the paired test needs: seeds on different machines pass where each seed's two runs are alike.
A key only one run records is not compared: an arm on the vllm engine or a TRL arm records vLLM's or TRL's
version and its base does not, which is the intervention, not a stack. A run whose run.json lacks versions or
hardware (made before they were recorded, or a test's) leaves that part unread for its pair, never failed; so does
an ingested run's machine: its times are TRL's step times on whatever machine trained it, while its hardware names
the machine that evaluated its checkpoints. Its versions are the stack that evaluated it, which sampled and scored
its evaluations, and are compared as any run's; the stack that trained it is compared too, where its TRL folder
records it (ingested.trained_with, _trained): checkpoints saved under different transformers, or a model card
that disagrees with them, make it unlike as attempts under different stacks do. Every basis of
mcgrpo.analysis.contrasts pairs runs by seed, equal iterations included; the pooled bases (mcgrpo.analysis.bases)
pool per-base contrasts, each checked in its own study.
"""

from __future__ import annotations

from mcgrpo.analysis import formats

# Compared: what computes a run's numbers, mcgrpo's own code included (mcgrpo_code: the sha256 of its source, but the
# analysis; the store key holds the config, not the code that trained it). Not python's version (the arithmetic is
# torch's; the patch version moves with every image rebuild, and CI already sets it aside) nor mcgrpo's version
# string: it names a release, which mcgrpo_code tells apart where it matters.
STACK = ("mcgrpo_code", "torch", "transformers", "trl", "vllm", "math_verify")
MACHINE = ("device", "gpu", "cpu", "threads")
# What an ingested run's TRL folder can record of the stack that trained it (mcgrpo.integrations.ingest.training_stack)
TRAINED = ("torch", "transformers", "trl")
KINDS = {"stack": "made under different stacks", "machine": "timed on different machines"}


def machine_words(hardware: dict) -> str:
    """'NVIDIA H100 80GB HBM3' or 'CPU (AMD EPYC), 2 threads': where a run was timed, as figures and checks say."""
    threads = hardware.get("threads")
    return hardware.get("gpu") or f"CPU ({hardware.get('cpu')}), {threads} thread{'s' if threads != 1 else ''}"


def kept(attempts: list[dict]) -> list[dict]:
    """The attempts whose training a run kept: one that the next resumed from beyond where it started (an attempt
    stopped before its first checkpoint, or any attempt of a TRL run but the last, trained nothing the run kept), and
    the last where it trained past its start (a finished run written again from its checkpoint trained nothing)."""
    starts = [attempt.get("resumed_at") or 0 for attempt in attempts]
    out = [attempt for attempt, start, after in zip(attempts, starts, starts[1:]) if after > start]
    if attempts and (attempts[-1].get("iterations") is None or attempts[-1]["iterations"] > starts[-1]):
        out.append(attempts[-1])
    return out


def _recorded(record: dict | None, part: str, keys: tuple[str, ...]) -> list[tuple[int | None, dict]] | None:
    """[(attempt, {key: value})] of a run's kept attempts that recorded `part` (mcgrpo.train.job: 'stack' or
    'machine'); [(None, run.json's)] where none did (runs from before attempts recorded it, TRL's ingested runs);
    None where neither is recorded. run.json's own (the last attempt's) fills the keys attempts never record."""
    if not isinstance(record, dict):
        return None
    whole = record.get({"stack": "versions", "machine": "hardware"}[part])
    whole = {k: whole[k] for k in keys if whole.get(k) is not None} if isinstance(whole, dict) else None
    attempts = record.get("attempts") if isinstance(record.get("attempts"), list) else []
    found = [(a.get("attempt"), {**(whole or {}), **{k: v for k, v in a[part].items() if k in keys}})
             for a in kept([a for a in attempts if isinstance(a, dict)]) if isinstance(a.get(part), dict)]
    return found or (None if whole is None else [(None, whole)])


def _trained(record: dict | None, part: str, keys: tuple[str, ...]) -> list[tuple[str, dict]] | None:
    """[(file, {key: value})] of the stack that trained an ingested run, as its TRL folder records it (ingest's
    ingested.trained_with: each kept checkpoint's config.json, TRL's model card), None where it records none (a run
    ingested before it was read, or a folder that says nothing); any other run's is the stack it trained and was
    evaluated with (_recorded)."""
    block = record.get("ingested") if isinstance(record, dict) else None
    if not isinstance(block, dict):
        return _recorded(record, part, keys)
    files = block.get("trained_with") if isinstance(block.get("trained_with"), dict) else {}
    found = [(name, {k: v for k, v in versions.items() if k in keys and isinstance(v, str)})
             for name, versions in files.items() if isinstance(versions, dict)]
    return [(name, versions) for name, versions in found if versions] or None


def _exact(x, y) -> bool:
    return x == y


def _release(x, y) -> bool:
    """Versions alike where equal, or of one release where one names no build: TRL's model card gives torch's
    distribution version, which for a PyPI CUDA wheel is '2.13.0' where torch.__version__ says '2.13.0+cu130'."""
    if isinstance(x, str) and isinstance(y, str) and ("+" in x) != ("+" in y):
        return x.split("+")[0] == y.split("+")[0]
    return x == y


def _words(part: str, key: str, values: dict) -> str:
    return machine_words(values) if part == "machine" else f"{key} {values.get(key, 'not recorded')}"


def _where(label: int | str | None) -> str:
    """An attempt by its number; a file of an ingested run's TRL folder by its name."""
    return label if isinstance(label, str) else f"attempt {label}"


def _stack(found: list[tuple[int | str | None, dict]]) -> dict:
    """A run's values by key, the last record of each (its kept attempts, its folder's files) standing for it."""
    return {k: v for _, values in found for k, v in values.items()}


def _said(part: str, key: str, found: list[tuple[int | str | None, dict]]) -> str:
    """A run's words for `key`, naming the file of its TRL folder the value was read from (not run.json's)."""
    return _words(part, key, _stack(found)) + _source(found, key)


def _source(found: list[tuple[int | str | None, dict]], key: str) -> str:
    label = next((label for label, values in reversed(found) if key in values), None)
    return f" in {label}" if isinstance(label, str) else ""


def _named(part: str, key: str, records: list[dict]) -> list[str]:
    """Each record's words for `key`, the key itself added where they would read alike though the key differs (the
    same GPU on another host CPU, or other threads)."""
    words = [_words(part, key, values) for values in records]
    return [f"{w} ({key} {values.get(key)})" for w, values in zip(words, records)] if len(set(words)) == 1 else words


def _across(found: list[tuple[int | str | None, dict]], part: str, keys: tuple[str, ...],
            same=_exact) -> tuple[str, str] | None:
    """(the key, the run's words) where the records of a run that record a key differ on it (its kept attempts,
    its TRL folder's files): 'torch 2.11.0+cu130 in attempt 1, torch 2.13.0+cpu in attempt 2', 'transformers
    5.17.0 in checkpoint-2/config.json, transformers 5.24.0 in README.md'."""
    for key in keys:
        have = [(label, values) for label, values in found if key in values]
        if any(not same(x[key], y[key]) for i, (_, x) in enumerate(have) for _, y in have[i + 1:]):
            named = _named(part, key, [values for _, values in have])
            return key, ", ".join(f"{words} in {_where(label)}" for words, (label, _) in zip(named, have))
    return None


def _differ(a: list, b: list, part: str, keys: tuple[str, ...], same=_exact) -> tuple[str, str, str] | None:
    """(part, A's words, B's words) of the first key on which runs `a` and `b` (_recorded's or _trained's) differ:
    within a run, across its records, or between the two; a key only one run records is not compared (the arm)."""
    for mine, other, flip in ((a, b, False), (b, a, True)):
        if across := _across(mine, part, keys, same):
            key, words = across
            theirs = _said(part, key, other)
            return (part, theirs, words) if flip else (part, words, theirs)
    stack_a, stack_b = _stack(a), _stack(b)
    for key in (k for k in keys if k in stack_a and k in stack_b and not same(stack_a[k], stack_b[k])):
        named = _named(part, key, [stack_a, stack_b])
        return part, *(words + _source(found, key) for words, found in zip(named, (a, b)))
    return None


def unlike(a: dict | None, b: dict | None, timed: bool) -> tuple[bool, tuple[str, str, str] | None]:
    """(whether anything of runs `a` and `b` (their run.json) could be compared, (kind, A's words, B's words) of the
    first key on which they differ, None where they are alike): the stack that evaluated them (that trained them too,
    but for an ingested run), then the one that trained them, where an ingested run's folder records it (for any
    other run this reads its stack again, found alike already; torch's release only where TRL's card names no
    build); the machine only where `timed`, and never an ingested run's (its times are TRL's, on whatever machine
    trained it)."""
    read = False
    for part, keys, reader, same in (("stack", STACK, _recorded, _exact), ("stack", TRAINED, _trained, _release),
                                     ("machine", MACHINE, _recorded, _exact)):
        if part == "machine" and (not timed or any(isinstance(r, dict) and r.get("ingested") for r in (a, b))):
            continue
        found_a, found_b = reader(a, part, keys), reader(b, part, keys)
        if found_a is None or found_b is None:
            continue
        read = True
        if differ := _differ(found_a, found_b, part, keys, same):
            return True, differ
    return read, None


def check(records: dict[tuple[str, int], dict] | None, a: str, b: str, seeds: list[int], timed: bool) -> dict:
    """alike_compared (pairs with anything read), alike_holds (None where none) and alike_unlike (the words, '' where
    every pair read is alike) of a contrast of arm `a` against `b` pairing `seeds`; `records`: {(arm, seed):
    run.json}, None where run.json was not read."""
    found, compared = {}, 0
    for seed in seeds:
        read, differ = unlike((records or {}).get((a, seed)), (records or {}).get((b, seed)), timed)
        compared += read
        if differ:
            found[seed] = differ
    return {"alike_compared": compared, "alike_holds": None if not compared else not found,
            "alike_unlike": words(found, a, b)}


def words(found: dict[int, tuple[str, str, str]], a: str, b: str) -> str:
    """One clause per kind of difference, naming its seeds and, for the first, the first key that differs:
    "seed 3's runs were made under different stacks (mc_k4: torch 2.11.0+cu130; outcome: torch 2.13.0+cpu)"."""
    clauses = []
    for kind, verb in KINDS.items():
        seeds = [seed for seed, (k, _, _) in found.items() if k == kind]
        if not seeds:
            continue
        _, words_a, words_b = found[seeds[0]]
        example = f"{a}: {words_a}; {b}: {words_b}"
        clauses.append(f"seed {seeds[0]}'s runs were {verb} ({example})" if len(seeds) == 1 else
                       f"the runs of {formats.seeds_in_words(seeds)} were {verb} (seed {seeds[0]}: {example})")
    return "; ".join(clauses)
