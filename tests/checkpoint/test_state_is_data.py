"""A sharded training state is data, by construction: what a resume reads from it builds DCP's
records and plain values, and nothing in it runs or changes code.

Each attack is a file someone who can write the state directory writes, with the manifest
rewritten to match (`verify_state` passes), and each is checked for its effect, not only for a
refusal: a command that would touch a marker file, an attribute set on a module or a class, a
file read from outside the state. The genuine article, DCP's own index of a tiny state saved
on CPU in one process, still loads."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import struct

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata

from rlvr.checkpoint.resume import plan_resume
from rlvr.checkpoint.safe_load import UnsafeStateFile
from rlvr.checkpoint.sharded import load_sharded, save_sharded
from rlvr.checkpoint.state import (MANIFEST, TrainingState, capture_rng, list_states,
                                   load_latest_state, save_state, verify_state)

DCP_METADATA = "torch.distributed.checkpoint.metadata"  # it imports `os`


def _text(s: str) -> bytes:
    data = s.encode()
    return pickle.BINUNICODE + struct.pack("<I", len(data)) + data


def _global(module: str, name: str) -> bytes:
    return _text(module) + _text(name) + pickle.STACK_GLOBAL


def _call(module: str, name: str, argument: str) -> bytes:
    """A protocol-4 pickle of `module`'s `name`(argument): a dotted name is walked attribute
    by attribute by `pickle.Unpickler.find_class`."""
    return (pickle.PROTO + b"\x04" + _global(module, name) + _text(argument) + pickle.TUPLE1
            + pickle.REDUCE + pickle.STOP)


def _set_attribute(module: str, name: str, attribute: str) -> bytes:
    """A pickle that BUILDs `module`'s `name` itself (a class, a module) with a slot state:
    `setattr(that, attribute, True)`."""
    return (pickle.PROTO + b"\x04" + _global(module, name) + pickle.NONE + pickle.EMPTY_DICT
            + _text(attribute) + pickle.NEWTRUE + pickle.SETITEM + pickle.TUPLE2 + pickle.BUILD
            + pickle.STOP)


def _saved(directory):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    save_sharded(directory, model, optimizer, None, {"step": 1})
    return model, optimizer


def _fresh():
    model = torch.nn.Linear(3, 2)
    return model, torch.optim.AdamW(model.parameters(), lr=0.5)


def _refusal(call, *args) -> BaseException:
    """What `call(*args)` raised (it must raise): checked by the caller after the side effects,
    so that a crafted file that ran is reported as such, whatever it raised afterwards."""
    try:
        call(*args)
    except BaseException as e:  # noqa: BLE001  DCP's failures are BaseExceptions
        return e
    raise AssertionError(f"{call.__name__} accepted a crafted state")


def _rewrite_manifest(path):
    """What an attacker who writes the state directory does: checksums that match."""
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*")
                   if p.is_file() and p.name != MANIFEST)
    manifest = {name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in files}
    (path / MANIFEST).write_text(json.dumps(manifest))


# ---- the index (`.metadata`) ------------------------------------------------------------------

def test_a_dotted_global_through_dcps_module_is_refused_and_never_run(tmp_path):
    # `torch.distributed.checkpoint.metadata` + `os.system`: one attribute away from a shell.
    marker = tmp_path / "pwned"
    _saved(tmp_path / "learner")
    (tmp_path / "learner" / ".metadata").write_bytes(
        _call(DCP_METADATA, "os.system", f"touch {marker}"))
    refused = _refusal(load_sharded, tmp_path / "learner", *_fresh(), None)
    assert not marker.exists(), "the state's index ran a command"
    assert isinstance(refused, UnsafeStateFile)
    assert "os.system: a dotted global name is not allowed" in str(refused)


@pytest.mark.parametrize("module, name", [(DCP_METADATA, "os"), (DCP_METADATA, "Metadata"),
                                          ("torch", "float32")])
def test_an_index_cannot_set_attributes_on_a_module_or_a_class(tmp_path, module, name):
    # Protocol 4's BUILD with a slot state is a setattr on whatever the pickle holds: under a
    # name filter alone, a module of DCP's (`os`, through `metadata`'s namespace) or a record
    # class was changed for the rest of the process.
    target = {"os": os, "Metadata": Metadata, "float32": torch.float32}[name]
    _saved(tmp_path / "learner")
    (tmp_path / "learner" / ".metadata").write_bytes(_set_attribute(module, name, "rlvr_poisoned"))
    try:
        refused = _refusal(load_sharded, tmp_path / "learner", *_fresh(), None)
        assert not hasattr(target, "rlvr_poisoned"), f"the state's index changed {name}"
        assert isinstance(refused, UnsafeStateFile)
        assert "not a plain checkpoint index" in str(refused)
    finally:
        if "rlvr_poisoned" in getattr(target, "__dict__", {}):
            delattr(target, "rlvr_poisoned")


@pytest.mark.parametrize("payload, says", [
    (_call("os", "system", "true"), "os.system is not allowed"),
    (_call("builtins", "eval", "1"), "builtins.eval is not allowed"),
    (_call(DCP_METADATA, "field", "x"), "field is not allowed"),
    (_call("torch.serialization", "_get_layout", "torch.strided")[:-1] + pickle.POP
     + _call("pathlib", "PosixPath", "/")[2:], "not a checkpoint index"),
    (b"cos\nsystem\n(S'true'\ntR.", "is not one DCP's index is written with"),  # protocol 0
    (pickle.PROTO + b"\x04" + _text("x") + pickle.BINPERSID + pickle.STOP, "is not one"),
    (pickle.PROTO + b"\x04" + pickle.EXT1 + b"\x01" + pickle.STOP, "is not one"),
    (b"\x80\x04\x95" + b"\xff" * 8, "truncated"),
])
def test_every_other_index_is_refused_with_what_is_wrong(tmp_path, payload, says):
    _saved(tmp_path / "learner")
    (tmp_path / "learner" / ".metadata").write_bytes(payload)
    with pytest.raises(UnsafeStateFile, match=says):
        load_sharded(tmp_path / "learner", *_fresh(), None)


def test_an_index_cannot_send_the_reads_outside_its_directory(tmp_path):
    _saved(tmp_path / "learner")
    index_path = tmp_path / "learner" / ".metadata"
    index = pickle.loads(index_path.read_bytes())  # our own file, trusted here
    shutil.move(tmp_path / "learner" / "__0_0.distcp", tmp_path / "elsewhere.distcp")
    for where in index.storage_data.values():
        where.relative_path = "../elsewhere.distcp"
    index_path.write_bytes(pickle.dumps(index))
    with pytest.raises(UnsafeStateFile, match="not a file beside the index"):
        load_sharded(tmp_path / "learner", *_fresh(), None)


# ---- the plain values inside the shards -------------------------------------------------------

class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _plant_value(learner, fqn, data):
    """Point the index's entry for the plain value `fqn` (DCP stores it with torch.save) at
    `data`, appended to the shard file."""
    index_path, shard = learner / ".metadata", learner / "__0_0.distcp"
    index = pickle.loads(index_path.read_bytes())  # our own file, trusted here
    assert type(index.state_dict_metadata[fqn]) is BytesStorageMetadata
    blob = shard.read_bytes()
    for key, where in index.storage_data.items():
        if key.fqn == fqn:
            where.offset, where.length = len(blob), len(data)
    shard.write_bytes(blob + data)
    index_path.write_bytes(pickle.dumps(index))


def test_a_crafted_plain_value_in_the_shards_is_refused_and_never_run(tmp_path):
    # DCP's default planner reads each plain value of a state dict (the learning rate, Adam's
    # betas) with torch.load(weights_only=False): a pickle there ran before any check.
    marker = tmp_path / "pwned"
    _saved(tmp_path / "learner")
    _plant_value(tmp_path / "learner", "optimizer.param_groups.0.lr",
                 pickle.dumps(_Payload(marker), protocol=2))
    refused = _refusal(load_sharded, tmp_path / "learner", *_fresh(), None)
    assert not marker.exists(), "a plain value of the shards ran a command"
    assert isinstance(refused, UnsafeStateFile)
    assert "'optimizer.param_groups.0.lr' in a sharded state is not plain data" in str(refused)


# ---- the genuine article ----------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_dcps_own_index_of_a_tiny_state_loads_as_what_pickle_reads(tmp_path):
    # Saved by DCP itself on CPU, one process, no process group: every kind of entry it writes.
    state = {"w": torch.randn(4, 3), "half": torch.zeros(2, dtype=torch.bfloat16),
             "ints": torch.arange(5), "flags": torch.tensor([True, False]),
             "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 7),
             "plain": {"lr": 0.1, "betas": (0.9, 0.999), "name": "adamw", "n": None,
                       "steps": [1, 2, 3]}}
    dcp.save(state, checkpoint_id=tmp_path, no_dist=True)
    from rlvr.checkpoint.dcp_index import read_index
    from rlvr.checkpoint.safe_load import DataLoadPlanner, SafeFileSystemReader

    genuine = (tmp_path / ".metadata").read_bytes()
    assert read_index(genuine) == pickle.loads(genuine)  # records compare by their fields
    for protocol in (4, 5):  # Python 3.14's pickle.dump writes protocol 5
        assert read_index(pickle.dumps(pickle.loads(genuine), protocol=protocol)) == \
            pickle.loads(genuine)
    into = {"w": torch.zeros(4, 3), "half": torch.ones(2, dtype=torch.bfloat16),
            "ints": torch.zeros(5, dtype=torch.int64), "flags": torch.zeros(2, dtype=torch.bool),
            "scalar": torch.tensor(0.0), "empty": torch.ones(0, 7),
            "plain": {"lr": 0.0, "betas": (0.0, 0.0), "name": "", "n": 1, "steps": []}}
    dcp.load(into, checkpoint_id=tmp_path, no_dist=True,
             storage_reader=SafeFileSystemReader(tmp_path), planner=DataLoadPlanner())
    assert all(torch.equal(into[k], state[k]) for k in state if k != "plain")
    assert into["plain"] == state["plain"]


def test_a_sharded_state_round_trips_through_the_data_readers(tmp_path):
    model, optimizer = _saved(tmp_path / "learner")
    loaded_model, loaded_optimizer = _fresh()
    assert load_sharded(tmp_path / "learner", loaded_model, loaded_optimizer, None) == {"step": 1}
    assert torch.equal(loaded_model.weight, model.weight)
    assert loaded_optimizer.param_groups[0]["lr"] == 0.1  # a plain value, read as data
    assert torch.equal(loaded_optimizer.state[loaded_model.weight]["exp_avg"],
                       optimizer.state[model.weight]["exp_avg"])


# ---- the resume path --------------------------------------------------------------------------

def _sharded_state(step: int) -> TrainingState:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    return TrainingState(step=step, episode=16 * step, mixer={"positions": [step]}, policy={},
                         reference=None, optimizer={}, scheduler={}, rng=capture_rng(),
                         policy_version=step,
                         write_learner=lambda d: save_sharded(d, model, optimizer, None,
                                                              {"step": step}))


@pytest.mark.parametrize("attack", ["index", "value"])
def test_a_resume_skips_a_crafted_sharded_state_for_the_one_before(tmp_path, caplog, attack):
    # The state a resume picks is read as data before any learner rank loads it, so a crafted
    # one is skipped with the reason, as a crafted file of the full format is, and the
    # learner loads the state before it.
    marker, states = tmp_path / "pwned", tmp_path / "state"
    save_state(_sharded_state(1), states)
    save_state(_sharded_state(2), states)
    learner = list_states(states)[-1] / "learner"
    if attack == "index":
        (learner / ".metadata").write_bytes(_call(DCP_METADATA, "os.system", f"touch {marker}"))
    else:
        _plant_value(learner, "optimizer.param_groups.0.lr",
                     pickle.dumps(_Payload(marker), protocol=2))
    _rewrite_manifest(learner.parent)
    assert verify_state(learner.parent) is None  # the checksums match: the manifest proves no more
    state = plan_resume(tmp_path, states, resume=True, num_training_steps=10)
    assert not marker.exists(), "a crafted state ran a command as a resume picked its state"
    assert state.step == 1 and "step_000002 cannot be used" in caplog.text
    assert load_sharded(state.learner_dir, *_fresh(), None) == {"step": 1}
    assert not marker.exists(), "a crafted state ran a command on resume"


@pytest.mark.parametrize("name", ["progress.json", "ahead.json", MANIFEST])
def test_json_nested_past_pythons_stack_is_a_damaged_state(tmp_path, caplog, name):
    save_state(_sharded_state(1), tmp_path)
    save_state(_sharded_state(2), tmp_path)
    newest = list_states(tmp_path)[-1]
    (newest / name).write_text("[" * 100_000 + "]" * 100_000)
    if name != MANIFEST:
        _rewrite_manifest(newest)
    assert load_latest_state(tmp_path).step == 1 and "cannot be used" in caplog.text


def test_a_metrics_line_nested_past_pythons_stack_is_skipped_on_resume(tmp_path, caplog):
    # The run directory's metrics are read on resume too (the last step, then cut at the
    # state's step): a line nested 100,000 deep is not a record, not a crash.
    from rlvr.metrics.sinks import JsonlSink

    save_state(_sharded_state(1), tmp_path / "state")
    metrics = tmp_path / "metrics.jsonl"
    deep = json.dumps({"training_step": 5}).replace("}", ', "x": ' + "[" * 100_000
                                                    + "]" * 100_000 + "}")
    metrics.write_text(json.dumps({"training_step": 1}) + "\n" + deep + "\n")
    assert plan_resume(tmp_path, tmp_path / "state", resume=True, num_training_steps=10).step == 1
    JsonlSink.truncate_after(metrics, 1)
    assert metrics.read_text() == json.dumps({"training_step": 1}) + "\n"
    assert "line 2 is not a metrics record" in caplog.text
