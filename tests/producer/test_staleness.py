"""Staleness: versions behind the policy, judged per group by its oldest sample."""

from rlvr.producer.staleness import drop_stale_groups, group_version, staleness_metrics
from rlvr.types import Completion, Prompt, Sample


def _sample(version: int) -> Sample:
    prompt = Prompt(id="p", messages=(), token_ids=(1, 2), ground_truth="1",
                    verifiers=("gsm8k",), source="test")
    return Sample(prompt=prompt, reward=1.0,
                  completion=Completion(token_ids_T=[3], logprobs_T=[-0.1], finish_reason="stop",
                                        text="1", model_version=version))


def test_drop_stale_groups_judges_a_group_by_its_oldest_sample():
    fresh, mixed, old = [_sample(4), _sample(5)], [_sample(2), _sample(5)], [_sample(1)]
    kept, dropped = drop_stale_groups([fresh, mixed, old], policy_version=5, max_staleness=2)
    assert kept == [fresh] and dropped == 2
    assert group_version(mixed) == 2
    kept, dropped = drop_stale_groups([fresh, mixed, old], policy_version=5, max_staleness=3)
    assert kept == [fresh, mixed] and dropped == 1


def test_staleness_metrics_report_versions_and_steps_off_policy():
    m = staleness_metrics([[_sample(3), _sample(5)], [_sample(4)]], policy_version=5)
    assert m["async/model_step_min"] == 3 and m["async/model_step_max"] == 5
    assert m["async/model_step_mean"] == 4 and m["async/num_steps_off_policy"] == 2
    assert staleness_metrics([], policy_version=5) == {}
