"""The `eval` section: n samples, pass@k, sampling settings, named eval sets; bad values fail
before any model loads, naming the fields."""

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.run.input_checks import check_registered_names


def test_defaults_are_one_greedy_sample_and_pass_at_1():
    cfg = load_config("configs/tiny.yaml")
    ev = cfg.eval
    assert (ev.num_samples, ev.pass_at_k, ev.temperature, ev.top_p) == (1, [1], 0.0, 1.0)
    assert ev.response_length is None and cfg.eval_response_length == cfg.rollout.response_length


def test_sampled_eval_settings_load():
    cfg = load_config("configs/tiny.yaml", ["eval.num_samples=8", "eval.pass_at_k=[1,4,8]",
                                            "eval.temperature=0.6", "eval.top_p=0.95",
                                            "eval.response_length=32"])
    assert cfg.eval.pass_at_k == [1, 4, 8] and cfg.eval_response_length == 32


@pytest.mark.parametrize("overrides, named", [
    (["eval.num_samples=4", "eval.temperature=1.0", "eval.pass_at_k=[1,8]"],
     ["eval.pass_at_k", "k=8", "eval.num_samples=4"]),
    (["eval.pass_at_k=[0]"], ["eval.pass_at_k[0]=0 must be >= 1"]),
    (["eval.pass_at_k=[]"], ["eval.pass_at_k"]),
    (["eval.num_samples=0"], ["eval.num_samples=0"]),
    (["eval.num_samples=4"], ["eval.temperature=0", "eval.num_samples=4", "greedy"]),
    (["eval.temperature=-1"], ["eval.temperature=-1"]),
    (["eval.top_p=0"], ["eval.top_p=0"]),
    (["eval.response_length=0"], ["eval.response_length=0"]),
    (["eval.max_prompts=0"], ["eval.max_prompts=0"]),
    (["data.eval=[{name: addition}, {name: addition, split: test}]"],
     ["data.eval[0]", "data.eval[1]", "'addition'", "label"]),
    (["data.eval=[{name: addition, label: a/b}]"], ["data.eval[0].label"]),
    (["data.train=[{name: addition, label: ''}]"], ["data.train[0].label"]),
    (["rollout.engine=vllm", "rollout.vllm.max_model_len=256", "eval.response_length=200"],
     ["rollout.vllm.max_model_len=256", "eval.response_length"]),
])
def test_bad_eval_settings_name_their_fields(overrides, named):
    with pytest.raises(ConfigError) as e:  # the engine's own checks run at start with these
        check_registered_names(load_config("configs/tiny.yaml", overrides))
    for text in named:
        assert text in str(e.value)


def test_labels_tell_two_sources_of_one_name_apart():
    cfg = load_config("configs/tiny.yaml", [
        "data.eval=[{name: addition}, {name: addition, split: test, label: addition_test}]"])
    assert [s.display_name for s in cfg.data.eval] == ["addition", "addition_test"]
