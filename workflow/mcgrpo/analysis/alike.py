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
Pairing is what the paired test needs: seeds on different machines pass where each seed's two runs are alike.
A key only one run records is not compared: an arm on the vllm engine or a TRL arm records vLLM's or TRL's
version and its base does not, which is the intervention, not a stack. A run whose run.json lacks versions or
hardware (made before they were recorded, or a test's) leaves that part unread for its pair, never failed; so does
an ingested run's machine: its times are TRL's step times on whatever machine trained it, while its hardware names
the machine that evaluated its checkpoints. (Its versions are the stack that evaluated it; the one that trained it
is not in TRL's folder.) Every basis of mcgrpo.analysis.contrasts pairs runs by seed, equal iterations included;
the pooled bases (mcgrpo.analysis.bases) pool per-base contrasts, each checked in its own study.
"""

from __future__ import annotations

from mcgrpo.analysis import formats

# Compared: what computes a run's numbers, mcgrpo's own code included (mcgrpo_code: the sha256 of its source, but the
# analysis; the store key holds the config, not the code that trained it). Not python's version (the arithmetic is
# torch's; the patch version moves with every image rebuild, and CI already sets it aside) nor mcgrpo's version
# string: it names a release, which mcgrpo_code tells apart where it matters.
STACK = ("mcgrpo_code", "torch", "transformers", "trl", "vllm", "math_verify")
MACHINE = ("device", "gpu", "cpu", "threads")
KINDS = {"stack": "made under different stacks", "machine": "timed on different machines"}


def machine_words(hardware: dict) -> str:
    """'NVIDIA H100 80GB HBM3' or 'CPU (AMD EPYC), 2 threads': where a run was timed, as figures and checks say."""
    threads = hardware.get("threads")
    return hardware.get("gpu") or f"CPU ({hardware.get('cpu')}), {threads} thread{'s' if threads != 1 else ''}"


def _stack(record: dict | None) -> dict | None:
    versions = record.get("versions") if isinstance(record, dict) else None
    return {k: versions[k] for k in STACK if versions.get(k) is not None} if isinstance(versions, dict) else None


def _machine(record: dict | None) -> dict | None:
    hardware = record.get("hardware") if isinstance(record, dict) else None
    if not isinstance(hardware, dict) or record.get("ingested"):  # an ingested run was timed elsewhere
        return None
    return hardware


def unlike(a: dict | None, b: dict | None, timed: bool) -> tuple[bool, tuple[str, str, str] | None]:
    """(whether anything of runs `a` and `b` (their run.json) could be compared, (kind, A's words, B's words) of the
    first key on which they differ, None where they are alike); the machine only where `timed`."""
    stack_a, stack_b = _stack(a), _stack(b)
    read = stack_a is not None and stack_b is not None
    if read:
        for key in (k for k in STACK if k in stack_a and k in stack_b and stack_a[k] != stack_b[k]):
            return True, ("stack", f"{key} {stack_a[key]}", f"{key} {stack_b[key]}")
    machine_a, machine_b = (_machine(a), _machine(b)) if timed else (None, None)
    if machine_a is None or machine_b is None:
        return read, None
    for key in (k for k in MACHINE if machine_a.get(k) != machine_b.get(k)):
        words_a, words_b = machine_words(machine_a), machine_words(machine_b)
        if words_a == words_b:  # the same GPU on another host CPU, or other threads: name the key
            words_a, words_b = f"{words_a} ({key} {machine_a.get(key)})", f"{words_b} ({key} {machine_b.get(key)})"
        return True, ("machine", words_a, words_b)
    return True, None


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
