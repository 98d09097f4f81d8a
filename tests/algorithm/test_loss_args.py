"""A loss's own parameters (`algorithm.loss_args`) reach it as `LossParams.args`, with no field
added to the schema, LossParams or the settings: what a plugin's loss with a parameter needs."""

import torch

from rlvr.algorithm.losses import (POLICY_LOSSES, LossInputs, PolicyLoss, TokenTerms,
                                   register_policy_loss)
from rlvr.config import load_config
from rlvr.run.settings import loss_params


def test_loss_args_reach_the_loss_as_params_args():
    @register_policy_loss("test_scaled_pg")
    def scaled(inputs: LossInputs, params) -> TokenTerms:
        ratio_RL = torch.exp(inputs.new_logprobs_RL - inputs.old_logprobs_RL)
        # -tau * r * A: tau is the loss's own parameter
        return TokenTerms(pg_loss_RL=-params.args["tau"] * ratio_RL * inputs.advantages_RL,
                          ratio_RL=ratio_RL.detach(),
                          clipped_lower_RL=torch.zeros_like(ratio_RL, dtype=torch.bool),
                          clipped_upper_RL=torch.zeros_like(ratio_RL, dtype=torch.bool))

    try:
        cfg = load_config(None, ["algorithm.loss_fn=test_scaled_pg",
                                 "algorithm.loss_args={tau: 0.5}"])
        params = loss_params(cfg, denominator=2)
        assert params.args == {"tau": 0.5}
        inputs = LossInputs(new_logprobs_RL=torch.zeros(1, 2, requires_grad=True),
                            old_logprobs_RL=torch.zeros(1, 2),
                            advantages_RL=torch.tensor([[1.0, 3.0]]),
                            response_mask_RL=torch.ones(1, 2, dtype=torch.bool))
        # ratio 1 on both tokens: the token losses are -0.5 * 1 and -0.5 * 3, summed over the
        # denominator 2: -1.0
        out = PolicyLoss("test_scaled_pg", params)(inputs)
        assert torch.isclose(out.loss, torch.tensor(-1.0))
    finally:
        POLICY_LOSSES._entries.pop("test_scaled_pg", None)
        POLICY_LOSSES._origins.pop("test_scaled_pg", None)
