"""The FLOPs of an update over a packed batch (`update_flops`), worked out by hand on a model
small enough to count, and the GPU peaks MFU divides by."""

from __future__ import annotations

import pytest
import torch

from rlvr.algorithm.packing import SequenceToPack, pack_sequences


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    # Per layer: q 16x16, k and v 16x8 (one key head of 8), o 16x16, gate and up 16x32, down
    # 32x16, two norms of 16: 256 + 128 + 128 + 256 + 512 + 512 + 512 + 32 = 2,336 weights.
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                        num_hidden_layers=2, num_attention_heads=2,
                                        num_key_value_heads=1, tie_word_embeddings=False))


SEQS = [SequenceToPack([5, 6, 7], [8, 9], [0.0, 0.0], 1.0, 0),
        SequenceToPack([5, 6, 7], [10], [0.0], 1.0, 1)]


def test_update_flops_of_shared_and_whole_sequences():
    from rlvr.metrics.throughput import decoder_weight_count, update_flops

    model = _model()
    assert decoder_weight_count(model) == 2 * 2336
    shared = update_flops(model, pack_sequences(SEQS, 16))
    # 6 tokens run (the prompt once); 3 response tokens through the 64x16 head; positions
    # 0 1 2 | 3 4 | 3 attend 1+2+3 + 4+5 + 4 = 19 keys, over 2 layers of 2 heads x 8.
    assert shared.decoder == 6 * 4672 * 6
    assert shared.head == 6 * 1024 * 3
    assert shared.attention == 12 * 2 * 16 * 19
    whole = update_flops(model, pack_sequences(SEQS, 16, share_prompts=False))
    # 9 tokens; positions 0-4 and 0-3 attend 15 + 10 keys; the head's work is the same.
    assert (whole.decoder, whole.head, whole.attention) == (6 * 4672 * 9, 6 * 1024 * 3,
                                                            12 * 2 * 16 * 25)
    assert whole.total == whole.decoder + whole.head + whole.attention


def test_padding_is_not_counted():
    from rlvr.metrics.throughput import update_flops

    model = _model()
    # pack_length 5: one sequence per row, the second row padded by one slot
    padded = pack_sequences(SEQS, 5, share_prompts=False)
    assert padded.input_ids_RL.shape == (2, 5)
    whole = update_flops(model, padded)
    assert whole.attention == 12 * 2 * 16 * 25 and whole.decoder == 6 * 4672 * 9


@pytest.mark.parametrize("name, peak", [("NVIDIA H100 80GB HBM3", 989e12),
                                        ("NVIDIA H100 PCIe", 756e12),
                                        ("NVIDIA H200", 989e12),
                                        ("NVIDIA A100-SXM4-80GB", 312e12),
                                        ("Tesla T4", None)])
def test_datasheet_peaks(name, peak):
    from rlvr.metrics.throughput import datasheet_peak_flops

    assert datasheet_peak_flops(name) == peak


def test_the_matmul_probe_runs_on_the_device_it_is_given():
    from rlvr.metrics.throughput import measure_matmul_flops

    flops = measure_matmul_flops(torch.float32, size=128, seconds=0.02,
                                 device=torch.device("cpu"))
    assert 1e6 < flops < 1e15
