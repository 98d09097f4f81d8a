"""torchrun whose rendezvous stores listen only on the address the run chose.

`python -m rlvr.launch.torchrun [torchrun's own arguments] -m rlvr.cli train CONFIG` is
torchrun (`torch.distributed.run`), unchanged but for one thing: every store its agent serves
listens on the address it was given, not on every interface of the machine. Those are the
static rendezvous's store (`--master-addr` / `--master-port`, which the ranks use as their
store too: `TORCHELASTIC_USE_AGENT_STORE`), the c10d rendezvous backend's store (the host of
`--rdzv-endpoint`) and the store the dynamic rendezvous shares with the ranks (on this node's
`--local-addr`, else its host name). torch's TCPStore, left to itself, listens on every
interface whatever host it is given; handed a socket already bound (`master_listen_fd`) it
listens there only, which is what rlvr's own stores do (`rlvr.distributed.ranks`,
`rlvr.rollout.weight_sync.broadcast.bound_socket`).

What it is not: a launcher of its own (the local launcher starts one machine's ranks without
torchrun: `rlvr.launch.local_ranks`), or authentication: whoever reaches the chosen address
reaches the store, so choose one only the run's machines reach (docs/security.md).

Why a wrapper and not a flag: torchrun has no option for where its stores listen
(`--local-addr` only names the address other nodes are told), and the classes that create the
stores take none. The wrapper swaps, in torchrun's own process only, the TCPStore those
modules construct for one that binds first (`BoundTCPStore`); the ranks it starts are plain
processes, untouched.
"""

from __future__ import annotations

import sys
from typing import Any

import torch.distributed as dist

# TCPStore's parameters in order, for stores created with positional arguments (the static
# rendezvous passes host, port, world size, is_master and timeout so).
_PARAMS = ("host_name", "port", "world_size", "is_master", "timeout", "wait_for_workers",
           "multi_tenant", "master_listen_fd", "use_libuv")


class BoundTCPStore(dist.TCPStore):
    """A TCPStore whose server listens only on the host it is given: a server (`is_master`)
    without a socket of its own gets one bound there (`bound_socket`); a client is a plain
    TCPStore."""

    def __init__(self, *args: Any, **kwargs: Any):
        named = dict(zip(_PARAMS, args)) | kwargs
        if named.get("is_master") and named.get("master_listen_fd") is None:
            from rlvr.rollout.weight_sync.broadcast import bound_socket

            sock = bound_socket(named["host_name"], int(named.get("port") or 0))
            named["port"] = sock.getsockname()[1]
            named["master_listen_fd"] = sock.detach()  # the store closes it when it ends
        super().__init__(**named)


def bind_agent_stores() -> None:
    """Make every store torchrun's agent serves a `BoundTCPStore` (in this process)."""
    from torch.distributed.elastic.rendezvous import (c10d_rendezvous_backend,
                                                      static_tcp_rendezvous)

    dist.TCPStore = BoundTCPStore  # the dynamic rendezvous's shared store: `dist.TCPStore(...)`
    c10d_rendezvous_backend.TCPStore = BoundTCPStore
    static_tcp_rendezvous.TCPStore = BoundTCPStore


def main(argv: list[str] | None = None) -> None:
    from torch.distributed import run

    bind_agent_stores()
    run.main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
