"""Sampling seeds derived from where a sample is drawn: the run's seed, then the step, the
active-sampling round, the engine share and the prompt; for a later turn of a multi-turn
episode also the turn and the sample of the group (`rlvr.rollout.client.EngineClient`).

Why hashing instead of arithmetic: offsets such as `base + 7919 * (round + share)` collide
(round 1 of share 0 and round 0 of share 1 drew the same random stream). A hash of the named
coordinates gives each (step, round, share, prompt) its own seed; two coordinates collide only
if 62-bit hashes do. The same coordinates always give the same seed, so runs and resumed runs
replay the same streams.
"""

from __future__ import annotations

import hashlib

# Under the engines' 64-bit limit (torch's), with room for an engine that seeds the k-th of n
# samples with seed + k.
SEED_BITS = 62


def derive_seed(base: int, **coordinates: int) -> int:
    """A seed for `base` at the named coordinates, e.g. `derive_seed(s, step=3, round=1)`."""
    key = ",".join([str(base)] + [f"{k}={v}" for k, v in sorted(coordinates.items())])
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> (64 - SEED_BITS)
