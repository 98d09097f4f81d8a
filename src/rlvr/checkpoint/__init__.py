"""What a run writes to resume or to use later, always atomically (`atomic`): Hugging Face model
directories (`models`) and the full training state for exact resume (`state`)."""

from rlvr.checkpoint.atomic import write_text_atomic
from rlvr.checkpoint.models import (latest_checkpoint, list_checkpoints, save_final_model,
                                    save_model_checkpoint)

__all__ = ["write_text_atomic", "latest_checkpoint", "list_checkpoints", "save_final_model",
           "save_model_checkpoint"]
