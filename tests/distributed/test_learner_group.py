"""The learner group: 2 sharded ranks give one process's losses and weights; an empty rank does
not hang; a rank that dies mid-step ends the call with a clear error within the timeout.

Ray tests share one Ray session per module (starting it costs 3-10 s) and skip when Ray is not
installed. The tiny model keeps each update well under a second.
"""

from __future__ import annotations

import copy
import os
import sys
import time

import pytest
import torch

from rlvr.algorithm.losses import LossParams
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.distributed.learner_group import LearnerGroup, LearnerGroupError, combine_results
from rlvr.distributed.learner_worker import LearnerSpec, LearnerWorker
from rlvr.learner import LearnerSettings, UpdateResult
from rlvr.rollout.weight_sync import sync_weights

FAULT_TIMEOUT_S = 20.0


def _spec(model_dir: str, **kw) -> LearnerSpec:
    settings = LearnerSettings(learning_rate=1e-3, lr_scheduler_type="linear", warm_up_steps=1,
                               total_optimizer_steps=10, max_grad_norm=1.0)
    return LearnerSpec(model_dir=model_dir, settings=settings, **kw)


def _batch(num_groups: int, seed: int):
    """Groups of 4 samples sharing a prompt, packed in rows of at most 40 tokens."""
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for g in range(num_groups):
        prompt = torch.randint(3, 250, (5 + g % 3,), generator=gen).tolist()
        for k in range(4):
            n = 2 + (g + 3 * k) % 6
            seqs.append(SequenceToPack(prompt, torch.randint(3, 250, (n,), generator=gen).tolist(),
                                       (-torch.rand(n, generator=gen) - 4).tolist(),
                                       advantage=(-1.0) ** k * (k + 1) / 4, index=len(seqs)))
    return pack_sequences(seqs, pack_length=40, strategy="first_fit_decreasing")


def _params(batch, beta: float = 0.1) -> LossParams:
    return LossParams(clip_lower=0.2, clip_higher=0.28, beta=beta, kl_estimator=2,
                      denominator=float(batch.num_response_tokens))


def _assert_same_result(got: UpdateResult, want: UpdateResult) -> None:
    assert got.loss_sums.keys() == want.loss_sums.keys()
    for key, value in want.loss_sums.items():
        assert got.loss_sums[key] == pytest.approx(value, rel=1e-5, abs=1e-5), key
    assert (got.num_response_tokens, got.num_tokens, got.num_sequences) == (
        want.num_response_tokens, want.num_tokens, want.num_sequences)
    assert got.entropy_sum == pytest.approx(want.entropy_sum, rel=1e-5)
    assert got.engine_diff_max == pytest.approx(want.engine_diff_max, rel=1e-5)
    assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-5)
    assert got.learning_rate == want.learning_rate


def _assert_same_weights(a: LearnerGroup, b: LearnerGroup, atol: float = 1e-5) -> None:
    wa, wb = dict(a.named_weights()), dict(b.named_weights())
    assert wa.keys() == wb.keys()
    for name in wb:
        torch.testing.assert_close(wa[name], wb[name], atol=atol, rtol=1e-4, msg=name)


def test_combine_results_adds_sums_and_takes_maxima():
    def result(tokens, loss, diff_max, grad_norm):
        return UpdateResult(loss_sums={"policy_loss_sum": loss, "rho_max": diff_max},
                            num_response_tokens=tokens, num_tokens=2 * tokens, num_sequences=1,
                            entropy_sum=0.5, engine_diff_sum=0.25, engine_diff_max=diff_max,
                            grad_norm=grad_norm, learning_rate=1e-3, skipped_steps=0,
                            seconds=9.0,
                            engine_ratio_T=torch.ones(tokens) * diff_max if tokens else None)

    out = combine_results([result(3, -1.0, 0.2, 4.0), result(0, 0.0, 0.0, 4.0)], seconds=1.5)
    assert out.loss_sums == {"policy_loss_sum": -1.0, "rho_max": 0.2}
    assert (out.num_response_tokens, out.num_tokens, out.num_sequences) == (3, 6, 2)
    assert (out.entropy_sum, out.engine_diff_sum, out.engine_diff_max) == (1.0, 0.5, 0.2)
    assert (out.grad_norm, out.seconds) == (4.0, 1.5)
    assert out.engine_ratio_T.tolist() == pytest.approx([0.2] * 3)  # every rank's tokens


def test_local_group_state_round_trip(tiny_model_dir):
    batch = _batch(2, seed=4)
    with LearnerGroup(_spec(tiny_model_dir, with_reference=True)) as group:
        group.update(batch, "dapo", _params(batch), 2, 1, 1.0)
        state = copy.deepcopy(group.state_dict())  # local tensors are the live ones
        first = group.update(batch, "dapo", _params(batch), 2, 1, 1.0)
        group.load_state_dict(state)
        again = group.update(batch, "dapo", _params(batch), 2, 1, 1.0)
    _assert_same_result(again, first)


def test_a_local_group_closes_where_ray_is_not_installed(tiny_model_dir, monkeypatch):
    """The local backend is what a host without Ray runs (a GPU machine with torch alone);
    closing it imported Ray for a placement group only Ray's backend has."""
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where it is absent
    with LearnerGroup(_spec(tiny_model_dir)) as group:
        assert group.num_learners == 1


def test_a_rank_with_no_rows_does_not_hang(ray_session, tiny_model_dir):
    spec = _spec(tiny_model_dir, sharding="ddp", timeout_s=30)
    batch = _batch(1, seed=5)
    batch = batch.select_rows([0])  # one row for two ranks
    with LearnerGroup(spec) as single, LearnerGroup(spec, 2, backend="ray") as pair:
        start = time.monotonic()
        got = pair.update(batch, "dapo", _params(batch, beta=0.0), 4, 1, 1.0)
        assert time.monotonic() - start < 10
        _assert_same_result(got, single.update(batch, "dapo", _params(batch, beta=0.0), 4, 1,
                                               1.0))
        _assert_same_weights(pair, single)


class DiesMidStep(LearnerWorker):
    """Rank 1's process exits inside its first loss computation: after the forward pass's
    all-gathers, before the backward's reduce-scatters, which rank 0 then waits for."""

    def loss_fn(self, loss_name, loss_params):
        inner = super().loss_fn(loss_name, loss_params)

        def dying(inputs):
            if self.rank == 1:
                os._exit(3)
            return inner(inputs)
        return dying


def test_a_learner_that_dies_mid_step_fails_the_call_quickly(ray_session, tiny_model_dir):
    spec = _spec(tiny_model_dir, sharding="fsdp", timeout_s=FAULT_TIMEOUT_S)
    batch = _batch(4, seed=6)
    group = LearnerGroup(spec, 2, backend="ray", worker_cls=DiesMidStep)
    try:
        start = time.monotonic()
        with pytest.raises(LearnerGroupError) as failure:
            group.update(batch, "dapo", _params(batch, beta=0.0), 1, 1, 1.0)
        assert time.monotonic() - start < FAULT_TIMEOUT_S
        message = str(failure.value)
        assert "update failed on learner rank(s) [1, 0]" in message  # the dead rank first
        assert "ActorDiedError" in message
        with pytest.raises(LearnerGroupError, match="failed earlier"):
            group.named_weights()
    finally:
        group.close()


def test_more_nodes_than_the_cluster_has_fails_placement_with_a_clear_error(ray_session,
                                                                            tiny_model_dir):
    spec = _spec(tiny_model_dir, sharding="fsdp", timeout_s=3.0)
    start = time.monotonic()
    with pytest.raises(LearnerGroupError, match=r"could not place learners \[1, 1\] per node"):
        LearnerGroup(spec, 2, backend="ray", learners_per_node=[1, 1])
    assert time.monotonic() - start < 20


def test_the_ray_learner_matches_the_in_process_learner_the_trainer_runs(ray_session,
                                                                       tiny_model_dir):
    """Through the protocol the trainer uses (`LearnerProtocol`): `Learner` in this process
    and `GroupLearner` over two FSDP2 ranks give the same results, weights and state."""
    from rlvr.algorithm.losses import PolicyLoss
    from rlvr.distributed.trainer_learner import GroupLearner
    from rlvr.learner import Learner
    from rlvr.models import load_causal_lm

    spec = _spec(tiny_model_dir, sharding="fsdp", with_reference=True, timeout_s=60)
    policy = load_causal_lm(tiny_model_dir)
    local = Learner(policy, Learner.frozen_copy(policy), spec.settings)
    ray_learner = GroupLearner(LearnerGroup(spec, 2, backend="ray"),
                               load_causal_lm(tiny_model_dir))
    try:
        for step in range(2):
            batch = _batch(4, seed=10 + step)
            loss = PolicyLoss("dapo", _params(batch))
            _assert_same_result(ray_learner.update(batch, loss, 2, 1, 1.0),
                                local.update(batch, loss, 2, 1, 1.0))
        local.update_reference(0.5)
        ray_learner.update_reference(0.5)
        want = dict(local.named_weights())
        for name, tensor in ray_learner.named_weights():
            torch.testing.assert_close(tensor, want[name], atol=1e-5, rtol=1e-4, msg=name)
        # One state format: what the Ray ranks saved resumes in this process, and back.
        saved = ray_learner.training_state()
        batch = _batch(3, seed=20)
        loss = PolicyLoss("grpo", LossParams(0.2, 0.28, 0.1, 2, float(batch.num_sequences)))
        want_result = ray_learner.update(batch, loss, 1, 1, 1.0)
        local.load_training_state(saved)
        _assert_same_result(local.update(batch, loss, 1, 1, 1.0), want_result)
        ray_learner.load_training_state(local.training_state())
        batch = _batch(2, seed=21)
        loss = PolicyLoss("dapo", _params(batch))
        _assert_same_result(ray_learner.update(batch, loss, 1, 1, 1.0),
                            local.update(batch, loss, 1, 1, 1.0))
    finally:
        ray_learner.close()


def test_lora_on_two_fsdp_ranks_matches_one_process_and_pushes_merged_weights(
        ray_session, tiny_model_dir, tiny_tokenizer):
    """LoRA wrapped before FSDP2 on two ranks, the reference being the base (adapters off):
    the same results, adapter state and merged weights as one process; and the weights rank 0
    broadcasts to an engine actor are merged, so the engine's logprobs are the learner's."""
    from rlvr.algorithm.losses import PolicyLoss
    from rlvr.distributed.engine_group import EngineGroup
    from rlvr.distributed.trainer_learner import GroupLearner
    from rlvr.learner import Learner
    from rlvr.learner.forward import forward_logprobs
    from rlvr.learner.lora import LoraSettings, wrap_lora
    from rlvr.models import load_causal_lm
    from rlvr.rollout.base import EngineSettings
    from rlvr.types import SamplingParams

    lora = LoraSettings(rank=4, alpha=8.0, init_seed=3)
    spec = _spec(tiny_model_dir, sharding="fsdp", with_reference=True, timeout_s=60, lora=lora)
    local = Learner(wrap_lora(load_causal_lm(tiny_model_dir), lora), None, spec.settings,
                    reference_is_base=True)
    ray_learner = GroupLearner(LearnerGroup(spec, 2, backend="ray"),
                               wrap_lora(load_causal_lm(tiny_model_dir), lora))
    engines = EngineGroup(1, "transformers", tiny_model_dir, EngineSettings(),
                          (tiny_tokenizer.eos_token_id,), tiny_tokenizer.pad_token_id,
                          num_threads=1, cpus_per_engine=1.0, timeout_s=60)
    try:
        for step in range(2):
            batch = _batch(4, seed=30 + step)
            loss = PolicyLoss("dapo", _params(batch))
            _assert_same_result(ray_learner.update(batch, loss, 2, 1, 1.0),
                                local.update(batch, loss, 2, 1, 1.0))
        want = dict(local.named_weights())  # merged, under the base model's names
        got = dict(ray_learner.named_weights())
        assert got.keys() == want.keys()
        for name in want:
            torch.testing.assert_close(got[name], want[name], atol=1e-5, rtol=1e-4, msg=name)
        saved = ray_learner.training_state()
        assert saved["reference"] is None and all(".lora_" in name for name in saved["policy"])
        sync_weights(ray_learner, engines, version=1)
        prompts = [[1, 90, 91, 92, 2, 1, 70], [1, 80, 81, 2, 1, 70]]
        groups = engines.generate(prompts, SamplingParams(n=2, temperature=1.0, max_tokens=8,
                                                          seed=1))
        seqs = [SequenceToPack(prompts[i], c.token_ids_T, c.logprobs_T, 0.0, 2 * i + k)
                for i, g in enumerate(groups) for k, c in enumerate(g)]
        batch = pack_sequences(seqs, pack_length=64)
        with torch.no_grad():
            local_RL, _ = forward_logprobs(local.policy, batch, 1.0)
        mask = batch.response_mask_RL
        torch.testing.assert_close(batch.engine_logprobs_RL[mask], local_RL[mask], atol=1e-4,
                                   rtol=0)
        batch = _batch(3, seed=40)  # what the two ranks saved resumes in this process
        loss = PolicyLoss("dapo", _params(batch))
        want_result = ray_learner.update(batch, loss, 1, 1, 1.0)
        local.load_training_state(saved)
        _assert_same_result(local.update(batch, loss, 1, 1, 1.0), want_result)
        ray_learner.load_training_state(local.training_state())  # and back, broadcast
        batch = _batch(2, seed=41)
        loss = PolicyLoss("dapo", _params(batch))
        _assert_same_result(ray_learner.update(batch, loss, 1, 1, 1.0),
                            local.update(batch, loss, 1, 1, 1.0))
    finally:
        engines.close()
        ray_learner.close()


@pytest.mark.slow
def test_compiled_layers_on_two_fsdp_ranks_match_an_eager_process(ray_session, tiny_model_dir):
    """`model.compile` under FSDP2: each rank compiles its layers' `forward` after sharding, so
    the gather and reshard hooks run around the compiled graph, eager; the results and weights
    are an uncompiled single process's."""
    import dataclasses

    from rlvr.algorithm.losses import PolicyLoss
    from rlvr.distributed.trainer_learner import GroupLearner
    from rlvr.learner import Learner
    from rlvr.models import load_causal_lm

    spec = _spec(tiny_model_dir, sharding="fsdp", timeout_s=120)
    spec = dataclasses.replace(spec, settings=dataclasses.replace(spec.settings,
                                                             compile_backend="aot_eager"))
    policy = load_causal_lm(tiny_model_dir)
    local = Learner(policy, None, dataclasses.replace(spec.settings, compile_backend=None))
    ray_learner = GroupLearner(LearnerGroup(spec, 2, backend="ray"),
                               load_causal_lm(tiny_model_dir))
    try:
        batch = _batch(8, seed=50)
        loss = PolicyLoss("dapo", _params(batch, beta=0.0))
        got, want = ray_learner.update(batch, loss, 1, 1, 1.0), local.update(batch, loss, 1, 1,
                                                                             1.0)
        assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-4)
        for key, value in want.loss_sums.items():
            assert got.loss_sums[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
        want = dict(local.named_weights())
        for name, tensor in ray_learner.named_weights():
            torch.testing.assert_close(tensor, want[name], atol=1e-5, rtol=1e-4, msg=name)
    finally:
        ray_learner.close()
