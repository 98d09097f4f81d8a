"""Verifiers that misbehave, importable by worker processes as `tests.rewards.hostile:NAME`."""

import time


def raises(completion: str, ground_truth: str) -> float:
    raise RuntimeError("verifier bug")


def hangs(completion: str, ground_truth: str) -> float:
    while True:
        time.sleep(0.01)


def dies(completion: str, ground_truth: str) -> float:
    import os

    os._exit(3)
