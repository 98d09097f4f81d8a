"""`algorithm.num_mini_batches` is optimizer steps per batch (open-instruct's meaning);
gradient accumulation is `gradient_accumulation_steps`; an old config is refused with both ways
to say what it meant."""

import json

import pytest

from rlvr.config import ConfigError, load_config
from rlvr.run.settings import learner_settings

TINY = "configs/tiny.yaml"


def test_an_old_config_meaning_gradient_accumulation_is_refused_with_both_fixes():
    with pytest.raises(ConfigError) as e:
        load_config(TINY, ["algorithm.num_mini_batches=4",
                           "algorithm.gradient_accumulation_steps=null"])
    message = str(e.value)
    assert "algorithm.num_mini_batches=4 now means 4 optimizer steps per batch" in message
    assert "gradient_accumulation_steps=4 and num_mini_batches=1 keeps the old" in message
    # Saying which meaning is meant is enough, either way.
    load_config(TINY, ["algorithm.num_mini_batches=4", "algorithm.gradient_accumulation_steps=1"])
    load_config(TINY, ["algorithm.num_mini_batches=1", "algorithm.gradient_accumulation_steps=4"])


def test_the_schedule_counts_every_optimizer_step():
    cfg = load_config(TINY, ["algorithm.num_mini_batches=2",
                             "algorithm.gradient_accumulation_steps=1", "algorithm.num_epochs=3"])
    assert cfg.optimizer_steps_per_batch == 6
    assert learner_settings(cfg).total_optimizer_steps == cfg.num_training_steps * 6


def test_each_mini_batch_loss_has_its_own_denominator():
    from rlvr.algorithm.packing import SequenceToPack, pack_sequences
    from rlvr.run.loop import training_mini_batches

    seqs = [SequenceToPack([7], [5] * n, [0.0] * n, advantage=1.0, index=i)
            for i, n in enumerate([2, 2, 3, 3])]
    batch = pack_sequences(seqs, pack_length=4)
    cfg = load_config(TINY, ["algorithm.num_mini_batches=2",
                             "algorithm.gradient_accumulation_steps=3"])
    mini = training_mini_batches(cfg, batch, step=1)
    # rows permuted (seeded by the step): each denominator is its own part's token count
    assert [m.loss.params.denominator for m in mini] == \
        [float(m.batch.num_response_tokens) for m in mini]
    assert sum(m.loss.params.denominator for m in mini) == 10.0
    assert [m.num_micro_batches for m in mini] == [3, 3]
    grpo = load_config(TINY, ["algorithm.num_mini_batches=2", "algorithm.loss_fn=grpo",
                              "algorithm.gradient_accumulation_steps=1"])
    assert [m.loss.params.denominator for m in training_mini_batches(grpo, batch, 1)] == [2.0, 2.0]
    constant = load_config(TINY, ["algorithm.num_mini_batches=2", "algorithm.loss_denominator=64",
                                  "algorithm.gradient_accumulation_steps=1"])
    assert [m.loss.params.denominator for m in training_mini_batches(constant, batch, 1)] == \
        [64.0, 64.0]


@pytest.mark.timeout(300)
def test_tiny_trains_two_optimizer_steps_per_batch(tmp_path):
    from rlvr.run.loop import train

    run = train(load_config(TINY, [
        f"experiment.output_dir={tmp_path}", "algorithm.num_mini_batches=2",
        "algorithm.gradient_accumulation_steps=1", "algorithm.filter_zero_std_samples=false",
        "eval.local_eval_every=0", "checkpoint.save_freq=0", "logging.progress_bar=false",
        "algorithm.pack_length=144"]))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["training_step"] > 0]
    assert [r["optim/num_optimizer_steps"] for r in steps] == [2.0] * len(steps)
    assert run.learner.scheduler.last_epoch == 2 * len(steps)
