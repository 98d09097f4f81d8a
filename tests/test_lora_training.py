"""LoRA end to end on configs/tiny.yaml (beta > 0): no reference copy is made, the engine
samples from the merged weights, checkpoints hold the adapter, `rlvr merge` and `rlvr generate`
take them, a target matching nothing fails before training, and a stopped run resumes exactly."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.config import ConfigError, load_config
from rlvr.learner import Learner
from rlvr.run.loop import train
from tests.certain_reward import REMAP

# REMAP: rewards that differ within every group, so each step's update moves the adapter away
# from the base (the tiny model's own answers earn none on some RNG streams, CUDA's among them).
LORA = ["model.lora.rank=4", "model.lora.alpha=8", "algorithm.filter_zero_std_samples=false",
        "eval.local_eval_every=0", "eval.eval_at_start=false", "logging.progress_bar=false",
        "checkpoint.checkpoint_state_freq=1", "optimizer.lr_scheduler_type=constant",
        "optimizer.learning_rate=1e-2", "model.num_threads=1", "model.bf16_autocast=false", REMAP]
TIMING = ("time/", "learner_tokens_per_second_step", "learner_mfu", "memory/")


def _no_reference_copy(policy):
    raise AssertionError("a LoRA run must not copy the model for its reference")


def _train(out, *extra):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Learner, "frozen_copy", staticmethod(_no_reference_copy))
        return train(load_config("configs/tiny.yaml", [f"experiment.output_dir={out}", *LORA,
                                                       *extra]))


def _steps(run) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(TIMING)}
            for r in run.history if r["training_step"] > 0]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("lora") / "straight"
    return out, _train(out)


def test_a_lora_run_with_kl_trains_from_its_base_and_saves_the_adapter(straight):
    out, run = straight
    steps = _steps(run)
    assert len(steps) == 3 and run.cfg.algorithm.beta > 0
    assert all(s["objective/kl2_avg"] >= 0 for s in steps) and steps[-1]["objective/kl2_avg"] > 0
    # The engine sampled each later step from the merged weights the learner had.
    assert all(s["debug/engine_vs_local_logprob_diff_max"] < 1e-4 for s in steps)
    for directory in (out / "final", out / "checkpoints" / "step_000002"):
        assert (directory / "adapter_model.safetensors").is_file()
        assert not (directory / "model.safetensors").exists()
        assert json.loads((directory / "adapter_config.json").read_text())[
            "base_model_name_or_path"] == "tiny-llama"
    adapter = load_file(out / "final" / "adapter_model.safetensors")
    assert adapter and all(".lora_" in name for name in adapter)
    state = load_file(out / "state" / "step_000003" / "policy.safetensors")
    assert all(".lora_" in name for name in state)  # the state holds no copy of the base
    assert not (out / "state" / "step_000003" / "reference.safetensors").exists()


def test_merge_writes_a_plain_model_that_generate_and_the_learner_agree_on(straight, tmp_path,
                                                                          capsys):
    from rlvr.checkpoint.adapters import load_adapter_checkpoint
    from rlvr.learner.lora import engine_weights
    from rlvr.models import load_causal_lm

    out, _ = straight
    merged_dir = tmp_path / "merged"
    assert main(["merge", str(out / "final"), str(merged_dir)]) == 0
    merged = load_causal_lm(str(merged_dir))
    adapted = load_adapter_checkpoint(out / "final")
    want = dict(engine_weights(adapted))
    got = merged.state_dict()
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, atol=1e-6, rtol=0, msg=name)
    ids = torch.tensor([[1, 90, 91, 92, 2, 1, 70]])
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, adapted(input_ids=ids).logits,
                                   atol=1e-5, rtol=0)
    capsys.readouterr()
    printed = []
    for model in (merged_dir, out / "final"):  # a plain model, and the adapter merged on the fly
        assert main(["generate", str(model), "--prompt", "1+1", "--max-tokens", "4"]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] and "4 tokens" in printed[0]
    assert main(["merge", str(merged_dir), str(tmp_path / "again")]) == 2  # not an adapter
    with pytest.raises(FileNotFoundError, match="holds a LoRA adapter.*rlvr merge"):
        load_causal_lm(str(out / "final"))  # what an engine would load: told to merge first


def test_steps_1_2_a_stop_and_a_resume_give_step_3_exactly(straight, tmp_path):
    out, run = straight
    split = tmp_path / "split"
    _train(split, "experiment.total_episodes=32")  # steps 1-2, then the process "stops"
    resumed = _train(split)
    assert resumed.start_step == 2
    [mine], ref = _steps(resumed), _steps(run)[-1]
    assert mine == ref
    ours = load_file(split / "final" / "adapter_model.safetensors")
    theirs = load_file(out / "final" / "adapter_model.safetensors")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_a_target_matching_no_module_fails_before_training(tmp_path):
    with pytest.raises(ConfigError, match=r"\['qkv'\] match\(es\) no linear layer.*'q_proj'"):
        _train(tmp_path, "model.lora.target_modules=[q_proj,qkv]")
