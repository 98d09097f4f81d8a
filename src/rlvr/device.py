"""The one place that decides where tensors live and how processes talk.

Everything that differs between a CPU and a GPU run is decided here, from `model.device`
(auto | cpu | cuda) and this process's local rank, and handed out as a `Device` record:
- the torch device (`cuda:N` for local rank N, or the one GPU Ray made visible; else `cpu`);
- the collective backend (NCCL on CUDA, gloo on CPU);
- whether bf16 matmuls are native (CUDA with bf16 support; a CPU with AVX512-BF16 or AMX, read
  from the CPU's flags: CPUs of one cloud instance type differ, and emulated bf16 is 5-100x
  slower than fp32 on AVX2-only ones, so this is detected, never assumed);
- whether host memory should be pinned for copies (only with an accelerator runtime);
- whether the C allocator keeps freed host memory (`keep_freed_host_memory`: where the host
  computes, so each step's large tensors are not page-faulted in afresh);
- an engine's weight dtype (`engine_dtype`), alike for an engine in process and for a server.
  How an engine then takes memory and cores on the device is the engine's own decision, in its
  subpackage (`rlvr.rollout.<engine>`).

Other modules take a `Device` (or a torch device) as an argument and never name one. Host-side
work that is CPU by nature (tokenising, building packed batches, checkpoint files) creates its
tensors on `HOST`, explicitly, so that a test can run with `torch.set_default_device("meta")` and
catch any tensor created on an implicit device.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import resource
import socket
from dataclasses import dataclass
from typing import Any

import torch

DEVICE_CHOICES: tuple[str, ...] = ("auto", "cpu", "cuda")
HOST = torch.device("cpu")  # where data is prepared and files are read and written

# The learner's attention for `model.attn_implementation=auto`, by device type; how rows are
# packed follows from it (`algorithm.share_prompts` null: a group's prompt is packed once where
# the attention can confine responses to it; `rlvr.learner.attention.packed_layout`).
# - cpu: sdpa with shared prompts. A CPU learner is bound by the FLOPs it runs and has no varlen
#   kernel, so running each prompt once wins (2.3x fewer tokens on the quick start).
# - cuda: varlen, each sequence whole, by measurement (`benchmarks/gpu.py`, H200, 2026-11-26,
#   compiled layers, fp32 weights under bf16 autocast, 40k sequence tokens in rows of 4,096,
#   micro-batches of 16k tokens, one process): Qwen2.5-1.5B shape 0.825 s an update against
#   0.920 s for sdpa with shared prompts (1.4x fewer tokens run, but a dense mask that rules out
#   flash kernels and scores every padded pair), the same gradient norm. Varlen's flash kernel
#   needs 16-bit compute (the GPU default); with float32 compute it runs sdpa per sequence,
#   and `model.attn_implementation=sdpa` is the faster choice there.
DEFAULT_ATTENTION: dict[str, str] = {"cpu": "sdpa", "cuda": "varlen"}
# `auto` with `algorithm.share_prompts=false`: each sequence whole, where no mask is needed.
WHOLE_SEQUENCE_ATTENTION: dict[str, str] = {"cpu": "sdpa", "cuda": "varlen"}
# What every refusal of two learner ranks on one GPU tells the user to do.
ONE_GPU_PER_RANK_FIX = ("Start at most one learner rank per GPU "
                        "(distributed.num_learners_per_node), or train on CPU (model.device=cpu)")

# CPU flags (Linux /proc/cpuinfo) that mean bf16 matmuls run natively: x86 AVX512-BF16 and AMX,
# and Arm's BF16 extension.
_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
# oneDNN, which runs torch's bf16 matmuls on CPU, can be capped below the CPU's own instruction
# set (`ONEDNN_MAX_CPU_ISA`); capped at one of these it emulates bf16 as an AVX2-only CPU does
# (measured: bf16 Linear 200 -> 18 GFLOP/s, fp32 unchanged). So `ONEDNN_MAX_CPU_ISA=AVX2` makes a
# machine with native bf16 compute, and decide, like one without (docs/testing.md).
_ONEDNN_ISAS_WITHOUT_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE",
                                       "AVX512_CORE_VNNI"})


def collective_backend(device_type: str) -> str:
    """The torch.distributed backend for collectives among processes on `device_type`."""
    return "nccl" if device_type == "cuda" else "gloo"


def cluster_device_type(requested: str, cluster_gpus: float) -> str:
    """`model.device` for processes placed on a Ray cluster with `cluster_gpus` GPUs in all
    (the driver itself may have none): "auto" means the GPUs when the cluster has any."""
    if requested == "cpu" or (requested == "auto" and cluster_gpus < 1):
        return "cpu"
    return "cuda"


def cluster_bf16(device_type: str, requested: bool | None) -> bool:
    """bf16 compute for processes on a Ray cluster's `device_type` devices, decided on the
    driver, which may see none of them: `requested` when the config says; else the CPU's flags
    on CPU clusters (the driver's CPU stands for its nodes'), and on for GPUs (every GPU rlvr
    is meant for, A100, H100, L40, ..., computes in bf16; a learner on one that does not is
    told so when it starts, `LearnerWorker.setup`)."""
    if requested is not None:
        return requested
    return cpu_has_native_bf16() if device_type == HOST.type else True


class DeviceUnavailable(ValueError):
    """The device asked for does not exist here; the message says what does."""


@dataclass(frozen=True)
class Device:
    """Where this process computes. Picklable (actors receive it inside their specs)."""

    type: str  # "cpu" | "cuda"
    index: int | None = None  # the CUDA ordinal; None on CPU
    bf16_native: bool = False

    @property
    def torch(self) -> torch.device:
        return torch.device(self.type, self.index) if self.index is not None else torch.device(
            self.type)

    @property
    def backend(self) -> str:
        """The torch.distributed backend for collectives among processes on this device."""
        return collective_backend(self.type)

    @property
    def pin_memory(self) -> bool:
        """Pinned host memory speeds host-to-device copies; it needs an accelerator runtime."""
        return self.type == "cuda"

    @property
    def is_accelerator(self) -> bool:
        return self.type != "cpu"

    def bf16_compute(self, requested: bool | None) -> bool:
        """bf16 matmuls or not: `requested` when the config says, else where they are native."""
        return self.bf16_native if requested is None else requested

    def describe(self) -> str:
        if self.type == "cuda":
            name = torch.cuda.get_device_name(self.index or 0)
            return f"{self.torch} ({name}), backend {self.backend}, bf16 native: {self.bf16_native}"
        return (f"cpu ({cpu_name()}, {os.cpu_count()} cores, torch capability "
                f"{torch.backends.cpu.get_cpu_capability()}), backend {self.backend}, "
                f"bf16 native: {self.bf16_native}")


def engine_dtype(requested: str, bf16: bool) -> str:
    """An engine's weight dtype for a requested one (`rollout.dtype`, `rewards.judge.dtype`):
    "auto" follows `bf16`, whether the run (or the judge's device) computes in bf16, so an
    engine samples in bf16 where the learner computes in bf16 (on a CPU with AVX512-BF16 a
    quick-start batch decodes 1.45x faster than in fp32) and stays fp32 where bf16 is
    emulated."""
    if requested != "auto":
        return requested
    return "bfloat16" if bf16 else "float32"


def resolve_device(requested: str = "auto", local_rank: int = 0) -> Device:
    """The device for `model.device` on this process. `local_rank` is this process's index
    among the learners of its node; under Ray each actor sees only its own GPU(s) (Ray sets
    CUDA_VISIBLE_DEVICES), so its visible index is 0 whatever its rank. A local rank beyond
    the visible GPUs would share one with another rank (NCCL refuses that at its first
    collective, "Duplicate GPU detected", after the model loaded): DeviceUnavailable, naming
    the ranks and GPUs, unless CUDA_VISIBLE_DEVICES gives this process one GPU of its own."""
    if requested not in DEVICE_CHOICES:
        raise DeviceUnavailable(f"model.device={requested!r} is not one of {DEVICE_CHOICES}")
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise DeviceUnavailable(f"model.device=cuda, but this process sees no CUDA device "
                                f"({what_exists()}); use model.device=auto or cpu")
    if requested == "cpu" or not has_cuda:
        return Device("cpu", None, bf16_native=cpu_has_native_bf16())
    count = torch.cuda.device_count()
    # A launcher (Ray, Slurm) that shows each process one GPU gave it one of its own.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    own_gpu = count == 1 and visible.strip() != "" and "," not in visible
    if local_rank >= count and not own_gpu:
        raise DeviceUnavailable(
            f"local rank {local_rank} needs a GPU of its own, but this process sees {count} "
            f"({what_exists()}): {local_rank + 1} or more learner ranks on this node for {count} "
            f"GPU(s). {ONE_GPU_PER_RANK_FIX}")
    index = 0 if own_gpu else local_rank  # one visible GPU: the one Ray or Slurm gave us
    return Device("cuda", index, bf16_native=torch.cuda.is_bf16_supported())


def gpu_identity(device: Device) -> str:
    """This process's GPU as a process on any node names it: host and the GPU's UUID."""
    uuid = torch.cuda.get_device_properties(device.torch).uuid
    return f"{socket.gethostname()}/GPU-{uuid}"


def shared_gpus_message(identities: list[str]) -> str | None:
    """What is wrong when ranks (`identities[rank]`, from `gpu_identity`) share a GPU, or None
    when each has its own."""
    ranks_of: dict[str, list[int]] = {}
    for rank, gpu in enumerate(identities):
        ranks_of.setdefault(gpu, []).append(rank)
    shared = {gpu: ranks for gpu, ranks in ranks_of.items() if len(ranks) > 1}
    if not shared:
        return None
    where = "; ".join(f"ranks {', '.join(map(str, ranks))} on {gpu}"
                      for gpu, ranks in shared.items())
    return (f"{len(identities)} learner ranks would compute on {len(ranks_of)} GPU(s) ({where}), "
            f"but NCCL needs one GPU per rank. {ONE_GPU_PER_RANK_FIX}")


def check_one_gpu_per_rank(device: Device, world_size: int,
                           timeout_s: float | None = None) -> None:
    """DeviceUnavailable if this process's GPU is also another learner rank's. A collective:
    every rank of the default process group calls it, after joining and before any NCCL
    collective (NCCL would fail at its first one, "Duplicate GPU detected", after the model
    loaded). The names travel over a gloo group of their own, which needs no GPU, bounded by
    `timeout_s` (`distributed.collective_timeout_s`; None: torch's default for a new group,
    30 minutes, not the world's)."""
    import datetime

    import torch.distributed as dist

    timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)
    group = dist.new_group(backend="gloo", timeout=timeout)
    identities: list[Any] = [None] * world_size
    try:
        dist.all_gather_object(identities, gpu_identity(device), group=group)
    finally:
        dist.destroy_process_group(group)
    if (message := shared_gpus_message(identities)) is not None:
        raise DeviceUnavailable(message)


def bind(device: Device) -> None:
    """Make `device` this process's current one (a CUDA process must do it before NCCL and
    FSDP create anything, or every rank would allocate on GPU 0)."""
    if device.type == "cuda":
        torch.cuda.set_device(device.torch)


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_host_memory() -> str:
    """Make glibc's allocator keep the memory this process frees, for its next allocations,
    instead of handing it back to the kernel; returns what it did, for the log.

    For a process that computes on the host. glibc serves every allocation over 32 MB (a
    step's [tokens, vocabulary] logits and its activations) with a fresh mmap and unmaps it
    when it is freed, so every step the kernel faults in and zeroes the same gigabytes again.
    A SmolLM2 update of a quick-start batch (1,469 tokens, bf16, 2 cores) took 9.5 s so and
    5.8 s with freed memory kept; the learner of a profiled quick-start step 16.1 s against
    11.4 (`benchmarks/peak.py model.keep_freed_host_memory=false`). With no mmap and no
    trimming, freed blocks stay in the heap and the next step reuses them; the resident set
    stays at its peak instead of falling between steps.
    Not on a GPU process: its large host buffers (full state dicts for checkpoints) are
    one-offs, and keeping them would hold that much host memory for the rest of the run.
    """
    if platform.libc_ver()[0] != "glibc":
        return "host allocator left as it is (not glibc)"
    # The process's own symbols, glibc's among them: no library search (find_library would
    # run ldconfig in a subprocess). mallopt returns 1 on success.
    libc = ctypes.CDLL(None)
    if libc.mallopt(_M_MMAP_MAX, 0) != 1 or libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) != 1:
        return "host allocator left as it is (glibc refused mallopt)"
    return "host allocator keeps freed memory (glibc: no mmap, no trim)"


@functools.cache
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:  # not Linux: no flags to read, so no claim of native bf16
        pass
    return frozenset()


def cpu_has_native_bf16() -> bool:
    capped = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""
    if capped.upper() in _ONEDNN_ISAS_WITHOUT_BF16:
        return False
    return bool(cpu_flags() & _BF16_CPU_FLAGS)


@functools.cache
def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_host() -> str:
    """The machine a measurement ran on, for benchmark output."""
    return (f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads")


def what_exists() -> str:
    """What this process can compute on, for error messages."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    parts = [f"torch {torch.__version__}",
             f"CUDA build: {torch.version.cuda or 'none (CPU-only torch)'}",
             f"CUDA devices: {torch.cuda.device_count() if torch.cuda.is_available() else 0}"]
    if visible is not None:
        parts.append(f"CUDA_VISIBLE_DEVICES={visible!r}")
    parts.append(f"{os.cpu_count()} CPU cores")
    return ", ".join(parts)


@dataclass(frozen=True)
class DeviceMemory:
    """A GPU's memory as this process sees it (bytes)."""

    allocated: int  # held by this process's live tensors
    free: int  # what this process could still allocate: free on the device, plus what its
    #            caching allocator holds unused
    total: int


def device_memory(device: torch.device) -> DeviceMemory | None:
    """The allocator's view of `device`, where there is one (CUDA); None on CPU, whose memory
    is the host's and is not planned for (`rlvr.learner.memory_plan`)."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    allocated = torch.cuda.memory_allocated(device)
    cached_unused = torch.cuda.memory_reserved(device) - allocated
    return DeviceMemory(allocated=allocated, free=free + cached_unused, total=total)


def reset_peak_memory(device: torch.device) -> int:
    """Start measuring `device`'s allocation peak from now; returns what is allocated now."""
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def peak_memory(device: torch.device) -> int:
    """The most `device` held allocated since `reset_peak_memory`."""
    return torch.cuda.max_memory_allocated(device)


def release_cached_memory(device_type: str) -> None:
    """Hand the blocks this process's CUDA caching allocator holds unused back to the driver,
    for another allocator on the GPU (a colocated engine waking up: its own pool cannot take
    torch's cached blocks, and the learner's memory plan lets its cache grow to what is free).
    Nothing on CPU."""
    if device_type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def memory_metrics(device: torch.device) -> dict[str, float]:
    """`memory/*` gauges for this process on `device`: CUDA allocator figures on a GPU
    (AReaL's `log_gpu_stats`), the process's resident set on CPU (its peak is the process's
    lifetime peak). Resets the CUDA peak, so each step's `peak_gb` is that step's."""
    gb = 1024 ** 3
    if device.type == "cuda":
        out = {"memory/allocated_gb": torch.cuda.memory_allocated(device) / gb,
               "memory/reserved_gb": torch.cuda.memory_reserved(device) / gb,
               "memory/peak_gb": peak_memory(device) / gb}
        reset_peak_memory(device)
        return out
    rss = _current_rss_bytes()  # before the peak, which then includes it
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if platform.system() == "Darwin" else 1024
    out = {"memory/peak_rss_gb": peak * scale / gb}
    if rss is not None:
        out["memory/rss_gb"] = rss / gb
    return out


def _current_rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
