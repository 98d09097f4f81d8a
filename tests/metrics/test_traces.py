"""Trace rows and files: which samples trained, the schema, atomic files, resume, readers."""

import json
from dataclasses import fields

import pandas as pd
import pyarrow.parquet as pq
import pytest

from rlvr.config import load_config
from rlvr.metrics.traces import (TRACE_SCHEMA, TraceRow, TraceWriter, eval_rows, prompt_text,
                                 training_rows)
from rlvr.types import Completion, Prompt, RewardOutcome, Sample


def _prompt(i: int, messages=None) -> Prompt:
    messages = messages or ({"role": "user", "content": f"{i}+1?"},)
    return Prompt(id=f"addition/{i}", messages=messages,
                  token_ids=(1, 2, 3), ground_truth=str(i + 1), verifiers=("last_number",),
                  source="addition")


def _sample(prompt: Prompt, text: str, reward: float, finish="stop", version=0) -> Sample:
    completion = Completion(token_ids_T=[5] * len(text), logprobs_T=[0.0] * len(text),
                            finish_reason=finish, text=text, model_version=version)
    return Sample(prompt=prompt, completion=completion, reward=reward)


def _outcome(score: float, error=None) -> RewardOutcome:
    return RewardOutcome(score=score, error=error, per_verifier={"last_number": score})


def test_schema_matches_the_record():
    assert TRACE_SCHEMA.names == [f.name for f in fields(TraceRow)]


def test_trained_is_matched_by_identity_not_by_value():
    p = _prompt(0)
    # Two equal samples (the same answer twice): only the first went into the update.
    twin_a, twin_b = _sample(p, "1", 1.0), _sample(p, "1", 1.0)
    other = _sample(p, "7", 0.0)
    assert twin_a == twin_b
    twin_a.advantage, other.advantage = 0.7, -0.7
    rows = training_rows(3, [[twin_a, twin_b, other]], [[_outcome(1.0)] * 2 + [_outcome(0.0)]],
                         trained=[twin_a, other])
    assert [r.trained for r in rows] == [True, False, True]
    assert [r.advantage for r in rows] == [0.7, None, -0.7]
    assert [r.sample_index for r in rows] == [0, 1, 2]
    assert rows[0].step == 3 and rows[0].kind == "train" and rows[0].eval_set is None


def test_a_row_holds_what_the_sample_and_outcome_say():
    p = _prompt(4)
    s = _sample(p, "the answer is 5", 0.5, finish="length", version=2)
    row = training_rows(1, [[s]], [[_outcome(1.0, error="boom")]], trained=[])[0]
    assert (row.prompt_id, row.source, row.prompt, row.completion, row.ground_truth) == (
        "addition/4", "addition", "4+1?", "the answer is 5", "5")
    assert json.loads(row.verifier_scores) == {"last_number": 1.0}
    assert row.verifier_error == "boom"
    assert (row.score, row.reward) == (1.0, 0.5)  # before and after shaping
    assert (row.prompt_tokens, row.completion_tokens) == (3, len("the answer is 5"))
    assert (row.finish_reason, row.policy_version, row.trained) == ("length", 2, False)


def test_several_messages_are_role_tagged():
    p = _prompt(0, messages=({"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "1+1?"}))
    assert prompt_text(p) == "[system] Be brief.\n[user] 1+1?"


def test_eval_rows_count_samples_per_prompt():
    a, b = _prompt(0), _prompt(1)
    samples = [_sample(a, "1", 1.0), _sample(a, "2", 0.0), _sample(b, "2", 1.0)]
    rows = eval_rows(5, "addition", samples, [_outcome(s.reward) for s in samples])
    assert [r.sample_index for r in rows] == [0, 1, 0]
    assert {(r.kind, r.eval_set, r.step, r.advantage, r.trained) for r in rows} == {
        ("eval", "addition", 5, None, False)}


def test_mismatched_outcomes_fail_loudly():
    with pytest.raises(ValueError):
        training_rows(1, [[_sample(_prompt(0), "1", 1.0)]], [[]], trained=[])


def _rows(step: int, n: int = 2):
    p = _prompt(step)
    samples = [_sample(p, str(k), float(k % 2)) for k in range(n)]
    return training_rows(step, [samples], [[_outcome(s.reward) for s in samples]], samples[:1])


def test_files_per_step_read_back_with_pandas_and_datasets(tmp_path):
    writer = TraceWriter(tmp_path / "traces")
    for step in (1, 2):
        writer.write_train(step, _rows(step))
    samples = [_sample(_prompt(9), "10", 1.0)]
    writer.write_eval(2, eval_rows(2, "addition", samples, [_outcome(1.0)]))
    assert writer.write_train(3, []) is None  # nothing to write, no empty file
    assert sorted(p.name for p in (tmp_path / "traces").glob("*.parquet")) == [
        "step_000001.parquet", "step_000002.parquet"]
    assert (tmp_path / "traces" / "eval" / "step_000002.parquet").exists()
    assert not list(tmp_path.rglob(".*.tmp"))
    everything = pd.read_parquet(tmp_path / "traces")  # eval/ is read too; `kind` tells
    assert sorted(everything["kind"]) == ["eval", "train", "train", "train", "train"]
    train = pd.read_parquet(tmp_path / "traces" / "step_000001.parquet")
    assert train["trained"].tolist() == [True, False]
    assert train["advantage"].isna().tolist() == [False, True]
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "traces" / "step_*.parquet"),
                               split="train", cache_dir=str(tmp_path / "cache"))
    assert len(ds) == 4 and set(ds.column_names) == set(TRACE_SCHEMA.names)


def test_a_leftover_temporary_is_ignored_by_readers(tmp_path):
    writer = TraceWriter(tmp_path / "traces")
    writer.write_train(1, _rows(1))
    # What a run killed mid-write leaves: a half file under the temporary name.
    (tmp_path / "traces" / ".step_000002.parquet.tmp").write_bytes(b"PAR1 half")
    assert len(pd.read_parquet(tmp_path / "traces")) == 2


def test_rewriting_a_step_replaces_it_and_truncate_after_drops_later_steps(tmp_path):
    writer = TraceWriter(tmp_path / "traces")
    for step in (1, 2, 3):
        writer.write_train(step, _rows(step))
    writer.write_eval(3, _rows(3))
    (tmp_path / "traces" / ".step_000004.parquet.tmp").write_bytes(b"half")
    writer.truncate_after(1)  # resumed from the state of step 1
    assert [p.name for p in (tmp_path / "traces").iterdir() if p.is_file()] == [
        "step_000001.parquet"]
    assert not list((tmp_path / "traces" / "eval").iterdir())
    writer.write_train(1, _rows(1, n=3))
    assert pq.read_table(tmp_path / "traces" / "step_000001.parquet").num_rows == 3


def test_save_traces_is_a_config_field_off_by_default():
    assert load_config(None).logging.save_traces is False
    assert load_config(None, ["logging.save_traces=true"]).logging.save_traces is True


def test_training_writes_every_steps_samples_and_each_eval(tmp_path):
    from rlvr.run.loop import train

    out = tmp_path / "run"
    cfg = load_config("configs/tiny.yaml", [f"experiment.output_dir={out}",
                                             "logging.save_traces=true",
                                             "experiment.total_episodes=32",  # 2 steps
                                             "eval.local_eval_every=1",
                                             "logging.progress_bar=false",
                                             "checkpoint.save_final=false"])
    run = train(cfg)
    traces = pd.read_parquet(out / "traces" / "step_000002.parquet")
    assert len(traces) == cfg.samples_per_step and set(traces["kind"]) == {"train"}
    assert traces["sample_index"].tolist() == list(range(4)) * 4
    # What trained is what the step's metrics say the filter kept.
    kept_groups = traces.groupby("prompt_id")["trained"].all().sum()
    metrics = run.history[2]
    assert kept_groups == round(metrics["real_batch_size_ratio"] * 4)
    assert traces["advantage"].notna().tolist() == traces["trained"].tolist()
    assert (traces["reward"] == traces["score"]).all()  # tiny.yaml shapes no reward
    assert set(traces["policy_version"]) <= {0, 1}
    every = pd.read_parquet(out / "traces")
    assert sorted(every[every["kind"] == "train"]["step"].unique()) == [1, 2]
    evals = pd.read_parquet(out / "traces" / "eval")
    assert sorted(evals["step"].unique()) == [0, 1, 2]  # eval_at_start, then every step
    assert evals["advantage"].isna().all() and not evals["trained"].any()
    assert len(evals[evals["step"] == 2]) == cfg.eval.max_prompts
    assert metrics["time/traces"] >= 0.0 and metrics["time/scoring"] > 0.0


def test_groups_the_trainer_drops_as_stale_are_traced_as_not_trained(tmp_path):
    from types import SimpleNamespace

    from rlvr.producer.groups import Episodes
    from rlvr.run.loop import _next_produced, _write_step_traces

    fresh = [_sample(_prompt(0), "1", 1.0, version=3), _sample(_prompt(0), "2", 0.0, version=3)]
    stale = [_sample(_prompt(1), "2", 1.0, version=0), _sample(_prompt(1), "3", 0.0, version=0)]
    outcomes = [[_outcome(s.reward) for s in g] for g in (fresh, stale)]
    batch = SimpleNamespace(item=(Episodes(groups=[fresh, stale], outcomes=outcomes), {}))
    producer = SimpleNamespace(next_batch=lambda should_stop: (batch, 0.0),
                               blocked_since_last=lambda: 0.0)
    run = SimpleNamespace(cfg=SimpleNamespace(rollout=SimpleNamespace(async_steps=1)),
                          policy_version=3, traces=TraceWriter(tmp_path / "traces"))
    episodes, metrics = _next_produced(run, producer, 4, SimpleNamespace(signum=None))
    assert episodes.groups == [fresh] and metrics["async/stale_results_dropped"] == 1.0
    _write_step_traces(run, 4, episodes, trained=fresh)
    rows = pd.read_parquet(tmp_path / "traces" / "step_000004.parquet")
    assert rows["prompt_id"].tolist() == ["addition/0"] * 2 + ["addition/1"] * 2
    assert rows["trained"].tolist() == [True, True, False, False]
    assert rows["policy_version"].tolist() == [3, 3, 0, 0]
