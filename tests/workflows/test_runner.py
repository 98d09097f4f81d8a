"""The episode runner: one-turn episodes reproduce the batched path; failures are counted."""

import asyncio
import threading

import pytest
import torch

from rlvr.producer.groups import RewardShaping, generate_and_score
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout.client import BatchCallFailed
from rlvr.types import SamplingParams
from rlvr.workflows import EpisodeRunner, WorkflowSettings, get_workflow
from rlvr.workflows.single_turn import single_turn

from tests.workflows.conftest import TurnScriptedEngine


def _runner(engine, scorer, workflow=single_turn, tokenizer=None, **kw):
    return EpisodeRunner(workflow, engine, scorer, tokenizer, WorkflowSettings(**kw))


def test_single_turn_gives_exactly_what_the_batched_path_gives(tiny_model, tiny_tokenizer,
                                                               chat_prompt):
    from rlvr.rollout.transformers.engine import TransformersEngine

    engine = TransformersEngine(tiny_model, tiny_tokenizer, (2,), 0)
    prompts = [chat_prompt(f"What is {i} plus {i}?", str(2 * i), i=i) for i in range(4)]
    params = SamplingParams(n=3, temperature=1.0, max_tokens=6, seed=11)
    shaping = RewardShaping(non_stop_penalty=True, non_stop_penalty_value=-0.5)
    with RewardScorer(num_workers=0) as scorer:
        before = generate_and_score(engine, scorer, prompts, params, shaping)
        runner = _runner(engine, scorer)
        after, metrics = runner.run(prompts, params, shaping)
        runner.close()
    assert metrics["workflow/errors"] == 0
    for g_before, g_after in zip(before.groups, after.groups, strict=True):
        for a, b in zip(g_before, g_after, strict=True):
            assert a.prompt == b.prompt and a.reward == b.reward
            assert a.completion.token_ids_T == b.completion.token_ids_T
            assert a.completion.logprobs_T == b.completion.logprobs_T
            assert b.completion.loss_mask_T is None  # one engine call: nothing was given


async def failing_on_odd(ctx, prompt):
    if int(prompt.id.split("/")[1]) % 2:
        raise ValueError("my workflow has a bug")
    return await single_turn(ctx, prompt)


async def hanging(ctx, prompt):
    if prompt.id.endswith("/1"):
        await asyncio.sleep(60)
    return await single_turn(ctx, prompt)


async def returns_nothing(ctx, prompt):
    return []


def test_a_raising_or_hanging_episode_loses_its_group_and_is_counted(tiny_tokenizer,
                                                                     chat_prompt):
    engine = TurnScriptedEngine(tiny_tokenizer, ["42"])
    prompts = [chat_prompt(i=i) for i in range(4)]
    params = SamplingParams(n=2)
    with RewardScorer(num_workers=0) as scorer:
        runner = _runner(engine, scorer, failing_on_odd)
        episodes, metrics = runner.run(prompts, params, RewardShaping())
        assert [g[0].prompt.id for g in episodes.groups] == ["q/0", "q/2"]
        assert metrics["workflow/errors"] == 2
        runner.close()
        runner = EpisodeRunner(hanging, engine, scorer, None, WorkflowSettings(),
                               episode_timeout_s=1.0, max_batch_wait_s=0.1)
        episodes, metrics = runner.run(prompts, params, RewardShaping())
        assert len(episodes.groups) == 3 and metrics["workflow/timeouts"] == 1
        runner.close()


def test_a_step_where_every_episode_fails_stops_the_run(tiny_tokenizer, chat_prompt):
    engine = TurnScriptedEngine(tiny_tokenizer, ["42"])
    with RewardScorer(num_workers=0) as scorer:
        runner = _runner(engine, scorer, returns_nothing)
        with pytest.raises(RuntimeError, match="every episode of the step failed"):
            runner.run([chat_prompt()], SamplingParams(n=2), RewardShaping())
        runner.close()


def test_an_engine_failure_is_not_an_episode_failure(tiny_tokenizer, chat_prompt):
    class Broken(TurnScriptedEngine):
        def generate(self, prompts, params):
            raise RuntimeError("CUDA error: device-side assert")

    with RewardScorer(num_workers=0) as scorer:
        runner = _runner(Broken(tiny_tokenizer, ["1"]), scorer)
        with pytest.raises(BatchCallFailed, match="device-side assert"):
            runner.run([chat_prompt(i=i) for i in range(3)], SamplingParams(n=2),
                       RewardShaping())
        runner.close()


def test_the_engine_decodes_on_the_thread_that_runs_the_step(tiny_tokenizer, chat_prompt):
    """Not on a thread of its own: torch's OpenMP team is per thread, and a second one slows
    the learner and the engine alike (rlvr.rollout.client.CallerThreadExecutor)."""
    class Recording(TurnScriptedEngine):
        threads = set()

        def generate(self, prompts, params):
            self.threads.add(threading.get_ident())
            return super().generate(prompts, params)

    from rlvr.workflows.multi_turn import multi_turn

    engine = Recording(tiny_tokenizer, ["5", "42"])
    with RewardScorer(num_workers=0) as scorer:
        runner = _runner(engine, scorer, multi_turn, tiny_tokenizer, max_turns=2)
        runner.run([chat_prompt(i=i) for i in range(3)], SamplingParams(n=2, max_tokens=64),
                   RewardShaping())  # two turns: two engine batches
        elsewhere = []
        worker = threading.Thread(target=lambda: elsewhere.append(runner.run(
            [chat_prompt()], SamplingParams(n=2, max_tokens=64), RewardShaping())))
        worker.start()
        worker.join()
        runner.close()
    # 3 first turns and 6 second ones, then 1 and 2: every turn was answered.
    assert len(engine.requests) == 3 + 6 + 1 + 2 and elsewhere
    assert engine.threads == {threading.get_ident(), worker.ident}


def test_a_users_workflow_is_named_by_module_and_function():
    assert get_workflow("tests.workflows.test_runner:hanging") is hanging
    with pytest.raises(KeyError, match="not an async function"):
        get_workflow("tests.workflows.test_runner:_runner")
    with pytest.raises(KeyError, match="known: multi_turn, single_turn, tool_use"):
        get_workflow("nope")


def test_trajectories_of_any_length_pack_and_train(tiny_model, tiny_tokenizer, chat_prompt):
    """A two-turn trajectory goes through batching and packing like a one-turn sample; its
    given tokens are in the sequence (attended to) but out of the response mask."""
    from rlvr.producer.training_batch import BatchSettings, build_training_batch
    from rlvr.workflows.multi_turn import multi_turn

    engine = TurnScriptedEngine(tiny_tokenizer, ["5", "42"])
    with RewardScorer(num_workers=0) as scorer:
        runner = _runner(engine, scorer, multi_turn, tiny_tokenizer, max_turns=2,
                         turn_discount=0.5)
        episodes, _ = runner.run([chat_prompt(), chat_prompt("2+2?", "4", i=1)],
                                 SamplingParams(n=2, max_tokens=64), RewardShaping())
        runner.close()
    built = build_training_batch(episodes.groups, BatchSettings(
        "centered", filter_zero_std_samples=False, pack_length=256, pad_token_id=0))
    batch = built.batch
    masks = [s.completion.loss_mask_T for g in episodes.groups for s in g]
    assert batch.num_response_tokens == sum(sum(m) for m in masks)
    # Each group's prompt once, then every token of its trajectories, given ones included.
    assert batch.num_tokens == sum(len(g[0].prompt.token_ids) + sum(
        len(s.completion.token_ids_T) for s in g) for g in episodes.groups)
    ids = batch.input_ids_RL[batch.segment_ids_RL >= 0]
    assert (tiny_tokenizer.encode("Your answer is incorrect", add_special_tokens=False)[0]
            in ids.tolist())
    assert torch.all(batch.predictor_pos_RL[batch.response_mask_RL] >= 0)


def test_the_example_workflow_runs(tiny_tokenizer, chat_prompt):
    workflow = get_workflow("examples.workflows.self_check:self_check")
    engine = TurnScriptedEngine(tiny_tokenizer, ["41", "42"])
    with RewardScorer(num_workers=0) as scorer:
        runner = _runner(engine, scorer, workflow, tiny_tokenizer)
        episodes, metrics = runner.run([chat_prompt()], SamplingParams(n=2, max_tokens=32),
                                       RewardShaping())
        runner.close()
    sample = episodes.groups[0][0]
    assert sample.reward == 1.0 and metrics["self_check/changed_mean"] == 1.0
    assert 0 in sample.completion.loss_mask_T
