"""Verifiers behind one small protocol, and the bounded scorer that runs them.

Importing this package registers the built-in verifiers. It deliberately does not import the
scorer (which needs torch for its records): worker processes import only the verifiers.
"""

from rlvr.rewards import gsm8k as _gsm8k  # noqa: F401  (registers)
from rlvr.rewards import math as _math  # noqa: F401  (registers)
from rlvr.rewards.penalties import apply_non_stop_penalty
from rlvr.rewards.registry import VERIFIERS, get_verifier, is_known_verifier, register_verifier

__all__ = ["VERIFIERS", "apply_non_stop_penalty", "get_verifier", "is_known_verifier",
           "register_verifier"]
