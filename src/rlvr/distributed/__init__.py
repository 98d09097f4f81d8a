"""Several learner processes for one policy: process group, FSDP2 sharding, batch balancing, and
the driver's `LearnerGroup` (in process, or Ray actors), and rollout engines as Ray actors
(`EngineGroup`). Ray is imported only when used."""

from rlvr.distributed.balance import RankSplit, split_batch_for_ranks
from rlvr.distributed.engine_group import EngineGroup, EngineGroupError
from rlvr.distributed.engine_worker import EngineWorker
from rlvr.distributed.learner_group import LearnerGroup, LearnerGroupError, combine_results
from rlvr.distributed.learner_worker import LearnerSpec, LearnerWorker
from rlvr.distributed.sharding import SHARDING_MODES, shard_policy, sharded_forward_logprobs
from rlvr.distributed.world import World, init_world

__all__ = ["EngineGroup", "EngineGroupError", "EngineWorker", "LearnerGroup", "LearnerGroupError",
           "LearnerSpec", "LearnerWorker", "RankSplit",
           "SHARDING_MODES", "World", "combine_results", "init_world", "shard_policy",
           "sharded_forward_logprobs", "split_batch_for_ranks"]
