"""How far behind the policy a batch's samples are, and dropping groups that are too far.

A version is the number of weight updates applied when a sample was generated (the trainer's
`policy_version`); staleness is the updates since. Judged per group, by its oldest sample.
"""

from __future__ import annotations

from rlvr.types import Sample


def group_version(group: list[Sample]) -> int:
    """The oldest weights that produced any sample of the group."""
    return min(s.completion.model_version for s in group)


def drop_stale_groups(groups: list[list[Sample]], policy_version: int,
                      max_staleness: int) -> tuple[list[list[Sample]], int]:
    """Keep groups at most `max_staleness` versions behind `policy_version`; count the rest.

    A group is judged whole (by its oldest sample): its advantages are relative to each other,
    so dropping part of a group would change the rest's advantages.
    """
    kept = [g for g in groups if policy_version - group_version(g) <= max_staleness]
    return kept, len(groups) - len(kept)


def staleness_metrics(groups: list[list[Sample]], policy_version: int) -> dict[str, float]:
    versions = [s.completion.model_version for g in groups for s in g]
    if not versions:
        return {}
    return {
        "async/model_step_min": float(min(versions)),
        "async/model_step_max": float(max(versions)),
        "async/model_step_mean": sum(versions) / len(versions),
        "async/num_steps_off_policy": float(policy_version - min(versions)),
        "async/num_steps_off_policy_mean": policy_version - sum(versions) / len(versions),
    }
