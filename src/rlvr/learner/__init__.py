"""Policy updates: packed forward passes, gradient accumulation, optimizer and schedule."""

from rlvr.learner.learner import Learner, LearnerSettings, UpdateResult
from rlvr.learner.forward import forward_logprobs, packed_attention_mask

__all__ = ["Learner", "LearnerSettings", "UpdateResult", "forward_logprobs", "packed_attention_mask"]
