"""Inference servers: start one as rlvr needs it (`server`), and talk to it (`client`).

`rlvr serve MODEL` starts one for a user; launchers (`rlvr.launch`) start the ones a run asks
for; `rlvr.rollout.remote.engine` generates on them and loads new weights into them. Every one
demands the run's key on every route (`auth`: where the key lives and how it is checked;
`guard`: the door vLLM runs in front of its routes). docs/security.md has the whole model.
"""

from rlvr.serving.server import (ServerProcess, ServerSettings, ServerStartError, free_port,
                                 is_healthy, server_command, server_env)

__all__ = ["ServerProcess", "ServerSettings", "ServerStartError", "free_port", "is_healthy",
           "server_command", "server_env"]
