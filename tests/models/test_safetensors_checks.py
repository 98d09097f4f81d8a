"""Hostile safetensors files and shard indexes in a model directory: each is refused with a
ConfigError (exit 2, one line) naming the file, from the headers alone, before transformers
reads a weight; a valid sharded checkpoint still loads. Before these checks most failed inside
transformers with a SafetensorError traceback, and an index naming `../x.safetensors` loaded
weights from outside the directory."""

from __future__ import annotations

import json
import shutil
import struct
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import ConfigError
from rlvr.models import load_causal_lm
from rlvr.models.checks import check_weight_files
from tests.cli_checks import fails_in_one_line

REPO = Path(__file__).resolve().parents[2]
NORM = "model.norm.weight"  # the last tensor in the tiny model's data: [64] float32, 256 bytes
INDEX = "model.safetensors.index.json"


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, copy)
    return copy


def _split(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + length]), raw[8 + length:]


def _write(path: Path, header: bytes | dict, data: bytes, length: int | None = None) -> None:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def _norm(**changes):
    return lambda header: header[NORM].update(changes)


# What each hostile header does to the tiny model's (a function of the parsed header), or the
# raw header bytes; and a phrase of the refusal.
HOSTILE_HEADERS = {
    "dtype-F99": (_norm(dtype="F99"), "unknown variant `F99`"),
    "dtype-empty": (_norm(dtype=""), "unknown variant ``"),
    "shape-negative": (_norm(shape=[-64]), "invalid value: integer `-64`"),
    "shape-huge": (_norm(shape=[2**62, 2**62]), "overflow"),
    "shape-huge-times-zero": (_norm(shape=[2**62, 0]), "invalid shape, data type, or offset"),
    "shape-float": (_norm(shape=[64.0]), "floating point `64.0`"),
    "shape-string": (_norm(shape=["64"]), 'string "64"'),
    "shape-wrong-size": (_norm(shape=[32]), "invalid shape, data type, or offset"),
    "offsets-past-end": (_norm(data_offsets=[362240, 362240 + 10**9]),
                         "invalid shape, data type, or offset"),
    "offsets-overlap": (_norm(data_offsets=[362112, 362368]),
                        f"invalid offset for tensor `{NORM}`"),
    "offsets-reversed": (_norm(data_offsets=[362496, 362240]),
                         f"invalid offset for tensor `{NORM}`"),
    "offsets-not-integers": (_norm(data_offsets=["a", 1.5]), 'string "a"'),
    "entry-not-object": (lambda h: h.update({NORM: [1, 2]}), "expected string or map"),
    "metadata-not-object": (lambda h: h.update({"__metadata__": [1]}), "expected a map"),
    "not-an-object": (b"[1, 2, 3]", "invalid type: sequence"),
    "not-utf8-json": (b"\xff\xfe not json" + b" " * 64, "invalid UTF-8"),
    "nested-deeply": (b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "recursion limit"),
}


@pytest.mark.parametrize("name", HOSTILE_HEADERS)
def test_a_hostile_header_is_refused_naming_the_file(model_copy, name):
    change, expected = HOSTILE_HEADERS[name]
    weights = model_copy / "model.safetensors"
    header, data = _split(weights)
    if isinstance(change, bytes):
        header = change
    else:
        change(header)
    _write(weights, header, data)
    with pytest.raises(ConfigError, match="model.safetensors is not a valid safetensors") as e:
        load_causal_lm(str(model_copy))
    assert expected in str(e.value)


def test_a_gap_between_tensors_is_refused(model_copy):
    weights = model_copy / "model.safetensors"
    header, data = _split(weights)
    header[NORM]["data_offsets"] = [362240 + 64, 362496 + 64]  # 64 bytes no tensor owns
    _write(weights, header, data + bytes(64))
    with pytest.raises(ConfigError, match=f"invalid offset for tensor `{NORM}`"):
        load_causal_lm(str(model_copy))


@pytest.mark.parametrize("cut", ["truncated", "header-cut", "zero-bytes", "four-bytes"])
def test_a_cut_file_is_refused(model_copy, cut):
    weights = model_copy / "model.safetensors"
    raw = weights.read_bytes()
    weights.write_bytes({"truncated": raw[:len(raw) // 2], "header-cut": raw[:100],
                         "zero-bytes": b"", "four-bytes": raw[:4]}[cut])
    with pytest.raises(ConfigError, match="model.safetensors"):
        load_causal_lm(str(model_copy))


@pytest.mark.parametrize("length", [2**63, "file+10"])
def test_a_length_prefix_beyond_the_file_is_refused_before_reading(model_copy, length):
    weights = model_copy / "model.safetensors"
    header, data = _split(weights)
    text = json.dumps(header).encode()
    claimed = 8 + len(text) + len(data) + 10 if length == "file+10" else length
    _write(weights, text, data, length=claimed)
    with pytest.raises(ConfigError, match=f"its header claims {claimed} bytes"):
        load_causal_lm(str(model_copy))


@pytest.mark.parametrize("same", [True, False], ids=["same-entry", "other-entry"])
def test_a_tensor_named_twice_is_refused(model_copy, same):
    # JSON keeps the last of two equal keys: an exact copy passes the library's checks.
    weights = model_copy / "model.safetensors"
    header, data = _split(weights)
    entry = header[NORM] if same else {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}
    text = json.dumps(header).encode()[:-1] + f', "{NORM}": {json.dumps(entry)}}}'.encode()
    _write(weights, text, data)
    with pytest.raises(ConfigError, match="model.safetensors"):
        load_causal_lm(str(model_copy))
    if same:
        with pytest.raises(ConfigError, match=f"its header names {NORM} twice"):
            check_weight_files(str(model_copy))


def test_a_train_on_a_hostile_header_exits_2_in_one_line(model_copy, tmp_path, capsys):
    weights = model_copy / "model.safetensors"
    header, data = _split(weights)
    header[NORM]["dtype"] = "F99"
    _write(weights, header, data)
    out = tmp_path / "run"
    fails_in_one_line(capsys, ["train", str(REPO / "configs" / "tiny.yaml"),
                               f"model.name_or_path={model_copy}", f"experiment.output_dir={out}"],
                      str(weights), "F99")
    assert not out.exists()


def test_the_check_reads_headers_only(tmp_path):
    # A 16 GiB tensor in a sparse file: opening it must not read (or map into memory) the data.
    path = tmp_path / "model.safetensors"
    size = 16 << 30
    _write(path, {"big": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}, b"")
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size + size)
    start = time.monotonic()
    check_weight_files(str(tmp_path))
    assert time.monotonic() - start < 2


# The shard index


def _shard(model: Path, last: tuple[str, ...] = (NORM,)) -> dict:
    """The tiny model as two shards, the second holding `last`, and its index's weight map."""
    header, data = _split(model / "model.safetensors")
    header.pop("__metadata__")
    (model / "model.safetensors").unlink()
    names = sorted(header, key=lambda n: header[n]["data_offsets"])
    weight_map = {}
    for file, part in (("model-00001-of-00002.safetensors", [n for n in names if n not in last]),
                       ("model-00002-of-00002.safetensors", list(last))):
        entries, chunks, at = {}, [], 0
        for name in part:
            begin, end = header[name]["data_offsets"]
            entries[name] = dict(header[name], data_offsets=[at, at + end - begin])
            chunks.append(data[begin:end])
            at += end - begin
            weight_map[name] = file
        _write(model / file, entries, b"".join(chunks))
    (model / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return weight_map


def test_a_sharded_checkpoint_loads_the_same_weights(model_copy, tiny_model_dir):
    _shard(model_copy)
    model = load_causal_lm(str(model_copy))
    expected = load_file(Path(tiny_model_dir) / "model.safetensors")
    for name, tensor in expected.items():
        assert torch.equal(model.state_dict()[name], tensor), name


@pytest.mark.parametrize("where", ["parent", "absolute", "subdirectory", "not-safetensors"])
def test_an_index_naming_a_file_outside_the_directory_is_refused(model_copy, tiny_model_dir,
                                                                 where):
    weight_map = _shard(model_copy)
    (model_copy / "model-00002-of-00002.safetensors").unlink()
    outside = model_copy.parent / "outside"
    shutil.copytree(tiny_model_dir, outside)  # every tensor, so transformers loaded it whole
    (model_copy / "sub").mkdir()
    shutil.copy(outside / "model.safetensors", model_copy / "sub" / "model.safetensors")
    weight_map[NORM] = {"parent": "../outside/model.safetensors",
                        "absolute": str(outside / "model.safetensors"),
                        "subdirectory": "sub/model.safetensors",
                        "not-safetensors": "config.json"}[where]
    (model_copy / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(ConfigError, match=f"{INDEX}: .* is not the name of a safetensors file"):
        load_causal_lm(str(model_copy))


def test_an_index_naming_a_missing_shard_is_refused(model_copy):
    _shard(model_copy)
    (model_copy / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ConfigError, match=f"{INDEX} names the shard model-00002-of-00002"):
        load_causal_lm(str(model_copy))


@pytest.mark.parametrize("tensor", [NORM, "model.extra.weight"], ids=["moved", "absent"])
def test_an_index_placing_a_tensor_in_the_wrong_shard_is_refused(model_copy, tensor):
    weight_map = _shard(model_copy)
    weight_map[tensor] = "model-00001-of-00002.safetensors"
    (model_copy / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(ConfigError, match=f"places tensors in model-00001-of-00002.safetensors "
                                          f"that it does not hold: {tensor}"):
        load_causal_lm(str(model_copy))


@pytest.mark.parametrize("text", ["{nope", "[1]", '{"a":' + "[" * 100_000 + "]" * 100_000 + "}",
                                  '{"metadata": {}, "weight_map": [1]}',
                                  '{"metadata": {}, "weight_map": {"x": 1}}',
                                  '{"weight_map": {}}', '{"metadata": [], "weight_map": {}}'],
                         ids=["not-json", "list", "nested-deeply", "map-list", "map-int",
                              "no-metadata", "metadata-list"])
def test_a_malformed_index_is_refused(model_copy, text):
    _shard(model_copy)
    (model_copy / INDEX).write_text(text)
    with pytest.raises(ConfigError, match=INDEX):
        load_causal_lm(str(model_copy))
