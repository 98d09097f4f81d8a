"""`hf:` sources with a subset (a configuration) and a revision: a local snapshot's subset is
its subdirectory; a hub id passes both to `datasets`, offline, from its cache. Both are
refused, naming the field, on a source that is not `hf:`."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.config import ConfigError, DataSourceConfig, load_config
from rlvr.data import DataError, load_source

pytest.importorskip("datasets", reason="the `datasets` extra is not installed")


def _row(answer: str) -> dict:
    return {"prompt": f"what is {answer}?", "ground_truth": answer, "dataset": "gsm8k"}


@pytest.fixture
def snapshot(tmp_path):
    """A hub snapshot laid out as openai/gsm8k's: one subdirectory per configuration."""
    for subset, answer in (("main", "1"), ("socratic", "2")):
        (tmp_path / "gsm8k" / subset).mkdir(parents=True)
        for split in ("train", "test"):
            pq.write_table(pa.Table.from_pylist([_row(answer)]),
                           tmp_path / "gsm8k" / subset / f"{split}-00000-of-00001.parquet")
    (tmp_path / "gsm8k" / "README.md").write_text("---\nconfigs:\n- config_name: main\n---\n")
    return tmp_path / "gsm8k"


def test_a_subset_picks_its_subdirectory_of_a_local_snapshot(snapshot):
    for subset, answer in (("main", "1"), ("socratic", "2")):
        (ex,), _ = load_source(DataSourceConfig(name=f"hf:{snapshot}", subset=subset,
                                                split="test"), seed=0)
        assert ex.ground_truth == answer


def test_a_missing_subset_names_the_ones_there(snapshot):
    with pytest.raises(DataError, match=r"no subset 'mian'.*\['main', 'socratic'\]"):
        load_source(DataSourceConfig(name=f"hf:{snapshot}", subset="mian"), seed=0)


@pytest.mark.parametrize("subset", ["..", "../gsm8k", "main/../..", "/etc"])
def test_a_subset_cannot_leave_the_directory(snapshot, subset):
    with pytest.raises(DataError, match=f"no subset '{subset}'"):
        load_source(DataSourceConfig(name=f"hf:{snapshot / 'main'}", subset=subset), seed=0)


def test_a_subset_that_is_a_link_is_refused(snapshot, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    pq.write_table(pa.Table.from_pylist([_row("9")]), tmp_path / "elsewhere" / "train.parquet")
    (snapshot / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(DataError, match="no subset 'linked'"):
        load_source(DataSourceConfig(name=f"hf:{snapshot}", subset="linked"), seed=0)


def test_a_revision_of_a_local_directory_is_refused(snapshot):
    with pytest.raises(DataError, match="a local directory holds one revision"):
        load_source(DataSourceConfig(name=f"hf:{snapshot}", subset="main", revision="v1"),
                    seed=0)


def test_a_hub_id_passes_subset_and_revision_to_datasets(monkeypatch):
    import datasets

    calls = []

    def load_dataset(path, **kwargs):  # the cache is not touched: what is asked is checked
        calls.append((path, kwargs))
        return datasets.Dataset.from_list([_row("3")])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    (ex,), _ = load_source(DataSourceConfig(name="hf:openai/gsm8k", subset="main",
                                            revision="e53f048", split="test"), seed=0)
    assert ex.ground_truth == "3"
    assert calls == [("openai/gsm8k", {"name": "main", "revision": "e53f048", "split": "test"})]


@pytest.mark.parametrize("name", ["gsm8k", "data/rows.jsonl"])
@pytest.mark.parametrize("field", ["subset", "revision"])
def test_subset_and_revision_are_refused_off_hf_sources(name, field):
    with pytest.raises(ConfigError, match=rf"data.eval\[0\].{field}='main': only an hf: source"):
        load_config("configs/tiny.yaml", [f"data.eval=[{{name: {name}, {field}: main}}]"])


def test_an_hf_source_takes_subset_and_revision():
    cfg = load_config("configs/tiny.yaml",
                      ["data.eval=[{name: 'hf:openai/gsm8k', subset: main, revision: main}]"])
    assert (cfg.data.eval[0].subset, cfg.data.eval[0].revision) == ("main", "main")
    with pytest.raises(ConfigError, match=r"data.train\[0\].subset is empty"):
        load_config("configs/tiny.yaml", ["data.train=[{name: 'hf:openai/gsm8k', subset: ''}]"])


def test_row_errors_name_the_jsonl_line_an_editor_shows(tmp_path):
    """Line 3 (after a blank line 2) was reported as "row 2"; line 2 of a file as "row 1"."""
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(_row("1")) + "\n\n" + json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(DataError, match=rf"^{path} line 3 field 'ground_truth': missing"):
        load_source(DataSourceConfig(name=str(path)), seed=0)


def test_row_errors_of_parquet_and_datasets_count_from_1_and_say_so(tmp_path, snapshot):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([_row("1"), {**_row("1"), "ground_truth": None}]), path)
    with pytest.raises(DataError, match=r"rows.parquet row 2 \(counted from 1\) field"):
        load_source(DataSourceConfig(name=str(path)), seed=0)
    pq.write_table(pa.Table.from_pylist([_row("1"), {**_row("1"), "ground_truth": None}]),
                   snapshot / "main" / "train-00000-of-00001.parquet")
    with pytest.raises(DataError, match=r"gsm8k row 2 \(counted from 1\) field 'ground_truth'"):
        load_source(DataSourceConfig(name=f"hf:{snapshot}", subset="main"), seed=0)
