"""How a job's OpenMP threads wait for work: the environment set before torch loads its OpenMP runtime.

A waiting thread that spins keeps its core busy, which is fast when the job has its cores to itself and ruinous
when they are shared (a laptop, a shared node, two jobs on two cores): each barrier then waits for a thread the
busy core has descheduled. One that sleeps at once loses its share of the cores and no more, but pays a wake-up
at every parallel region. Passive with a short spin first has most of both (bench/under_load.py;
docs/performance.md, "Shared cores"). On 2 cores, one warm-start step of the default study (2 threads) took,
in ms, quiet / beside one busy core (1-7 runs of 60-150 steps each, the settings alternating; a machine of AMD
EPYC cores):

    OMP_WAIT_POLICY=PASSIVE                      138-169 / 202-214
    PASSIVE, GOMP_SPINCOUNT=400 (the default)    112-119 / 215-221
    PASSIVE, GOMP_SPINCOUNT=600                  106-112 / 222-231
    GOMP_SPINCOUNT=1000 (no policy)              108-116 / 236-241
    libgomp's own default (no policy, 300,000)   107-112 / 332

GOMP_SPINCOUNT is read by GNU OpenMP (libgomp, which torch's Linux wheels ship) only, and it counts even under
PASSIVE; LLVM's and Intel's runtimes ignore it and stay passive.
"""

from __future__ import annotations

import os
from typing import MutableMapping

WAIT_POLICY = "PASSIVE"
SPIN_COUNT = "400"  # libgomp spins, about 4 microseconds by its own estimate of 100,000 spins per millisecond


def set_wait_defaults(environ: MutableMapping[str, str] = os.environ) -> None:
    """The project's wait policy and spin, unless the user set a wait policy (then nothing is added to it)."""
    if "OMP_WAIT_POLICY" not in environ:
        environ["OMP_WAIT_POLICY"] = WAIT_POLICY
        environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)


def describe(environ: MutableMapping[str, str] = os.environ) -> str:
    """The wait settings `set_wait_defaults` leaves in `environ`, as one would write them."""
    env = dict(environ)
    set_wait_defaults(env)
    return " ".join(f"{key}={env[key]}" for key in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT") if key in env)
