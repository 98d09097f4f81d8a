"""What a run writes to resume or to use later, always atomically (`atomic`): Hugging Face model
directories (`models`), the training state for exact resume (`state`), and its learner part
written by every rank in shards (`sharded`, `checkpoint.state_format=sharded`)."""

from rlvr.checkpoint.atomic import write_text_atomic
from rlvr.checkpoint.models import (latest_checkpoint, list_checkpoints, save_final_model,
                                    save_model_checkpoint)

__all__ = ["write_text_atomic", "latest_checkpoint", "list_checkpoints", "save_final_model",
           "save_model_checkpoint"]
