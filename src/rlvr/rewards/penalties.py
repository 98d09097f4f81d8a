"""Reward shaping that depends on how a completion ended, not on what it says."""

from __future__ import annotations


def apply_non_stop_penalty(scores: list[float], truncated: list[bool], value: float) -> list[float]:
    """A completion cut off at the length limit gets `value` instead of its score."""
    return [value if cut else score for score, cut in zip(scores, truncated)]
