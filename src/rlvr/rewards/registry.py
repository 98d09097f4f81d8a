"""The verifier registry: a name a data row carries -> a function (completion, truth) -> score.

A verifier returns a score (normally in [0, 1]) and raises on anything it cannot judge, such as
a ground truth that holds no answer; the scorer turns that into a recorded, counted error.
Verifiers register with `@register_verifier("name")`, optionally with a cheap ground-truth check
that data loading runs on every row, and with an answer extractor: completion -> the answer it
gives, as a key equal for equal answers (maj@n votes with it; a verifier without one gets no
majority vote). A name of the form `package.module:function` is also accepted and imported on
first use (`rlvr.registry`: the entry that module registered for `function`, or the plain
function), so a verifier can be named without being registered anywhere.
Registered names match in any case (`canonical_name`), as open-instruct routes on
`dataset.lower()`: a row labelled "GSM8K" is scored by `gsm8k`.

A verifier that needs to see more than the answer declares keyword-only parameters with these
names, and the scorer fills exactly those it declares (a two-argument verifier gets nothing more):
- `prompt`: the prompt's messages, a list of {"role", "content"} dicts (a system prompt included);
- `trajectory`: the episode after the prompt, a list of {"role", "content"} dicts: every
  assistant turn with the feedback and tool messages between them (multi-turn workflows), or
  the one assistant message of a single-turn sample;
- `metadata`: the data row's other fields, a dict (`DataSourceConfig.metadata_fields`).
    @register_verifier("cites_source")
    def cites_source(completion, ground_truth, *, prompt, metadata): ...
They are plain JSON-like values, sent to the worker process with a request only when one of
its verifiers asks for them.

Some verifiers cannot be a function a worker process calls: an LLM judge needs a loaded model
or a network client. Their names are in `BATCHED_VERIFIERS` (name -> the config section that
sets them up); the scorer hands them to a batched stage in its own process
(`rlvr.rewards.batched`).

This module holds no scoring policy (time limits, processes, aggregation): that is the scorer's.
It imports nothing heavy, so a fresh worker process can load it cheaply.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from rlvr.registry import Registry

Verifier = Callable[..., float]  # (completion, ground_truth, *, any of VERIFIER_INPUTS)
# What a verifier may ask for besides (completion, ground_truth), by keyword-only parameter.
VERIFIER_INPUTS = ("prompt", "trajectory", "metadata")
GroundTruthCheck = Callable[[str], object]  # ground truth -> its parse; ValueError if unusable
AnswerExtractor = Callable[[str], "str | None"]  # completion -> its answer's key; None: no answer


@dataclass(frozen=True)
class RegisteredVerifier:
    """A `VERIFIERS` entry: the scoring function and, if it has one, the check run when data is
    loaded, so a row the verifier could never score fails up front with its file, row and field."""

    score: Verifier
    ground_truth_check: GroundTruthCheck | None = None
    answer_extractor: AnswerExtractor | None = None
    inputs: frozenset[str] = frozenset()  # the VERIFIER_INPUTS its parameters ask for


# A 'package.module:function' name may point at a plain function (`_plain_verifier`).
VERIFIERS: Registry[RegisteredVerifier] = Registry("verifier",
                                                   adapt=lambda fn: _plain_verifier(fn))
# Names scored by a batched stage in the scorer's process -> the config section setting it up.
BATCHED_VERIFIERS: Registry[str] = Registry("batched verifier")


def declared_inputs(fn: Callable) -> frozenset[str]:
    """The VERIFIER_INPUTS `fn` declares as keyword-only parameters. ValueError for a required
    keyword-only parameter nobody would fill (a typo such as `meta` fails at registration,
    not as an error on every sample)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C function: called with two arguments
        return frozenset()
    keyword_only = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = [p.name for p in keyword_only
               if p.name not in VERIFIER_INPUTS and p.default is inspect.Parameter.empty]
    if unknown:
        raise ValueError(f"verifier {getattr(fn, '__qualname__', fn)!r} has keyword-only "
                         f"parameter(s) {unknown} that the scorer cannot fill; it fills "
                         f"{', '.join(VERIFIER_INPUTS)}")
    return frozenset(p.name for p in keyword_only if p.name in VERIFIER_INPUTS)


def register_verifier(name: str, ground_truth_check: GroundTruthCheck | None = None,
                      answer_extractor: AnswerExtractor | None = None
                      ) -> Callable[[Verifier], Verifier]:
    """Decorator: make `fn` available under `name`. Two different functions may not share a name.
    `answer_extractor` must never raise: text with no answer gives None."""
    if not name or ":" in name:
        raise ValueError(f"verifier name {name!r} must be non-empty and contain no ':' "
                         "(':' marks a 'package.module:function' name)")

    def register(fn: Verifier) -> Verifier:
        if name in BATCHED_VERIFIERS:
            raise ValueError(f"verifier name {name!r} is taken by a batched verifier")
        if canonical_name(name) != name:  # names match in any case: one spelling per name
            raise ValueError(f"verifier name {name!r} is taken as {canonical_name(name)!r}")
        VERIFIERS.add(name, RegisteredVerifier(fn, ground_truth_check, answer_extractor,
                                               declared_inputs(fn)), defined_by=fn)
        return fn

    return register


def canonical_name(name: str) -> str:
    """The registered spelling of verifier `name`: names match in any case, as open-instruct
    routes on `dataset.lower()` (a row labelled "MATH" or "GSM8K" is scored by `math` / `gsm8k`).
    A 'module:function' name is Python's and keeps its case; an unknown name is returned as is."""
    if name in VERIFIERS or name in BATCHED_VERIFIERS or ":" in name:
        return name
    folded = name.casefold()
    for known in (*VERIFIERS, *BATCHED_VERIFIERS):
        if known.casefold() == folded:
            return known
    return name


def get_verifier(name: str) -> Verifier:
    """The verifier called `name` (any case); KeyError listing the known names if there is none."""
    name = canonical_name(name)
    if name in VERIFIERS:
        return VERIFIERS[name].score
    if ":" in name:
        return _import_verifier(name).score
    if name in BATCHED_VERIFIERS:
        raise KeyError(f"verifier '{name}' is scored in the trainer's process, not by a "
                       f"function: it needs {BATCHED_VERIFIERS[name]} in the config")
    raise KeyError(f"unknown verifier '{name}'; known: {', '.join(VERIFIERS.names())} "
                   "(or name one as 'package.module:function')")


def verifier_inputs(name: str) -> frozenset[str]:
    """The extra inputs (VERIFIER_INPUTS) verifier `name` asks for; imports a 'module:function'
    name. KeyError as `get_verifier` for an unknown name."""
    name = canonical_name(name)
    if name not in VERIFIERS:
        get_verifier(name)
    return VERIFIERS[name].inputs


def ground_truth_check(name: str) -> GroundTruthCheck | None:
    """The ground-truth check of verifier `name`; None if it has none, if the name is unknown, or
    if it is a 'module:function' name not imported yet (data loading does not import it)."""
    entry = VERIFIERS.get(canonical_name(name))
    return None if entry is None else entry.ground_truth_check


def answer_extractor(name: str) -> AnswerExtractor | None:
    """The answer extractor of verifier `name`; None if it has none or the name is unknown."""
    entry = VERIFIERS.get(canonical_name(name))
    return None if entry is None else entry.answer_extractor


def is_known_verifier(name: str) -> bool:
    """True for a registered or batched name; a 'module:function' name is trusted until it is
    used."""
    name = canonical_name(name)
    return name in VERIFIERS or name in BATCHED_VERIFIERS or ":" in name


def _plain_verifier(fn: object) -> RegisteredVerifier:
    """`VERIFIERS.adapt`: a function nobody registered, named 'package.module:function'."""
    if not callable(fn):
        raise TypeError(f"{fn!r} is not a function")
    return RegisteredVerifier(fn, inputs=declared_inputs(fn))


def _import_verifier(name: str) -> RegisteredVerifier:
    # Only names the config lists (`rewards.custom_verifiers`, remap targets) get here from a
    # data row: `rlvr.run.input_checks.check_custom_verifiers` refuses the others at start.
    try:
        return VERIFIERS.lookup(name)  # imports the module (`rlvr.registry`)
    except ValueError as e:
        raise KeyError(str(e)) from e
