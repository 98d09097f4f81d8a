"""A verifier that gives every group of the tiny random model a spread of rewards, for tests that
need updates to move the policy, whatever the RNG stream (CPU or CUDA sampling).

The tiny model almost never answers a task right: under `last_number` most of its groups score
all zeros, carry no advantage and leave the policy where it was. `text_digest` pays each
completion a score read from a digest of its text, so two samples that differ (at temperature 1
on a random model, all of them) score differently. Name it with
`rewards.remap_verifier={last_number: "tests.certain_reward:text_digest"}` (`REMAP`).
`NO_REWARD` is the other certainty: every sample scores 0, so with zero-std filtering on every
batch is empty.

A module of its own that imports nothing heavy: the scorer's worker processes import it.
"""

import zlib

REMAP = 'rewards.remap_verifier={last_number: "tests.certain_reward:text_digest"}'
NO_REWARD = 'rewards.remap_verifier={last_number: "tests.certain_reward:nothing"}'


def text_digest(completion: str, ground_truth: str) -> float:
    """A score in [0, 1) that is a fixed function of the completion's text."""
    return (zlib.crc32(completion.encode()) % 1000) / 1000


def nothing(completion: str, ground_truth: str) -> float:
    return 0.0
