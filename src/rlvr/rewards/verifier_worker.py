"""A verifier worker process: what `RewardScorer` starts (`rlvr.rewards.scorer`), and the one
function both it and the scorer's in-process mode score with (`run_verifiers`).

What it is: `serve(config)`, the worker's whole life: prepare (exit with the parent, a bounded
address space, the parent's verifier modules imported and warmed up), then answer (completion,
ground truth, verifiers, context, tags) requests with `run_verifiers` until the pipe closes.
What it is not: time limits, restarts or routing (the parent's, `RewardScorer`), and it imports
no torch: a worker is a fresh interpreter that must start in about a second.
"""

from __future__ import annotations

import importlib
import os
import resource
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from rlvr.plugins import import_from_environment
from rlvr.rewards.batched import checked_score
from rlvr.rewards.format import answer_tags
from rlvr.rewards.registry import VERIFIERS, get_verifier, verifier_inputs

_ERROR_CHARS = 300  # an exception message may quote a 100 KB completion


def run_verifiers(completion: str, ground_truth: str, verifiers: tuple[str, ...],
                  context: dict[str, Any] | None = None, tags_mark_answers: bool = True
                  ) -> tuple[list[float], str | None]:
    """Each named verifier's score, in order, and the errors' text (a failed verifier scores 0).
    `context` holds the extra inputs some of them declare (`verifier_context`);
    `tags_mark_answers`: whether <think>/<answer> tags mark the graded part (`answer_tags`)."""
    if not verifiers:
        return [], "no verifier named for this sample"
    with answer_tags(tags_mark_answers):
        return _run_each(completion, ground_truth, verifiers, context)


def _run_each(completion: str, ground_truth: str, verifiers: tuple[str, ...],
              context: dict[str, Any] | None) -> tuple[list[float], str | None]:
    scores, errors = [], []
    for name in verifiers:
        try:
            fn = get_verifier(name)
            extra = {key: context[key] for key in verifier_inputs(name)} if context else {}
            score = checked_score(fn(completion, ground_truth, **extra))
        except Exception as e:  # noqa: BLE001  any verifier failure is recorded and counted
            score = 0.0
            errors.append(f"{name}: {_describe(e)}")
        scores.append(score)
    return scores, "; ".join(errors) or None


def _describe(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:  # noqa: BLE001  some sympy objects fail to print
        text = "<unprintable>"
    return f"{type(e).__name__}: {text}"[:_ERROR_CHARS]


def serve(config: dict[str, Any]) -> None:
    """A worker's main loop (run by `scorer._BOOTSTRAP`): answer requests until the pipe closes."""
    conn = Connection(config["fd"])
    try:
        _prepare_worker(config)
    except Exception:  # noqa: BLE001  reported to the parent, which raises it
        import traceback

        conn.send(("failed", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            completion, ground_truth, verifiers, context, tags_mark_answers = conn.recv()
        except EOFError:  # the parent closed the pipe or died
            return
        conn.send(run_verifiers(completion, ground_truth, verifiers, context, tags_mark_answers))


def _prepare_worker(config: dict[str, Any]) -> None:
    _exit_with_parent(config["parent_pid"])
    _limit_address_space(config["address_space_bytes"])
    os.set_inheritable(config["fd"], False)  # a process a verifier starts must not hold our pipe
    # The built-ins registered when the bootstrap imported this module (rlvr.rewards runs first);
    # the run's plugins (`rlvr.plugins`), then the modules that registered verifiers there.
    import_from_environment()
    for module in config["modules"]:
        importlib.import_module(module)
    for fn in [verifier.score for verifier in VERIFIERS.values()]:
        # Warm-up: math-verify's lazy import (~1 s) is paid now, not inside a request's limit.
        if fn.__module__.startswith("rlvr.rewards."):
            try:
                fn("0", "0")
            except Exception:  # noqa: BLE001  a broken verifier fails loudly on its first request
                pass


def _exit_with_parent(parent_pid: int) -> None:
    """Exit within 0.5 s of the parent's death, even mid-request (else a hung worker lives on)."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _limit_address_space(limit: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
