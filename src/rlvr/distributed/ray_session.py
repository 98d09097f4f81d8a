"""Joining or starting Ray, and naming an endpoint on this node: shared by learners and engines.

Ray is imported inside the functions, so the local launcher never needs it installed.
"""

from __future__ import annotations

import os
import socket


def ensure_ray(address: str | None, num_cpus: int) -> None:
    """Connect to `address`, reuse this process's Ray session, or start a small local one
    (no dashboard, a 128 MB object store: sized for a 2-core machine's small models).

    `num_cpus` is what the actors will ask for; a local Ray offers at least that many logical
    CPUs even on a smaller machine (the actors then share cores, as processes do)."""
    import ray

    if ray.is_initialized():
        return
    if address is not None:
        ray.init(address=address)
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=max(num_cpus, os.cpu_count() or 1), include_dashboard=False,
             object_store_memory=128 * 2**20)


def cluster_gpus() -> float:
    """GPUs the connected Ray cluster has in all (0 without any)."""
    import ray

    return float(ray.cluster_resources().get("GPU", 0.0))


def actor_resources() -> dict[str, str]:
    """What Ray gave the calling actor: its GPU ids and what CUDA shows it (for the start-up
    log, and tests that check placement on clusters with declared but absent GPUs)."""
    import ray

    gpu_ids = ray.get_gpu_ids() if ray.is_initialized() else []
    return {"gpu_ids": ",".join(str(g) for g in gpu_ids),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def node_ip() -> str:
    """This host's address as Ray sees it (other nodes can reach it); loopback without Ray."""
    try:
        import ray
    except ImportError:
        return "127.0.0.1"
    return ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"


def free_endpoint() -> tuple[str, int]:
    """(this node's address, a port free when chosen) for a rendezvous this process will serve.

    Another process could take the port before it is bound; the rendezvous then fails loudly
    and the caller may retry."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return node_ip(), port


def thread_env(num_threads: int) -> dict | None:
    """A Ray `runtime_env` giving an actor `num_threads` OpenMP threads from its start (0:
    Ray's own count), and the run's plugins: Ray actors do not inherit the driver's
    environment, and the actor imports what it names (`rlvr.plugins.import_from_environment`).

    Ray sets OMP_NUM_THREADS to the actor's CPU count (1 here), and OpenMP copies it into
    every thread it starts. `torch.set_num_threads` changes only the calling thread, so a
    threaded actor's other threads kept 1, and an engine's CPU attention, which plans with one
    count and runs with another, stopped with "thread_num == thread_num (1 vs. 2)"."""
    from rlvr.plugins import forwarded_environment

    env = {**({"OMP_NUM_THREADS": str(num_threads)} if num_threads > 0 else {}),
           **forwarded_environment()}
    return {"env_vars": env} if env else None
