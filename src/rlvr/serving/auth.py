"""The run's server key: a per-run secret that signs every request to an inference server and
every answer back, and never travels itself.

What it is: where the key lives (`<output_dir>/server.key`, mode 0600, written atomically),
and how a process finds it (`RLVR_SERVER_KEY`, else the file named by `RLVR_SERVER_KEY_FILE`,
else the run's file). How a request and its answer are signed with it is
`rlvr.serving.signing`. It is also how a server proves it holds the key to a client that has
not signed anything yet (`health_proof`): a client asks `/health` with a fresh random
challenge, and a server of the run answers with an HMAC of it under the key, bound to the
server's name (the address it was started to answer at), so a process that took the port, or
relays to another server of the run, cannot answer it (`rlvr.serving.server.is_healthy`), and
the client learns the name that server's signed requests must name.
What it is not: the server's door (`rlvr.serving.guard`, which uses these) or a user database:
one run, one key, shared by the trainer and its servers.

Why a file or the environment and never the command line: every user of a host can read any
process's argv (`ps`), while `/proc/<pid>/environ` and a 0600 file are the owner's alone. The
key is never logged; only the file's path is.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import stat
from pathlib import Path
from typing import Mapping

from rlvr.run.paths import RunPaths

KEY_ENV = "RLVR_SERVER_KEY"  # the key itself (a launcher sets it in a server's environment)
KEY_FILE_ENV = "RLVR_SERVER_KEY_FILE"  # or a file holding it (a Slurm job's steps read this)
# The key as the server's vLLM workers read it, to check the weight-sync handshake
# (`rlvr.rollout.weight_sync.broadcast`); only a server's environment holds it, so an engine inside a
# trainer's process never asks a handshake for a MAC it cannot have.
WEIGHT_SYNC_KEY_ENV = "RLVR_WEIGHT_SYNC_KEY"
_MAX_KEY_CHARS = 1024
# The health challenge: the client's nonce, the server's answer, and the name it proved for.
CHALLENGE_HEADER = "x-rlvr-challenge"
PROOF_HEADER = "x-rlvr-proof"
NAME_HEADER = "x-rlvr-server-name"
SERVER_NAME_ENV = "RLVR_SERVER_NAME"  # a server's name ("host:port"), set by whoever starts it
_CHALLENGE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class ServerKeyError(ValueError):
    """A key file that is missing, empty, not a regular file, or readable by other users."""


def run_key_path(output_dir: str | Path) -> Path:
    """Where a run keeps its key: `<output_dir>/server.key`."""
    return RunPaths(output_dir).server_key


def new_key() -> str:
    """32 random bytes, URL-safe text (no whitespace, safe in a header)."""
    return secrets.token_urlsafe(32)


def write_key_file(path: str | Path, key: str) -> Path:
    """`key` into `path`, mode 0600 from the moment the file exists (created under a temporary
    name with O_EXCL and renamed over any earlier one)."""
    path = Path(path)
    _check_key_text(key, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, key.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def read_key_file(path: str | Path) -> str:
    """The key in `path`; refuses a symlink, a file others can read or write, an empty one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        raise ServerKeyError(f"cannot read the server key file {path}: {e.strerror}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ServerKeyError(f"the server key file {path} is not a regular file")
        if st.st_mode & 0o077:
            raise ServerKeyError(f"the server key file {path} is open to other users (mode "
                                 f"{stat.S_IMODE(st.st_mode):o}); chmod 600 it")
        text = os.read(fd, _MAX_KEY_CHARS + 2).decode(errors="replace").strip()
    finally:
        os.close(fd)
    _check_key_text(text, str(path))
    return text


def key_from_env(env: Mapping[str, str] | None = None) -> str | None:
    """`RLVR_SERVER_KEY`, else the file `RLVR_SERVER_KEY_FILE` names, else None."""
    env = os.environ if env is None else env
    if env.get(KEY_ENV, "").strip():
        key = env[KEY_ENV].strip()
        _check_key_text(key, KEY_ENV)
        return key
    if env.get(KEY_FILE_ENV, "").strip():
        return read_key_file(env[KEY_FILE_ENV].strip())
    return None


def prepare_run_key(output_dir: str | Path) -> str:
    """The key of a run whose launcher starts its servers: the environment's if it names one
    (the user's servers and ours then share it), else a fresh one; either way written to
    `<output_dir>/server.key`, which the run's trainer reads (`client_key`)."""
    key = key_from_env() or new_key()
    write_key_file(run_key_path(output_dir), key)
    return key


def client_key(run_key_file: str | Path | None = None) -> str | None:
    """The key a client signs with: the environment's, else the run's key file if it exists,
    else None (a server that needs one then answers 401, and the error says so)."""
    key = key_from_env()
    if key is None and run_key_file and Path(run_key_file).exists():
        key = read_key_file(run_key_file)
    return key


def new_challenge() -> str:
    """A fresh health challenge: 32 random bytes, URL-safe text."""
    return secrets.token_urlsafe(32)


def valid_challenge(challenge: str | bytes | None) -> str | None:
    """`challenge` as text if it is one a client makes (22 to 128 URL-safe characters), else
    None: a server answers nothing else."""
    if isinstance(challenge, bytes):
        challenge = challenge.decode("latin-1")
    if not challenge or not 22 <= len(challenge) <= 128 or not set(challenge) <= _CHALLENGE_CHARS:
        return None
    return challenge


def health_proof(key: str, name: str, challenge: str) -> str:
    """What a server holding `key` answers a health `challenge` with: HMAC-SHA256 under the key
    over the purpose, the server's `name` and the challenge. The purpose keeps it apart from
    every other MAC under the run's key (the weight plan's starts "rlvr weight plan")."""
    message = f"rlvr health proof v1\n{name}\n{challenge}"
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()


def proof_matches(proof: str | None, key: str, name: str, challenge: str) -> bool:
    """True if `proof` is `health_proof(key, name, challenge)`; constant time."""
    if not proof:
        return False
    return hmac.compare_digest(proof.strip().encode("latin-1", errors="replace"),
                               health_proof(key, name, challenge).encode())


def is_loopback(host: str) -> bool:
    """True if every address `host` names is a loopback one ("" and 0.0.0.0 are every
    interface, so not). A name that does not resolve counts as not loopback."""
    if host in ("", "0.0.0.0", "::"):
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0].split("%")[0]).is_loopback
                               for info in infos)


def _check_key_text(key: str, where: str) -> None:
    if not key:
        raise ServerKeyError(f"the server key in {where} is empty")
    if len(key) > _MAX_KEY_CHARS or any(c.isspace() or not c.isprintable() for c in key):
        raise ServerKeyError(f"the server key in {where} must be at most {_MAX_KEY_CHARS} "
                             "printable characters without spaces")
