"""Active sampling and prompt retirement, with a scripted engine and in-process verifiers."""

from rlvr.data.mixer import PromptMixer
from rlvr.episodes import RewardShaping
from rlvr.rewards.scorer import RewardScorer
from rlvr.sampling import ActiveSampling, collect_episodes, solved_prompt_ids
from rlvr.types import Completion, Prompt, SamplingParams


def _prompt(i, answer):
    return Prompt(id=f"p/{i}", messages=(), token_ids=(i,), ground_truth=answer,
                  verifiers=("last_number",), source="p")


class ScriptedEngine:
    """Prompt i's samples answer from SCRIPT[i]: a flat group or a mixed one."""

    SCRIPT = {0: ["1", "1"], 1: ["1", "2"], 2: ["2", "2"], 3: ["1", "2"], 4: ["1", "1"]}

    def generate(self, prompts, params):
        return [[Completion([1], [-0.1], "stop", text) for text in self.SCRIPT[p[0]]]
                for p in prompts]


def _mixer():
    return PromptMixer([("p", [_prompt(i, "1") for i in range(5)], 1.0)], seed=0, shuffle=False)


def _collect(active: ActiveSampling, num_prompts=2, mixer=None):
    with RewardScorer(num_workers=0) as scorer:
        return collect_episodes(ScriptedEngine(), scorer, (mixer or _mixer()).next_batch,
                                num_prompts, SamplingParams(n=2, seed=0), RewardShaping(), active)


def test_without_active_sampling_one_draw():
    episodes, metrics = _collect(ActiveSampling(enabled=False))
    assert [g[0].prompt.id for g in episodes.groups] == ["p/0", "p/1"]
    assert metrics["batch/sampling_rounds"] == 1.0


def test_active_sampling_draws_until_enough_groups_have_spread():
    episodes, metrics = _collect(ActiveSampling(enabled=True, max_rounds=4))
    # Round 1 draws p0 (flat) and p1 (mixed); round 2 draws p2 (flat); round 3 draws p3 (mixed).
    assert [g[0].prompt.id for g in episodes.groups] == ["p/1", "p/3"]
    assert metrics["batch/sampling_rounds"] == 3.0 and metrics["batch/prompts_sampled"] == 4.0
    assert metrics["batch/active_sampling_shortfall"] == 0.0


def test_active_sampling_is_bounded():
    episodes, metrics = _collect(ActiveSampling(enabled=True, max_rounds=2))
    assert len(episodes.groups) == 1 and metrics["batch/active_sampling_shortfall"] == 1.0


def test_solved_prompts_are_retired_from_later_draws():
    mixer = _mixer()
    episodes, _ = _collect(ActiveSampling(), num_prompts=5, mixer=mixer)
    solved = solved_prompt_ids(episodes, pass_rate=1.0)
    assert solved == ["p/0", "p/4"]
    mixer.retire(solved)
    assert {p.id for p in mixer.next_batch(9)} == {"p/1", "p/2", "p/3"}
    restored = _mixer()
    restored.load_state_dict(mixer.state_dict())
    assert restored.retired == {"p/0", "p/4"}


def test_an_empty_selection_builds_no_batch():
    from rlvr.batching import BatchSettings, build_training_batch

    result = build_training_batch([], BatchSettings("standard", True, 64, 0))
    assert result.batch is None and result.metrics["real_batch_size_ratio"] == 0.0
