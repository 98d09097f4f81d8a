"""What an attacker brings to weight sync: a pickle that runs a shell command when loaded, a
rendezvous store of their own holding it, and a way to find this host's other interface.
Imports nothing of rlvr's that the code before the fix lacked, so the attack tests can run
against it too (and show what it let through)."""

from __future__ import annotations

import os
import pickle
import socket
from datetime import timedelta

import torch.distributed as dist

PLAN_KEY = "rlvr/weights/plan"  # where a receiver looks for the sender's plan


class ShellCommand:
    """Unpickling this runs a shell command (what the old pickled plan let anyone who could
    write the store do)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def rogue_store(value: bytes) -> dist.TCPStore:
    """A store as an attacker would run it, holding `value` where the plan belongs."""
    store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timedelta(seconds=60),
                          wait_for_workers=False)
    store.set(PLAN_KEY, value)
    return store


def pickled_command(marker) -> bytes:
    """A plan-shaped pickle that touches `marker` when loaded."""
    return pickle.dumps(ShellCommand(f"touch {marker}"))


def other_interface_address() -> str | None:
    """An address of this host that is not loopback (the interface a route leaves by)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.123", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address
