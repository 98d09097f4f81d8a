"""Relative data paths in a config file are read beside that file (rlvr.config.paths), from
any working directory; overrides stay relative to the working directory. On the code before, a
config naming `rows.jsonl` beside itself ran only from its own directory."""

import logging
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.data import load_source

ROOT = Path(__file__).parents[1]
ROW = '{"prompt": "1+1?", "ground_truth": "2", "dataset": "gsm8k"}\n'


@pytest.fixture
def task(tmp_path):
    """tasks/mytask/{config.yaml, rows.jsonl, eval.jsonl, t.jinja}, the config naming its
    neighbours by relative paths."""
    folder = tmp_path / "tasks" / "mytask"
    folder.mkdir(parents=True)
    (folder / "rows.jsonl").write_text(ROW)
    (folder / "eval.jsonl").write_text(ROW.replace("1+1", "2+0"))
    (folder / "t.jinja").write_text("{{ messages[0]['content'] }}")
    (folder / "config.yaml").write_text(
        "data:\n  train:\n    - name: rows.jsonl\n    - name: addition\n"
        "  eval:\n    - name: ./eval.jsonl\n  chat_template: t.jinja\n")
    return folder


def test_paths_in_a_config_file_are_read_beside_it(task, tmp_path, monkeypatch):
    for cwd in (tmp_path, task, ROOT):
        monkeypatch.chdir(cwd)
        cfg = load_config(task / "config.yaml")
        names = [Path(s.name).resolve() for s in cfg.data.train[:1] + cfg.data.eval]
        assert names == [task / "rows.jsonl", task / "eval.jsonl"]
        assert Path(cfg.data.chat_template).resolve() == task / "t.jinja"
        assert cfg.data.train[1].name == "addition"  # a built-in is no path
        assert cfg.data.eval[0].display_name == "mytask"  # not eval/eval/pass@1
        (ex,), _ = load_source(cfg.data.train[0], seed=0)
        assert ex.ground_truth == "2"


def test_a_path_inside_the_working_directory_stays_relative_to_it(task, tmp_path,
                                                                  monkeypatch):
    """A source's name seeds its shuffle and names its prompts: from the directory a config
    was written for, its paths read as written, whichever checkout holds them."""
    monkeypatch.chdir(tmp_path)
    cfg = load_config(Path("tasks/mytask/config.yaml"))
    assert cfg.data.train[0].name == "tasks/mytask/rows.jsonl"


def test_overrides_stay_relative_to_the_working_directory(task, tmp_path, monkeypatch):
    (tmp_path / "rows.jsonl").write_text(ROW)
    monkeypatch.chdir(tmp_path)
    cfg = load_config(task / "config.yaml", ["data.train=[{name: rows.jsonl}]"])
    assert cfg.data.train[0].name == "rows.jsonl"


def test_a_path_only_the_working_directory_holds_still_reads_and_is_logged(
        task, tmp_path, monkeypatch, caplog):
    """The old rule, kept so configs written for it run: examples/custom_task named its data
    from the repository root."""
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "rows.jsonl").write_text(ROW)
    (task / "config.yaml").write_text("data:\n  train:\n    - name: old/rows.jsonl\n")
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO, logger="rlvr.config.paths"):
        cfg = load_config(task / "config.yaml")
    assert cfg.data.train[0].name == "old/rows.jsonl"
    assert "not found beside the config file" in caplog.text
    assert "data.train[0].name='old/rows.jsonl'" in caplog.text


def test_a_path_found_nowhere_is_named_beside_the_config(task, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path / "tasks")
    (task / "config.yaml").write_text("data:\n  train:\n    - name: missing.jsonl\n"
                                      "  eval:\n    - name: hf:openai/gsm8k\n")
    cfg = load_config(task / "config.yaml")
    assert cfg.data.train[0].name == "mytask/missing.jsonl"  # its error names where to put it
    assert cfg.data.eval[0].name == "hf:openai/gsm8k"  # a hub id is no path


def test_an_hf_directory_beside_the_config_is_resolved(task, tmp_path, monkeypatch):
    (task / "snapshot").mkdir()
    (task / "config.yaml").write_text("data:\n  train:\n    - name: hf:./snapshot\n")
    monkeypatch.chdir(tmp_path)
    assert load_config(task / "config.yaml").data.train[0].name == "hf:tasks/mytask/snapshot"


def test_a_name_beside_a_directory_of_that_name_stays_a_name(task, tmp_path, monkeypatch):
    """`gsm8k` is the built-in and `tokenizer` the tokenizer's template, whatever folders lie
    beside the config; only a value written as a path is one."""
    for folder in ("gsm8k", "tokenizer", "squad"):
        (task / folder).mkdir()
    (task / "config.yaml").write_text("data:\n  train:\n    - name: gsm8k\n"
                                      "  eval:\n    - name: hf:squad\n"
                                      "  chat_template: tokenizer\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(task / "config.yaml")
    assert (cfg.data.train[0].name, cfg.data.eval[0].name, cfg.data.chat_template) == (
        "gsm8k", "hf:squad", "tokenizer")


def test_the_example_task_loads_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(ROOT / "examples" / "custom_task" / "reverse.yaml")
    assert Path(cfg.data.train[0].name) == ROOT / "examples" / "custom_task" / "reverse.jsonl"
    monkeypatch.chdir(ROOT)  # from the root, as written before: the same name, the same order
    cfg = load_config("examples/custom_task/reverse.yaml")
    assert cfg.data.train[0].name == "examples/custom_task/reverse.jsonl"
