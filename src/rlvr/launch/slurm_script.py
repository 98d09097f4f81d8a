"""The batch script of a Slurm run (`distributed.launcher=slurm`), built from the config alone.

What it is: `job_layout` (which node of the allocation each inference server runs on, its port
and its GPUs) and `batch_script` (the text of the sbatch script). The script starts the server
steps in the background, waits until every one answers `/health` (bounded, and failing at once
if a server step exits), runs the trainer step on the first node with `RLVR_LLM_SERVER_ADDRS`
set, and on every way out (the trainer's end, an error, scancel's or the time limit's SIGTERM)
writes the exit code to `<output_dir>/slurm/exit_code` and stops every step. Pure functions:
tested without Slurm.

Preemption and requeue: the job asks for `--requeue` and for SIGUSR1 to its batch shell
`distributed.slurm.signal_grace_s` seconds before its time limit. On that signal the script
sends SIGTERM to the trainer's step only (the servers keep serving the step it finishes), waits
up to the grace for the trainer to save its state and exit 143, then stops the servers and
runs `scontrol requeue` on itself; the requeued job (same script, SLURM_RESTART_COUNT > 0)
runs the same `rlvr train`, which resumes from that state (`rlvr.checkpoint.rerun`). A job that
Slurm itself requeues (scontrol requeue, preemption, a failed node) gets SIGTERM everywhere at
once; the trainer saves if it can in Slurm's KillWait, else the rerun resumes from the last
state saved before. Logs are appended across restarts, so each attempt's lines stay.
What it is not: submitting the script or waiting for it (`rlvr.launch.slurm`).

Servers bind their node's address as Slurm knows it (`NodeAddr`, else the node's name), not
every interface, and the trainer reaches them there. Every step finds the run's key through
`RLVR_SERVER_KEY_FILE` (`<output_dir>/server.key`, 0600, written by `rlvr.launch.slurm.prepare`):
the script holds the file's path, never the key.

Why the step flags differ with GPUs (verified on Slurm 22.05):
- Without GPUs every step takes `--overlap`: the servers and the trainer share the job's CPUs,
  as the local launcher's child processes share the host's.
- With GPUs, `--overlap` would share GRES too (two server steps asking `--gres=gpu:1` both got
  GPU 0), so steps take `--exact` (only the CPUs they ask for, `STEP_CPUS`, else the first step
  holds every CPU and the next blocks) and `--mem=0` (else the first step holds all the job's
  memory and the next blocks); each then gets GPUs of its own.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from rlvr.config import Config, ConfigError
from rlvr.serving.auth import KEY_FILE_ENV, run_key_path

DEFAULT_FIRST_PORT = 8100  # rollout.server_port=0: the trainer step must know ports in advance
STEP_PREFIX = "rlvr-"  # step names (squeue -s): rlvr-server-<i>, rlvr-trainer


@dataclass(frozen=True)
class ServerStep:
    """One inference server's job step."""

    index: int
    node: int  # index into the job's nodes (`scontrol show hostnames`); 0 runs the trainer too
    port: int
    gpus: int  # its step's --gres=gpu:N (tensor_parallel_size); 0 on CPU nodes


@dataclass(frozen=True)
class JobLayout:
    """Where the steps of one job run."""

    nodes: int
    gpus_per_node: int  # 0: CPU nodes, no --gres anywhere
    servers: tuple[ServerStep, ...]
    trainer_gpus: int  # the trainer step's GPUs on each of its nodes: one per learner task
    # The trainer step: `learners_per_node` learner tasks (ranks) on each of the job's first
    # `learner_nodes` nodes, rank 0 (the trainer) on node 0.
    learner_nodes: int = 1
    learners_per_node: int = 1

    @property
    def num_learners(self) -> int:
        return self.learner_nodes * self.learners_per_node

    def steps_on(self, node: int) -> int:
        """Tasks running at once on `node`: its servers and its learner ranks."""
        learners = self.learners_per_node if node < self.learner_nodes else 0
        return sum(s.node == node for s in self.servers) + learners

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

    def engine_log(self, index: int) -> Path:  # the serving engine's process behind it
        return self.dir / f"server_{index}.engine.log"


def job_layout(cfg: Config) -> JobLayout:
    """Learner ranks on the first nodes (`distributed.num_learners_per_node`, the same count on
    each), servers spread over the nodes in turn; with GPUs, each learner keeps one GPU of its
    node and a node without `tensor_parallel_size` free GPUs is skipped. Ports:
    `server_port + i` (`DEFAULT_FIRST_PORT + i` when 0), distinct across the job so two servers
    never clash."""
    s, r = cfg.distributed.slurm, cfg.rollout
    first_port = r.server_port or DEFAULT_FIRST_PORT
    learner_nodes = len(cfg.distributed.num_learners_per_node)
    per_node = cfg.distributed.num_learners_per_node[0]
    trainer_gpus = per_node if s.gpus_per_node else 0
    tp = r.tensor_parallel_size if s.gpus_per_node else 0
    free = [s.gpus_per_node - (trainer_gpus if k < learner_nodes else 0)
            for k in range(s.nodes)]
    servers, node = [], 0
    for i in range(r.num_servers):
        for _ in range(s.nodes):  # the next node (in turn) with room for one more server
            if free[node] >= tp:
                break
            node = (node + 1) % s.nodes
        else:
            raise ConfigError(
                f"rollout.num_servers={r.num_servers} servers of rollout.tensor_parallel_"
                f"size={r.tensor_parallel_size} GPUs do not fit on distributed.slurm.nodes="
                f"{s.nodes} x gpus_per_node={s.gpus_per_node} (the learners keep one GPU "
                "each)")
        free[node] -= tp
        servers.append(ServerStep(i, node, first_port + i, tp))
        node = (node + 1) % s.nodes
    return JobLayout(s.nodes, s.gpus_per_node, tuple(servers), trainer_gpus, learner_nodes,
                     per_node)


def batch_script(cfg: Config, layout: JobLayout, files: JobFiles, model_dir: str, python: str,
                 workdir: str) -> str:
    """The sbatch script of `cfg`'s run (`files.config` must hold `cfg`); `model_dir` is what
    the servers load, `python` the interpreter on the nodes, `workdir` the job's directory.
    ConfigError, before any text is built, for a value Slurm or the shell would misread
    (`check_script_values`)."""
    check_script_values(cfg, files, workdir, [model_dir, python])
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
             "# The run's server key is in this 0600 file; the script never holds the key.",
             f"export {KEY_FILE_ENV}={q(str(run_key_path(cfg.experiment.output_dir)))}",
             f"STARTUP_TIMEOUT_S={int(cfg.rollout.server_startup_timeout_s)}",
             # How long the trainer may take to finish its step and save after SIGUSR1: the
             # grace, less time to stop the servers and requeue.
             f"SAVE_WAIT_S={_save_wait_s(cfg.distributed.slurm.signal_grace_s)}",
             f"NUM_NODES={layout.nodes}"]
    if layout.gpus_per_node:
        cpus = cfg.distributed.slurm.cpus_per_task
        lines.append(f"STEP_CPUS={cpus}" if cpus else
                     f"STEP_CPUS=$(( SLURM_CPUS_ON_NODE / {layout.tasks_per_node} ))  "
                     "# the job's CPUs shared by its steps on a node\n"
                     "(( STEP_CPUS >= 1 )) || STEP_CPUS=1")
    lines.append(_PROLOGUE)
    lines.append(_NODE_ADDRESSES)
    for server in layout.servers:
        lines.append(_server_step(server, layout))
    lines.append(_HEALTH_WAIT)
    # Broadcast weight updates connect the servers back to the trainer: at its node's address,
    # unless the config names one (the default, 127.0.0.1, only works on one node).
    sync_host = "" if cfg.rollout.weight_sync_host else \
        ' rollout.weight_sync_host="${NODE_ADDRS[0]}"'
    lines.append(_trainer_step(layout, sync_host))
    lines.append(_EPILOGUE)
    return "\n".join(lines) + "\n"


def _sbatch_options(cfg: Config, layout: JobLayout, files: JobFiles, workdir: str) -> list[str]:
    s = cfg.distributed.slurm
    # With GPUs the steps split the CPUs (--exact), so the job holds one task per step (and
    # per learner rank); without, they overlap on the learner ranks' CPUs.
    tasks = layout.tasks_per_node if layout.gpus_per_node else layout.learners_per_node
    options = [f"--job-name={s.job_name or cfg.experiment.name}", f"--nodes={s.nodes}",
               f"--ntasks-per-node={tasks}", f"--time={s.time}",
               f"--output={_sbatch_value(str(files.job_log))}",
               f"--chdir={_sbatch_value(workdir)}"]
    optional = {"--gres": f"gpu:{s.gpus_per_node}" if s.gpus_per_node else "",
                "--cpus-per-task": str(s.cpus_per_task) if s.cpus_per_task else "",
                "--partition": s.partition, "--account": s.account}
    options += [f"{flag}={value}" for flag, value in optional.items() if value]
    # A requeued job appends to its log (each attempt's lines stay); Slurm signals the batch
    # shell (B:) before the time limit so the trainer can save and the job requeue itself.
    options += ["--open-mode=append", "--requeue" if s.requeue else "--no-requeue"]
    if s.signal_grace_s:
        options.append(f"--signal=B:USR1@{s.signal_grace_s}")
    return options + list(s.sbatch_args)


def _save_wait_s(grace_s: int) -> int:
    """Seconds the trainer gets to save after SIGUSR1: the grace less 30 s for stopping the
    servers and requeueing (at least 10)."""
    return max(10, grace_s - 30)


# What each value on an #SBATCH line may hold. A line break would end the comment and make the
# rest a command of the script; the sets are those Slurm documents (names of partitions and
# accounts, time formats), job names kept to characters no tool quotes.
_JOB_NAME = re.compile(r"[A-Za-z0-9_.+@:=,-]{1,200}")
_SLURM_NAMES = re.compile(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")  # a partition list, an account
_TIME = re.compile(r"(\d+-\d{1,2}(:\d{1,2}){0,2}|\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)",
                   re.IGNORECASE)  # min, min:s, h:min:s, d-h, d-h:min, d-h:min:s


def _control_free(value: str) -> bool:
    return not any(unicodedata.category(c)[0] == "C" or c in "\u2028\u2029" for c in value)


def check_script_values(cfg: Config, files: JobFiles, workdir: str, shell_values: list[str]
                        ) -> None:
    """Every value the script will hold is one Slurm and bash read as that value: names of the
    character sets Slurm accepts, a time in one of its formats, options starting with '-', and
    no line break or control character anywhere (paths and `shell_values` included, which are
    also shell-quoted where they reach a command). ConfigError naming every offender."""
    s = cfg.distributed.slurm
    errors = []
    name_field = "distributed.slurm.job_name" if s.job_name else "experiment.name"
    if not _JOB_NAME.fullmatch(s.job_name or cfg.experiment.name):
        errors.append(f"{name_field}={s.job_name or cfg.experiment.name!r} names the Slurm job: "
                      "use letters, digits and _.+@:=,- only (set distributed.slurm.job_name to "
                      "keep experiment.name)")
    for field, value in (("partition", s.partition), ("account", s.account)):
        if value and not _SLURM_NAMES.fullmatch(value):
            errors.append(f"distributed.slurm.{field}={value!r} is not a Slurm {field} name "
                          "(letters, digits and _.- ; partitions separated by commas)")
    if not _TIME.fullmatch(s.time):
        errors.append(f"distributed.slurm.time={s.time!r} is not a Slurm time (minutes, "
                      "H:MM:SS, D-HH:MM:SS, ...)")
    for i, arg in enumerate(s.sbatch_args):
        if not arg.startswith("-") or not _control_free(arg):
            errors.append(f"distributed.slurm.sbatch_args[{i}]={arg!r} must be one sbatch "
                          "option (starting with '-') with no line break or control character")
    paths = {"experiment.output_dir": str(files.dir), "the working directory": workdir}
    for field, value in paths.items():  # on #SBATCH lines, double-quoted when they hold spaces
        if not _control_free(value) or '"' in value:
            errors.append(f"{field} {value!r} holds a line break, control character or double "
                          "quote, which an #SBATCH line cannot carry")
    errors += [f"{value!r} holds a line break or control character" for value in shell_values
               if not _control_free(value)]
    if errors:
        raise ConfigError("the Slurm script cannot carry these values:\n  - "
                          + "\n  - ".join(errors))


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


def _trainer_step(layout: JobLayout, sync_host: str) -> str:
    """The trainer's step: one task running `rlvr train`, or with several learners one task per
    rank on the first nodes, each given the environment torchrun would give it (rank 0 is the
    trainer, the others serve it: `rlvr.distributed.ranks`), one rendezvous at node 0, and
    `--kill-on-bad-exit` so a rank that fails ends the step."""
    train = f'"$PYTHON" -m rlvr.cli train "$CONFIG"{sync_host} &'
    if layout.num_learners == 1:
        return "\n".join([
            _NEW_TRAINER_LOG,
            _srun(layout, 0, layout.trainer_gpus, "rlvr-trainer", '"$SLURM_DIR/trainer.log"')
            + f" --open-mode=append \\\n    {train}"])
    m, n = layout.learner_nodes, layout.learners_per_node
    if layout.gpus_per_node:
        resources = f'--exact --mem=0 --cpus-per-task="$STEP_CPUS" --gres=gpu:{n}'
    else:
        resources = "--overlap"
    return "\n".join([
        f"# the learner ranks: {n} per node on nodes 0-{m - 1}, rank 0 (the trainer) on node 0;",
        "# one rendezvous at node 0, every rank's output in trainer.log",
        'export MASTER_ADDR="${NODE_ADDRS[0]}"',
        "export MASTER_PORT=$(\"$PYTHON\" -c 'import socket; s = socket.socket(); "
        "s.bind((\"\", 0)); print(s.getsockname()[1])')",
        f'LEARNER_NODES=$(IFS=,; echo "${{NODES[*]:0:{m}}}")',
        _NEW_TRAINER_LOG,
        f'srun --nodes={m} --ntasks={m * n} --ntasks-per-node={n} --nodelist="$LEARNER_NODES" '
        f"--job-name=rlvr-trainer \\\n    --kill-on-bad-exit=1 {resources} "
        '--output="$SLURM_DIR/trainer.log" --open-mode=append \\',
        "    bash -c 'export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID "
        "WORLD_SIZE=$SLURM_NTASKS LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE; exec \"$@\"' "
        "rlvr-rank \\",
        f"    {train}"])


def _server_step(server: ServerStep, layout: JobLayout) -> str:
    i = server.index
    return "\n".join([
        f"# server {i}: node {server.node}, port {server.port}, {server.gpus} GPU(s)",
        _srun(layout, server.node, server.gpus, f"{STEP_PREFIX}server-{i}",
              f'"$SLURM_DIR/server_{i}.log"') + " \\",
        f'    "$PYTHON" -m rlvr.cli serve "$MODEL" "$CONFIG" '
        f'--host "${{NODE_ADDRS[{server.node}]}}" --port {server.port} \\\n'
        f'    --log "$SLURM_DIR/server_{i}.engine.log" --startup-timeout "$STARTUP_TIMEOUT_S" &',
        "SERVER_PIDS+=($!)",
        f'ADDRS+=("http://${{NODE_ADDRS[{server.node}]}}:{server.port}")'])


# The constant parts of the script: they read only the variables set above them.
_NEW_TRAINER_LOG = ('(( ${SLURM_RESTART_COUNT:-0} > 0 )) || : > "$SLURM_DIR/trainer.log"  '
                    "# a requeued job appends")
_PROLOGUE = r'''
rm -f "$SLURM_DIR/exit_code"
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
SERVER_PIDS=()
ADDRS=()
TRAINER_PID=""
TRAINER_RC=""  # the trainer step's exit status, once it ended
REQUEUE=""  # set by SIGUSR1: save, then requeue this job

# The running steps (this job's, named rlvr-*) get SIGTERM in their tasks, so `rlvr serve`
# stops its engine's process group in its own time (a SIGTERM to srun instead would have Slurm
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

# SIGUSR1 (Slurm's warning before the time limit, or `scancel --signal=USR1 --batch`): the
# trainer's step alone gets SIGTERM, so it finishes its step on servers still serving and
# saves; the job then requeues itself if the trainer stopped on that signal (exit 143) or had
# not started. A trainer that finished (0) or failed (any other code) is not run again.
stop_trainer() {
    local deadline=$((SECONDS + SAVE_WAIT_S)) steps
    steps=$(squeue -h -s -j "$SLURM_JOB_ID" -o '%i %j' 2>/dev/null |
            awk '$2 == "rlvr-trainer" {print $1}')
    if [[ -n $steps ]]; then
        scancel --signal=TERM $steps 2>/dev/null
    else
        kill -TERM "$TRAINER_PID" 2>/dev/null
    fi
    while kill -0 "$TRAINER_PID" 2>/dev/null && (( SECONDS < deadline )); do sleep 1; done
    if kill -0 "$TRAINER_PID" 2>/dev/null; then
        echo "rlvr: the trainer did not stop within $SAVE_WAIT_S s: the requeued job resumes" \
             "from the last state saved before" >&2
    else
        wait "$TRAINER_PID"
        TRAINER_RC=$?
        TRAINER_PID=""
        echo "rlvr: the trainer exited with status $TRAINER_RC after" \
             "$((SECONDS - deadline + SAVE_WAIT_S)) s"
    fi
}
requeue_after_save() {
    [[ -n $TRAINER_PID ]] && stop_trainer
    if [[ -n $TRAINER_RC && $TRAINER_RC != 143 ]]; then
        return "$TRAINER_RC"  # finished, or failed: not a run to start again
    fi
    stop_steps "${SERVER_PIDS[@]}"
    SERVER_PIDS=()
    echo "rlvr: requeueing job $SLURM_JOB_ID (restart $(( ${SLURM_RESTART_COUNT:-0} + 1 ))):" \
         "the trainer resumes from its saved state when it starts again"
    rm -f "$SLURM_DIR/exit_code"
    if scontrol requeue "$SLURM_JOB_ID"; then
        # The job is queued again: nothing of this instance may touch it (or its next
        # instance's steps) any more, and no exit code is written.
        exit 0
    fi
    echo "rlvr: scontrol requeue $SLURM_JOB_ID failed (--no-requeue, or the cluster does not" \
         "requeue): rerun the same command to resume" >&2
    return 143
}

# Every way out comes here: the exit code first (a cancelled job has seconds left), then the
# steps are stopped.
finish() {
    local rc=$?
    trap - EXIT TERM INT USR1
    if [[ -n $REQUEUE ]]; then
        requeue_after_save
        rc=$?
    fi
    echo "$rc" > "$SLURM_DIR/.exit_code.tmp" &&
        mv -f "$SLURM_DIR/.exit_code.tmp" "$SLURM_DIR/exit_code"
    stop_steps $TRAINER_PID "${SERVER_PIDS[@]}"
    echo "rlvr: job ended with exit code $rc"
    exit "$rc"
}
trap finish EXIT
trap 'echo "rlvr: SIGTERM: stopping the steps" >&2; exit 143' TERM
trap 'echo "rlvr: SIGINT: stopping the steps" >&2; exit 130' INT
trap 'echo "rlvr: SIGUSR1: Slurm stops this job soon (time limit or preemption): the trainer" \
          "saves its state, then the job is requeued" >&2; REQUEUE=1; exit 143' USR1

if (( ${#NODES[@]} < NUM_NODES )); then
    echo "rlvr: the allocation has ${#NODES[@]} node(s) ($SLURM_JOB_NODELIST)," \
         "the run needs $NUM_NODES" >&2
    exit 2
fi
echo "rlvr: job ${SLURM_JOB_ID:-?} on ${NODES[*]} (restart ${SLURM_RESTART_COUNT:-0})"
'''

_NODE_ADDRESSES = r'''
# Each node's address as Slurm knows it (NodeAddr; the node's name when it gives none): the
# servers bind it, not every interface, and the trainer reaches them there.
NODE_ADDRS=()
for node in "${NODES[@]}"; do
    addr=$(scontrol show node -o "$node" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeAddr=//p')
    NODE_ADDRS+=("${addr:-$node}")
done'''

_HEALTH_WAIT = r'''
# Bounded wait until every server answers /health and proves it holds the run's key, which is
# never sent (`is_healthy`: a challenge, no proxy, no redirect), so a process that took a
# server's port while the server was building its engine neither gets the key nor passes; a server
# step that exits meanwhile fails the job at once, naming its log.
healthy() {
    "$PYTHON" -c 'import sys
from rlvr.serving.auth import key_from_env
from rlvr.serving.server import is_healthy, server_name
try:
    key = key_from_env()
except (OSError, ValueError):  # no key file: a server without a door answers a plain 200
    key = None
address = sys.argv[1]
sys.exit(0 if is_healthy(address, 2.0, key=key, name=server_name(address)) else 1)' \
        "$1" 2>/dev/null
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
TRAINER_RC=$?
TRAINER_PID=""
echo "rlvr: the trainer exited with status $TRAINER_RC"
exit "$TRAINER_RC"'''
