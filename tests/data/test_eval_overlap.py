"""Eval sets that are training prompts are refused (wholly inside, or the same source read
again) or warned about and counted (some overlap); procedural tasks are only warned about."""

import json
import logging

import pytest

from rlvr.config import DataConfig, DataSourceConfig
from rlvr.data import BUILTIN_SOURCES, DataError, build_datasets, load_datasets


def _jsonl(path, numbers, spacing=" "):
    path.write_text("".join(json.dumps({"prompt": f"What is{spacing}{i} + 1?",
                                        "ground_truth": str(i + 1), "dataset": "gsm8k"}) + "\n"
                            for i in numbers))
    return str(path)


def _load(train, evals, **kw):
    return load_datasets(DataConfig(train=train, eval=evals, **kw), seed=0)


def test_an_eval_source_naming_the_training_split_again_is_refused():
    # The audit: eval {name: gsm8k} with no split read the train split, 200 of 200 trained on.
    with pytest.raises(DataError, match=r"eval set 'gsm8k' reads the training source 'gsm8k' "
                                        r"\(split train\) again: 20 of its 20 prompts"):
        _load([DataSourceConfig(name="gsm8k")],
              [DataSourceConfig(name="gsm8k", split="train", max_rows=20)])


def test_the_test_split_of_the_training_source_is_no_overlap():
    loaded = _load([DataSourceConfig(name="gsm8k")],
                   [DataSourceConfig(name="gsm8k", split="test", max_rows=50)])
    assert loaded.eval_overlap == {"gsm8k": 0}


def test_the_same_file_as_train_and_eval_is_refused(tmp_path):
    path = _jsonl(tmp_path / "rows.jsonl", range(10))
    with pytest.raises(DataError, match="reads the training source .* again: 10 of its 10"):
        _load([DataSourceConfig(name=path)], [DataSourceConfig(name=path, label="dev")])


def test_an_eval_set_wholly_inside_the_training_prompts_is_refused(tmp_path):
    # Another file, other whitespace, the same prompts: found by the normalised hash.
    train = _jsonl(tmp_path / "train.jsonl", range(10))
    dev = _jsonl(tmp_path / "probe.jsonl", range(3, 6), spacing="  \n")
    with pytest.raises(DataError, match=r"eval set 'probe' is wholly inside the training set: "
                                        r"3 of its 3 prompts .*\(3 in '.*train.jsonl'\)"):
        _load([DataSourceConfig(name=train)], [DataSourceConfig(name=dev)])


def test_math500_inside_the_math_test_split_is_refused():
    with pytest.raises(DataError, match="'math500' is wholly inside .* 500 of its 500 prompts "
                                        r"are training prompts \(500 in 'math' \(split test\)\)"):
        _load([DataSourceConfig(name="math", split="test")],
              [DataSourceConfig(name="math500", split="test")])


def test_some_overlap_is_warned_once_and_counted(tmp_path, caplog, tiny_tokenizer):
    train = _jsonl(tmp_path / "train.jsonl", range(10))
    dev = _jsonl(tmp_path / "probe.jsonl", range(8, 12))
    other = _jsonl(tmp_path / "other.jsonl", range(100, 103))
    cfg = DataConfig(train=[DataSourceConfig(name=train)],
                     eval=[DataSourceConfig(name=dev), DataSourceConfig(name=other)])
    with caplog.at_level(logging.WARNING, logger="rlvr.data.overlap"):
        bundle = build_datasets(cfg, tiny_tokenizer, seed=0)
    assert bundle.eval_overlap == {"probe": 2, "other": 0}  # the step-0 metric reads this
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "'probe' 2 of 4 (2 in '" in warning and "'other'" not in warning


def test_procedural_tasks_share_problems_by_design_and_are_only_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="rlvr.data.overlap"):
        loaded = _load([DataSourceConfig(name="addition")],
                       [DataSourceConfig(name="addition", split="test", max_rows=50),
                        DataSourceConfig(name="addition", max_rows=20, label="same_split")])
    assert loaded.eval_overlap == {"addition": 50, "same_split": 20}
    assert "shared by design" in caplog.text


def test_the_eval_holdout_is_not_flagged(caplog, tiny_tokenizer):
    cfg = DataConfig(train=[DataSourceConfig(name="addition")], eval_holdout=8,
                     max_prompt_length=200)
    with caplog.at_level(logging.WARNING, logger="rlvr.data.overlap"):
        bundle = build_datasets(cfg, tiny_tokenizer, seed=0)
    assert [len(s.prompts) for s in bundle.eval_sets] == [8]
    assert bundle.eval_overlap == {} and not caplog.records


def test_an_unset_split_reads_train_for_training_and_test_for_eval():
    loaded = _load([DataSourceConfig(name="gsm8k", split=None, max_rows=5)],
                   [DataSourceConfig(name="gsm8k", split=None, max_rows=5)])
    assert [s.split for s, _ in loaded.train + loaded.eval] == ["train", "test"]
    assert loaded.eval_overlap == {"gsm8k": 0}


def test_prompt_key_collapses_whitespace_only():
    from rlvr.data.overlap import prompt_key

    m = lambda text, role="user": ({"role": role, "content": text},)  # noqa: E731
    assert prompt_key(m("What is  2+2?\n")) == prompt_key(m("What is 2+2?"))
    assert prompt_key(m("what is 2+2?")) != prompt_key(m("What is 2+2?"))
    assert prompt_key(m("What is 2+2?", "system")) != prompt_key(m("What is 2+2?"))


def test_the_shared_by_design_names_are_built_in_sources():
    from rlvr.data.overlap import SHARED_BY_DESIGN

    assert SHARED_BY_DESIGN <= set(BUILTIN_SOURCES)
    assert {"gsm8k", "math", "math500", "humaneval", "ifbench"}.isdisjoint(SHARED_BY_DESIGN)
