"""Seconds per weight push to an engine in another process: the learner's fp32 weights sent as
they are against sent in the engine's bf16 (`rlvr.rollout.weight_sync.broadcast.wire_layout`), by
broadcast and through a file on disk.

The weights are a real model's (SmolLM2-135M-Instruct by default, fp32 as the learner holds
them); the receiving process joins two broadcast groups (gloo over loopback, the transport
every CPU run and a Ray cluster without GPUs use) and loads each push into bf16 tensors, as a
bf16 engine does (casting what arrives in fp32). Pushes alternate between the two settings, so
noise from other processes hits both alike; the first of each is a warm-up. Prints bytes per
push and the median and minimum seconds. The disk path (`rollout.weight_update=disk`, servers)
is timed as writing the safetensors file (`write_weights_dir`) plus reading it back into bf16
tensors, as a server's reload does, in a temporary directory.

    python benchmarks/weight_sync.py [--model smollm2-135m-instruct] [--pushes 6]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import socket
import statistics
import tempfile
import time
from pathlib import Path

import torch

from rlvr.device import HOST, cpu_name
from rlvr.rollout.weight_sync.broadcast import BroadcastReceiver, BroadcastTransport, layout_of


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Bf16Engine:
    """Loads each weight into a bf16 tensor of its own, as a bf16 engine's `update_weights`
    copies into its parameters."""

    def __init__(self):
        self.weights: dict[str, torch.Tensor] = {}

    def update_weights(self, named_tensors, version: int) -> None:
        for name, tensor in named_tensors:
            target = self.weights.get(name)
            if target is None:
                target = self.weights[name] = torch.empty(tensor.shape, dtype=torch.bfloat16,
                                                          device=HOST)
            target.copy_(tensor)


def _receive(ports: list[int]) -> None:
    torch.set_num_threads(1)
    receivers = [BroadcastReceiver("127.0.0.1", port, 1, 1, timeout_s=300) for port in ports]
    engine = _Bf16Engine()
    while all(r.receive_into(engine) is not None for r in receivers):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--pushes", type=int, default=6, help="timed pushes per setting")
    args = parser.parse_args()
    from rlvr.models import load_causal_lm, resolve_model_dir

    model = load_causal_lm(resolve_model_dir(args.model), "float32")
    weights = [(name, t.detach()) for name, t in model.state_dict().items()]
    settings = {"fp32 (as held)": None, "bf16 (engine's)": torch.bfloat16}
    ports = [_free_port() for _ in settings]
    receiver = mp.get_context("spawn").Process(target=_receive, args=(ports,))
    receiver.start()
    transports = {name: BroadcastTransport("127.0.0.1", port, 1, layout_of(weights),
                                           timeout_s=300, wire_dtype=dtype)
                  for (name, dtype), port in zip(settings.items(), ports)}
    times: dict[str, list[float]] = {name: [] for name in settings}
    for version in range(args.pushes + 1):
        for name, transport in transports.items():
            start = time.perf_counter()
            transport.push(iter(weights), version)
            if version:  # the first push of each forms buffers on both sides
                times[name].append(time.perf_counter() - start)
    for transport in transports.values():
        transport.close()
    receiver.join(timeout=60)
    print(f"{cpu_name()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}; "
          f"{args.model}, {len(weights)} tensors, gloo over loopback to one receiving process")
    for name, transport in transports.items():
        sent = sum(b.nbytes for b in transport.buckets) / 2**20
        print(f"  broadcast, {name:16s} {sent:7.1f} MiB per push: median "
              f"{statistics.median(times[name]):.3f} s, min {min(times[name]):.3f} s")
    disk(weights, settings, args.pushes)


def disk(weights, settings: dict, pushes: int) -> None:
    from safetensors.torch import load_file

    from rlvr.rollout.weight_sync.servers import WEIGHTS_FILE, write_weights_dir

    times: dict[str, list[float]] = {name: [] for name in settings}
    sizes: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for version in range(pushes + 1):
            for name, dtype in settings.items():
                start = time.perf_counter()
                target = write_weights_dir(iter(weights), Path(tmp) / f"v{version}", False, dtype)
                engine = _Bf16Engine()
                engine.update_weights(load_file(str(target / WEIGHTS_FILE)).items(), version)
                if version:
                    times[name].append(time.perf_counter() - start)
                sizes[name] = (target / WEIGHTS_FILE).stat().st_size / 2**20
                shutil.rmtree(target)
    for name in settings:
        print(f"  disk,      {name:16s} {sizes[name]:7.1f} MiB per push: median "
              f"{statistics.median(times[name]):.3f} s, min {min(times[name]):.3f} s")


if __name__ == "__main__":
    main()
