"""What a user's plugin module holds (`PLUGIN_SOURCE`, written into a test's directory by the
`plugin` fixture), and how a test reads which processes ran its parts (`marks`)."""

from __future__ import annotations

from pathlib import Path

# A loss with its own behaviour (DAPO's terms, halved), a verifier and a workflow, each leaving
# a mark named for what ran and in which process: the tests read which processes ran them.
PLUGIN_SOURCE = '''
import dataclasses
import os
from pathlib import Path

from rlvr.algorithm.advantages import register_advantage_normalization
from rlvr.algorithm.losses import dapo_loss, register_policy_loss
from rlvr.rewards import register_verifier
from rlvr.workflows import register_workflow
from rlvr.workflows.single_turn import single_turn

MARKS = Path(__file__).with_name("marks")


def _mark(what):
    MARKS.mkdir(exist_ok=True)
    (MARKS / f"{what}-{os.getpid()}").touch()


@register_policy_loss("halved_dapo")
def halved_dapo(inputs, params):
    _mark("loss")
    terms = dapo_loss(inputs, params)
    return dataclasses.replace(terms, pg_loss_RL=0.5 * terms.pg_loss_RL)


@register_advantage_normalization("plugin_centered")
def plugin_centered(rewards_NG, eps):
    return rewards_NG - rewards_NG.mean(dim=1, keepdim=True)


@register_verifier("plugin_digits")
def plugin_digits(completion, ground_truth):
    _mark("verifier")
    return float(ground_truth in completion)


@register_workflow("plugin_turn")
async def plugin_turn(ctx, prompt):
    _mark("workflow")
    return await single_turn(ctx, prompt)


def unregistered_verifier(completion, ground_truth):
    return 1.0


def unregistered_loss(inputs, params):
    return dapo_loss(inputs, params)
'''


def marks(plugin_dir: Path, what: str) -> set[int]:
    """The process ids that ran the plugin's `what` (loss, verifier, workflow)."""
    return {int(p.name.split("-")[1]) for p in (plugin_dir / "marks").glob(f"{what}-*")}
