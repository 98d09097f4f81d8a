"""Policy updates: packed forward passes, gradient accumulation, optimizer and schedule."""

from rlvr.learner.learner import Learner, LearnerSettings
from rlvr.learner.records import MiniBatch, UpdateResult
from rlvr.learner.attention import packed_attention_mask
from rlvr.learner.forward import forward_logprobs
from rlvr.learner.protocol import LearnerProtocol, LearnerState

__all__ = ["Learner", "LearnerProtocol", "LearnerSettings", "LearnerState", "MiniBatch",
           "UpdateResult", "forward_logprobs", "packed_attention_mask"]
