"""`multi_turn`: on a wrong answer, tell the model so and let it try again.

Each of the group's samples is its own conversation: answer, score; if it is not right, append
the feedback message (`rollout.feedback`) as a user turn and sample again, up to
`rollout.max_turns` answers. The reward is the last answer's score, discounted by
`rollout.turn_discount` per retry, so a right first answer is worth most (AReaL's
MultiTurnWorkflow), then shaped: the penalties (non-stop, overlong) are not discounted, and
the overlong penalty is the worst turn's. The model's tokens of every turn are trained on; the
feedback and the chat template's turn markers carry loss mask 0. Verifiers that declare `trajectory` see the
conversation so far: every answer and the feedback between them.

An answer cut off by the length limit ends the episode (a retry cannot follow a turn that never
ended), as does running out of `rollout.max_episode_tokens`. An exception in one sample's
conversation cancels its siblings and loses the group (`gather_samples`).
"""

from __future__ import annotations

from rlvr.types import Completion, Prompt
from rlvr.workflows.base import (EpisodeContext, Trajectory, TrajectoryBuilder,
                                 gather_samples, register_workflow)


@register_workflow("multi_turn")
async def multi_turn(ctx: EpisodeContext, prompt: Prompt) -> list[Trajectory]:
    first_turns = await ctx.generate(prompt.token_ids)
    return await gather_samples(_converse(ctx, prompt, c, k)
                                for k, c in enumerate(first_turns))


async def _converse(ctx: EpisodeContext, prompt: Prompt, answer: Completion,
                    sample: int) -> Trajectory:
    s = ctx.settings
    budget = s.max_episode_tokens or ctx.params.max_tokens * s.max_turns
    trajectory = TrajectoryBuilder()
    messages = [dict(m) for m in prompt.messages]
    turn = 0
    while True:
        trajectory.add_model(answer)
        messages.append({"role": "assistant", "content": answer.text})
        outcome = (await ctx.score(prompt, [answer.text],
                                   [messages[len(prompt.messages):]]))[0]
        if outcome.score >= 1.0 or turn + 1 >= s.max_turns or answer.truncated:
            break
        feedback = {"role": "user", "content": s.feedback}
        given = ctx.continuation_ids(messages, [feedback], answer)
        room = budget - len(trajectory.token_ids) - len(given)
        if room < 1:
            break
        messages.append(feedback)
        trajectory.add_given(given)
        turn += 1
        answer = (await ctx.generate(list(prompt.token_ids) + trajectory.token_ids,
                                     ctx.turn_params(turn, min(ctx.params.max_tokens, room)),
                                     sample=sample))[0]
    last = trajectory.last
    # The score is discounted, then shaped: a penalty (cut off, overlong) discounted with it
    # would shrink with every retry spent, so burning retries before a bad end would pay.
    reward = ctx.shape([outcome.score * s.turn_discount ** turn], [last],
                       [trajectory.turn_lengths])[0]
    return Trajectory(trajectory.build(ctx.tokenizer), reward, outcome,
                      {"workflow/turns_mean": float(turn + 1),
                       "workflow/retried_mean": float(turn > 0)})
