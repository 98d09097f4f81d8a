"""Eval prompts keep their set: one named set per `data.eval` source, or the holdout."""

import pytest

from rlvr.config import DataConfig, DataSourceConfig
from rlvr.data import build_datasets


def test_each_eval_source_is_a_set_named_after_it(tmp_path, tiny_tokenizer):
    rows = tmp_path / "my_questions.jsonl"
    rows.write_text('{"prompt": "1+1?", "ground_truth": "2", "dataset": "gsm8k"}\n')
    cfg = DataConfig(train=[DataSourceConfig(name="addition")],
                     eval=[DataSourceConfig(name="addition", split="test", max_rows=3),
                           DataSourceConfig(name="multiplication", max_rows=2, label="mul"),
                           DataSourceConfig(name=str(rows))],
                     max_prompt_length=200)
    bundle = build_datasets(cfg, tiny_tokenizer, seed=0)
    assert [(s.name, len(s.prompts)) for s in bundle.eval_sets] == [
        ("addition", 3), ("mul", 2), ("my_questions", 1)]
    assert bundle.eval_prompts == [p for s in bundle.eval_sets for p in s.prompts]


def test_the_holdout_is_one_set_named_after_the_first_train_source(tiny_tokenizer):
    cfg = DataConfig(train=[DataSourceConfig(name="multiplication", label="mult"),
                            DataSourceConfig(name="addition")],
                     eval_holdout=5, max_prompt_length=200)
    bundle = build_datasets(cfg, tiny_tokenizer, seed=0)
    assert [(s.name, len(s.prompts)) for s in bundle.eval_sets] == [("mult", 5)]
    assert {p.source for p in bundle.eval_sets[0].prompts} == {"multiplication"}


def test_display_name_drops_directories_and_extensions():
    assert DataSourceConfig(name="gsm8k").display_name == "gsm8k"
    assert DataSourceConfig(name="data/hard.parquet").display_name == "hard"
    assert DataSourceConfig(name="hf:openai/gsm8k").display_name == "gsm8k"
    assert DataSourceConfig(name="data/dev.parquet", label="dev_v2").display_name == "dev_v2"


@pytest.mark.parametrize("name, shown", [
    ("tasks/mytask/eval.jsonl", "mytask"), ("tasks/mytask/Test.parquet", "mytask"),
    ("/abs/sums/validation.jsonl", "sums"), ("hf:org/arith/dev", "arith"),
    ("data/eval.jsonl", "eval_set"), ("tasks/train/val.jsonl", "val_set"),
    ("hf:test", "test_set"), ("/data.jsonl", "data_set")])
def test_a_file_named_for_its_split_is_named_by_its_directory(name, shown):
    """An eval file called eval.jsonl gave the metrics eval/eval/pass@1: a stem that names a
    split says nothing of the task, so the directory names the source, or `<stem>_set`."""
    assert DataSourceConfig(name=name).display_name == shown
    assert DataSourceConfig(name=name, label="mine").display_name == "mine"  # a label wins


def test_a_split_file_named_relative_to_its_directory_takes_its_name(tmp_path, monkeypatch):
    (tmp_path / "mytask").mkdir()
    monkeypatch.chdir(tmp_path / "mytask")
    assert DataSourceConfig(name="eval.jsonl").display_name == "mytask"


def test_an_eval_file_called_eval_is_not_eval_eval(tmp_path, tiny_tokenizer):
    (tmp_path / "mytask").mkdir()
    rows = tmp_path / "mytask" / "eval.jsonl"
    rows.write_text('{"prompt": "1+1?", "ground_truth": "2", "dataset": "gsm8k"}\n')
    cfg = DataConfig(train=[DataSourceConfig(name="addition")],
                     eval=[DataSourceConfig(name=str(rows))], max_prompt_length=200)
    assert [s.name for s in build_datasets(cfg, tiny_tokenizer, seed=0).eval_sets] == ["mytask"]
