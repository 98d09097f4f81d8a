"""The device layer: what `model.device` resolves to, bf16 detection from CPU flags, errors
that say what exists, memory gauges; and the meta-device test that catches any tensor the
learner update or the batch building creates without an explicit device."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch

import rlvr.device
from rlvr.algorithm.losses import LossParams, compute_policy_loss
from rlvr.run.build import plan_devices
from rlvr.config import load_config
from rlvr.device import (DeviceUnavailable, cluster_device_type, collective_backend,
                         memory_metrics, resolve_device)
from rlvr.learner import Learner, LearnerSettings
from rlvr.producer.training_batch import BatchSettings, build_training_batch
from rlvr.types import Completion, Prompt, Sample

REAL_BF16_DETECTION = rlvr.device.cpu_has_native_bf16  # before conftest pins it
ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_cpu_device_uses_gloo_and_no_pinned_memory():
    device = resolve_device("cpu")
    assert (device.torch, device.backend, device.pin_memory) == (torch.device("cpu"), "gloo",
                                                                False)
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("requested, gpus, expected", [
    ("auto", 0, "cpu"), ("auto", 2, "cuda"), ("cpu", 8, "cpu"), ("cuda", 0, "cuda")])
def test_a_cluster_runs_on_its_gpus_when_auto_finds_some(requested, gpus, expected):
    # One rule for learners (`plan_devices`) and Ray-placed servers; "cuda" on a cluster
    # without GPUs is refused by `plan_devices`, not here.
    assert cluster_device_type(requested, gpus) == expected
    assert collective_backend(expected) == ("nccl" if expected == "cuda" else "gloo")


def test_asking_for_cuda_without_it_says_what_exists(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a GPU host too
    with pytest.raises(DeviceUnavailable, match=r"model.device=cuda.*CUDA devices: 0.*CPU cores"):
        resolve_device("cuda")
    with pytest.raises(DeviceUnavailable, match="not one of"):
        resolve_device("tpu")


@pytest.mark.parametrize("flags, native", [({"avx2", "avx512f"}, False),
                                           ({"avx2", "avx512_bf16"}, True),
                                           ({"amx_bf16"}, True), ({"fp", "bf16"}, True),
                                           (set(), False)])
def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch, flags, native):
    monkeypatch.setattr(rlvr.device, "cpu_flags", lambda: frozenset(flags))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)  # as when measuring an AVX2 CPU
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    assert REAL_BF16_DETECTION() is native


@pytest.mark.parametrize("variable, isa, native", [
    ("ONEDNN_MAX_CPU_ISA", "AVX2", False), ("ONEDNN_MAX_CPU_ISA", "avx512_core", False),
    ("DNNL_MAX_CPU_ISA", "AVX2", False), ("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16", True),
    ("ONEDNN_MAX_CPU_ISA", "ALL", True)])
def test_onednn_capped_below_bf16_means_emulated_bf16(monkeypatch, variable, isa, native):
    """oneDNN capped below AVX512-BF16 emulates bf16 on a CPU that has it (bf16 Linear 200 ->
    18 GFLOP/s here): rlvr then decides as on an AVX2-only CPU, so `ONEDNN_MAX_CPU_ISA=AVX2`
    measures one (docs/testing.md)."""
    monkeypatch.setattr(rlvr.device, "cpu_flags", lambda: frozenset({"avx2", "avx512_bf16",
                                                                     "amx_bf16"}))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv(variable, isa)
    assert REAL_BF16_DETECTION() is native


def test_bf16_compute_defaults_to_native_and_obeys_the_config(monkeypatch):
    slow = rlvr.device.Device("cpu", None, bf16_native=False)
    fast = rlvr.device.Device("cpu", None, bf16_native=True)
    assert (slow.bf16_compute(None), fast.bf16_compute(None)) == (False, True)
    assert (slow.bf16_compute(True), fast.bf16_compute(False)) == (True, False)


def test_the_local_plan_follows_the_config_and_the_hardware(monkeypatch):
    cfg = load_config(os.path.join(ROOT, "configs", "tiny.yaml"), ["model.device=cpu"])
    assert plan_devices(cfg, None).describe() == ("device cpu, bf16 compute off, collectives "
                                                  "gloo, attention sdpa (shared prompts), freed "
                                                  "host memory kept")
    monkeypatch.setattr(rlvr.device, "cpu_has_native_bf16", lambda: True)
    assert plan_devices(cfg, None).bf16  # an AVX512-BF16 machine computes in bf16 by default
    cfg.model.bf16_autocast = False
    assert not plan_devices(cfg, None).bf16
    cfg.model.keep_freed_host_memory = False
    assert not plan_devices(cfg, None).keep_host_memory


def test_the_engine_samples_in_the_dtype_the_run_computes_in(monkeypatch):
    """rollout.dtype=auto: a bf16 engine where the learner computes in bf16 (a CPU with
    AVX512-BF16, a GPU), fp32 where bf16 would be emulated; the engine actors, servers and the
    engine in process all take it from the same plan."""
    from rlvr.launch.servers import server_settings
    from rlvr.run.settings import engine_settings

    cfg = load_config(os.path.join(ROOT, "configs", "tiny.yaml"), ["model.device=cpu"])
    assert cfg.rollout.dtype == "auto"

    def engine_dtype() -> str:
        plan = plan_devices(cfg, None)
        return engine_settings(cfg, plan.type, plan.bf16).dtype

    assert engine_dtype() == "float32"  # conftest: this CPU has no native bf16
    assert server_settings(cfg, "m", "cpu", bf16=False).dtype == "float32"
    monkeypatch.setattr(rlvr.device, "cpu_has_native_bf16", lambda: True)
    assert engine_dtype() == "bfloat16"
    assert server_settings(cfg, "m", "cpu", bf16=True).dtype == "bfloat16"
    assert plan_devices(load_config(os.path.join(ROOT, "configs", "tiny.yaml"),
                                    ["distributed.launcher=ray"]), 2).bf16  # GPU cluster
    cfg.model.bf16_autocast = False  # the run computes in fp32: so does its engine
    assert engine_dtype() == "float32"
    cfg.model.bf16_autocast, cfg.rollout.dtype = None, "float32"  # said outright: kept
    assert engine_dtype() == "float32"


def test_the_judge_engine_takes_bf16_where_its_device_computes_it(monkeypatch):
    """rewards.judge.dtype=auto, resolved in the process the judge loads in."""
    from rlvr.rewards.judge import judge_dtype

    cfg = load_config(os.path.join(ROOT, "configs", "tiny.yaml"),
                      ["rewards.judge.engine=transformers", "rewards.judge.model=tiny"])
    assert cfg.rewards.judge.dtype == "auto"
    assert judge_dtype("auto", "cpu") == "float32"  # conftest: this CPU has no native bf16
    monkeypatch.setattr(rlvr.device, "cpu_has_native_bf16", lambda: True)
    assert judge_dtype("auto", "cpu") == "bfloat16"
    assert judge_dtype("auto", "auto") == "bfloat16"  # no GPU here: the CPU
    assert judge_dtype("float32", "cpu") == "float32"  # said outright: kept


def test_host_memory_is_kept_where_learners_compute_on_the_host_only():
    cfg = load_config(os.path.join(ROOT, "configs", "tiny.yaml"),
                      ["model.device=auto", "distributed.launcher=ray"])
    assert plan_devices(cfg, 0).keep_host_memory
    assert not plan_devices(cfg, 2).keep_host_memory  # GPU learners: host buffers are one-offs
    cfg.model.keep_freed_host_memory = True
    assert plan_devices(cfg, 2).keep_host_memory


_KEEP_AND_FREE = """
import sys, torch
from rlvr.device import _current_rss_bytes, keep_freed_host_memory
if sys.argv[1] == "keep":
    print(keep_freed_host_memory())
before = _current_rss_bytes()
x = torch.ones(64 * 2**20)  # 256 MB, far above glibc's largest mmap threshold (32 MB)
del x
print((_current_rss_bytes() - before) / 2**20)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")
def test_kept_host_memory_is_not_handed_back_to_the_kernel():
    def freed_but_resident_mb(mode: str) -> tuple[str, float]:
        out = subprocess.run([sys.executable, "-c", _KEEP_AND_FREE, mode], capture_output=True,
                             text=True, timeout=120, check=True).stdout.split("\n")
        return out[0], float(out[-2])

    said, kept_mb = freed_but_resident_mb("keep")
    assert said == "host allocator keeps freed memory (glibc: no mmap, no trim)"
    assert kept_mb > 200  # the next step's tensors reuse it without page faults
    assert freed_but_resident_mb("default")[1] < 50  # glibc unmapped it on free


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_rlvr_train_on_cuda_without_one_fails_at_start_with_a_message(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "train", os.path.join(ROOT, "configs", "tiny.yaml"),
         "model.device=cuda", f"experiment.output_dir={tmp_path}"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "model.device=cuda" in out.stderr and "CUDA devices: 0" in out.stderr
    assert "Traceback" not in out.stderr


def test_memory_gauges_on_cpu():
    got = memory_metrics(torch.device("cpu"))
    # Two kernel counters (statm, getrusage) that are updated at different times: close.
    assert 0 < got["memory/rss_gb"] <= got["memory/peak_rss_gb"] * 1.05


def test_rlvr_env_lists_devices_and_libraries():
    out = subprocess.run([sys.executable, "-m", "rlvr.cli", "env"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for label in ("torch", "CPU native bf16", "model.device=auto", "vllm", "flash-attn", "ray"):
        assert label in out.stdout


# ---- nothing is created on an implicit device -------------------------------------------

PROMPT = Prompt(id="p/0", messages=(), token_ids=(5, 6, 7), ground_truth="1", verifiers=("x",),
                source="p")


def _groups():
    return [[Sample(prompt=PROMPT, completion=Completion([8 + k, 9, 10 + g], [-1.0, -2.0, -1.5],
                                                        "stop", "t"), reward=float(k % 2))
             for k in range(4)] for g in range(3)]


def test_batch_building_and_a_learner_update_create_no_tensor_on_the_default_device(
        tiny_model):
    """With the default device set to "meta", a tensor created without a device lands on meta
    and the first operation mixing it with real ones fails. The batch is built, and the update
    (forward, loss, backward, clipping, optimizer, schedule) runs, entirely under it."""
    reference = Learner.frozen_copy(tiny_model)
    settings = LearnerSettings(learning_rate=1e-3, lr_scheduler_type="linear",
                               warm_up_steps=1, total_optimizer_steps=4)
    learner = Learner(tiny_model, reference, settings, device=torch.device("cpu"))
    before = [p.detach().clone() for p in tiny_model.parameters()]
    torch.set_default_device("meta")
    try:
        training = build_training_batch(_groups(), BatchSettings("standard", True, 64, 0))
        batch = training.batch
        params = LossParams(clip_lower=0.2, clip_higher=0.28, beta=0.1, kl_estimator=3,
                            denominator=float(batch.num_response_tokens))
        result = learner.update(batch, lambda i: compute_policy_loss("dapo", i, params),
                                num_micro_batches=2, num_epochs=2, temperature=1.0)
    finally:
        torch.set_default_device(None)
    assert batch.input_ids_RL.device.type == "cpu"
    assert result.grad_norm > 0 and result.num_response_tokens == batch.num_response_tokens
    assert any(not torch.equal(b, p) for b, p in zip(before, tiny_model.parameters()))


@pytest.mark.parametrize("attn, message", [
    ("flex", "FlexAttention does not support backward on CPU"),
    ("flash_attention_2", "model.attn_implementation='flash_attention_2'")])
def test_attention_that_cannot_train_here_fails_at_start(tmp_path, attn, message):
    if attn == "flash_attention_2" and torch.cuda.is_available():
        pytest.skip("a CUDA machine may have flash-attn")
    out = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "train", os.path.join(ROOT, "configs", "tiny.yaml"),
         f"model.attn_implementation={attn}", "model.device=cpu",
         f"experiment.output_dir={tmp_path}"], capture_output=True, text=True, timeout=180)
    assert out.returncode == 2 and message in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


def test_vllm_takes_memory_graphs_and_threads_alike_in_process_and_as_a_server():
    """One rule (`vllm_placement`): the engine in process takes it as `LLM` arguments, a server
    as flags and environment."""
    from dataclasses import replace

    from rlvr.rollout.vllm.placement import vllm_placement
    from rlvr.serving.server import ServerSettings, server_command, server_env

    cpu = vllm_placement("cpu", gpu_memory_utilization=0.5, kv_cache_gb=2, enforce_eager=False)
    assert cpu.engine_args == {"kv_cache_memory_bytes": 2 * 2**30, "enforce_eager": True}
    assert cpu.env == {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
                       "VLLM_CPU_OMP_THREADS_BIND": f"0-{(os.cpu_count() or 1) - 1}"}
    gpu = vllm_placement("cuda", gpu_memory_utilization=0.5, kv_cache_gb=2, enforce_eager=False)
    assert gpu.engine_args == {"gpu_memory_utilization": 0.5, "enforce_eager": False}
    assert gpu.env == {}

    on_gpu = ServerSettings(model="m", port=1, device="cuda", gpu_memory_utilization=0.5,
                            kv_cache_gb=2)
    cmd = server_command(on_gpu)
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.5"
    assert "--enforce-eager" not in cmd and "--kv-cache-memory-bytes" not in cmd
    assert "--enforce-eager" in server_command(replace(on_gpu, enforce_eager=True))
    assert not any(k.startswith("VLLM_CPU_") for k in server_env(on_gpu, {}))
    on_cpu = replace(on_gpu, device="cpu", cpu_threads_bind="1")
    cmd = server_command(on_cpu)
    assert cmd[cmd.index("--kv-cache-memory-bytes") + 1] == str(2 * 2**30)
    assert "--enforce-eager" in cmd and "--gpu-memory-utilization" not in cmd
    assert server_env(on_cpu, {})["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert server_env(on_cpu, {"VLLM_CPU_OMP_THREADS_BIND": "0"})[
        "VLLM_CPU_OMP_THREADS_BIND"] == "0"  # the user's own setting wins
