"""The data-preparation actor: scored groups from engine actors, its mixer state in and out,
and an engine failure surfacing as a clear error in the trainer's process."""

from __future__ import annotations

import pytest

from rlvr.rewards.scorer import ScorerSettings
from rlvr.rollout.base import EngineSettings
from rlvr.data.mixer import PromptMixer
from rlvr.distributed.data_prep import DataPrepActor, DataPrepError
from rlvr.distributed.engine_group import EngineGroup
from rlvr.producer.source import SourceSettings
from rlvr.producer.groups import RewardShaping
from rlvr.producer.prompt_selection import ActiveSampling
from rlvr.types import Prompt, SamplingParams

SETTINGS = SourceSettings(prompts_per_step=3, sampling=SamplingParams(n=2, max_tokens=4, seed=1),
                          shaping=RewardShaping(), active=ActiveSampling())
SCORER = ScorerSettings(num_workers=1, timeout_s=10.0, aggregator="last")


def _mixer() -> PromptMixer:
    prompts = [Prompt(id=f"toy/{i}", messages=({"role": "user", "content": str(i)},),
                      token_ids=(5 + i, 17, 33), ground_truth=str(i), verifiers=("last_number",),
                      source="toy") for i in range(8)]
    return PromptMixer([("toy", prompts, 1.0)], seed=0)


@pytest.fixture
def engines(ray_session, tiny_model_dir, tiny_tokenizer):
    group = EngineGroup(1, "transformers", tiny_model_dir, EngineSettings(),
                        (tiny_tokenizer.eos_token_id,), tiny_tokenizer.pad_token_id,
                        num_threads=1, timeout_s=60)
    yield group
    group.close()


def test_the_actor_produces_scored_groups_and_keeps_the_mixer_position(engines):
    actor = DataPrepActor(_mixer(), engines, SETTINGS, SCORER, timeout_s=60)
    try:
        episodes, metrics = actor.produce(1)
        assert len(episodes.groups) == 3 and all(len(g) == 2 for g in episodes.groups)
        assert "time/generation" in metrics and "batch/prompts_sampled" in metrics
        state = actor.mixer_state()
        after = [g[0].prompt.id for g in actor.produce(2)[0].groups]
        actor.load_mixer_state(state)  # back to where step 2 started: the same prompts again
        assert [g[0].prompt.id for g in actor.produce(2)[0].groups] == after
    finally:
        actor.close()


def test_an_engine_failure_reaches_the_trainer_as_a_data_prep_error(engines, ray_session):
    actor = DataPrepActor(_mixer(), engines, SETTINGS, SCORER, timeout_s=60)
    ray_session.kill(engines.actors[0], no_restart=True)
    with pytest.raises(DataPrepError, match=r"(?s)producing step 1.*generate failed on engine actor 0"):
        actor.produce(1)
    with pytest.raises(DataPrepError, match="closed"):
        actor.produce(2)
