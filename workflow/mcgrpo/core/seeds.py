"""Seeds derived from names: the one way every stage turns (run seed, purpose, indices) into randomness.

Common random numbers rest on this: a draw's seed depends only on what it is for (the run seed, the
evaluation set, the problem, the sample), never on the arm or the batch it happens to share.
"""

from __future__ import annotations

import hashlib


def stable_seed(*parts: object) -> int:
    """A 63-bit seed from any tuple of ints and strings, identical across processes and machines."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)
