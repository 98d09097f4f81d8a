"""A user's rollout workflow: answer, then check the answer once, whatever it was.

Name it in a config as `rollout.workflow=examples.workflows.self_check:self_check` (run from the
repository root, or put the module anywhere on the Python path). Its settings come from
`rollout.workflow_args`, here `check_prompt`.

What it shows: an episode is plain async Python over `ctx` (rlvr.workflows.base.EpisodeContext):
- `await ctx.generate(ids, params)` samples; concurrent episodes are batched together;
- `ctx.continuation_ids(messages, new_messages, last_turn)` gives the tokens that add a message
  and open the next assistant turn in the run's chat template;
- `TrajectoryBuilder` joins the model's turns (trained on) and the given tokens (loss mask 0);
- `await ctx.score(prompt, texts)` runs the row's verifiers, `ctx.shape` the reward shaping.
"""

from __future__ import annotations

from rlvr.types import Completion, Prompt
from rlvr.workflows import EpisodeContext, Trajectory, TrajectoryBuilder, gather_samples

CHECK = "Check your answer step by step. Then give your final answer as just the number."


async def self_check(ctx: EpisodeContext, prompt: Prompt) -> list[Trajectory]:
    first_answers = await ctx.generate(prompt.token_ids)  # the group: params.n samples
    # Each sample passes its index on, so that its later turn draws its own seed. If one
    # raises, gather_samples cancels the others (asyncio.gather would leave them running).
    return await gather_samples(_check(ctx, prompt, a, k) for k, a in enumerate(first_answers))


async def _check(ctx: EpisodeContext, prompt: Prompt, answer: Completion,
                 sample: int) -> Trajectory:
    trajectory = TrajectoryBuilder()
    trajectory.add_model(answer)
    if not answer.truncated:  # a turn cut off mid-answer cannot be followed by another
        messages = [*prompt.messages, {"role": "assistant", "content": answer.text}]
        check = {"role": "user", "content": ctx.settings.args.get("check_prompt", CHECK)}
        trajectory.add_given(ctx.continuation_ids(messages, [check], answer))
        (answer,) = await ctx.generate(list(prompt.token_ids) + trajectory.token_ids,
                                       ctx.turn_params(1), sample=sample)
        trajectory.add_model(answer)
    (outcome,) = await ctx.score(prompt, [answer.text])  # the final answer is what counts
    # Shaped on the last turn's text, with every turn's length (the overlong penalty's).
    (reward,) = ctx.shape([outcome.score], [answer], [trajectory.turn_lengths])
    return Trajectory(trajectory.build(ctx.tokenizer), reward, outcome,
                      {"self_check/changed_mean": float(trajectory.model_turns > 1)})
