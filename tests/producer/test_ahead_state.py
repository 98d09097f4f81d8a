"""What an asynchronous run's training state holds of the producer: the batches made ahead (as
JSON, back to equal records) and the mark where the next batch starts; a producer handed them
back gives them out first."""

import json
import math
import threading
import time

import pytest

from rlvr.producer.ahead import Produced, RolloutProducer
from rlvr.producer.ahead_state import ahead_from_json, ahead_to_json
from rlvr.producer.groups import Episodes
from rlvr.types import Completion, Prompt, RewardOutcome, Sample


def _batch(step: int) -> Produced:
    prompt = Prompt(id=f"addition/{step}", messages=({"role": "user", "content": "1 + 1?"},),
                    token_ids=(1, 2, 3), ground_truth="2", verifiers=("math",),
                    source="addition", metadata_json='{"level": 1}')
    group = [Sample(prompt=prompt, reward=1.0 / (k + 1), advantage=0.1 * k,
                    completion=Completion(token_ids_T=[5, 6 + k], logprobs_T=[-0.1 / 3, -1e-9],
                                          finish_reason="stop", text="2", model_version=step,
                                          loss_mask_T=[1, 0], versions_T=[step, step + 1]))
             for k in range(2)]
    outcomes = [RewardOutcome(score=1.0, per_verifier={"math": 1.0}),
                RewardOutcome(score=0.0, error="ValueError: x", timed_out=True)]
    metrics = {"objective/verifiable_reward": 0.5, "val/odd": math.nan}
    return Produced((Episodes(groups=[group], outcomes=[outcomes]), metrics), 1.25,
                    mark={"positions": [step], "rng": [3, [1, 2], None]})


def test_batches_made_ahead_round_trip_through_json_exactly():
    batches = [_batch(3), _batch(4)]
    text = ahead_to_json(batches)
    json.loads(text)  # plain JSON (NaN aside, which Python reads back)
    back = ahead_from_json(text)
    for got, want in zip(back, batches):
        (got_eps, got_metrics), (want_eps, want_metrics) = got.item, want.item
        assert got_eps.groups == want_eps.groups and got_eps.outcomes == want_eps.outcomes
        assert got_eps.groups[0][0].prompt is got_eps.groups[0][1].prompt  # one prompt a group
        assert got_metrics.keys() == want_metrics.keys() and math.isnan(got_metrics["val/odd"])
        assert (got.seconds, got.mark) == (want.seconds, want.mark)


def test_a_state_of_another_layout_is_refused():
    data = json.loads(ahead_to_json([_batch(1)]))
    data[0]["groups"][0]["outcomes"][0]["surprise"] = 1
    with pytest.raises(ValueError, match="surprise"):
        ahead_from_json(json.dumps(data))
    data[0]["format"] = 99
    with pytest.raises(ValueError, match="format 99"):
        ahead_from_json(json.dumps(data))


def test_ahead_waits_for_the_batch_in_the_making_and_marks_the_next():
    counter = {"drawn": 0}
    release = threading.Event()

    def produce():
        counter["drawn"] += 1
        n = counter["drawn"]
        if n == 2:
            release.wait(5)  # the second batch is still being made when `ahead` is asked
        return n

    with RolloutProducer(produce, async_steps=2, mark=lambda: dict(counter)) as producer:
        first, _ = producer.next_batch()
        assert first.item == 1 and first.mark == {"drawn": 0}
        deadline = time.monotonic() + 5
        while counter["drawn"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        ahead = producer.ahead(wait=False)  # not waiting: batch 2 is lost, its mark kept
        assert (ahead.made, ahead.mark, ahead.complete) == ([], {"drawn": 1}, False)
        release.set()
        ahead = producer.ahead(wait=True)
        assert [p.item for p in ahead.made] == [2, 3] and ahead.complete
        assert ahead.mark == {"drawn": 3}  # the next batch would draw after both


def test_a_resumed_producer_hands_out_the_batches_made_before_first():
    made = [Produced("old 4", 0.5, {"drawn": 3})]
    items = iter(["new 5", "new 6"])
    with RolloutProducer(lambda: next(items), async_steps=1, made=made) as producer:
        assert producer.next_batch()[0].item == "old 4"
        assert producer.next_batch()[0].item == "new 5"
    with pytest.raises(ValueError, match="more than async_steps"):
        RolloutProducer(lambda: None, async_steps=1, made=made * 2)
