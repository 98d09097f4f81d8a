"""Every algorithm knob, switched from the command line, trains the tiny config for 3 steps."""

import json

import pytest

from rlvr.cli import main

VARIANTS = [
    ["algorithm.loss_fn=dapo"],
    ["algorithm.loss_fn=cispo"],
    ["algorithm.loss_fn=grpo"],
    ["algorithm.loss_fn=gspo", "algorithm.clip_lower=0.0003", "algorithm.clip_higher=0.0004"],
    ["algorithm.kl_estimator=0", "algorithm.beta=0", "algorithm.load_ref_policy=true"],
    ["algorithm.kl_estimator=1"],
    ["algorithm.kl_estimator=3", "algorithm.ref_policy_update_freq=2"],
    ["algorithm.advantage_normalization_type=centered", "algorithm.loss_denominator=64"],
    ["algorithm.rho_correction=true", "algorithm.rho_clamp_upper=2.0"],
    ["algorithm.rho_correction=true", "algorithm.rho_mask=token", "algorithm.rho_clamp_lower=0.5"],
    ["algorithm.rho_correction=true", "algorithm.rho_mask=sequence"],
    ["algorithm.mask_truncated_completions=true", "algorithm.overlong_buffer=4",
     "algorithm.packing=first_fit_decreasing"],
    ["algorithm.active_sampling=true", "algorithm.no_resampling_pass_rate=0.5",
     "algorithm.filter_zero_std_samples=true"],
]


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: " ".join(o))
def test_variant_trains_three_steps(tmp_path, overrides):
    # Zero-std filtering off so every step updates even when the random model scores nothing.
    base = [f"experiment.output_dir={tmp_path}", "algorithm.filter_zero_std_samples=false",
            "logging.progress_bar=false", "eval.local_eval_every=0", "checkpoint.save_freq=0",
            "checkpoint.save_final=false"]
    assert main(["train", "configs/tiny.yaml", *base, *overrides]) == 0
    rows = [json.loads(l) for l in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["training_step"] for r in rows] == [0, 1, 2, 3]
    updated = [r for r in rows[1:] if "loss/total_avg" in r]
    assert updated and all(r["loss/total_avg"] is not None for r in updated)
    if any("rho_correction" in o for o in overrides):
        assert all("val/rho_mean" in r for r in updated)
