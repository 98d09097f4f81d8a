"""The server a run's engine expects: a config's rollout section as `ServerSettings`, so
`rlvr serve`, the local launcher, Ray and a Slurm step start identical servers.

What it is not: starting them (`rlvr.launch.servers`, `rlvr.launch.ray_servers`,
`rlvr.launch.slurm_script`) or the server itself (`rlvr.serving.server`). It reads the vLLM
section of the rollout config (`rollout.vllm`), the engine the servers run.
"""

from __future__ import annotations

from rlvr.config import Config
from rlvr.device import engine_dtype
from rlvr.run.paths import RunPaths
from rlvr.serving.server import ServerSettings


def server_settings(cfg: Config, model_dir: str, device: str, bf16: bool,
                    host: str = "127.0.0.1", port: int = 0) -> ServerSettings:
    """The server a run's engine expects: the rollout section's vLLM settings, the run's seed,
    weights in `engine_dtype` for a device that computes in bf16 or not, reloads only from the
    run's `<output_dir>/weight_updates` (where its trainer writes them)."""
    r = cfg.rollout
    return ServerSettings(
        model=model_dir, host=host, port=port, dtype=engine_dtype(r.dtype, bf16),
        max_model_len=r.vllm.max_model_len,
        block_size=r.vllm.block_size, kv_cache_gb=r.vllm.kv_cache_gb,
        gpu_memory_utilization=r.vllm.gpu_memory_utilization,
        tensor_parallel_size=r.tensor_parallel_size,
        enforce_eager=r.vllm.enforce_eager,
        enable_prefix_caching=r.vllm.enable_prefix_caching, seed=cfg.experiment.seed,
        device=device, cpu_threads_bind=r.vllm.cpu_threads_bind,
        weights_dir=str(RunPaths(cfg.experiment.output_dir).weight_updates.resolve()))
