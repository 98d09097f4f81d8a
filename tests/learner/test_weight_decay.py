"""AdamW decays weight matrices, not biases or norm weights (`rlvr.learner.weight_decay`)."""

import torch

from rlvr.learner import Learner, LearnerSettings
from rlvr.learner.weight_decay import decay_param_groups, is_decayed


def _settings(**kw):
    base = dict(learning_rate=1e-3, lr_scheduler_type="constant", warm_up_steps=0,
                total_optimizer_steps=10, max_grad_norm=1e9)
    return LearnerSettings(**{**base, **kw})


def _decay_by_name(learner, model):
    rate = {id(p): g["weight_decay"] for g in learner.optimizer.param_groups for p in g["params"]}
    return {name: rate[id(p)] for name, p in model.named_parameters()}


def test_norm_weights_and_biases_are_not_decayed_as_in_open_instruct(tiny_model):
    """open-instruct's grpo_fast builds AdamW from `get_optimizer_grouped_parameters`, whose
    default leaves out every parameter named like a bias or a norm weight; rlvr decayed all of
    them, pulling each RMSNorm gain (neutral at 1) toward 0 at `weight_decay` per step."""
    learner = Learner(tiny_model, None, _settings(weight_decay=0.1))
    rates = _decay_by_name(learner, tiny_model)
    norms = [n for n in rates if "norm" in n]
    assert norms and all(rates[n] == 0.0 for n in norms)
    matrices = [n for n in rates if n.endswith(("proj.weight", "embed_tokens.weight"))]
    assert matrices and all(rates[n] == 0.1 for n in matrices)


def test_the_rule_by_name_and_shape():
    assert not is_decayed("model.layers.0.input_layernorm.weight", torch.ones(4))
    assert not is_decayed("model.norm.weight", torch.ones(4))
    assert not is_decayed("q_proj.bias", torch.ones(4))
    assert not is_decayed("transformer.ln_f.weight", torch.ones(4, 4))  # named: left out
    assert is_decayed("model.layers.0.mlp.up_proj.weight", torch.ones(4, 4))
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    params = list(model.parameters())
    assert decay_param_groups(model, params, 0.0) is params  # no decay: one group, as before
    groups = decay_param_groups(model, params, 0.5)
    assert [len(g["params"]) for g in groups] == [1, 3]  # the Linear's weight; bias, gain, bias
    assert [g["weight_decay"] for g in groups] == [0.5, 0.0]
