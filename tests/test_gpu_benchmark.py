"""benchmarks/gpu.py: its settings' names, a fit setting's memory plan on CPU, and its profile
(`--profile DIR`, benchmarks/gpu_profile.py): kernel names to categories, the busy time of
overlapping kernels, and one profiled update of a tiny model on CPU (the dry run's path)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"
_spec = importlib.util.spec_from_file_location("gpu_benchmark", _SCRIPT)
gpu = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gpu  # its dataclasses look their module up there
_spec.loader.exec_module(gpu)  # puts benchmarks/ on sys.path for its own `import gpu_profile`
import gpu_profile as profiling  # noqa: E402

def test_a_setting_name_is_read_word_by_word():
    assert gpu.parse_setting("varlen-mb8k-compile") == gpu.Setting(
        "varlen-mb8k-compile", attention="varlen", compile=True, max_tokens_per_micro_batch=8192)
    assert gpu.parse_setting("sdpa-shared-ckpt2") == gpu.Setting(
        "sdpa-shared-ckpt2", attention="sdpa", share_prompts=True, checkpoint_every=2)
    assert gpu.parse_setting("varlen-fit-compile") == gpu.Setting(
        "varlen-fit-compile", attention="varlen", compile=True, fit=True)
    assert gpu.parse_setting("fit-ckpt-mb4k") == gpu.Setting(
        "fit-ckpt-mb4k", checkpoint_every=1, max_tokens_per_micro_batch=4096, fit=True)
    assert gpu.parse_setting("varlen-fsdp-compile") == gpu.Setting(
        "varlen-fsdp-compile", attention="varlen", compile=True, fsdp=True)
    assert gpu.parse_setting("varlen-head4k").head_chunk_tokens == 4096
    with pytest.raises(ValueError, match="fit takes ckpt, not ckptN"):
        gpu.parse_setting("varlen-fit-ckpt2")  # the learner checkpoints every layer or none
    with pytest.raises(ValueError, match="unknown word 'fits'"):
        gpu.parse_setting("varlen-fits")


def test_a_fit_setting_leaves_the_plan_open_and_says_on_cpu_that_none_was_made(tmp_path, capsys):
    args = gpu.parse_args(["--pack-length", "256", "--max-memory-gb", "60"])
    settings = gpu.learner_settings(args, gpu.parse_setting("varlen-fit"), False, 1)
    assert settings.gradient_checkpointing is None  # the plan's to choose, as is the budget
    assert settings.max_tokens_per_micro_batch is None and settings.pack_length == 256
    assert settings.max_memory_bytes == 60 * 1024 ** 3
    fixed = gpu.learner_settings(args, gpu.parse_setting("varlen-fit-ckpt-mb1k"), False, 1)
    assert fixed.gradient_checkpointing is True and fixed.max_tokens_per_micro_batch == 1024
    plain = gpu.learner_settings(args, gpu.parse_setting("varlen"), False, 1)
    assert plain.pack_length is None and plain.max_tokens_per_micro_batch == 16384  # no plan

    out = tmp_path / "bench.jsonl"
    assert gpu.main(["--device", "cpu", "--shape", "tiny", "--tokens", "512",
                     "--pack-length", "256", "--prompt-tokens", "32", "--response-tokens", "64",
                     "--steps", "1", "--max-memory-gb", "60", "--setting", "varlen-fit",
                     "--out", str(out)]) == 0
    record = json.loads(out.read_text().splitlines()[-1])
    assert record["fit"] and record["plan"] == "none (no allocator figures)"
    assert record["plan_gradient_checkpointing"] is None
    assert record["max_tokens_per_micro_batch"] is None  # the learner's, unplanned: no budget
    assert record["seconds_per_update"] > 0
    assert "plan: none (no allocator figures)" in capsys.readouterr().out


def test_an_fsdp_setting_trains_one_rank_in_mixed_precision_as_autocast_does(tmp_path):
    """`fsdp`: the policy sharded over a world of one (gloo here, NCCL on a GPU), bf16 compute
    by FSDP2's mixed precision instead of autocast; the same update's gradient as the plain
    learner's, and the process group gone afterwards (a later test may make its own)."""
    import torch.distributed as dist

    assert gpu.learner_settings(gpu.parse_args([]), gpu.parse_setting("varlen-fsdp"), True,
                                1).bf16_autocast is False  # FSDP2 casts the weights itself
    out = tmp_path / "bench.jsonl"
    assert gpu.main(["--device", "cpu", "--shape", "tiny", "--tokens", "512", "--bf16", "on",
                     "--pack-length", "256", "--prompt-tokens", "32", "--response-tokens", "64",
                     "--steps", "1", "--setting", "varlen", "--setting", "varlen-fsdp",
                     "--out", str(out)]) == 0
    plain, sharded = (json.loads(line) for line in out.read_text().splitlines())
    assert sharded["fsdp"] and not plain["fsdp"] and "error" not in sharded
    # bf16 either way; autocast keeps the residual stream in fp32, FSDP2's mixed precision not
    assert sharded["grad_norm"] == pytest.approx(plain["grad_norm"], rel=2e-2)
    assert not dist.is_initialized()


def test_a_head_chunk_setting_sets_the_learners_chunk_for_its_own_run_only():
    from rlvr.learner import forward

    before = forward.LOGIT_CHUNK_TOKENS
    with gpu.head_chunk(8192):
        assert forward.LOGIT_CHUNK_TOKENS == 8192
    with gpu.head_chunk(None):
        assert forward.LOGIT_CHUNK_TOKENS == before
    with pytest.raises(RuntimeError), gpu.head_chunk(2048):
        raise RuntimeError("a failed setting")
    assert forward.LOGIT_CHUNK_TOKENS == before


# Names as the profiler reports them on an H100/H200 (CUDA kernels) and on CPU (aten ops).
KERNELS = [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize2x1x1_"
     "execute_segment_k_off_kernel__5x_cublas", "matmul"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "matmul"),
    ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x1_tn_align8>",
     "matmul"),
    ("triton_tem_fused_mm_0", "matmul"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
     "false, cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>(...)",
     "attention"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>)",
     "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1",
     "attention"),
    ("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0", "elementwise/reduction"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
     "float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(...)",
     "elementwise/reduction"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
     "at::native::MaxOps<float>, unsigned int, float, 4, 4> >(...)", "elementwise/reduction"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
     "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
     "attention"),  # a softmax outside the head is an eager attention's
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
     "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor"
     "<float, 4, (at::native::ADAM_MODE)1, false>, ...>(...)", "optimizer"),
    ("void at::native::lpnorm_cleanup<float, (at::native::NormType)1, float, float>(...)",
     "optimizer"),
    ("Memcpy HtoD (Pageable -> Device)", "memcpy/memset"),
    ("Memset (Device)", "memcpy/memset"),
    ("aten::mm", "matmul"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
    ("aten::_fused_adamw_", "optimizer"),
    ("aten::copy_", "elementwise/reduction"),
    ("aten::add_", "elementwise/reduction"),
    ("aten::expand", "other"),  # a view: no work, whatever its name starts with
    ("aten::empty_strided", "other"),
]


@pytest.mark.parametrize(("name", "category"), KERNELS)
def test_a_kernel_name_falls_in_its_category(name, category):
    assert profiling.categorise(name) == category
    assert category in profiling.CATEGORIES


def test_where_a_kernel_ran_decides_what_its_name_cannot():
    softmax = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(...)"
    gather = "void at::native::_scatter_gather_elementwise_kernel<128, 8, ...>(...)"
    cast = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>"
    gemm = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT"
    assert profiling.categorise(softmax, "head") == "head/softmax"
    assert profiling.categorise(gather, "head") == "head/softmax"
    assert profiling.categorise(gather, "trunk") == "elementwise/reduction"
    assert profiling.categorise(cast, "head") == "head/softmax"  # the logits' float cast
    assert profiling.categorise(gemm, "head") == "matmul"  # the output projection stays a matmul
    assert profiling.categorise(cast, "optimizer") == "optimizer"  # grad clipping's scaling
    assert profiling.categorise("Memcpy DtoD (Device -> Device)", "optimizer") == "memcpy/memset"


def test_busy_time_counts_overlapping_kernels_once():
    # [0, 10] and [5, 20] overlap: 20 us; [30, 40]: 10 us more; [32, 35] inside it: none.
    assert profiling.busy_ms([(30.0, 40.0), (0.0, 10.0), (5.0, 20.0), (32.0, 35.0)]) == 0.03
    assert profiling.busy_ms([]) == 0.0


def test_a_profiled_update_on_cpu_is_broken_down_and_written(tmp_path, capsys):
    out = tmp_path / "bench.jsonl"
    assert gpu.main(["--device", "cpu", "--shape", "tiny", "--tokens", "512",
                     "--pack-length", "256", "--prompt-tokens", "32", "--response-tokens", "64",
                     "--steps", "1", "--out", str(out), "--profile", str(tmp_path / "p")]) == 0
    profile = json.loads(out.read_text().splitlines()[-1])["profile"]
    assert profile["activity"] == "cpu"
    assert sum(profile["categories_ms"].values()) == pytest.approx(profile["kernel_ms"], abs=0.1)
    assert profile["categories_ms"]["matmul"] > 0
    assert profile["categories_ms"]["head/softmax"] > 0
    assert {"forward", "backward", "optimizer"} <= set(profile["spans_ms"])
    # The head runs in the forward and, recomputed and differentiated, in the backward.
    assert profile["head_ms"]["forward"] > 0 and profile["head_ms"]["backward"] > 0
    assert 0 < len(profile["top"]) <= 15
    assert sorted(os.listdir(tmp_path / "p")) == ["auto.trace.json.gz", "auto.txt"]
    assert "by category:" in capsys.readouterr().out
    assert "by category:" in (tmp_path / "p" / "auto.txt").read_text()


def _event(name, start, end, *, device=False, parent=None, thread=1, seq=-1, scope=0,
           fwd_thread=None, annotation=False):
    """A stand-in for torch's FunctionEvent with the fields the breakdown reads (times in us)."""
    from torch.autograd import DeviceType

    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end),
                           device_type=DeviceType.CUDA if device else DeviceType.CPU,
                           is_async=False, cpu_parent=parent, thread=thread, sequence_nr=seq,
                           scope=scope, fwd_thread=fwd_thread, is_user_annotation=annotation,
                           kernels=[], self_cpu_time_total=0.0)


def _launch(op, name, start, duration):
    """A kernel `op` launched, as the profiler reports it: linked to the op, and on the device."""
    op.kernels.append(SimpleNamespace(name=name, duration=duration))
    return _event(name, start, start + duration, device=True)


def test_cuda_kernels_are_charged_to_the_span_and_context_of_their_launching_op():
    gemm, reduce = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "void at::native::reduce_kernel"
    elementwise = "void at::native::vectorized_elementwise_kernel<4>"
    forward = _event("learner.forward", 0, 100, annotation=True)
    trunk = _event("bench.trunk", 10, 50, parent=forward, annotation=True)
    trunk_mm = _event("aten::mm", 20, 30, parent=trunk, seq=3)
    head_mm = _event("aten::mm", 55, 58, parent=forward, seq=6)
    lse = _event("aten::logsumexp", 60, 70, parent=forward, seq=7)
    backward = _event("learner.backward", 100, 200, annotation=True)
    # autograd's own thread (2) runs the backward nodes; each names its forward op's number
    lse_node = _event("LogsumexpBackward0", 110, 120, thread=2, seq=7, scope=1, fwd_thread=1)
    exp = _event("aten::exp", 111, 115, parent=lse_node, thread=2)
    mm_node = _event("MmBackward0", 130, 140, thread=2, seq=3, scope=1, fwd_thread=1)
    node_mm = _event("aten::mm", 131, 139, parent=mm_node, thread=2)
    optimizer = _event("learner.optimizer", 200, 300, annotation=True)
    adam = _event("aten::_fused_adamw_", 210, 220, parent=optimizer)
    scale = _event("aten::mul_", 205, 208, parent=optimizer)
    device = [_launch(trunk_mm, gemm, 1000, 5000), _launch(head_mm, gemm, 7000, 4000),
              _launch(lse, reduce, 12000, 3000), _launch(exp, elementwise, 20000, 2000),
              _launch(node_mm, gemm, 23000, 6000), _launch(scale, elementwise, 30000, 1000),
              _launch(adam, "multi_tensor_apply_kernel<FusedAdamMathFunctor>", 31000, 8000),
              _event("Memcpy HtoD (Pageable -> Device)", 0, 2000, device=True),  # no op linked
              # a CPU span's GPU annotation, linked to the span like a kernel: not one
              _event("learner.forward", 1000, 15000, device=True, annotation=True)]
    forward.kernels.append(SimpleNamespace(name="learner.forward", duration=14000))
    ops = [forward, trunk, trunk_mm, head_mm, lse, backward, lse_node, exp, mm_node, node_mm,
           optimizer, adam, scale]

    rows = profiling.kernel_times(ops + device)
    busy = profiling.busy_ms([(e.time_range.start, e.time_range.end)
                        for e in profiling.device_kernels(ops + device)])
    p = profiling.profile_breakdown(rows, wall_ms=50.0, busy=busy, activity="cuda")

    assert p["categories_ms"] == {"matmul": 15.0, "optimizer": 9.0, "head/softmax": 5.0,
                                  "memcpy/memset": 2.0, "attention": 0.0,
                                  "elementwise/reduction": 0.0, "other": 0.0}
    assert p["spans_ms"] == {"forward": 12.0, "optimizer": 9.0, "backward": 8.0, "unlinked": 2.0}
    assert p["head_ms"] == {"forward": 7.0, "backward": 2.0}  # the head's gemm, reduce, exp
    assert p["head_matmul_ms"] == 4.0
    assert p["kernel_ms"] == 31.0 and p["kernel_calls"] == 8
    # The memcpy overlaps the first gemm, the last two kernels abut: 30 ms busy of 50.
    assert p["busy_ms"] == 30.0 and p["idle_ms"] == 20.0
    assert p["top"][0] == {"name": gemm, "ms": 15.0, "calls": 3, "category": "matmul"}
