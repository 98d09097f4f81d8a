"""`rlvr report` reads a run directory of any size within bounds: a metrics line past
`MAX_METRICS_LINE_BYTES` is skipped with a warning (a 3 GB line was read whole: 6.4 GiB), and a
trace file whose metadata says it holds more than `MAX_TRACE_FILE_BYTES` uncompressed is
skipped unread (83 KB of zstd strings reached 4.9 GiB)."""

import json

import pyarrow as pa
import pyarrow.parquet as pq

from rlvr.report import run_data


def test_an_oversized_metrics_line_is_skipped_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(run_data, "MAX_METRICS_LINE_BYTES", 1000)
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"training_step": 0, "x": 1.0}) + "\n"
                    + json.dumps({"training_step": 1, "junk": "z" * 5000}) + "\n"
                    + json.dumps({"training_step": 2, "x": 3.0}) + "\n"
                    + '{"training_step": 3, "x"')  # torn: a run in the middle of writing it
    warnings = []
    rows, torn = run_data.read_metrics(path, warnings)
    assert [r["training_step"] for r in rows] == [0, 2] and torn
    assert any("line 2: skipped" in w and "bytes" in w for w in warnings)


def test_a_trace_file_too_large_uncompressed_is_skipped_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(run_data, "MAX_TRACE_FILE_BYTES", 10_000)
    small, large = tmp_path / "step_000001.parquet", tmp_path / "step_000002.parquet"
    pq.write_table(pa.table({"text": ["ok"]}), small)
    pq.write_table(pa.table({"text": ["a" * 100_000]}), large, compression="zstd")
    assert large.stat().st_size < 10_000  # small on disk, large once read

    def no_read_of_the_large_one(file, *args, **kwargs):
        assert file != large, "the oversized trace file was read"
        return real_read(file, *args, **kwargs)

    real_read = pq.read_table
    monkeypatch.setattr(run_data.pq, "read_table", no_read_of_the_large_one)
    warnings = []
    frame = run_data.read_traces([small, large], warnings)
    assert list(frame["text"]) == ["ok"]
    assert any("step_000002.parquet: skipped" in w for w in warnings)
