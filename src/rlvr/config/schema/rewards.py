"""How answers are scored: `rewards` and its LLM `judge`.
One section per dataclass; each field's comment, range and choices are its facts
(`rlvr.config.fields`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from rlvr.config.fields import (AT_LEAST_ONE, GREEDY_OR_SAMPLED, NON_NEGATIVE, POSITIVE, TIMEOUT,
                                choice, ranged)


@dataclass
class JudgeConfig:
    """The `llm_judge` verifier: a second model grades each answer against a rubric
    (rlvr.rewards.judge), in the trainer's process. Rows name `llm_judge` to use it."""

    engine: str = "transformers"  # an rlvr engine (transformers, vllm), or openai: an endpoint
    model: str = ""  # engine: built-in name or model directory; openai: the endpoint's model name
    base_url: str = ""  # openai: the API root, e.g. http://127.0.0.1:8000/v1
    api_key_env: str = ""  # openai: the environment variable holding the API key ("": none)
    # The judge's prompt: {question} (the last user message), {answer}, {ground_truth} and
    # {metadata[field]} are filled in; literal braces are doubled. null: a default rubric that
    # asks for a final "Score: N", N from 0 to 10.
    rubric: Optional[str] = None
    max_tokens: int = ranged(256, AT_LEAST_ONE)  # the longest reply the judge may write
    # 0: greedy
    temperature: float = ranged(0.0, GREEDY_OR_SAMPLED)
    # the most one batch of judgements may take; the rest time out
    timeout_s: float = ranged(60.0, TIMEOUT)
    # Where the reply says its score: the first group of this regex, which must match the
    # reply's whole last non-empty line (null: a line "Score: N"), over max_score and clamped to
    # [0, 1]. A reply without it, or cut off at max_tokens, is a counted error.
    score_regex: Optional[str] = None
    # the rubric's top score: the reward is score / max_score
    max_score: float = ranged(10.0, POSITIVE)
    max_concurrency: int = ranged(16, AT_LEAST_ONE)  # openai: requests in flight at once
    # engine: the judge's weights. auto: bf16 where its device computes bf16 natively (GPUs,
    # CPUs with AVX512-BF16/AMX), else fp32 | float32 | bfloat16
    dtype: str = choice("auto", {"auto", "float32", "bfloat16"})


@dataclass
class RewardsConfig:
    # verifier worker processes; 0 runs verifiers in-process, unbounded
    num_workers: int = ranged(2, NON_NEGATIVE)
    # wall-clock limit per completion; past it the score is 0, counted
    timeout_s: float = ranged(10.0, TIMEOUT)
    reward_aggregator: str = "last"  # last | sum: how the scores of a row's verifiers combine
    remap_verifier: dict[str, str] = field(default_factory=dict)  # row's name -> verifier used
    # package.module:function verifiers the data may name (a row's `dataset` field) besides
    # remap_verifier's targets: the config chooses code to import and run, a dataset does not
    # (a row naming `shutil:rmtree` would have it called on the policy's text).
    custom_verifiers: list[str] = field(default_factory=list)
    # R1 format <think>..</think><answer>..</answer>: additive adds the bonus below when it holds;
    # otherwise the format gates the verifier score (no format, no reward).
    apply_r1_style_format_reward: bool = False
    # Whether <think>/<answer> tags in a completion mark what is graded (the text after the last
    # </think>, inside <answer>). null: where the run asks for them (its chat template names
    # them, or the R1 format reward is on) and in requests whose prompt names them; elsewhere a
    # tag is text, graded with the rest (else "rule-breaking text</think>ok" would pass).
    answer_tags: Optional[bool] = None
    # the bonus when additive_format_reward is true
    r1_style_format_reward: float = ranged(1.0, NON_NEGATIVE)
    additive_format_reward: bool = False  # true: the format adds a bonus; false: it gates
    judge: Optional[JudgeConfig] = None  # the model behind `llm_judge`; null: none
    # The code sandbox isolates answers with user, mount, PID and network namespaces; where the
    # kernel refuses them, true goes on with in-process guards only (docs/sandbox.md: weaker),
    # false stops the run at start.
    allow_weak_sandbox: bool = False
    # Before step 1, every verifier the run uses scores known exploits (rlvr.rewards.canary) and
    # the run stops if one is paid; false skips it, for a verifier that pays a case on purpose.
    exploit_canary: bool = True
    # Steps in a row whose every sample failed its verifier (an error or a timeout, no score)
    # before the run stops: such a step teaches nothing, and a run of them is a broken verifier.
    max_failed_steps: int = ranged(3, AT_LEAST_ONE)
