"""Active sampling and prompt retirement, with a scripted engine and in-process verifiers."""

from rlvr.data.mixer import PromptMixer
from rlvr.producer.groups import RewardShaping, generate_and_score
from rlvr.rewards.scorer import RewardScorer
from rlvr.producer.prompt_selection import ActiveSampling, collect_episodes, solved_prompt_ids
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
        def run_groups(prompts, params):
            return generate_and_score(ScriptedEngine(), scorer, prompts, params,
                                      RewardShaping()), {}

        return collect_episodes(run_groups, (mixer or _mixer()).next_batch,
                                num_prompts, SamplingParams(n=2, seed=0), active)


def test_without_active_sampling_one_draw():
    episodes, sampled, metrics = _collect(ActiveSampling(enabled=False))
    assert sampled is episodes
    assert [g[0].prompt.id for g in episodes.groups] == ["p/0", "p/1"]
    assert metrics["batch/sampling_rounds"] == 1.0


def test_active_sampling_draws_until_enough_groups_have_spread():
    episodes, sampled, metrics = _collect(ActiveSampling(enabled=True, max_rounds=4))
    # Round 1 draws p0 (flat) and p1 (mixed); round 2 draws p2 (flat); round 3 draws p3 (mixed).
    assert [g[0].prompt.id for g in episodes.groups] == ["p/1", "p/3"]
    assert [g[0].prompt.id for g in sampled.groups] == ["p/0", "p/1", "p/2", "p/3"]
    assert metrics["batch/sampling_rounds"] == 3.0 and metrics["batch/prompts_sampled"] == 4.0
    assert metrics["batch/active_sampling_shortfall"] == 0.0


def test_active_sampling_is_bounded():
    episodes, _, metrics = _collect(ActiveSampling(enabled=True, max_rounds=2))
    assert len(episodes.groups) == 1 and metrics["batch/active_sampling_shortfall"] == 1.0


def test_solved_prompts_are_retired_from_later_draws():
    mixer = _mixer()
    episodes, _, _ = _collect(ActiveSampling(), num_prompts=5, mixer=mixer)
    solved = solved_prompt_ids(episodes, pass_rate=1.0)
    assert solved == ["p/0", "p/4"]
    mixer.retire(solved)
    assert {p.id for p in mixer.next_batch(9)} == {"p/1", "p/2", "p/3"}
    restored = _mixer()
    restored.load_state_dict(mixer.state_dict())
    assert restored.retired == {"p/0", "p/4"}


def test_active_sampling_retires_and_reports_on_every_sampled_group_not_the_kept_ones():
    # Five prompts, two solved by every sample (p0, p4): the groups active sampling leaves out.
    # Judged on the kept groups, no prompt would ever retire and the reward would read 0.5;
    # over what the policy sampled it is 6 right answers of 10.
    from rlvr.producer.source import EpisodeSource, SourceSettings

    mixer = _mixer()
    settings = SourceSettings(prompts_per_step=5, sampling=SamplingParams(n=2, seed=0),
                              shaping=RewardShaping(), retire_pass_rate=1.0,
                              active=ActiveSampling(enabled=True, max_rounds=1))
    with RewardScorer(num_workers=0) as scorer:
        source = EpisodeSource(mixer, ScriptedEngine(), scorer, settings)
        episodes, metrics = source.produce(1)
        source.close()
    assert [g[0].prompt.id for g in episodes.groups] == ["p/1", "p/3"]  # trained on
    assert mixer.retired == {"p/0", "p/4"}
    assert metrics["objective/verifiable_reward"] == 0.6
    assert metrics["objective/scores"] == 0.6


def test_an_empty_selection_builds_no_batch():
    from rlvr.producer.training_batch import BatchSettings, build_training_batch

    result = build_training_batch([], BatchSettings("standard", True, 64, 0))
    assert result.batch is None and result.metrics["real_batch_size_ratio"] == 0.0


class SeedRecordingEngine(ScriptedEngine):
    def __init__(self):
        self.seeds = []

    def generate(self, prompts, params):
        self.seeds.append(params.seed)
        return super().generate(prompts, params)


def test_seeds_differ_across_steps_rounds_and_engine_shares():
    # Every (step, round, share) samples its own stream. The old offsets collided: round r of
    # share k used base + 7919 * (r + k), so round 1 / share 0 replayed round 0 / share 1.
    from rlvr.distributed.engine_group import share_params
    from rlvr.producer.source import SourceSettings

    settings = SourceSettings(prompts_per_step=2, sampling=SamplingParams(n=2, seed=7),
                              shaping=RewardShaping(), active=ActiveSampling(True, 4))
    seeds = []
    for step in (1, 2):
        engine = SeedRecordingEngine()
        with RewardScorer(num_workers=0) as scorer:
            collect_episodes(lambda prompts, params: (generate_and_score(
                                 engine, scorer, prompts, params), {}),
                             _mixer().next_batch, 2, settings.params_for(step),
                             ActiveSampling(enabled=True, max_rounds=4))
        assert len(engine.seeds) == 3  # three rounds (see the test above)
        for round_seed in engine.seeds:
            seeds += [share_params(SamplingParams(seed=round_seed), k).seed for k in range(4)]
    assert len(seeds) == 2 * 3 * 4 and len(set(seeds)) == len(seeds)


def test_vllm_prompt_seeds_do_not_collide_across_shares():
    # vLLM seeds prompt i of a call from the call's seed; prompt i of share 1 must not replay
    # prompt j of share 0.
    from rlvr.distributed.engine_group import share_params
    from rlvr.rollout.seeds import derive_seed

    call_seeds = [share_params(SamplingParams(seed=11), k).seed for k in range(4)]
    per_prompt = [derive_seed(s, prompt=i) for s in call_seeds for i in range(64)]
    # vLLM gives the k-th of n samples seed + k: keep every prompt's n = 16 seeds apart.
    starts = sorted(per_prompt)
    assert all(b - a > 16 for a, b in zip(starts, starts[1:]))


def _group(prompt_id, rewards):
    from rlvr.types import Sample

    prompt = Prompt(id=prompt_id, messages=(), token_ids=(0,), ground_truth="", verifiers=(),
                    source="p")
    return [Sample(prompt, Completion([1], [-0.1], "stop", ""), r) for r in rewards]


def test_a_prompt_retires_on_its_mean_reward_over_the_most_a_sample_can_earn():
    """open-instruct's `process_group`: percent_solved = mean(reward_scores) / max_possible_score.
    rlvr counted samples scoring >= 1.0, so a multi-turn win discounted to 0.9, an overlong-
    penalised right answer (0.95) or partial credit never counted as solved, and a prompt solved
    by every sample stayed in the draws for ever."""
    from rlvr.producer.groups import Episodes

    groups = [_group("discounted", [0.9, 0.9, 0.9, 0.9]),  # every sample won, over 2 turns
              _group("penalised", [0.95, 1.0, 0.95, 1.0]),  # right, some a little overlong
              _group("half", [1.0, 0.0, 1.0, 0.0]),
              _group("partial", [0.5, 0.5, 0.5, 0.5])]
    episodes = Episodes(groups=groups, outcomes=[[] for _ in groups])
    assert solved_prompt_ids(episodes, pass_rate=0.9) == ["discounted", "penalised"]
    assert solved_prompt_ids(episodes, pass_rate=0.5) == ["discounted", "penalised", "half",
                                                          "partial"]
    # With an added format bonus of 1 a sample can earn 2: full marks without it are half.
    bonus = RewardShaping(format_reward=True, format_reward_value=1.0, additive_format_reward=True)
    assert bonus.max_reward == 2.0 and RewardShaping().max_reward == 1.0
    assert solved_prompt_ids(episodes, pass_rate=0.9, max_reward=bonus.max_reward) == []
