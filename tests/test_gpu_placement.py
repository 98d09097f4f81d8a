"""Where learner ranks compute on GPUs, checked on CPU with a faked CUDA runtime: a rank never
shares a GPU with another (NCCL would refuse it at its first collective, "Duplicate GPU
detected", after the model loaded), and the packing layout each device's learner gets."""

from __future__ import annotations

import pytest
import torch

import rlvr.device
from rlvr.config import load_config
from rlvr.device import DeviceUnavailable, resolve_device


@pytest.fixture
def one_gpu(monkeypatch):
    """A process that sees one CUDA device (and nothing else of CUDA is asked)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_a_second_local_rank_on_one_gpu_fails_with_the_counts(one_gpu):
    assert resolve_device("cuda", 0).torch == torch.device("cuda", 0)
    with pytest.raises(DeviceUnavailable, match=r"local rank 1 needs a GPU of its own, but this "
                                                r"process sees 1 .*2 or more learner ranks on "
                                                r"this node for 1 GPU"):
        resolve_device("cuda", 1)


def test_a_gpu_given_by_the_launcher_serves_any_rank(one_gpu, monkeypatch):
    # Ray or Slurm shows each process the one GPU it gave it: index 0 whatever the rank.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert resolve_device("cuda", 5).torch == torch.device("cuda", 0)


def test_ranks_beyond_the_gpus_of_a_node_fail(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert resolve_device("cuda", 1).torch == torch.device("cuda", 1)
    with pytest.raises(DeviceUnavailable, match="3 or more learner ranks on this node for 2"):
        resolve_device("cuda", 2)


def test_ranks_sharing_a_gpu_are_named():
    from rlvr.device import shared_gpus_message

    assert shared_gpus_message(["a/GPU-1", "a/GPU-2", "b/GPU-1"]) is None  # hosts differ
    message = shared_gpus_message(["a/GPU-1", "a/GPU-1", "a/GPU-2", "a/GPU-1"])
    assert message.startswith("4 learner ranks would compute on 2 GPU(s) (ranks 0, 1, 3 on "
                              "a/GPU-1)")
    assert "one GPU per rank" in message


@pytest.mark.parametrize("device, expected", [("cpu", ("sdpa", True)),
                                              ("cuda", ("varlen", False))])
def test_the_plan_gives_each_device_its_attention_and_packing(monkeypatch, one_gpu, device,
                                                               expected):
    from rlvr.run.build import driver_layout, plan_devices

    cfg = load_config(None, [f"model.device={device}"])
    plan = plan_devices(cfg, None)
    assert (plan.attention, plan.share_prompts) == expected
    layout = driver_layout(cfg)  # the policy loaded here trains here: the same layout
    assert (layout.attention, layout.share_prompts) == expected
    assert f"attention {expected[0]}" in plan.describe()


def test_share_prompts_true_picks_an_attention_that_can(one_gpu):
    from rlvr.run.build import plan_devices

    plan = plan_devices(load_config(None, ["model.device=cuda",
                                           "algorithm.share_prompts=true"]), None)
    assert (plan.attention, plan.share_prompts) == ("sdpa", True)


def test_shared_prompts_with_whole_sequence_attention_are_refused_by_the_config_checks():
    from rlvr.config import ConfigError

    with pytest.raises(ConfigError, match="algorithm.share_prompts=true packs responses"):
        load_config(None, ["model.attn_implementation=varlen", "algorithm.share_prompts=true"])
    load_config(None, ["model.attn_implementation=varlen", "algorithm.share_prompts=false"])


def test_the_trainer_packs_as_the_plan_says(tiny_tokenizer):
    """`BatchSettings.share_prompts` reaches the packing: whole sequences, one unit each."""
    from rlvr.producer.training_batch import BatchSettings, build_training_batch
    from tests.test_device import _groups

    for share, units in ((True, 1), (False, 12)):  # 3 groups of 4 with one prompt
        batch = build_training_batch(_groups(), BatchSettings("standard", False, 64, 0,
                                                              share_prompts=share)).batch
        assert sum(map(len, batch.seq_lens_per_row)) == units


def test_a_run_with_varlen_attention_packs_whole_sequences_and_trains(tmp_path, monkeypatch):
    """The layout travels from the config through the device plan to the packing and the
    learner's model: varlen attention, each sequence whole, on CPU (sdpa per sequence)."""
    import os

    import rlvr.producer.training_batch as training_batch
    from rlvr.run.loop import train

    layouts = []
    pack = training_batch.pack_sequences

    def recording_pack(*args, **kwargs):
        layouts.append(kwargs["share_prompts"])
        return pack(*args, **kwargs)

    monkeypatch.setattr(training_batch, "pack_sequences", recording_pack)
    root = os.path.join(os.path.dirname(__file__), "..")
    cfg = load_config(os.path.join(root, "configs", "tiny.yaml"), [
        f"experiment.output_dir={tmp_path}", "experiment.total_episodes=32",
        "model.attn_implementation=varlen", "algorithm.filter_zero_std_samples=false",
        "eval.local_eval_every=0", "logging.progress_bar=false", "checkpoint.save_final=false"])
    run = train(cfg)
    assert (run.devices.attention, run.devices.share_prompts) == ("varlen", False)
    assert run.learner.policy.config._attn_implementation == "rlvr_varlen"
    assert layouts == [False, False]
    assert [r["training_step"] for r in run.history if "loss/policy_avg" in r] == [1, 2]


def test_more_local_ranks_than_gpus_fail_at_start_with_the_counts(one_gpu):
    """The local launcher with two learner ranks on a machine of one GPU: refused when the run
    is planned, before any rank starts (NCCL: "Duplicate GPU detected", after the load)."""
    from rlvr.run.build import plan_devices
    from rlvr.config import ConfigError

    cfg = load_config(None, ["model.device=cuda", "distributed.num_learners_per_node=[2]"])
    with pytest.raises(ConfigError, match=r"starts 2 learner ranks on this machine, which has "
                                          r"1 GPU\(s\): NCCL needs one GPU per rank"):
        plan_devices(cfg, None)
    plan_devices(load_config(None, ["model.device=cpu",
                                    "distributed.num_learners_per_node=[2]"]), None)
