"""The RL math as pure tensor functions: advantages, filtering, KL, losses, packing.

No model, process group or config object lives here; every input is a tensor or a number.
"""

from rlvr.algorithm.advantages import ADVANTAGE_NORMALIZATIONS, compute_group_advantages
from rlvr.algorithm.filtering import FilterResult, filter_zero_std_groups, group_has_signal
from rlvr.algorithm.kl import KL_ESTIMATORS, all_kl_estimates, kl_penalty
from rlvr.algorithm.losses import (POLICY_LOSSES, LossInputs, LossOutputs, LossParams,
                                   compute_policy_loss, register_policy_loss,
                                   summarize_loss_metrics)
from rlvr.algorithm.packing import SequenceToPack, pack_sequences, packed_ratio, split_rows

__all__ = [
    "ADVANTAGE_NORMALIZATIONS", "compute_group_advantages", "FilterResult",
    "filter_zero_std_groups", "group_has_signal", "KL_ESTIMATORS", "all_kl_estimates",
    "kl_penalty", "POLICY_LOSSES", "LossInputs", "LossOutputs", "LossParams",
    "compute_policy_loss", "register_policy_loss", "summarize_loss_metrics", "SequenceToPack",
    "pack_sequences", "packed_ratio", "split_rows",
]
