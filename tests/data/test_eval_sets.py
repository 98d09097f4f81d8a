"""Eval prompts keep their set: one named set per `data.eval` source, or the holdout."""

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
    assert DataSourceConfig(name="data/dev.parquet").display_name == "dev"
    assert DataSourceConfig(name="hf:openai/gsm8k").display_name == "gsm8k"
    assert DataSourceConfig(name="data/dev.parquet", label="dev_v2").display_name == "dev_v2"
