"""Evaluation on named prompt sets: n episodes per prompt, played by the run's workflow and scored
by the verifiers, reported per set (pass@k for each k asked, maj@n, mean reward, stop rate,
length, the workflow's own counts) and pooled over all sets.

What it is: `Evaluator(sets, settings, tokenizer).run(engine, scorer) -> EvalResult`, the one
code path of both the training loop (`rlvr.run.loop.run_eval`) and `rlvr eval`
(`rlvr.run.offline_eval`), so a checkpoint scored afterwards is measured exactly as its run measured
it. An eval episode is a training episode: the run's workflow (`EvalSettings.episodes`, the
`EpisodePath` training's source plays by, through the same `EpisodeRunner`), with its tools,
turns, sandbox and verifiers, only sampled with eval's n, temperature and seeds. A `tool_use`
run is measured using its tool, a `multi_turn` run with its retries. The result keeps every
sample (a whole episode) with its verifier outcome, for whoever records generations.
What it is not: it builds nothing (engine, scorer and sets are given), writes nothing, and
shapes no reward: eval reports what the verifiers said of each episode's final answer (and
what the workflow made of it: `multi_turn`'s `rollout.turn_discount` is the workflow's, so a
discounted retry is no full marks). The estimators are `rlvr.algorithm.pass_at_k`.

Metrics, for each set `<name>`: `eval/<name>/pass@k`, `eval/<name>/maj@n` (n > 1, and only
where every prompt's verifier can extract answers), `eval/<name>/mean_reward`,
`eval/<name>/stop_rate`, `eval/<name>/sequence_lengths`, and the workflow's metrics as training
logs them, under the set's name: `eval/<name>/workflow/errors`, `.../workflow/timeouts` (episodes
that raised or ran out of time; their prompts are left out of the set's figures, as training
leaves their groups out), `.../workflow/sandbox_wait_s_max`, and whatever the workflow's
trajectories count (`eval/<name>/tools/calls`, `eval/<name>/tools/turns_mean`,
`eval/<name>/workflow/turns_mean`, ...: summed over the set's episodes, `*_mean` averaged).
Pooled over every sample of every set
(the figures of one greedy sample per prompt before eval sets had names, kept so curves and
benchmarks read on): `eval/scores` (mean reward), `eval/pass_at_1`, `eval/stop_rate`,
`eval/sequence_lengths`, and `eval/verifier_errors` / `eval/verifier_timeouts` (counts).

A sample (one episode) is correct when its reward is full marks (>= 1): a partial score (some of
a row's IF constraints, some tests) is not a pass. maj@n votes on each episode's final answer
(its last model turn). Every eval draws the same seeds (derived from the run's per set), so two
evals of a run differ by the weights, not by sampling luck.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from rlvr.algorithm.pass_at_k import majority_vote, pass_at_k
from rlvr.data import EvalSet
from rlvr.producer.groups import Episodes, RewardShaping
from rlvr.rewards.format import answer_tags
from rlvr.rewards.registry import answer_extractor
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout.base import RolloutEngine
from rlvr.rollout.seeds import derive_seed
from rlvr.types import Completion, Prompt, SamplingParams
from rlvr.workflows.runner import EpisodePath

log = logging.getLogger(__name__)

FULL_MARKS = 1.0  # a sample scoring at least this passes
NO_SHAPING = RewardShaping()  # eval reports the verifiers' scores: no format reward, no penalty
AnswerKey = Callable[[str], "str | None"]


@dataclass(frozen=True)
class EvalSettings:
    """How to evaluate (`eval.*`, made by `rlvr.run.settings.eval_settings`)."""

    sampling: SamplingParams  # n: samples per prompt; seed: the base each set derives its own from
    pass_at_k: tuple[int, ...] = (1,)  # each in [1, sampling.n]
    max_prompts: int = 64  # the first prompts of each set
    # The run's workflow and its settings: training's (`rlvr.run.settings.episode_path`).
    episodes: EpisodePath = field(default_factory=EpisodePath)

    def __post_init__(self) -> None:
        bad = [k for k in self.pass_at_k if not 1 <= k <= self.sampling.n]
        if bad:
            raise ValueError(f"pass@k for k={bad} needs 1 <= k <= {self.sampling.n} samples")


@dataclass
class SetResult:
    """One set's samples and figures. `episodes.groups[i]` holds the episodes of the i-th prompt
    whose episodes ran (a failed one's prompt is left out, counted in `workflow/errors`), their
    `reward` the workflow's unshaped reward, `episodes.outcomes[i]` their verifier outcomes, and
    `answers[i]` their final answers' keys (None when the set has no extractor)."""

    name: str
    episodes: Episodes
    answers: list[list[str | None]] | None
    metrics: dict[str, float]  # this set's, named eval/<name>/...

    @property
    def num_prompts(self) -> int:
        return len(self.episodes.groups)


@dataclass
class EvalResult:
    metrics: dict[str, float]  # every set's and the pooled figures
    sets: list[SetResult]


class Evaluator:
    """The evaluation of a run: its sets (each cut to `max_prompts`) and settings, built once,
    which also says once in the log which sets get no maj@n and why; `run` measures. The
    tokenizer is the run's: a workflow of several turns writes them with it."""

    def __init__(self, sets: list[EvalSet], settings: EvalSettings, tokenizer: Any = None):
        self.settings, self.tokenizer = settings, tokenizer
        self.sets = [EvalSet(s.name, s.prompts[:settings.max_prompts]) for s in sets
                     if s.prompts]
        for s in sets:
            if not s.prompts:
                log.warning("eval set '%s' has no prompts (all too long?): not evaluated", s.name)
        # Per set: whether maj@n is reported (every prompt's verifier extracts answers).
        self.votes = [self._votes(s) for s in self.sets]

    def _votes(self, eval_set: EvalSet) -> bool:
        if self.settings.sampling.n < 2:
            return False  # a vote of one is pass@1
        missing = sorted({"+".join(p.verifiers) for p in eval_set.prompts
                          if prompt_answer_key(p) is None})
        if missing:
            log.info("eval set '%s': no maj@%d, as verifier(s) %s extract no answer to vote on",
                     eval_set.name, self.settings.sampling.n, ", ".join(missing))
        return not missing

    def run(self, engine: RolloutEngine, scorer: RewardScorer) -> EvalResult:
        results = []
        # The episode loop training runs, built for this eval and closed after it.
        runner = self.settings.episodes.runner(engine, scorer, self.tokenizer)
        try:
            for index, (eval_set, votes) in enumerate(zip(self.sets, self.votes)):
                params = self.settings.sampling
                if params.seed is not None:
                    params = replace(params, seed=derive_seed(params.seed, eval_set=index))
                episodes, played = runner.run(eval_set.prompts, params, NO_SHAPING)
                # Per group, not per set prompt: a failed episode's group is not there.
                answers = (None if not votes else answer_keys(
                    episodes, [prompt_answer_key(g[0].prompt) for g in episodes.groups],
                    scorer.tags_mark_answers, self.tokenizer))
                metrics = set_metrics(eval_set.name, episodes, answers, self.settings.pass_at_k)
                metrics.update({f"eval/{eval_set.name}/{k}": v for k, v in played.items()})
                results.append(SetResult(eval_set.name, episodes, answers, metrics))
        finally:
            runner.close()
        metrics = pooled_metrics(results)
        for r in results:
            metrics.update(r.metrics)
        return EvalResult(metrics=metrics, sets=results)


def prompt_answer_key(prompt: Prompt) -> AnswerKey | None:
    """The answer extractor of a prompt's verifier; None when it has none, or names several
    (which verifier's answer would be the one voted on is not clear)."""
    if len(prompt.verifiers) != 1:
        return None
    return answer_extractor(prompt.verifiers[0])


def answer_keys(episodes: Episodes, extractors: list[AnswerKey],
                tags_mark_answers: Callable[[Sequence[dict]], bool] = lambda messages: True,
                tokenizer: Any = None) -> list[list[str | None]]:
    """Each sample's answer key (`extractors[i]` for group i), read from its episode's final
    answer (`final_answer`), its <think>/<answer> tags read as the scorer read them
    (`RewardScorer.tags_mark_answers` of the prompt); an extractor that raises counts as no
    answer (and is logged: extractors are meant never to raise)."""
    out = []
    for group, extract in zip(episodes.groups, extractors, strict=True):
        keys = []
        for sample in group:
            try:
                with answer_tags(tags_mark_answers(sample.prompt.messages)):
                    keys.append(extract(final_answer(sample.completion, tokenizer)))
            except Exception as e:  # noqa: BLE001  a broken extractor must not stop training
                log.warning("answer extractor failed on eval prompt %s: %s", sample.prompt.id, e)
                keys.append(None)
        out.append(keys)
    return out


def final_answer(completion: Completion, tokenizer: Any = None) -> str:
    """The text an episode's verifier scored: a one-call completion's own text; for an episode
    of several turns (a loss mask), its last model turn, the tokens after the last given one,
    decoded as the whole episode's text is (`TrajectoryBuilder.build`). Its whole text would
    hold every turn and tool output, so the vote would read a number the model was shown."""
    mask = completion.loss_mask_T
    if mask is None or all(mask) or tokenizer is None:
        return completion.text
    start = len(mask) - next(i for i, m in enumerate(reversed(mask)) if not m)
    return tokenizer.decode(completion.token_ids_T[start:], skip_special_tokens=True)


def set_metrics(name: str, episodes: Episodes, answers: list[list[str | None]] | None,
                ks: tuple[int, ...]) -> dict[str, float]:
    """One set's figures: per-prompt pass@k and maj@n averaged over prompts; per-sample means."""
    groups = episodes.groups
    samples = [s for g in groups for s in g]
    n_samples = len(samples)
    out: dict[str, float] = {}
    for k in ks:
        out[f"eval/{name}/pass@{k}"] = sum(
            pass_at_k(len(g), sum(s.reward >= FULL_MARKS for s in g), k) for g in groups
        ) / len(groups)
    if answers is not None:
        n = len(groups[0])
        out[f"eval/{name}/maj@{n}"] = sum(
            majority_vote(keys, [s.reward >= FULL_MARKS for s in g])
            for g, keys in zip(groups, answers)) / len(groups)
    out[f"eval/{name}/mean_reward"] = sum(s.reward for s in samples) / n_samples
    out[f"eval/{name}/stop_rate"] = sum(not s.completion.truncated for s in samples) / n_samples
    out[f"eval/{name}/sequence_lengths"] = sum(
        len(s.completion.token_ids_T) for s in samples) / n_samples
    return out


def pooled_metrics(results: list[SetResult]) -> dict[str, float]:
    """Per-sample means over every set (the long-standing `eval/scores` & co.)."""
    samples = [s for r in results for g in r.episodes.groups for s in g]
    outcomes = [o for r in results for g in r.episodes.outcomes for o in g]
    if not samples:
        return {}
    n = len(samples)
    return {
        "eval/scores": sum(s.reward for s in samples) / n,
        "eval/pass_at_1": sum(s.reward >= FULL_MARKS for s in samples) / n,
        "eval/stop_rate": sum(not s.completion.truncated for s in samples) / n,
        "eval/sequence_lengths": sum(len(s.completion.token_ids_T) for s in samples) / n,
        "eval/verifier_errors": float(sum(o.error is not None for o in outcomes)),
        "eval/verifier_timeouts": float(sum(o.timed_out for o in outcomes)),
    }
