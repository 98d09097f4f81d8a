"""Which completions the report shows."""

import pandas as pd

from rlvr.report.samples import SampleChoice, pick_samples, spread_points


def test_spread_points_keeps_first_and_last():
    assert spread_points([5, 1, 3], 6) == [1, 3, 5]
    assert spread_points(list(range(0, 101, 5)), 3) == [0, 50, 100]


def _traces(step: int, rewards: list[float], eval_set="addition") -> pd.DataFrame:
    return pd.DataFrame({"step": step, "eval_set": eval_set, "reward": rewards,
                         "completion": [f"c{i}" for i in range(len(rewards))]})


def test_best_worst_and_random_do_not_overlap_and_are_reproducible():
    traces = _traces(2, [0.0, 1.0, 0.5, 0.2, 0.9, 0.1, 0.3, 0.4])
    picked = pick_samples(traces, SampleChoice(best=2, worst=2, random=2))
    assert picked["pick"].tolist() == ["best"] * 2 + ["worst"] * 2 + ["random"] * 2
    assert picked["reward"].tolist()[:4] == [1.0, 0.9, 0.0, 0.1]
    assert picked["completion"].is_unique
    assert picked.equals(pick_samples(traces, SampleChoice(best=2, worst=2, random=2)))


def test_each_step_and_eval_set_gets_its_own_picks_and_small_groups_are_not_padded():
    traces = pd.concat([_traces(0, [0.0, 1.0]), _traces(0, [1.0], eval_set="gsm8k"),
                        _traces(4, [0.0, 0.0, 1.0])])
    picked = pick_samples(traces, SampleChoice(best=1, worst=1, random=5))
    counts = picked.groupby(["step", "eval_set"]).size().to_dict()
    assert counts == {(0, "addition"): 2, (0, "gsm8k"): 1, (4, "addition"): 3}


def test_training_traces_without_an_eval_set_group_by_step():
    traces = _traces(1, [0.0, 1.0], eval_set=None)
    assert len(pick_samples(traces)) == 2
    assert pick_samples(None).empty
