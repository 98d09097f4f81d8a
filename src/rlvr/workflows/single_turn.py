"""`single_turn`: one engine call for the group, one verifier call: RLVR as it always was.

Batched with every other episode of the step (`rlvr.rollout.client`), it makes the same engine
and scorer calls, in the same order, as the trainer did before workflows, so runs reproduce."""

from __future__ import annotations

from rlvr.types import Prompt
from rlvr.workflows.base import EpisodeContext, Trajectory, register_workflow


@register_workflow("single_turn")
async def single_turn(ctx: EpisodeContext, prompt: Prompt) -> list[Trajectory]:
    completions = await ctx.generate(prompt.token_ids)
    outcomes = await ctx.score(prompt, [c.text for c in completions])
    rewards = ctx.shape([o.score for o in outcomes], completions)
    return [Trajectory(c, r, o) for c, r, o in zip(completions, rewards, outcomes)]
