"""Dropout off in models that read their rates from the config inside `forward`: two
train-mode passes over the same tokens must give the same logits."""

import pytest
import torch

from rlvr.learner.dropout import disable_dropout


def _falcon():
    from transformers import FalconConfig, FalconForCausalLM

    return FalconForCausalLM(FalconConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2,
                                          num_attention_heads=2, attention_dropout=0.3,
                                          hidden_dropout=0.3))


def _gpt_neo():
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    return GPTNeoForCausalLM(GPTNeoConfig(vocab_size=64, hidden_size=16, num_layers=2,
                                          num_heads=2, intermediate_size=32,
                                          attention_types=[[["global", "local"], 1]],
                                          window_size=8, max_position_embeddings=32,
                                          attention_dropout=0.3, resid_dropout=0.3,
                                          embed_dropout=0.3))


def _persimmon():
    from transformers import PersimmonConfig, PersimmonForCausalLM

    return PersimmonForCausalLM(PersimmonConfig(vocab_size=64, hidden_size=16,
                                                intermediate_size=32, num_hidden_layers=2,
                                                num_attention_heads=2, attention_dropout=0.3,
                                                hidden_dropout=0.3))


@pytest.mark.parametrize("make", [_falcon, _gpt_neo, _persimmon],
                         ids=["falcon", "gpt_neo", "persimmon"])
def test_two_train_mode_passes_agree_once_dropout_is_off(make):
    torch.manual_seed(0)
    model = make()
    assert disable_dropout(model) > 0
    model.train()
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        first, second = model(ids).logits, model(ids).logits
    assert torch.equal(first, second), f"{(first - second).abs().max():.3f} apart"
    # What forward reads from the config: GPT-Neo's flash-attention path (a GPU's) reads
    # `config.attention_dropout`, which the CPU passes above do not reach.
    rates = {k: v for k, v in vars(model.config).items() if "dropout" in k and v is not None}
    assert rates and all(v == 0.0 for v in rates.values()), rates


def test_rates_in_nested_configs_are_zeroed_and_other_numbers_are_not():
    from transformers import PretrainedConfig

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = PretrainedConfig(
                attention_dropout=0.1, resid_pdrop=0.2, attention_probs_dropout_prob=0.1,
                drop_path_rate=0.05, encoder_layerdrop=0.1, classifier_dropout=None,
                hidden_size=16, rope_theta=10000.0, layer_norm_eps=1e-5, use_dropout=True,
                text_config=PretrainedConfig(hidden_dropout=0.2, initializer_range=0.02))

    model = Wrapper()
    assert disable_dropout(model) == 6
    c = model.config
    assert (c.attention_dropout, c.resid_pdrop, c.attention_probs_dropout_prob,
            c.drop_path_rate, c.encoder_layerdrop, c.text_config.hidden_dropout) == (0.0,) * 6
    assert c.classifier_dropout is None and c.use_dropout is True
    assert (c.hidden_size, c.rope_theta, c.layer_norm_eps) == (16, 10000.0, 1e-5)
    assert c.text_config.initializer_range == 0.02
