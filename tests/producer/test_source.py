"""The episode source: a step's scored groups, seeded by the step, with the mixer's state."""

from rlvr.data.mixer import PromptMixer
from rlvr.producer.groups import RewardShaping
from rlvr.producer.prompt_selection import ActiveSampling
from rlvr.producer.source import EpisodeSource, SourceSettings
from rlvr.rewards.scorer import RewardScorer
from rlvr.types import Completion, Prompt, SamplingParams


class RecordingEngine:
    def __init__(self):
        self.seeds = []

    def generate(self, prompts, params):
        self.seeds.append(params.seed)
        return [[Completion([5], [-0.1], "stop", "1")] * params.n for _ in prompts]


def _source(engine, scorer):
    prompts = [Prompt(id=f"p/{i}", messages=(), token_ids=(i,), ground_truth="1",
                      verifiers=("last_number",), source="p") for i in range(6)]
    mixer = PromptMixer([("p", prompts, 1.0)], seed=0, shuffle=False)
    settings = SourceSettings(prompts_per_step=2, sampling=SamplingParams(n=2, seed=3),
                              shaping=RewardShaping(), active=ActiveSampling())
    return EpisodeSource(mixer, engine, scorer, settings)


def test_each_step_has_its_own_reproducible_seed_and_next_prompts():
    engine = RecordingEngine()
    with RewardScorer(num_workers=0) as scorer:
        source = _source(engine, scorer)
        first, metrics = source.produce(1)
        second, _ = source.produce(2)
        assert "time/generation" in metrics and metrics["objective/verifiable_reward"] == 1.0
        assert [g[0].prompt.id for g in first.groups] == ["p/0", "p/1"]
        assert [g[0].prompt.id for g in second.groups] == ["p/2", "p/3"]
        again = RecordingEngine()
        _source(again, scorer).produce(1)
    assert engine.seeds[0] != engine.seeds[1] and again.seeds[0] == engine.seeds[0]


def test_the_mixer_position_round_trips_through_the_source():
    with RewardScorer(num_workers=0) as scorer:
        source = _source(RecordingEngine(), scorer)
        source.produce(1)
        state = source.mixer_state()
        expected = [g[0].prompt.id for g in source.produce(2)[0].groups]
        resumed = _source(RecordingEngine(), scorer)
        resumed.load_mixer_state(state)
        assert [g[0].prompt.id for g in resumed.produce(2)[0].groups] == expected
