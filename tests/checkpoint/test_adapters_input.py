"""An adapter directory is input to `rlvr merge`: its config and tensor names are checked
before and after PEFT builds the model, so a crafted adapter exits 2 instead of merging random
matrices, allocating gigabytes, or running an SVD over the base weights."""

import json
import re
import shutil
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr.cli import main
from rlvr.config import ConfigError
from rlvr.learner.lora import LoraSettings, save_adapter, wrap_lora


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    """A base model directory and an adapter rlvr itself wrote for it."""
    root = tmp_path_factory.mktemp("adapters")
    base = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1))
    base.save_pretrained(root / "base", safe_serialization=True)
    wrapped = wrap_lora(base, LoraSettings(rank=4, alpha=8, base_model=str(root / "base")))
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.normal_()  # so the merge differs from the base
    save_adapter(wrapped, root / "ok")
    return root


def _variant(root, name, config=None, rename=None):
    d = root / name
    shutil.copytree(root / "ok", d)
    if config:
        c = json.loads((d / "adapter_config.json").read_text())
        c.update(config)
        (d / "adapter_config.json").write_text(json.dumps(c))
    if rename:
        state = load_file(d / "adapter_model.safetensors")
        save_file({rename(k): v for k, v in state.items()}, d / "adapter_model.safetensors")
    return d


def test_rlvrs_own_adapter_passes_the_checks_and_merges(adapter):
    from rlvr.checkpoint.adapters import load_merged_model
    merged = load_merged_model(adapter / "ok").state_dict()
    base = LlamaForCausalLM.from_pretrained(adapter / "base").state_dict()
    assert merged.keys() == base.keys()
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           base["model.layers.0.self_attn.q_proj.weight"])


@pytest.mark.parametrize("name, config, rename, message", [
    ("renamed", None, lambda k: k.replace("lora_A", "lora_X"), "7 tensors missing"),
    ("extra", None, lambda k: k.replace(".weight", ".weight2"), "unexpected"),
    ("r_huge", {"r": 3_000_000}, None, r"r=3000000 is not a rank in \[1, 16\]"),
    ("r_zero", {"r": 0}, None, "r=0 is not a rank"),
    ("r_str", {"r": "8"}, None, "r='8' is not a rank"),
    ("pattern", {"rank_pattern": {"q_proj": 10**7}}, None, "rank_pattern"),
    ("pissa", {"init_lora_weights": "pissa_niter_1000000000"}, None, "init_lora_weights"),
    ("replicate", {"layer_replication": [[0, 1], [0, 1]]}, None, "layer_replication"),
    ("save", {"modules_to_save": ["lm_head"]}, None, "modules_to_save"),
    ("dora", {"use_dora": True}, None, "use_dora"),
    ("targets", {"target_modules": ["nonexistent_proj"]}, None, "nonexistent_proj"),
])
def test_a_crafted_adapter_exits_2_naming_the_file(adapter, tmp_path, capsys, name, config,
                                                   rename, message):
    d = _variant(adapter, name, config, rename)
    assert main(["merge", str(d), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(d) in err and re.search(message, err)
    assert not (tmp_path / "out").exists()


def test_a_config_that_is_not_a_json_object_exits_2(adapter, tmp_path, capsys):
    d = _variant(adapter, "list")
    (d / "adapter_config.json").write_text("[1, 2]")
    assert main(["merge", str(d), str(tmp_path / "out")]) == 2
    assert "not a JSON object" in capsys.readouterr().err


def _header_and_data(path):
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + length]), raw[8 + length:]


def _hostile_weights(path, how):
    """Rewrite the adapter file `path` as `how` says; PEFT opened each unchecked."""
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
        return
    header, data = _header_and_data(path)
    first = next(name for name in header if name != "__metadata__")
    if how == "offsets-past-end":
        header[first]["data_offsets"] = [0, 10**9]
    elif how == "dtype-F99":
        header[first]["dtype"] = "F99"
    text = json.dumps(header).encode()
    if how == "named-twice":  # json keeps the last of two equal keys: the library passes it
        text = text[:-1] + f', "{first}": {json.dumps(header[first])}}}'.encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize("how, message", [
    ("truncated", "is not a valid safetensors file: .*incomplete metadata"),
    ("offsets-past-end", "is not a valid safetensors file: .*invalid shape, data type, or offset"),
    ("dtype-F99", "is not a valid safetensors file: .*unknown variant `F99`"),
    ("named-twice", "its header names base_model.model.*lora_A.weight twice"),
])
def test_a_malformed_adapter_weights_file_exits_2_naming_it(adapter, tmp_path, capsys, how,
                                                            message):
    d = _variant(adapter, how)
    _hostile_weights(d / "adapter_model.safetensors", how)
    assert main(["merge", str(d), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rlvr: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(d / "adapter_model.safetensors") in lines[0]
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "out").exists()


def test_an_adapter_file_linking_out_of_the_directory_is_refused(adapter, tmp_path):
    from rlvr.checkpoint.adapters import load_merged_model

    d = _variant(adapter, "link")
    (d / "adapter_model.safetensors").unlink()
    (d / "adapter_model.safetensors").symlink_to(adapter / "ok" / "adapter_model.safetensors")
    with pytest.raises(ConfigError, match="adapter_model.safetensors links to .* outside"):
        load_merged_model(d)
