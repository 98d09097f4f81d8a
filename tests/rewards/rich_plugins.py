"""Verifiers that declare extra inputs, for test_rich_verifiers and test_batched. A module of
their own that imports only `rlvr.rewards`: the scorer's worker processes import every module
that registered a verifier, and a test module would bring torch into each of them.
`metadata_keyword` is not registered: tests name it by its `module:function` path."""

from rlvr.rewards import register_verifier

SEEN = []  # trajectories `test_records_trajectory` was given (in-process scorers only)


@register_verifier("test_prompt_echo")
def prompt_echo(completion: str, ground_truth: str, *, prompt) -> float:
    """1.0 if the completion repeats the prompt's last message."""
    return float(completion == prompt[-1]["content"])


@register_verifier("test_all_inputs")
def all_inputs(completion, ground_truth, *, prompt, trajectory, metadata) -> float:
    """Raises unless every input arrived with the expected shape; else the row's points / 10."""
    assert isinstance(prompt, list) and prompt[0]["role"] in ("system", "user"), prompt
    assert trajectory[-1] == {"role": "assistant", "content": completion}, trajectory
    assert isinstance(metadata, dict), metadata
    return float(metadata.get("points", 0)) / 10


@register_verifier("test_records_trajectory")
def records_trajectory(completion, ground_truth, *, trajectory) -> float:
    SEEN.append(trajectory)
    return float(completion.strip() == ground_truth)


def metadata_keyword(completion: str, ground_truth: str, *, metadata=None) -> float:
    """1.0 if the completion contains the row's `keyword` field."""
    return float(metadata["keyword"] in completion)
