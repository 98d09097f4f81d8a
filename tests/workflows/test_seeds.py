"""Sampling seeds of multi-turn episodes: each sample of each prompt draws its own stream at
every turn, and the same streams again when the step is replayed (a resumed run)."""

import asyncio

import pytest

from rlvr.producer.groups import RewardShaping
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout.base import AsyncRolloutEngine
from rlvr.rollout.client import EngineClient, current_episode, episode_position
from rlvr.types import SamplingParams
from rlvr.workflows import EpisodeRunner, WorkflowSettings
from rlvr.workflows.multi_turn import multi_turn
from rlvr.workflows.tool_use import tool_use

from tests.workflows.conftest import TurnScriptedEngine
from tests.workflows.test_client import RecordingEngine

TOOL_CALL = "Let me compute.\n```python\nprint(6 * 7)\n```"


class SchedulingEngine(TurnScriptedEngine):
    """The scripted engine behind `agenerate`, as a remote server is: one request at a time,
    its seed taken as given."""

    async def agenerate(self, prompt_ids, params):
        return self.generate([prompt_ids], params)[0]


def _turn_seeds(workflow, tokenizer, prompts, script, **settings):
    engine = SchedulingEngine(tokenizer, script)
    assert isinstance(engine, AsyncRolloutEngine)
    with RewardScorer(num_workers=0) as scorer:
        runner = EpisodeRunner(workflow, engine, scorer, tokenizer,
                               WorkflowSettings(**{"max_turns": 2, **settings}))
        runner.run(prompts, SamplingParams(n=3, max_tokens=64, seed=5), RewardShaping())
        runner.close()
    # Requests after the first turn: one per sample; the scripted answers are the same for
    # every sample, so only the seed can tell the samples' continuations apart.
    return [(tuple(ids), p.seed) for ids, p in engine.requests if p.n == 1]


@pytest.mark.parametrize("workflow, script", [(multi_turn, ["41", "42"]),
                                              (tool_use, [TOOL_CALL, "42"])])
def test_every_sample_of_every_prompt_gets_its_own_seed_after_the_first_turn(
        workflow, script, tiny_tokenizer, chat_prompt):
    prompts = [chat_prompt(i=0), chat_prompt("What is 5 times 8?", "40", i=1)]
    later = _turn_seeds(workflow, tiny_tokenizer, prompts, script)
    assert len(later) == 6  # 2 prompts x 3 samples, one later turn each
    seeds = [seed for _, seed in later]
    assert len(set(seeds)) == 6, "samples of a group share a seed: correlated continuations"
    # Replayed (a resumed run redoes the step): the same request gets the same seed.
    assert sorted(later) == sorted(_turn_seeds(workflow, tiny_tokenizer, prompts, script))


def _submit(client, requests):
    """Episodes asking at once, as the runner starts them: (position, sample, ids, params)."""
    async def one(position, sample, ids, params):
        episode = client.tracker.start()
        current_episode.set(episode)
        episode_position.set(position)
        try:
            return await client.generate(ids, params, sample=sample)
        finally:
            client.tracker.finish(episode)
    async def all_of_them():
        return await asyncio.gather(*(one(*r) for r in requests))
    return asyncio.run(all_of_them())


def test_a_batch_engine_gets_requests_in_sample_order_whatever_order_they_came_in():
    # The order a batch engine sees decides each prompt's seed (seed per index in the call);
    # arrival order depends on how long each sample's tool ran.
    params = SamplingParams(n=1, seed=3)
    engine = RecordingEngine()
    client = EngineClient(engine)
    results = _submit(client, [(1, 0, [10], params), (0, 2, [2], params), (0, 1, [1], params)])
    assert engine.calls[0][0] == [[1], [2], [10]]
    assert [r[0].text for r in results] == ["10.0", "2.0", "1.0"]  # each caller its own answer
    client.close()


def test_later_turn_calls_that_share_a_turn_seed_draw_different_streams():
    # Two samples at the same turn with different token budgets go out as two calls; each is
    # its engine call's prompt 0, so the call's seed must differ or both draw the same stream.
    engine = RecordingEngine()
    client = EngineClient(engine)
    _submit(client, [(0, 0, [1], SamplingParams(n=1, seed=3, max_tokens=8)),
                     (0, 1, [2], SamplingParams(n=1, seed=3, max_tokens=6))])
    assert len(engine.calls) == 2
    assert engine.calls[0][1].seed != engine.calls[1][1].seed
    # A call for whole groups (the first turn) keeps the step's seed: one-turn runs unchanged.
    engine.calls.clear()
    _submit(client, [(1, None, [4], SamplingParams(n=2, seed=3)),
                     (0, None, [3], SamplingParams(n=2, seed=3))])
    assert engine.calls == [([[3], [4]], SamplingParams(n=2, seed=3))]
    client.close()
