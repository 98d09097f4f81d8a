"""Launchers: run a config's training where `distributed.launcher` says, with the inference
servers it asks for.

- `local`: this process trains (the embedded default); with several learners it is rank 0 and
  ranks 1..N-1 are child processes (`rlvr.launch.local_ranks`); servers, if any, are child
  processes.
- `ray`: learners (and engines) are Ray actors (`rlvr.distributed`); servers are Ray actors too.
- `slurm`: `rlvr launch slurm CONFIG` submits one job whose steps run the servers and the
  learner ranks (`rlvr.launch.slurm`).
Under torchrun's environment (RANK, WORLD_SIZE, ...) only rank 0 trains; the other ranks serve
it (`rlvr.distributed.ranks`), whichever launcher started them. docs/launchers.md.

`launch(cfg)` is what `rlvr train` calls. It starts servers only for `rollout.engine=remote`
with no addresses given (neither `rollout.server_addresses` nor `RLVR_LLM_SERVER_ADDRS`), waits
until all are healthy, trains, and stops them on every way out.
"""

from rlvr.launch.run import launch, needs_servers

__all__ = ["launch", "needs_servers"]
