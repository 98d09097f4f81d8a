"""Reward shaping that depends on how a completion ended, not on what it says.

Pure functions of scores and flags; they know nothing of tokens, engines or verifiers.
"""

from __future__ import annotations


def apply_non_stop_penalty(scores: list[float], truncated: list[bool], value: float) -> list[float]:
    """A completion cut off at the length limit scores `value` instead of its verifier score.

    Why: an answer that never finished may still contain the right number (the last-number
    verifier would pay for it), which would teach the model that rambling to the limit is fine.
    """
    if len(scores) != len(truncated):
        raise ValueError(f"{len(scores)} scores but {len(truncated)} truncation flags")
    return [value if cut else score for score, cut in zip(scores, truncated)]


def soft_overlong_penalty(lengths: list[int], max_length: int, buffer: int,
                          factor: float = 1.0) -> list[float]:
    """DAPO's overlong reward shaping, added to the score: 0 up to `max_length - buffer`
    tokens, then falling linearly to `-factor` at `max_length` (and staying there)."""
    if not 0 < buffer <= max_length:
        raise ValueError(f"overlong buffer {buffer} must be in (0, max_length={max_length}]")
    start = max_length - buffer
    return [-factor * min(max(n - start, 0), buffer) / buffer for n in lengths]
