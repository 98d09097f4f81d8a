"""The batch script of a Slurm run (`distributed.launcher=slurm`), built from the config alone.

What it is: `job_layout` (which node of the allocation each inference server runs on, its port
and its GPUs) and `batch_script` (the text of the sbatch script). The script starts the server
steps in the background, waits until every one answers `/health` (bounded, and failing at once
if a server step exits), runs the trainer step on the first node with `RLVR_LLM_SERVER_ADDRS`
set, and on every way out (the trainer's end, an error, scancel's or the time limit's SIGTERM)
writes the exit code to `<output_dir>/slurm/exit_code` and stops every step. Pure functions:
tested without Slurm.
What it is not: submitting the script or waiting for it (`rlvr.launch.slurm`).

Why the step flags differ with GPUs (verified on Slurm 22.05):
- Without GPUs every step takes `--overlap`: the servers and the trainer share the job's CPUs,
  as the local launcher's child processes share the host's.
- With GPUs, `--overlap` would share GRES too (two server steps asking `--gres=gpu:1` both got
  GPU 0), so steps take `--exact` (only the CPUs they ask for, `STEP_CPUS`, else the first step
  holds every CPU and the next blocks) and `--mem=0` (else the first step holds all the job's
  memory and the next blocks); each then gets GPUs of its own.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from rlvr.config import Config, ConfigError

DEFAULT_FIRST_PORT = 8100  # rollout.server_port=0: the trainer step must know ports in advance
STEP_PREFIX = "rlvr-"  # step names (squeue -s): rlvr-server-<i>, rlvr-trainer


@dataclass(frozen=True)
class ServerStep:
    """One inference server's job step."""

    index: int
    node: int  # index into the job's nodes (`scontrol show hostnames`); 0 runs the trainer too
    port: int
    gpus: int  # its step's --gres=gpu:N (vllm_tensor_parallel_size); 0 on CPU nodes


@dataclass(frozen=True)
class JobLayout:
    """Where the steps of one job run."""

    nodes: int
    gpus_per_node: int  # 0: CPU nodes, no --gres anywhere
    servers: tuple[ServerStep, ...]
    trainer_gpus: int  # the trainer step's GPUs on node 0 (its one learner's)

    def steps_on(self, node: int) -> int:
        return sum(s.node == node for s in self.servers) + (node == 0)

    @property
    def tasks_per_node(self) -> int:
        """Concurrent steps on the busiest node: the job's --ntasks-per-node with GPUs."""
        return max(self.steps_on(k) for k in range(self.nodes))


@dataclass(frozen=True)
class JobFiles:
    """Everything a job reads and writes, under `<output_dir>/slurm/`."""

    dir: Path

    @property
    def script(self) -> Path:
        return self.dir / "job.sbatch"

    @property
    def config(self) -> Path:  # the resolved config every step loads
        return self.dir / "config.yaml"

    @property
    def job_log(self) -> Path:  # the batch script's own output
        return self.dir / "job.log"

    @property
    def trainer_log(self) -> Path:
        return self.dir / "trainer.log"

    @property
    def exit_code(self) -> Path:  # written by the script on every way out; no accounting needed
        return self.dir / "exit_code"

    def server_log(self, index: int) -> Path:  # the `rlvr serve` step's output
        return self.dir / f"server_{index}.log"

    def vllm_log(self, index: int) -> Path:  # the vLLM process behind it
        return self.dir / f"server_{index}.vllm.log"


def job_layout(cfg: Config) -> JobLayout:
    """Servers spread over the nodes in turn; with GPUs, node 0 keeps one for the trainer and a
    node without `vllm_tensor_parallel_size` free GPUs is skipped. Ports: `server_port + i`
    (`DEFAULT_FIRST_PORT + i` when 0), distinct across the job so two servers never clash."""
    s, r = cfg.distributed.slurm, cfg.rollout
    first_port = r.server_port or DEFAULT_FIRST_PORT
    trainer_gpus = 1 if s.gpus_per_node else 0
    tp = r.vllm_tensor_parallel_size if s.gpus_per_node else 0
    free = [s.gpus_per_node - trainer_gpus] + [s.gpus_per_node] * (s.nodes - 1)
    servers, node = [], 0
    for i in range(r.num_servers):
        for _ in range(s.nodes):  # the next node (in turn) with room for one more server
            if free[node] >= tp:
                break
            node = (node + 1) % s.nodes
        else:
            raise ConfigError(
                f"rollout.num_servers={r.num_servers} servers of rollout.vllm_tensor_parallel_"
                f"size={r.vllm_tensor_parallel_size} GPUs do not fit on distributed.slurm.nodes="
                f"{s.nodes} x gpus_per_node={s.gpus_per_node} (the trainer keeps one GPU)")
        free[node] -= tp
        servers.append(ServerStep(i, node, first_port + i, tp))
        node = (node + 1) % s.nodes
    return JobLayout(s.nodes, s.gpus_per_node, tuple(servers), trainer_gpus)


def batch_script(cfg: Config, layout: JobLayout, files: JobFiles, model_dir: str, python: str,
                 workdir: str) -> str:
    """The sbatch script of `cfg`'s run (`files.config` must hold `cfg`); `model_dir` is what
    the servers load, `python` the interpreter on the nodes, `workdir` the job's directory."""
    q = shlex.quote
    lines = ["#!/bin/bash",
             f"# rlvr: the inference servers and the trainer of experiment "
             f"{cfg.experiment.name!r} as steps of one job.",
             "# Written by `rlvr launch slurm`; every step loads the config beside this file.",
             *(f"#SBATCH {arg}" for arg in _sbatch_options(cfg, layout, files, workdir)),
             "",
             "set -o pipefail",
             "export PYTHONUNBUFFERED=1  # step logs readable while they are written",
             f"SLURM_DIR={q(str(files.dir))}",
             f"PYTHON={q(python)}",
             f"CONFIG={q(str(files.config))}",
             f"MODEL={q(model_dir)}",
             f"STARTUP_TIMEOUT_S={int(cfg.rollout.server_startup_timeout_s)}",
             f"NUM_NODES={layout.nodes}"]
    if layout.gpus_per_node:
        cpus = cfg.distributed.slurm.cpus_per_task
        lines.append(f"STEP_CPUS={cpus}" if cpus else
                     f"STEP_CPUS=$(( SLURM_CPUS_ON_NODE / {layout.tasks_per_node} ))  "
                     "# the job's CPUs shared by its steps on a node\n"
                     "(( STEP_CPUS >= 1 )) || STEP_CPUS=1")
    lines.append(_PROLOGUE)
    for server in layout.servers:
        lines.append(_server_step(server, layout))
    lines.append(_HEALTH_WAIT)
    # Broadcast weight updates connect the servers back to the trainer: at its node's name,
    # unless the config names the address (the default, 127.0.0.1, only works on one node).
    sync_host = "" if cfg.rollout.weight_sync_host else ' rollout.weight_sync_host="${NODES[0]}"'
    lines.append(_srun(layout, 0, layout.trainer_gpus, "rlvr-trainer", '"$SLURM_DIR/trainer.log"')
                 + f' \\\n    "$PYTHON" -m rlvr.cli train "$CONFIG"{sync_host} &')
    lines.append(_EPILOGUE)
    return "\n".join(lines) + "\n"


def _sbatch_options(cfg: Config, layout: JobLayout, files: JobFiles, workdir: str) -> list[str]:
    s = cfg.distributed.slurm
    # With GPUs the steps split the CPUs (--exact), so the job holds one task per step;
    # without, they overlap on one task's CPUs.
    tasks = layout.tasks_per_node if layout.gpus_per_node else 1
    options = [f"--job-name={s.job_name or cfg.experiment.name}", f"--nodes={s.nodes}",
               f"--ntasks-per-node={tasks}", f"--time={s.time}",
               f"--output={_sbatch_value(str(files.job_log))}",
               f"--chdir={_sbatch_value(workdir)}"]
    optional = {"--gres": f"gpu:{s.gpus_per_node}" if s.gpus_per_node else "",
                "--cpus-per-task": str(s.cpus_per_task) if s.cpus_per_task else "",
                "--partition": s.partition, "--account": s.account}
    options += [f"{flag}={value}" for flag, value in optional.items() if value]
    return options + list(s.sbatch_args)


def _sbatch_value(value: str) -> str:
    # sbatch splits #SBATCH lines at whitespace unless the value is double-quoted.
    return f'"{value}"' if any(c.isspace() for c in value) else value


def _srun(layout: JobLayout, node: int, gpus: int, name: str, output: str) -> str:
    if layout.gpus_per_node:
        resources = '--exact --mem=0 --cpus-per-task="$STEP_CPUS"'
        resources += f" --gres=gpu:{gpus}" if gpus else ""
    else:
        resources = "--overlap"
    return (f'srun --nodes=1 --ntasks=1 --nodelist="${{NODES[{node}]}}" --job-name={name} \\\n'
            f"    {resources} --output={output}")


def _server_step(server: ServerStep, layout: JobLayout) -> str:
    i = server.index
    return "\n".join([
        f"# server {i}: node {server.node}, port {server.port}, {server.gpus} GPU(s)",
        _srun(layout, server.node, server.gpus, f"{STEP_PREFIX}server-{i}",
              f'"$SLURM_DIR/server_{i}.log"') + " \\",
        f'    "$PYTHON" -m rlvr.cli serve "$MODEL" "$CONFIG" --host 0.0.0.0 --port {server.port} '
        f'\\\n    --log "$SLURM_DIR/server_{i}.vllm.log" --startup-timeout "$STARTUP_TIMEOUT_S" &',
        "SERVER_PIDS+=($!)",
        f'ADDRS+=("http://${{NODES[{server.node}]}}:{server.port}")'])


# The constant parts of the script: they read only the variables set above them.
_PROLOGUE = r'''
rm -f "$SLURM_DIR/exit_code"
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
SERVER_PIDS=()
ADDRS=()
TRAINER_PID=""

# The running steps (this job's, named rlvr-*) get SIGTERM in their tasks, so `rlvr serve`
# stops its vLLM process group in its own time (a SIGTERM to srun instead would have Slurm
# SIGKILL the tasks KillWait seconds later); without squeue, srun gets it. Bounded: steps
# still running after 60 s are cancelled.
rlvr_steps() {
    squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' 2>/dev/null | awk '$2 ~ /^rlvr-/ {print $1}'
}
stop_steps() {
    local pid steps deadline=$((SECONDS + 60))
    steps=$(rlvr_steps)
    if [[ -n $steps ]]; then
        scancel --signal=TERM $steps 2>/dev/null
    else
        for pid in "$@"; do kill -TERM "$pid" 2>/dev/null; done
    fi
    for pid in "$@"; do
        while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 1; done
    done
    if (( SECONDS >= deadline )); then
        rlvr_steps | xargs -r scancel
        for pid in "$@"; do kill -TERM "$pid" 2>/dev/null; done
    fi
    wait 2>/dev/null
}

# Every way out comes here: the exit code first (a cancelled job has seconds left), then the
# steps are stopped.
finish() {
    local rc=$?
    trap - EXIT TERM INT
    echo "$rc" > "$SLURM_DIR/.exit_code.tmp" &&
        mv -f "$SLURM_DIR/.exit_code.tmp" "$SLURM_DIR/exit_code"
    stop_steps $TRAINER_PID "${SERVER_PIDS[@]}"
    echo "rlvr: job ended with exit code $rc"
    exit "$rc"
}
trap finish EXIT
trap 'echo "rlvr: SIGTERM: stopping the steps" >&2; exit 143' TERM
trap 'echo "rlvr: SIGINT: stopping the steps" >&2; exit 130' INT

if (( ${#NODES[@]} < NUM_NODES )); then
    echo "rlvr: the allocation has ${#NODES[@]} node(s) ($SLURM_JOB_NODELIST)," \
         "the run needs $NUM_NODES" >&2
    exit 2
fi
echo "rlvr: job ${SLURM_JOB_ID:-?} on ${NODES[*]}"
'''

_HEALTH_WAIT = r'''
# Bounded wait until every server answers /health (no proxy: they are on the cluster's network);
# a server step that exits meanwhile fails the job at once, naming its log.
healthy() {
    "$PYTHON" -c 'import sys, urllib.request as u
u.build_opener(u.ProxyHandler({})).open(sys.argv[1] + "/health", timeout=2)' "$1" 2>/dev/null
}
fail_start() {
    echo "rlvr: inference server $1 (${ADDRS[$1]}) $2; its log: $SLURM_DIR/server_$1.log" >&2
    exit 4
}
deadline=$((SECONDS + STARTUP_TIMEOUT_S + 60))  # + the time Slurm takes to start the steps
for i in "${!ADDRS[@]}"; do
    until healthy "${ADDRS[$i]}"; do
        for j in "${!SERVER_PIDS[@]}"; do
            kill -0 "${SERVER_PIDS[$j]}" 2>/dev/null || fail_start "$j" "exited while starting"
        done
        (( SECONDS < deadline )) || fail_start "$i" "was not healthy after $STARTUP_TIMEOUT_S s"
        sleep 2
    done
done
export RLVR_LLM_SERVER_ADDRS=$(IFS=,; echo "${ADDRS[*]}")
echo "rlvr: ${#ADDRS[@]} inference server(s) healthy after $SECONDS s: $RLVR_LLM_SERVER_ADDRS"

# The trainer in the background, so that a SIGTERM is handled at once, not after it ends.'''

_EPILOGUE = r'''TRAINER_PID=$!
wait "$TRAINER_PID"
rc=$?
TRAINER_PID=""
echo "rlvr: the trainer exited with status $rc"
exit "$rc"'''
