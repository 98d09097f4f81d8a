"""The remote engine (`rollout.engine=remote`): inference servers over HTTP behind the engine
protocol (`engine.py`). The servers themselves are `rlvr.serving`'s; new weights reach them
through `rlvr.rollout.weight_sync.servers`. Importing this package registers the engine.
"""

from rlvr.rollout.base import register_engine
from rlvr.rollout.remote.engine import create_remote_engine
from rlvr.rollout.vllm.checks import vllm_section_errors

register_engine("remote",
                uses_servers=True,  # a launcher starts them unless rollout.server_addresses
                tensor_parallel=True,  # each server spans its tensor-parallel GPUs
                # the servers a launcher starts are vLLM's, sized by rollout.vllm
                checks=vllm_section_errors,
                )(create_remote_engine)
