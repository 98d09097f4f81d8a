"""Readers and field mapping; every bad row names its file, row and field."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from rlvr.config import DataSourceConfig
from rlvr.data import DataError, load_source


def _jsonl(tmp_path, rows, name="d.jsonl"):
    path = tmp_path / name
    with open(path, "wb") as f:
        for r in rows:
            f.write(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode())
    return path


GOOD = {"messages": [{"role": "user", "content": "1+1?"}], "ground_truth": "2",
        "dataset": "gsm8k"}


def test_jsonl_messages_and_prompt_rows(tmp_path):
    path = _jsonl(tmp_path, [GOOD, {"prompt": "2+2?", "ground_truth": 4, "dataset": ["gsm8k"]}])
    examples, bad = load_source(DataSourceConfig(name=str(path)), seed=0)
    assert bad == 0 and len(examples) == 2
    assert examples[1].messages == ({"role": "user", "content": "2+2?"},)
    assert examples[1].ground_truth == "4" and examples[1].verifiers == ("gsm8k",)
    assert examples[0].id == f"{path}/0"


def test_field_mapping_and_default_verifier(tmp_path):
    path = _jsonl(tmp_path, [{"question": "3+3?", "answer": "6"}])
    src = DataSourceConfig(name=str(path), prompt_field="question", ground_truth_field="answer",
                           verifier="last_number")
    (ex,), _ = load_source(src, seed=0)
    assert ex.messages[0]["content"] == "3+3?" and ex.verifiers == ("last_number",)


def test_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "5+5?", "ground_truth": "10",
                                          "dataset": "gsm8k"}]), path)
    (ex,), _ = load_source(DataSourceConfig(name=str(path)), seed=0)
    assert ex.ground_truth == "10"


def test_datasets_directory(tmp_path):
    datasets = pytest.importorskip("datasets", reason="the `datasets` extra is not installed")
    datasets.Dataset.from_list([GOOD]).save_to_disk(str(tmp_path / "ds"))
    (ex,), _ = load_source(DataSourceConfig(name=str(tmp_path / "ds")), seed=0)
    assert ex.ground_truth == "2"


@pytest.mark.parametrize("row, field, problem", [
    ({"messages": GOOD["messages"], "dataset": "gsm8k"}, "ground_truth", "missing"),
    ({**GOOD, "ground_truth": {"a": 1}}, "ground_truth", "expected a string"),
    ({**GOOD, "messages": []}, "messages", "empty"),
    ({**GOOD, "messages": "hi"}, "messages", "expected a list"),
    ({**GOOD, "messages": [{"role": "user"}]}, "messages", "'content'"),
    ({**GOOD, "dataset": "no_such_verifier"}, "dataset", "unknown verifier"),
    ({"ground_truth": "2", "dataset": "gsm8k"}, "messages", "missing"),
    ({**GOOD, "ground_truth": "two"}, "ground_truth", "the 'gsm8k' verifier cannot use it"),
])
def test_bad_rows_name_file_row_and_field(tmp_path, row, field, problem):
    path = _jsonl(tmp_path, [GOOD, GOOD, row])
    with pytest.raises(DataError) as e:
        load_source(DataSourceConfig(name=str(path)), seed=0)
    assert (e.value.source, e.value.row, e.value.field) == (str(path), 2, field)  # 0-based
    assert f"{path} line 3 field '{field}'" in str(e.value) and problem in str(e.value)


@pytest.mark.parametrize("raw, problem", [
    (b'{"prompt": "x", \n', "invalid JSON"),
    (b'{"prompt": "\xff\xfe"}\n', "undecodable bytes"),
])
def test_undecodable_and_invalid_lines(tmp_path, raw, problem):
    path = _jsonl(tmp_path, [GOOD, raw])
    with pytest.raises(DataError, match=rf"line 2: {problem}"):
        load_source(DataSourceConfig(name=str(path)), seed=0)


def test_skip_mode_counts_bad_rows(tmp_path):
    path = _jsonl(tmp_path, [GOOD, {"prompt": "x"}, b"\xff\n", GOOD])
    examples, bad = load_source(DataSourceConfig(name=str(path)), seed=0, on_bad_row="skip")
    assert len(examples) == 2 and bad == 2


def test_missing_file():
    with pytest.raises(DataError, match="no such file"):
        load_source(DataSourceConfig(name="nowhere.jsonl"), seed=0)


def test_an_hf_directory_of_jsonl_or_parquet_loads(tmp_path):
    pytest.importorskip("datasets", reason="the `datasets` extra is not installed")
    (tmp_path / "j").mkdir()
    (tmp_path / "j" / "train.jsonl").write_text(json.dumps(GOOD) + "\n")
    (ex,), _ = load_source(DataSourceConfig(name=f"hf:{tmp_path / 'j'}"), seed=0)
    assert ex.ground_truth == "2"
    (tmp_path / "p").mkdir()
    pq.write_table(pa.Table.from_pylist([GOOD]), tmp_path / "p" / "train.parquet")
    (ex,), _ = load_source(DataSourceConfig(name=f"hf:{tmp_path / 'p'}"), seed=0)
    assert ex.ground_truth == "2"


def test_an_hf_directory_holding_a_tar_is_refused_unread(tmp_path, monkeypatch):
    """datasets' webdataset builder would torch.load the tar's .pth member (an unpickle)."""
    import io
    import tarfile
    pytest.importorskip("datasets", reason="the `datasets` extra is not installed")

    def no_unpickling(*args, **kwargs):
        raise AssertionError("torch.load ran on data set bytes")

    monkeypatch.setattr(torch, "load", no_unpickling)
    (tmp_path / "ds").mkdir()
    with tarfile.open(tmp_path / "ds" / "data.tar", "w") as tar:
        body = io.BytesIO()
        torch.save({"x": 1}, body)
        info = tarfile.TarInfo("0.pth")
        info.size = len(body.getvalue())
        tar.addfile(info, io.BytesIO(body.getvalue()))
    with pytest.raises(DataError, match=r"ds: data.tar: an hf: directory holds only"):
        load_source(DataSourceConfig(name=f"hf:{tmp_path / 'ds'}"), seed=0)


def test_an_hf_directory_readme_cannot_redirect_outside_it(tmp_path):
    pytest.importorskip("datasets", reason="the `datasets` extra is not installed")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "rows.jsonl").write_text(json.dumps({**GOOD, "ground_truth": "9"})
                                                    + "\n")
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
        "    path: \"../secret/rows.jsonl\"\n---\n")
    (tmp_path / "ds" / "train.jsonl").write_text(json.dumps(GOOD) + "\n")
    (ex,), _ = load_source(DataSourceConfig(name=f"hf:{tmp_path / 'ds'}"), seed=0)
    assert ex.ground_truth == "2"  # the directory's own file, not the README's
