"""Moving the learner's weights into engines after an update, without restarting them.

An engine in the learner's process takes the weights directly (`engine.update_weights`, a
tensor copy). Engines in other processes (a Ray actor, an engine's own worker process, another
node) are reached through `BroadcastTransport`: the sender (learner rank 0, or the trainer) is
rank 0 of a torch.distributed group of its own, gloo on CPU or NCCL on GPU, and broadcasts the
weights; each receiving process runs a `BroadcastReceiver`: an engine actor's, or one in each
worker of an engine whose workers receive for themselves (one rank per tensor-parallel worker,
in the engine's subpackage), all on the same receive loop.

Why a separate group and not the learners' default one: engines are not learners, and the
learners' group must keep its own membership (FSDP collectives). Why buckets: one broadcast per
bucket instead of one per tensor (a large difference for many small tensors), and neither side
ever holds a second full copy of the model: the sender copies one bucket's tensors into a reused
buffer, broadcasts it and moves on; receivers hand each bucket's tensors to the engine as it
arrives. Both sides agree once, at connection time and through the rendezvous store, on the
layout (names, shapes, dtypes), the bucket size and the backend, so buckets are cut by the same
pure function on both sides and each push carries only the version and the bytes.

Trust: the rendezvous store is a plain key-value server that anyone who reaches its port can
read and write, so what a receiver reads from it is data, never code: the plan travels as JSON
(`encode_plan` / `decode_plan`, every field checked), nothing is unpickled (torch's own store
and gloo exchange bytes, not pickles). With a `token` (the run's server key; an inference
server's workers always have one) the plan carries an HMAC over itself and the address, port
and size of the group, so a worker told to join a store someone else runs, or an old plan
replayed, refuses it. The sender's store listens only on `host` (torch's TCPStore binds every
interface unless handed a socket, `bound_socket`). The weights themselves then cross the
group's connections unauthenticated and unencrypted: the network between trainer and engines
must be the cluster's own (docs/security.md).

Not here: gathering sharded weights (`rlvr.distributed.sharding`), which process sends or
receives (`rlvr.distributed`), how an engine loads a tensor (`RolloutEngine.update_weights`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterable, Iterator, NamedTuple

import torch
import torch.distributed as dist

from rlvr.device import HOST
from rlvr.rollout.base import RolloutEngine

DEFAULT_BUCKET_BYTES = 512 * 2**20  # `rollout.weight_sync_bucket_mb`'s default
BACKENDS = ("gloo", "nccl")
# Every tensor starts at a multiple of this many bytes within its bucket, so a byte slice can be
# viewed as any dtype (the widest element, complex128, is 16 bytes).
_ALIGN_BYTES = 16
_PLAN_KEY = "rlvr/weights/plan"
_PLAN_FORMAT = 1
_MAX_PLAN_BYTES = 64 * 2**20
# The dtypes a plan may name (by torch's name without "torch."); nothing else is looked up.
WIRE_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
    torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
    torch.bool, torch.float8_e4m3fn, torch.float8_e5m2)}

NamedTensors = Iterable[tuple[str, torch.Tensor]]


class TensorSpec(NamedTuple):
    """One weight as both sides agree on it (a tuple, so `for name, shape, dtype in layout`)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


Layout = list[TensorSpec]


def layout_of(named_tensors: NamedTensors) -> Layout:
    """Names, shapes and dtypes: all a sender needs to agree on with its receivers."""
    return [TensorSpec(name, tuple(t.shape), t.dtype) for name, t in named_tensors]


def wire_layout(layout: Layout, dtype: torch.dtype | None) -> Layout:
    """The layout as it travels: floating-point weights in `dtype`, the receiving engines'
    weight dtype (None: as the sender holds them); integer tensors as they are.

    An engine casts every weight to its own dtype as it loads it, so an fp32 learner sending
    to bf16 engines would move twice the bytes the engines keep; cast on the sender's side
    (on its device, into the bucket buffer), the engines load the same values. The exception
    is a weight an engine keeps in fp32 whatever its dtype (some MoE routers' bias terms):
    it arrives rounded to `dtype`. `rollout.dtype=float32` sends everything in fp32."""
    if dtype is None:
        return list(layout)
    return [TensorSpec(name, shape, dtype if spec_dtype.is_floating_point else spec_dtype)
            for name, shape, spec_dtype in layout]


@dataclass(frozen=True)
class BucketEntry:
    spec: TensorSpec
    offset: int  # bytes from the start of the bucket; a multiple of _ALIGN_BYTES


@dataclass(frozen=True)
class Bucket:
    """Tensors broadcast together, in layout order, packed as raw bytes into one uint8 buffer
    of `nbytes` (their bytes plus alignment padding)."""

    entries: tuple[BucketEntry, ...]
    nbytes: int

    def views(self, buffer_N: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
        """Each entry's tensor as a view into `buffer_N` (uint8, at least `nbytes` long): the
        sender writes through these views, the receiver reads them."""
        out = []
        for entry in self.entries:
            start, spec = entry.offset, entry.spec
            raw = buffer_N[start:start + spec.nbytes]
            out.append((spec.name, raw.view(spec.dtype).view(spec.shape)))
        return out


def cut_buckets(layout: Layout, bucket_bytes: int) -> list[Bucket]:
    """The layout, in order, cut into buckets of at most `bucket_bytes` each; a tensor larger
    than that gets a bucket of its own. Pure: sender and receivers call it alike.

    Why mixed dtypes in one byte buffer rather than a bucket per dtype: it keeps the layout
    (the model's own) order, and an engine's layerwise reload finishes a layer only once all
    of its weights arrived, holding the rest until then, so weights grouped by layer keep that
    small; it needs one buffer and one broadcast per bucket whatever the number of dtypes; and
    each tensor keeps the dtype the layout gives it, so an fp32 norm next to bf16 matrices
    arrives as fp32 (`wire_layout` decides those dtypes).
    """
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes={bucket_bytes} must be >= 1")
    buckets: list[Bucket] = []
    entries: list[BucketEntry] = []
    end = 0  # bytes used in the open bucket
    for spec in layout:
        start = -(-end // _ALIGN_BYTES) * _ALIGN_BYTES  # `end` rounded up to the alignment
        if entries and start + spec.nbytes > bucket_bytes:
            buckets.append(Bucket(tuple(entries), end))
            entries, start = [], 0
        entries.append(BucketEntry(spec, start))
        end = start + spec.nbytes
    if entries:
        buckets.append(Bucket(tuple(entries), end))
    return buckets


@dataclass(frozen=True)
class SyncPlan:
    """What the sender publishes in the rendezvous store for its receivers to read."""

    layout: Layout
    bucket_bytes: int
    backend: str  # "gloo" | "nccl"


class PlanRefused(ValueError):
    """A plan read from the store that is malformed, or whose MAC does not match."""


def _plan_mac(token: str, plan_text: str, host: str, port: int, world_size: int) -> str:
    # Bound to the group's address and size: a plan is good for the one group it was made for.
    message = f"rlvr weight plan v{_PLAN_FORMAT}\n{host}\n{port}\n{world_size}\n{plan_text}"
    return hmac.new(token.encode(), message.encode(), hashlib.sha256).hexdigest()


def encode_plan(plan: SyncPlan, token: str | None, host: str, port: int,
                world_size: int) -> bytes:
    """The plan as the store holds it: JSON, with an HMAC when there is a `token`."""
    text = json.dumps({"layout": [[n, list(shape), str(d).removeprefix("torch.")]
                                  for n, shape, d in plan.layout],
                       "bucket_bytes": plan.bucket_bytes, "backend": plan.backend})
    mac = _plan_mac(token, text, host, port, world_size) if token else ""
    return json.dumps({"format": _PLAN_FORMAT, "plan": text, "mac": mac}).encode()


def decode_plan(data: bytes, token: str | None, host: str, port: int,
                world_size: int) -> SyncPlan:
    """The plan in `data`, every field checked; with a `token`, its MAC must match (for this
    host, port and group size). `PlanRefused` otherwise."""
    if len(data) > _MAX_PLAN_BYTES:
        raise PlanRefused(f"weight-sync plan of {len(data)} bytes is too large")
    try:
        envelope = json.loads(data)
        text, mac = envelope["plan"], envelope["mac"]
        if envelope["format"] != _PLAN_FORMAT or not isinstance(text, str) \
                or not isinstance(mac, str):
            raise ValueError("unknown format")
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
        raise PlanRefused(f"the weight-sync store holds no rlvr plan ({e})") from e
    if token is not None and not hmac.compare_digest(
            mac, _plan_mac(token, text, host, port, world_size)):
        raise PlanRefused(f"the weight-sync plan at {host}:{port} is not signed with this "
                          "run's key: refusing to join that group")
    try:
        raw = json.loads(text)
        layout = [_spec(entry) for entry in raw["layout"]]
        bucket_bytes, backend = raw["bucket_bytes"], raw["backend"]
    except (ValueError, TypeError, KeyError) as e:
        raise PlanRefused(f"malformed weight-sync plan ({e})") from e
    if type(bucket_bytes) is not int or bucket_bytes < 1 or backend not in BACKENDS:
        raise PlanRefused(f"malformed weight-sync plan (bucket_bytes={bucket_bytes!r}, "
                          f"backend={backend!r})")
    return SyncPlan(layout, bucket_bytes, backend)


def _spec(entry: object) -> TensorSpec:
    name, shape, dtype = entry  # type: ignore[misc]
    if not isinstance(name, str) or not isinstance(shape, list) or dtype not in WIRE_DTYPES \
            or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"bad layout entry {entry!r}")
    return TensorSpec(name, tuple(shape), WIRE_DTYPES[dtype])


def bound_socket(host: str, port: int = 0) -> socket.socket:
    """A listening socket on `host` only (port 0: a free one), for the sender's store: torch's
    TCPStore, left to itself, listens on every interface of the machine."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def buffer_device(backend: str, device: torch.device | None) -> torch.device:
    """Where a side's buffers live: host memory for gloo (its CUDA support is partial and goes
    through the host anyway), the given CUDA device for NCCL, which moves device memory only."""
    if backend not in BACKENDS:
        raise ValueError(f"weight-sync backend {backend!r} is not one of {BACKENDS}")
    if backend == "gloo":
        return HOST
    if device is None or device.type != "cuda":
        raise ValueError(f"weight sync over NCCL needs a CUDA device for its buffers, got {device}")
    return device


def _process_group(store: dist.Store, rank: int, world_size: int, timeout: timedelta,
                   backend: str) -> dist.ProcessGroupGloo | dist.ProcessGroupNCCL:
    """A group of its own on `store`, apart from torch.distributed's default group (a c10d
    backend object used directly: `broadcast(tensor, root)`)."""
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    # ---- GPU only: never run on the CPU test machine. ProcessGroupNCCL takes its timeout
    # inside Options (torch 2.13: `ProcessGroupNCCL(store, rank, size, options)`), the same
    # way `torch.distributed.new_group` builds one. The communicator is created lazily at the
    # first broadcast, on the device of that tensor (the caller's current CUDA device).
    if not dist.is_nccl_available():
        raise RuntimeError("weight sync over NCCL: this torch build has no NCCL")
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = timeout
    return dist.ProcessGroupNCCL(store, rank, world_size, options)
    # ---- end of GPU-only lines


def _broadcast(group: dist.ProcessGroupGloo | dist.ProcessGroupNCCL,
               tensor: torch.Tensor) -> None:
    # gloo: blocks until done. NCCL: orders the current CUDA stream after the broadcast, so the
    # next write into a reused buffer, queued on that stream, cannot overtake it.
    group.broadcast(tensor, 0).wait()


class BroadcastTransport:
    """The sender's side: rank 0 of a group with `num_engines` receiving ranks (one per engine,
    or per tensor-parallel worker when an engine's workers receive themselves). `layout`
    (`layout_of(model.state_dict().items())`) is what every push will carry; its floating-point
    tensors travel in `wire_dtype` (`wire_layout`; None: as they are).

    Construction blocks until every receiver has connected (the rendezvous), so start the
    receivers first or concurrently. `timeout_s` bounds every broadcast: a dead engine makes
    `push` raise instead of hanging the learner. `device` is where the one bucket buffer lives
    (the learner's GPU for NCCL; gloo uses host memory).

    The store listens on `host` only: on `listen` if given (a `bound_socket(host)`, when the
    port must be known before this blocks), else on a socket bound here to (host, port). The
    transport owns the socket from then on. `token` (the run's key) signs the plan; receivers
    that hold the key refuse a plan without it.
    """

    def __init__(self, host: str, port: int, num_engines: int, layout: Layout,
                 timeout_s: float = 300.0, *, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 backend: str = "gloo", device: torch.device | None = None,
                 wire_dtype: torch.dtype | None = None, token: str | None = None,
                 listen: socket.socket | None = None):
        self.device = buffer_device(backend, device)
        self.layout = [TensorSpec(name, tuple(shape), dtype) for name, shape, dtype in layout]
        # What receivers are told and read; each push is checked against `layout`.
        self.wire = wire_layout(self.layout, wire_dtype)
        self.buckets = cut_buckets(self.wire, bucket_bytes)
        timeout = timedelta(seconds=timeout_s)
        world_size = num_engines + 1
        sock = listen if listen is not None else bound_socket(host, port)
        port = sock.getsockname()[1]
        # The store takes the descriptor and closes it when it ends.
        self.store = dist.TCPStore(host, port, world_size, is_master=True, timeout=timeout,
                                   master_listen_fd=sock.detach())
        # Published before the group forms: receivers read the backend to build theirs.
        self.store.set(_PLAN_KEY, encode_plan(SyncPlan(self.wire, bucket_bytes, backend), token,
                                              host, port, world_size))
        self.group = _process_group(self.store, 0, world_size, timeout, backend)
        self._buffer_N: torch.Tensor | None = None  # the one bucket buffer, from the first push
        self._failed = False

    def push(self, named_tensors: NamedTensors, version: int) -> None:
        """Broadcast weights in layout order, reading `named_tensors` one bucket at a time: a
        generator is consumed lazily, and no tensor of an earlier bucket is referenced here
        once its bucket is sent. Names, shapes and dtypes must match the layout."""
        if self._failed:
            raise RuntimeError("an earlier push failed midway, so the receivers are out of step; "
                               "form a new group")
        if self._buffer_N is None:
            largest = max((b.nbytes for b in self.buckets), default=0)
            self._buffer_N = torch.empty(largest, dtype=torch.uint8, device=self.device)
        tensors, expected = iter(named_tensors), iter(self.layout)
        try:
            _broadcast(self.group, torch.tensor([version], dtype=torch.long, device=self.device))
            for bucket in self.buckets:
                buffer_N = self._buffer_N[:bucket.nbytes]
                _fill(bucket, buffer_N, tensors, expected)
                _broadcast(self.group, buffer_N)
            extra = next(tensors, None)
            if extra is not None:
                raise ValueError(f"weight {extra[0]!r} is not in the layout agreed at connection")
        except BaseException:
            self._failed = True
            raise

    def close(self) -> None:
        # A negative version tells receivers to stop listening.
        try:
            _broadcast(self.group, torch.tensor([-1], dtype=torch.long, device=self.device))
        except Exception:  # noqa: BLE001  receivers that are already gone need no goodbye
            pass


def _fill(bucket: Bucket, buffer_N: torch.Tensor, tensors: Iterator[tuple[str, torch.Tensor]],
          expected: Iterator[TensorSpec]) -> None:
    """Copy the bucket's tensors, taken from `tensors` and checked against the sender's layout
    (`expected`, in step with them), into its buffer. A function of its own so that its
    locals, the last tensor included, are released before the next bucket."""
    for name, view in bucket.views(buffer_N):
        spec = next(expected)  # the layout and its wire form have the same entries
        got = next(tensors, None)
        if got is None:
            raise ValueError(f"the weights pushed end before {name!r} of the agreed layout")
        got_name, tensor = got
        if (got_name, tuple(tensor.shape), tensor.dtype) != tuple(spec):
            raise ValueError(f"weight {got_name!r} {tuple(tensor.shape)} {tensor.dtype} does not "
                             f"match the layout's {tuple(spec)}")
        # Across devices too (a CPU gather into a GPU buffer), and into the wire dtype.
        view.copy_(tensor.detach())


class BroadcastReceiver:
    """A receiving process's side, rank `rank` (1..num_engines) of the sender's group.

    Layout, bucket size and backend come from the sender (`SyncPlan`, JSON, checked); `backend`,
    if given, is checked against the sender's. `device` is this process's CUDA device when the
    sender uses NCCL (ignored by gloo). With a `token` (the run's key) the plan must carry its
    MAC, or the receiver refuses to join (`PlanRefused`) before any group forms.
    `receive_into(engine)` waits for one push and loads it.
    """

    def __init__(self, host: str, port: int, rank: int, num_engines: int,
                 timeout_s: float = 300.0, *, backend: str | None = None,
                 device: torch.device | None = None, token: str | None = None):
        timeout = timedelta(seconds=timeout_s)
        world_size = num_engines + 1
        self.store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
        plan = decode_plan(self.store.get(_PLAN_KEY), token, host, port, world_size)
        if backend is not None and backend != plan.backend:
            raise ValueError(f"this receiver expects weight sync over {backend}, the sender "
                             f"uses {plan.backend}")
        self.backend, self.layout = plan.backend, plan.layout
        self.buckets = cut_buckets(plan.layout, plan.bucket_bytes)
        self.device = buffer_device(plan.backend, device)
        self.group = _process_group(self.store, rank, world_size, timeout, plan.backend)
        self._open: Iterator | None = None  # the weights of a push not yet fully read
        self._failed = False

    def receive(self) -> tuple[int, Iterator[tuple[str, torch.Tensor]]] | None:
        """Wait for the next push: its version, and its weights as an iterator that receives one
        bucket per step of consumption. None when the sender closed. Read the iterator to
        the end before the next `receive` (`receive_into` does)."""
        if self._failed:
            raise RuntimeError("a push was left half read or failed; the group is out of step")
        if self._open is not None:
            raise RuntimeError("the previous push's weights were not read to the end")
        version_1 = torch.zeros(1, dtype=torch.long, device=self.device)
        _broadcast(self.group, version_1)
        version = int(version_1.item())
        if version < 0:
            return None
        self._open = self._weights()
        return version, self._open

    def _weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        try:
            for bucket in self.buckets:
                # A new buffer per bucket, not a reused one: an engine may keep the views past
                # the bucket (a layerwise reload holds a layer's weights until the whole layer
                # has arrived), and a reused buffer would overwrite them. On GPU the caching
                # allocator hands back the freed block, so this costs no more than reuse.
                buffer_N = torch.empty(bucket.nbytes, dtype=torch.uint8, device=self.device)
                _broadcast(self.group, buffer_N)
                yield from bucket.views(buffer_N)
                del buffer_N  # freed before the next bucket's is allocated (if the engine let go)
        except BaseException:  # a failed broadcast, or the reader gave up (GeneratorExit)
            self._failed = True
            raise
        self._open = None

    def receive_into(self, engine: RolloutEngine) -> int | None:
        """Wait for one push and load it with one `engine.update_weights(weights, version)`
        call, the weights streaming in bucket by bucket as the engine reads them (the engine
        sets its version after the last one). The version loaded, or None at close."""
        got = self.receive()
        if got is None:
            return None
        version, weights = got
        try:
            engine.update_weights(weights, version)
        finally:
            unread = sum(1 for _ in weights)  # keeps the group in step whatever the engine did
        if unread:
            raise RuntimeError(f"the engine left {unread} weights of version {version} unread")
        return version
