"""Weight sync: a broadcast to an engine in another process leaves it sampling from the learner's
weights, checked by the logprobs it reports against the learner's own forward pass."""

import multiprocessing as mp
import socket

import pytest
import torch

from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.learner.forward import forward_logprobs
from rlvr.rollout.weight_sync import BroadcastReceiver, BroadcastTransport, layout_of
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
    from rlvr.rollout.transformers_engine import TransformersEngine

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
        transport = BroadcastTransport("127.0.0.1", port, num_engines=1,
                                       layout=layout_of(tiny_model.state_dict().items()), timeout_s=60)
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
    transport = BroadcastTransport("127.0.0.1", port, num_engines=1,
                                   layout=layout_of(tiny_model.state_dict().items()), timeout_s=20)
    proc.kill()
    proc.join()
    with pytest.raises(RuntimeError):
        transport.push(tiny_model.state_dict().items(), version=1)
        transport.push(tiny_model.state_dict().items(), version=2)


def test_local_transport_loads_weights_into_the_engine(tiny_model, tiny_tokenizer,
                                                       tiny_model_dir):
    from rlvr.models import load_causal_lm
    from rlvr.rollout.transformers_engine import TransformersEngine

    engine = TransformersEngine(load_causal_lm(tiny_model_dir), tiny_tokenizer,
                                (tiny_tokenizer.eos_token_id,), tiny_tokenizer.pad_token_id)
    _perturb_(tiny_model, seed=7)
    engine.update_weights(tiny_model.state_dict().items(), version=5)  # the in-process path
    groups = [[(c.token_ids_T, c.logprobs_T, c.model_version) for c in g]
              for g in engine.generate(PROMPTS, PARAMS)]
    assert {v for g in groups for (_, _, v) in g} == {5}
    local, from_engine = _learner_logprobs(tiny_model, groups)
    torch.testing.assert_close(from_engine, local, atol=TOLERANCE, rtol=0)
