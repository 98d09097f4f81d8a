"""How the run is laid out and watched: `distributed` (and `slurm`), `checkpoint`, `eval`,
`logging`, `health`.
One section per dataclass; each field's comment, range and choices are its facts
(`rlvr.config.fields`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from rlvr.config.fields import (AT_LEAST_ONE, GREEDY_OR_SAMPLED, NON_NEGATIVE, POSITIVE, TIMEOUT,
                                UNIT_OPEN_LOW, Range, choice, ranged)


@dataclass
class SlurmConfig:
    """`distributed.launcher=slurm` (`rlvr launch slurm CONFIG`): one batch job whose steps run
    the inference servers and the trainer. Inside an allocation (SLURM_JOB_ID set) it uses it."""

    partition: str = ""  # empty: the cluster's default
    account: str = ""  # empty: the user's default
    time: str = "04:00:00"  # the job's time limit; quote it in YAML
    # servers are spread over the nodes; the trainer runs on the first
    nodes: int = ranged(1, AT_LEAST_ONE)
    # --gres=gpu:N per node; each server step takes tensor_parallel GPUs
    gpus_per_node: int = ranged(0, NON_NEGATIVE)
    cpus_per_task: int = ranged(0, NON_NEGATIVE)  # 0: Slurm's default
    job_name: str = ""  # empty: experiment.name
    sbatch_args: list[str] = field(default_factory=list)  # passed to sbatch as they are
    python: str = ""  # the interpreter on the nodes; empty: the one running `rlvr launch`
    # sbatch --requeue: a job Slurm stops early (preemption, node failure, the time-limit signal
    # below, scontrol requeue) starts again and resumes from its saved state by itself
    requeue: bool = True
    # seconds before the time limit Slurm signals the job (--signal=B:USR1@N): the trainer
    # finishes its step and saves, then the job requeues itself; 0: no signal
    signal_grace_s: int = ranged(180, Range(low=0, high=65535,
                                            why="Slurm's --signal takes 0-65535 s"))


@dataclass
class DistributedConfig:
    # Learner ranks (FSDP2 shards, a process each) on each node, one entry per node the
    # learners span ([1, 1] is two nodes). ray: the learners of one node share a placement
    # bundle, nodes are spread (STRICT_SPREAD); local: one entry (the launcher starts the
    # ranks of this machine; torchrun may start several nodes'); slurm: the same count on
    # each of the job's first nodes (srun --ntasks-per-node). docs/launchers.md.
    num_learners_per_node: list[int] = ranged(field(default_factory=lambda: [1]), NON_NEGATIVE)
    # local: this process trains (rank 0; further ranks are its child processes, or
    # torchrun's); ray: learners are Ray actors forming one gloo/NCCL group, on the cluster at
    # ray_address or a Ray started here; slurm: `rlvr launch slurm` runs inference servers and
    # the learner ranks as steps of one job. With rollout.engine=remote and no server
    # addresses, each launcher starts the servers.
    launcher: str = choice("local", {"local", "ray", "slurm"})
    # none | ddp | fsdp (FSDP2; fsdp is the ZeRO-3 equivalent)
    sharding: str = choice("fsdp", {"none", "ddp", "fsdp"})
    cpu_offload: bool = False  # FSDP2 CPU offload of parameters, gradients, optimizer state
    # The prompt mixer and the training verifiers in a Ray actor of their own, feeding the
    # engine actors and the learners (needs rollout.num_engines >= 1).
    data_prep_actor: bool = False
    ray_address: str = ""  # "" starts (or reuses) a local Ray; "auto" or host:port joins one
    # every collective raises after this; no hangs
    collective_timeout_s: float = ranged(600.0, TIMEOUT)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)


@dataclass
class CheckpointConfig:
    save_freq: int = ranged(0, NON_NEGATIVE)  # steps between model saves; 0: only the final model
    # -1 keeps all
    keep_last_n_checkpoints: int = ranged(3, Range(low=1, also=(-1,), why="-1 keeps all"))
    save_final: bool = True  # the final model in <output_dir>/final
    # steps between full training-state saves; 0 disables
    checkpoint_state_freq: int = ranged(0, NON_NEGATIVE)
    checkpoint_state_dir: Optional[str] = None  # default: <output_dir>/state
    keep_last_n_states: int = ranged(2, AT_LEAST_ONE)  # older training states are deleted
    # full: the learner's state gathered on rank 0 into one file (any launcher resumes it);
    # sharded: torch.distributed.checkpoint, each rank writing its own shard (large models),
    # resumable on any number of ranks.
    state_format: str = choice("full", {"full", "sharded"})
    resume: bool = True  # continue from the latest good state in checkpoint_state_dir


@dataclass
class EvalConfig:
    local_eval_every: int = ranged(0, NON_NEGATIVE)  # steps between evals; 0 disables in-loop eval
    eval_at_start: bool = True  # score the untrained model first, as the baseline
    # 0: greedy (then num_samples must be 1: greedy samples are equal)
    temperature: float = ranged(0.0, GREEDY_OR_SAMPLED)
    max_prompts: int = ranged(64, AT_LEAST_ONE)  # per eval set
    # samples per prompt: pass@k over them, pass@1 as their mean, maj@n
    num_samples: int = ranged(1, AT_LEAST_ONE)
    # each k in [1, num_samples]
    pass_at_k: list[int] = ranged(field(default_factory=lambda: [1]), AT_LEAST_ONE)
    top_p: float = ranged(1.0, UNIT_OPEN_LOW)  # nucleus sampling of eval samples
    response_length: Optional[int] = ranged(None, AT_LEAST_ONE)  # null: rollout.response_length


@dataclass
class LoggingConfig:
    with_tracking: bool = False  # TensorBoard and W&B
    wandb_project: str = "rlvr"  # the W&B project of tracked runs
    # offline needs no network; online; disabled
    wandb_mode: str = choice("offline", {"online", "offline", "disabled"})
    progress_bar: bool = True  # step lines on the console (a bar on a terminal)
    # for MFU; None picks a figure for the device and dtype
    peak_flops: Optional[float] = ranged(None, POSITIVE)
    # Every step's samples (prompt, completion, scores, reward, advantage, trained or not) as
    # Parquet under <output_dir>/traces/, eval samples under traces/eval/ (rlvr.metrics.traces).
    save_traces: bool = False


@dataclass
class HealthConfig:
    """The run's health gates (`rlvr.run.health`, docs/health.md): each step, signals read from
    its metrics and the run's history, a warning when one crosses its bound, and a stop (exit
    9, the state saved) where the run is surely wasted."""

    enabled: bool = True  # false: no gate is read (the verifier and learning-signal stops stay)
    # Sampler/trainer mismatch, over the step's response tokens before any update of its batch:
    # mean |engine - learner| logprob (debug/engine_vs_local_logprob_diff_mean)
    mismatch_warn_logprob_diff: float = ranged(0.1, POSITIVE)
    # stop past it (stop_after_steps in a row)
    mismatch_stop_logprob_diff: float = ranged(0.5, POSITIVE)
    # KL(engine || learner) per token (debug/engine_vs_local_kl)
    mismatch_warn_kl: float = ranged(0.02, POSITIVE)
    mismatch_stop_kl: float = ranged(0.25, POSITIVE)  # stop past it (stop_after_steps in a row)
    # steps in a row past a stop bound before the run stops
    stop_after_steps: int = ranged(2, AT_LEAST_ONE)
    # the trend gates compare the halves of the last this many steps
    window_steps: int = ranged(10, Range(low=2, why="two halves of at least a step each"))
    # reward against held-out: the trend over the last this many evals
    hacking_evals: int = ranged(3, Range(low=2, why="a trend needs two evals"))
    # a training reward rising at least this much (absolute) rises
    reward_rise: float = ranged(0.05, POSITIVE)
    # a reward or held-out pass@1 moving up less than this (absolute) is flat (or falls)
    flat_reward: float = ranged(0.02, POSITIVE)
    # responses this fraction longer (second half / first) grow
    length_growth: float = ranged(0.3, POSITIVE)
    entropy_min: float = ranged(0.01, NON_NEGATIVE)  # policy entropy in nats per token: warn below
    # share of policy tokens clipped (policy/clipfrac_avg): warn above
    clipfrac_max: float = ranged(0.3, UNIT_OPEN_LOW)
    # share of samples the verifier failed: warn above
    verifier_error_rate_max: float = ranged(0.1, UNIT_OPEN_LOW)
