"""`tool_use`: the model may run Python while it answers.

Each sample of the group is its own conversation. A model turn that ends with a tool call
(`rlvr.workflows.tools`) has the code run in the sandbox; its output comes back as a `tool`
message and the model continues in a new assistant turn. The episode ends at a turn that is an
answer, at `rollout.max_turns` turns, after `rollout.max_tool_calls` calls, when a turn is cut
off by the length limit, or when `rollout.max_episode_tokens` runs out; the last turn is scored.
Tool errors, timeouts and unreadable calls go back to the model as the tool's output and are
counted (`tools/calls`, `tools/errors`, `tools/timeouts`, `tools/malformed`, summed over the
step; `tools/turns_mean`, `tools/used_mean` averaged over trajectories). Verifiers that declare
`trajectory` see the whole conversation: every turn with the tool outputs between them.

Nothing a model writes makes an episode raise; an exception in one sample's conversation (a
broken sandbox host, a template that cannot write the turn) cancels its siblings and loses the
group (`gather_samples`), counted by the runner as `workflow/errors`.
"""

from __future__ import annotations

from dataclasses import replace

from rlvr.types import Completion, Prompt
from rlvr.workflows.base import (EpisodeContext, Trajectory, TrajectoryBuilder,
                                 gather_samples, register_workflow)
from rlvr.workflows.tools import (TOOL_STOP_STRINGS, cut_output, find_tool_call,
                                  run_python_tool)


@register_workflow("tool_use")
async def tool_use(ctx: EpisodeContext, prompt: Prompt) -> list[Trajectory]:
    stops = tuple(dict.fromkeys(ctx.params.stop_strings + TOOL_STOP_STRINGS))
    ctx.params = replace(ctx.params, stop_strings=stops)
    first_turns = await ctx.generate(prompt.token_ids)
    return await gather_samples(_converse(ctx, prompt, c, k)
                                for k, c in enumerate(first_turns))


async def _converse(ctx: EpisodeContext, prompt: Prompt, turn_out: Completion,
                    sample: int) -> Trajectory:
    s = ctx.settings
    budget = s.max_episode_tokens or ctx.params.max_tokens * s.max_turns
    trajectory = TrajectoryBuilder()
    messages = [dict(m) for m in prompt.messages]
    counts = {"tools/calls": 0.0, "tools/errors": 0.0, "tools/timeouts": 0.0,
              "tools/malformed": 0.0}
    turn = 0
    while True:
        trajectory.add_model(turn_out)
        messages.append({"role": "assistant", "content": turn_out.text})
        call = None if turn_out.truncated else find_tool_call(turn_out.text)
        if call is None or turn + 1 >= s.max_turns or counts["tools/calls"] >= s.max_tool_calls:
            break
        counts["tools/calls"] += 1
        if call.code is None:
            counts["tools/malformed"] += 1
            output = f"Error: {call.problem}"
        else:
            result = await run_python_tool(call.code, s.tool_timeout_s, ctx.sandboxed)
            counts["tools/errors"] += result.failed and not result.timed_out
            counts["tools/timeouts"] += result.timed_out
            output = result.output
        # Every tool message is cut, an error about a call too: it may echo the model's text.
        tool_message = {"role": "tool", "content": cut_output(output, s.tool_output_chars)}
        given = ctx.continuation_ids(messages, [tool_message], turn_out)
        room = budget - len(trajectory.token_ids) - len(given)
        if room < 1:
            break
        messages.append(tool_message)
        trajectory.add_given(given)
        turn += 1
        turn_out = (await ctx.generate(list(prompt.token_ids) + trajectory.token_ids,
                                       ctx.turn_params(turn, min(ctx.params.max_tokens, room)),
                                       sample=sample))[0]
    last = trajectory.last
    outcome = (await ctx.score(prompt, [last.text], [messages[len(prompt.messages):]]))[0]
    reward = ctx.shape([outcome.score], [last], [trajectory.turn_lengths])[0]
    return Trajectory(trajectory.build(ctx.tokenizer), reward, outcome,
                      {**counts, "tools/turns_mean": float(turn + 1),
                       "tools/used_mean": float(counts["tools/calls"] > 0)})
