"""Where torchrun's agent stores listen: `python -m rlvr.launch.torchrun` binds the address the
run chose (`--master-addr`, the host of `--rdzv-endpoint`, `--local-addr`), where torchrun
itself listens on every interface. A one-rank torchrun whose rank reads the machine's listening
sockets (/proc/net/tcp, tcp6) while the agent's stores are up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.serving.server import free_port

ROOT = Path(__file__).resolve().parents[2]

# The rank: every listening socket of the machine as (address, port), and the store it was
# told to use (MASTER_ADDR:MASTER_PORT), written as JSON to argv[1].
RANK = r'''
import json, os, socket, sys
def listening():
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # host order
            found.append((socket.inet_ntop(family, raw), int(hex_port, 16)))
    return found
json.dump({"listening": listening(), "master_port": int(os.environ["MASTER_PORT"]),
           "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE")},
          open(sys.argv[1], "w"))
'''


def _torchrun(launcher: list[str], rdzv: list[str], tmp_path: Path) -> dict:
    script, out = tmp_path / "rank.py", tmp_path / "seen.json"
    script.write_text(RANK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([*launcher, "--nnodes", "1", "--nproc-per-node", "1", *rdzv,
                           str(script), str(out)], env=env, capture_output=True, text=True,
                          timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def _on(seen: dict, port: int) -> set[str]:
    return {address for address, p in seen["listening"] if p == port}


RLVR_TORCHRUN = [sys.executable, "-m", "rlvr.launch.torchrun"]


def test_the_static_rendezvous_store_listens_on_the_master_address_only(tmp_path):
    port = free_port()
    seen = _torchrun(RLVR_TORCHRUN, ["--master-addr", "127.0.0.1", "--master-port", str(port)],
                     tmp_path)
    assert seen["master_port"] == port and seen["agent_store"] == "True"  # the ranks' store too
    assert _on(seen, port) == {"127.0.0.1"}  # not 0.0.0.0, not ::


def test_the_c10d_rendezvous_stores_listen_on_the_chosen_addresses_only(tmp_path):
    port = free_port()
    seen = _torchrun(RLVR_TORCHRUN, ["--rdzv-backend", "c10d", "--rdzv-endpoint",
                                     f"127.0.0.1:{port}", "--local-addr", "127.0.0.1"], tmp_path)
    assert _on(seen, port) == {"127.0.0.1"}  # the rendezvous backend's store
    assert _on(seen, seen["master_port"]) == {"127.0.0.1"}  # the store shared with the ranks


def test_plain_torchrun_listens_on_every_interface(tmp_path):
    """Why the wrapper: the same static rendezvous through torchrun itself."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("no torchrun beside this interpreter")
    port = free_port()
    seen = _torchrun([str(torchrun)], ["--master-addr", "127.0.0.1", "--master-port", str(port)],
                     tmp_path)
    assert _on(seen, port) & {"0.0.0.0", "::"}
