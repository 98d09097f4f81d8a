"""The batches generated ahead of training (`rollout.async_steps`) as plain JSON, for training
states: a resumed asynchronous run trains on exactly the batches the interrupted one had made,
with the policy versions that made them (each sample's `Completion.model_version` and
`versions_T`), instead of making them again with newer weights.

What it is: `produced_to_json` / `produced_from_json` for one `Produced((Episodes, metrics))`,
and `ahead_to_json` / `ahead_from_json` for the list a state holds. JSON, not pickle: a state
is data read back from disk (`rlvr.checkpoint.state` loads nothing that runs code). Floats
round-trip exactly (Python writes the shortest repr that reads back to the same double).
Records are written field by field from their dataclasses, so a field added to `Prompt`,
`Completion`, `RewardOutcome` or `Sample` travels without a change here; a field a state lacks
takes its default.
What it is not: deciding what to save or when (`rlvr.run.loop`, `RolloutProducer.ahead`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rlvr.producer.ahead import Produced
from rlvr.producer.groups import Episodes
from rlvr.types import Completion, Prompt, RewardOutcome, Sample

FORMAT = 1  # bumped when the layout below changes incompatibly


def produced_to_json(produced: Produced) -> dict[str, Any]:
    """One batch made ahead: its groups (each group's prompt once), outcomes, metrics, the
    time it took and its mark (the mixer's state before it: JSON-able already)."""
    episodes, metrics = produced.item
    if episodes.dropped_stale is not None:
        raise ValueError("a batch made ahead holds no stale groups yet (the trainer drops them "
                         "when it takes the batch)")
    groups = []
    for group, outcomes in zip(episodes.groups, episodes.outcomes, strict=True):
        prompts = {id(s.prompt): s.prompt for s in group}
        if len(prompts) != 1:
            raise ValueError(f"a group holds {len(prompts)} prompts; a group is one prompt's")
        groups.append({"prompt": _fields(group[0].prompt),
                       "samples": [{k: v for k, v in _fields(s).items() if k != "prompt"}
                                   for s in group],
                       "outcomes": [_fields(o) for o in outcomes]})
    return {"format": FORMAT, "groups": groups,
            "metrics": {k: float(v) for k, v in metrics.items()},
            "seconds": produced.seconds, "mark": produced.mark,
            "sampled_failure": episodes.sampled_failure}


def produced_from_json(data: dict[str, Any]) -> Produced:
    if data.get("format") != FORMAT:
        raise ValueError(f"a batch made ahead in format {data.get('format')!r}; this rlvr reads "
                         f"format {FORMAT}")
    groups, outcomes = [], []
    for g in data["groups"]:
        prompt = _record(Prompt, g["prompt"])
        groups.append([Sample(prompt=prompt, **_sample_fields(s)) for s in g["samples"]])
        outcomes.append([_record(RewardOutcome, o) for o in g["outcomes"]])
    metrics = {k: float(v) for k, v in data["metrics"].items()}
    failure = data.get("sampled_failure")  # absent from states written before it existed
    return Produced((Episodes(groups=groups, outcomes=outcomes,
                              sampled_failure=None if failure is None else str(failure)),
                     metrics), float(data["seconds"]), data.get("mark"))


def ahead_to_json(batches: list[Produced]) -> str:
    return json.dumps([produced_to_json(b) for b in batches])


def ahead_from_json(text: str) -> list[Produced]:
    return [produced_from_json(d) for d in json.loads(text)]


def _fields(record: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON values (tuples as lists, nested dataclasses as dicts)."""
    return {f.name: _plain(getattr(record, f.name)) for f in dataclasses.fields(record)}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return _fields(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{type(value).__name__} has no JSON form here")


def _sample_fields(data: dict[str, Any]) -> dict[str, Any]:
    fields = {f.name for f in dataclasses.fields(Sample)} - {"prompt"}
    values = {k: v for k, v in data.items() if k in fields}
    values["completion"] = _record(Completion, values["completion"])
    return values


def _record(cls: type, data: dict[str, Any]) -> Any:
    """`cls` from its JSON fields: lists back into tuples where the field is a tuple; fields
    the data lacks take their defaults, keys the class lacks are an error (not this rlvr's)."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {sorted(unknown)}")
    values = {}
    for name, value in data.items():
        if str(names[name].type).startswith("tuple") and isinstance(value, list):
            value = tuple(value)
        values[name] = value
    return cls(**values)
