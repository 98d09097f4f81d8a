"""Traces: the generations behind the curves, one row per sample, so users can read what the
policy wrote (reward hacking and format collapse show in the text long before in a mean).

`training_rows` and `eval_rows` turn a step's samples and verifier outcomes into `TraceRow`s
(pure functions); `TraceWriter` writes each step's rows as one Parquet file,
`traces/step_000001.parquet` for training and `traces/eval/step_000005.parquet` for evaluation.
Every file is written whole under a temporary dot-name and renamed into place, so a killed
run leaves only complete files (and perhaps a dot-file that readers skip). All files share
`TRACE_SCHEMA`: `pandas.read_parquet("<run>/traces")` reads training and eval rows together
(`kind` tells them apart), `datasets.load_dataset("parquet", data_files=...)` reads either.

Not here: which samples trained (`rlvr.producer.training_batch` decides; the trainer passes
the kept samples in), what to show of them (`rlvr.report`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rlvr.checkpoint.atomic import write_bytes_atomic
from rlvr.types import Prompt, RewardOutcome, Sample


@dataclass(frozen=True)
class TraceRow:
    """One sample of one step, as written to the trace files."""

    step: int  # the training step (eval: the step after which it ran; 0 = before training)
    kind: str  # "train" | "eval"
    eval_set: str | None  # the eval set's name; None for training rows
    prompt_id: str
    source: str  # the prompt's dataset
    sample_index: int  # position of the sample within its prompt's group
    prompt: str  # the prompt's message text (role-tagged when there are several messages)
    completion: str
    ground_truth: str
    verifier_scores: str  # JSON object, verifier name -> score
    verifier_error: str | None  # what a verifier raised, if one did
    score: float  # the verifiers' combined score, before shaping
    reward: float  # after shaping (format reward, non-stop and overlong penalties)
    advantage: float | None  # the advantage it trained with; None if it did not train
    trained: bool  # in the update; False if dropped (zero reward spread, truncated, stale)
    prompt_tokens: int
    completion_tokens: int  # every token after the prompt (a multi-turn episode's given ones too)
    finish_reason: str  # "stop" | "length"
    policy_version: int  # weight updates behind the policy that sampled it (its oldest token)


TRACE_SCHEMA = pa.schema([
    ("step", pa.int64()), ("kind", pa.string()), ("eval_set", pa.string()),
    ("prompt_id", pa.string()), ("source", pa.string()), ("sample_index", pa.int32()),
    ("prompt", pa.string()), ("completion", pa.string()), ("ground_truth", pa.string()),
    ("verifier_scores", pa.string()), ("verifier_error", pa.string()),
    ("score", pa.float64()), ("reward", pa.float64()), ("advantage", pa.float64()),
    ("trained", pa.bool_()), ("prompt_tokens", pa.int32()), ("completion_tokens", pa.int32()),
    ("finish_reason", pa.string()), ("policy_version", pa.int64()),
])


def training_rows(step: int, groups: list[list[Sample]], outcomes: list[list[RewardOutcome]],
                  trained: list[Sample]) -> list[TraceRow]:
    """Rows of every sample of a training step: `groups` are all the step's groups (the ones
    dropped before advantages too), `outcomes` their verifier results, `trained` the samples
    that went into the update. Matched by identity: `Sample` compares by value, and two
    samples of a group can be equal (the same answer twice) while only one trained."""
    trained_ids = {id(s) for s in trained}
    rows = []
    for group, group_outcomes in zip(groups, outcomes, strict=True):
        for k, (sample, outcome) in enumerate(zip(group, group_outcomes, strict=True)):
            kept = id(sample) in trained_ids
            rows.append(_row(step, "train", None, k, sample, outcome, trained=kept,
                             advantage=sample.advantage if kept else None))
    return rows


def eval_rows(step: int, eval_set: str, samples: list[Sample], outcomes: list[RewardOutcome]
              ) -> list[TraceRow]:
    """Rows of one eval set's samples (flat, a prompt's samples next to each other when there
    are several): nothing trains on them, so no advantage."""
    seen: dict[str, int] = {}
    rows = []
    for sample, outcome in zip(samples, outcomes, strict=True):
        k = seen.get(sample.prompt.id, 0)
        seen[sample.prompt.id] = k + 1
        rows.append(_row(step, "eval", eval_set, k, sample, outcome, trained=False,
                         advantage=None))
    return rows


def _row(step: int, kind: str, eval_set: str | None, index: int, sample: Sample,
         outcome: RewardOutcome, trained: bool, advantage: float | None) -> TraceRow:
    p, c = sample.prompt, sample.completion
    return TraceRow(
        step=step, kind=kind, eval_set=eval_set, prompt_id=p.id, source=p.source,
        sample_index=index, prompt=prompt_text(p), completion=c.text,
        ground_truth=p.ground_truth, verifier_scores=json.dumps(outcome.per_verifier),
        verifier_error=outcome.error, score=float(outcome.score), reward=float(sample.reward),
        advantage=advantage, trained=trained, prompt_tokens=len(p.token_ids),
        completion_tokens=len(c.token_ids_T), finish_reason=c.finish_reason,
        policy_version=c.model_version)


def prompt_text(prompt: Prompt) -> str:
    """The prompt as a person reads it: the message itself, or each message tagged with its
    role when there are several (a system prompt, few-shot turns)."""
    if len(prompt.messages) == 1:
        return str(prompt.messages[0].get("content", ""))
    return "\n".join(f"[{m.get('role', '?')}] {m.get('content', '')}" for m in prompt.messages)


def rows_to_table(rows: list[TraceRow]) -> pa.Table:
    return pa.Table.from_pylist([asdict(r) for r in rows], schema=TRACE_SCHEMA)


class TraceWriter:
    """Writes a step's rows under `directory` (a run's `traces/`); one file per step and kind,
    replaced whole if the step is written again (a resumed run redoing steps)."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def path_for(self, step: int, kind: str) -> Path:
        folder = self.directory / "eval" if kind == "eval" else self.directory
        return folder / f"step_{step:06d}.parquet"

    def write_train(self, step: int, rows: list[TraceRow]) -> Path | None:
        return self._write(self.path_for(step, "train"), rows)

    def write_eval(self, step: int, rows: list[TraceRow]) -> Path | None:
        """All eval sets of one eval point in one file (`eval_set` tells them apart)."""
        return self._write(self.path_for(step, "eval"), rows)

    def truncate_after(self, step: int) -> None:
        """Remove the files of steps after `step`, and temporaries a killed run left: a run
        resumed from the state of `step` redoes the later steps, and steps it does not reach
        again must not survive from the abandoned attempt."""
        for folder in (self.directory, self.directory / "eval"):
            if not folder.is_dir():
                continue
            for stale in folder.glob(".step_*.parquet.tmp"):
                stale.unlink(missing_ok=True)
            for later, path in step_files(folder).items():
                if later > step:
                    path.unlink(missing_ok=True)

    def _write(self, path: Path, rows: list[TraceRow]) -> Path | None:
        if not rows:  # a step without samples (active sampling found none) writes no file
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        sink = pa.BufferOutputStream()
        pq.write_table(rows_to_table(rows), sink)
        write_bytes_atomic(path, sink.getvalue().to_pybytes())
        return path


def step_files(directory: Path) -> dict[int, Path]:
    """Step -> its trace file in `directory` (not its subdirectories), by step; temporaries
    of a write in progress (dot-names) are not among them."""
    if not directory.is_dir():
        return {}
    files = {}
    for path in directory.glob("step_*.parquet"):
        digits = path.name.removeprefix("step_").removesuffix(".parquet")
        if digits.isdigit():
            files[int(digits)] = path
    return dict(sorted(files.items()))
