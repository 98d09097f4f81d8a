"""The cross-field rules of a config: `validate` collects every problem and fails once, naming
all the fields; `warnings_for` lists settings that work but deserve a loud line at start.
Names of registered parts are checked where the parts are built (`rlvr.build`)."""

from __future__ import annotations

import re
import string

from rlvr.config.schema import (ConfigError, JudgeConfig, RewardsConfig, RolloutConfig, Config)


def _choice(errors: list[str], name: str, value: object, allowed: set | list) -> None:
    if value not in allowed:
        errors.append(f"{name}={value!r} is not one of {sorted(allowed)}")


def _check_distributed(errors: list[str], cfg: Config) -> None:
    d = cfg.distributed
    _choice(errors, "distributed.launcher", d.launcher, {"local", "ray", "slurm"})
    _check_remote(errors, cfg)
    _choice(errors, "distributed.sharding", d.sharding, {"none", "ddp", "fsdp"})
    if any(n < 0 for n in d.num_learners_per_node) or cfg.world_size < 1:
        errors.append(f"distributed.num_learners_per_node={d.num_learners_per_node} needs at "
                      "least one learner and no negative count")
    if d.launcher in ("local", "slurm") and cfg.world_size != 1:
        errors.append(f"distributed.num_learners_per_node={d.num_learners_per_node}: the "
                      f"{d.launcher} launcher runs one learner; set distributed.launcher=ray")
    if d.launcher == "ray":
        if cfg.world_size > 1 and d.sharding == "none":
            errors.append(f"distributed.sharding=none cannot split {cfg.world_size} learners; "
                          "use ddp or fsdp")
    if len(d.num_learners_per_node) > 1 and d.launcher != "ray":
        errors.append(f"distributed.num_learners_per_node={d.num_learners_per_node} spans "
                      f"{len(d.num_learners_per_node)} nodes, which needs distributed.launcher=ray")
    r = cfg.rollout
    if r.vllm_num_engines < 0:
        errors.append(f"rollout.vllm_num_engines={r.vllm_num_engines} must be >= 0")
    if r.vllm_num_engines > 0 and d.launcher != "ray":
        errors.append(f"rollout.vllm_num_engines={r.vllm_num_engines} starts engine actors, "
                      "which needs distributed.launcher=ray (0 keeps the engine in process)")
    if d.data_prep_actor and (d.launcher != "ray" or r.vllm_num_engines < 1):
        errors.append("distributed.data_prep_actor=true feeds engine actors: it needs "
                      "distributed.launcher=ray and rollout.vllm_num_engines >= 1")
    if r.vllm_block_size < 1 or r.vllm_block_size % 16:
        errors.append(f"rollout.vllm_block_size={r.vllm_block_size} must be a positive multiple "
                      "of 16 (of 32 on CPU)")
    if r.vllm_tensor_parallel_size < 1:
        errors.append(f"rollout.vllm_tensor_parallel_size={r.vllm_tensor_parallel_size} must "
                      "be >= 1")
    if r.vllm_tensor_parallel_size > 1 and r.engine not in ("vllm", "remote", "auto"):
        errors.append(f"rollout.vllm_tensor_parallel_size={r.vllm_tensor_parallel_size} needs "
                      f"rollout.engine=vllm or remote, not {r.engine!r}")
    if d.collective_timeout_s <= 0:
        errors.append(f"distributed.collective_timeout_s={d.collective_timeout_s} must be > 0")


def _check_remote(errors: list[str], cfg: Config) -> None:
    r, d = cfg.rollout, cfg.distributed
    _choice(errors, "rollout.weight_update", r.weight_update, {"disk", "broadcast"})
    if r.num_servers < 1 or r.server_max_retries < 0 or not 0 <= r.server_port < 65536:
        errors.append("rollout.num_servers must be >= 1, rollout.server_max_retries >= 0 and "
                      "rollout.server_port in [0, 65535]")
    if r.server_request_timeout_s <= 0 or r.server_startup_timeout_s <= 0:
        errors.append("rollout.server_request_timeout_s and server_startup_timeout_s must be > 0")
    if r.engine != "remote":
        if r.server_addresses:
            errors.append(f"rollout.server_addresses={list(r.server_addresses)} needs "
                          f"rollout.engine=remote (not {r.engine!r})")
        if d.launcher == "slurm":
            errors.append(f"distributed.launcher=slurm runs generation on inference servers: "
                          f"set rollout.engine=remote (not {r.engine!r})")
        return
    if r.vllm_num_engines:
        errors.append(f"rollout.engine=remote generates on servers; rollout.vllm_num_engines="
                      f"{r.vllm_num_engines} starts engine actors: set it to 0")
    if r.colocate:
        errors.append("rollout.colocate=true puts an in-process vLLM to sleep; with "
                      "rollout.engine=remote the servers own their devices: set it to false")
    if d.data_prep_actor:
        errors.append("distributed.data_prep_actor=true feeds engine actors; with "
                      "rollout.engine=remote set it to false")
    if d.launcher == "slurm" and r.server_addresses:
        errors.append("distributed.launcher=slurm starts the servers itself: leave "
                      "rollout.server_addresses empty")
    s = d.slurm
    if d.launcher == "slurm" and s.time.isdigit():  # YAML 1.1 reads 24:00:00 as 86400 (base 60)
        errors.append(f"distributed.slurm.time={s.time!r} is a bare number, which is what YAML "
                      "makes of an unquoted H:MM:SS (24:00:00 -> 86400); quote it (time: "
                      "\"24:00:00\", or 'distributed.slurm.time=\"24:00:00\"' on the command "
                      "line) or write D-HH:MM:SS (1-00:00:00)")
    if s.nodes < 1 or s.gpus_per_node < 0 or s.cpus_per_task < 0:
        errors.append("distributed.slurm.nodes must be >= 1, gpus_per_node and cpus_per_task "
                      ">= 0")
    elif d.launcher == "slurm" and s.gpus_per_node:  # the trainer keeps one GPU of node 0
        tp = max(r.vllm_tensor_parallel_size, 1)
        fit = (s.gpus_per_node - 1) // tp + (s.nodes - 1) * (s.gpus_per_node // tp)
        if r.num_servers > fit:
            errors.append(f"rollout.num_servers={r.num_servers} servers of rollout.vllm_tensor_"
                          f"parallel_size={tp} GPUs do not fit on distributed.slurm.nodes="
                          f"{s.nodes} x gpus_per_node={s.gpus_per_node} (the trainer keeps one "
                          f"GPU): {fit} fit")


def _check_async(errors: list[str], cfg: Config) -> None:
    r = cfg.rollout
    if r.async_steps < 0:
        errors.append(f"rollout.async_steps={r.async_steps} must be >= 0")
    if r.inflight_updates and r.async_steps == 0:
        errors.append("rollout.inflight_updates needs rollout.async_steps >= 1 (with synchronous "
                      "generation no weights change while generating)")
    if r.async_steps > 0 and cfg.algorithm.active_sampling:
        errors.append("algorithm.active_sampling with rollout.async_steps > 0 is not supported: "
                      "use one or the other")
    longest = cfg.data.max_prompt_length + cfg.episode_tokens
    # Servers a launcher starts get the same bound (`rlvr.launch.servers.server_settings`).
    if r.engine in ("vllm", "remote", "auto") and r.vllm_max_model_len < longest:
        errors.append(f"rollout.vllm_max_model_len={r.vllm_max_model_len} is below "
                      f"data.max_prompt_length + the episode's tokens (rollout.response_length"
                      f", x rollout.max_turns for multi-turn workflows) = {longest}")


def _check_rho(errors: list[str], cfg: Config) -> None:
    a, r = cfg.algorithm, cfg.rollout
    if not cfg.uses_rho_correction:
        return
    if not 0 <= a.rho_clamp_lower < 1 < a.rho_clamp_upper:
        errors.append(f"algorithm.rho_clamp_lower={a.rho_clamp_lower} and rho_clamp_upper="
                      f"{a.rho_clamp_upper} need 0 <= lower < 1 < upper (rho is 1 when the "
                      "engine and the learner agree)")
    if r.top_p < 1.0:
        # Engines report logprobs under the distribution they sampled from, truncated by top_p;
        # the learner's are over the whole vocabulary. rho would then be below 1 on every token
        # by the truncated mass, and the correction would fight the truncation, not staleness.
        errors.append(f"algorithm.rho_correction=true with rollout.top_p={r.top_p}: rho would "
                      "measure the top-p truncation (engine logprobs are over the truncated "
                      "distribution, the learner's over the full one), not the engine mismatch; "
                      "use rollout.top_p=1.0 or algorithm.rho_correction=false")


def _check_gpu_settings(errors: list[str], cfg: Config) -> None:
    r, a = cfg.rollout, cfg.algorithm
    if not 0 < r.vllm_gpu_memory_utilization <= 1:
        errors.append(f"rollout.vllm_gpu_memory_utilization={r.vllm_gpu_memory_utilization} "
                      "must be in (0, 1]")
    if r.weight_sync_bucket_mb < 1:
        errors.append(f"rollout.weight_sync_bucket_mb={r.weight_sync_bucket_mb} must be >= 1")
    if a.max_tokens_per_micro_batch is not None and a.max_tokens_per_micro_batch < a.pack_length:
        errors.append(f"algorithm.max_tokens_per_micro_batch={a.max_tokens_per_micro_batch} is "
                      f"below algorithm.pack_length={a.pack_length}: a packed row, which never "
                      "splits, must fit in a micro-batch")
    if r.colocate:
        why = []
        if r.engine != "vllm":
            why.append(f"rollout.engine=vllm (not {r.engine!r}): only vLLM can sleep")
        if r.vllm_num_engines != 0:
            why.append(f"rollout.vllm_num_engines=0 (not {r.vllm_num_engines}): the colocated "
                       "engine lives in the learner's process")
        if r.async_steps != 0:
            why.append(f"rollout.async_steps=0 (not {r.async_steps}): a sleeping engine cannot "
                       "generate while the learner trains")
        if cfg.distributed.launcher != "local":
            why.append("distributed.launcher=local")
        if r.vllm_gpu_memory_utilization > 0.7:
            why.append(f"rollout.vllm_gpu_memory_utilization <= 0.7 (not "
                       f"{r.vllm_gpu_memory_utilization}): while awake, vLLM's share and the "
                       "learner's weights, gradients and Adam state (about 16 bytes per "
                       "parameter in fp32) must fit on the one device together")
        if why:
            errors.append("rollout.colocate=true needs " + "; ".join(why))


def _check_workflow(errors: list[str], r: RolloutConfig) -> None:
    if r.max_turns < 1 or r.max_tool_calls < 0 or r.max_episode_tokens < 0:
        errors.append("rollout.max_turns must be >= 1, rollout.max_tool_calls and "
                      "rollout.max_episode_tokens >= 0")
    if not 0 < r.turn_discount <= 1:
        errors.append(f"rollout.turn_discount={r.turn_discount} must be in (0, 1]")
    if r.tool_timeout_s <= 0 or r.episode_timeout_s <= 0 or r.tool_output_chars <= 0:
        errors.append("rollout.tool_timeout_s, rollout.episode_timeout_s and "
                      "rollout.tool_output_chars must be > 0")
    if r.workflow != "single_turn" and r.max_episode_tokens and \
            r.max_episode_tokens < r.response_length:
        errors.append(f"rollout.max_episode_tokens={r.max_episode_tokens} is below "
                      f"rollout.response_length={r.response_length}: the first turn alone "
                      "could not fit")


def _check_rewards(errors: list[str], rw: RewardsConfig) -> None:
    if rw.num_workers < 0 or rw.timeout_s <= 0:
        errors.append("rewards.num_workers must be >= 0 and rewards.timeout_s > 0")
    if rw.additive_format_reward and not rw.apply_r1_style_format_reward:
        errors.append("rewards.additive_format_reward needs rewards.apply_r1_style_format_reward")
    if rw.judge is not None:
        _check_judge(errors, rw.judge)


_RUBRIC_FIELDS = {"question", "answer", "ground_truth", "metadata"}


def _check_judge(errors: list[str], j: JudgeConfig) -> None:
    """The judge's endpoint or model, its rubric's placeholders and its score pattern. Whether
    `engine` names an engine is checked where engines are registered (`rlvr.build`)."""
    if not j.model:
        what = ("the model name the endpoint serves" if j.engine == "openai"
                else "the judge model's built-in name or directory")
        errors.append(f"rewards.judge.model is missing: {what}")
    if j.engine == "openai" and not j.base_url.startswith(("http://", "https://")):
        errors.append(f"rewards.judge.base_url={j.base_url!r}: rewards.judge.engine=openai "
                      "needs the endpoint's http(s) URL, e.g. http://127.0.0.1:8000/v1")
    if j.max_tokens <= 0 or j.timeout_s <= 0 or j.max_score <= 0 or j.max_concurrency < 1:
        errors.append("rewards.judge.max_tokens, timeout_s and max_score must be > 0, "
                      "rewards.judge.max_concurrency >= 1")
    if j.temperature < 0:
        errors.append(f"rewards.judge.temperature={j.temperature} must be >= 0")
    _choice(errors, "rewards.judge.dtype", j.dtype, {"auto", "float32", "bfloat16"})
    if j.rubric is not None:
        try:
            used = {name.split("[")[0].split(".")[0]
                    for _, name, _, _ in string.Formatter().parse(j.rubric) if name is not None}
        except ValueError as e:
            errors.append(f"rewards.judge.rubric is not a format string ({e}); double literal "
                          "braces")
        else:
            if used - _RUBRIC_FIELDS or "answer" not in used:
                errors.append(f"rewards.judge.rubric may use only the placeholders "
                              f"{sorted(_RUBRIC_FIELDS)} and must use 'answer'; it uses "
                              f"{sorted(used)}")
    if j.score_regex is not None:
        try:
            if re.compile(j.score_regex).groups < 1:
                errors.append(f"rewards.judge.score_regex={j.score_regex!r} needs a group "
                              "around the number")
        except re.error as e:
            errors.append(f"rewards.judge.score_regex={j.score_regex!r} does not compile: {e}")


def _check_eval(errors: list[str], cfg: Config) -> None:
    ev = cfg.eval
    if ev.num_samples < 1 or ev.max_prompts < 1:
        errors.append(f"eval.num_samples={ev.num_samples} and eval.max_prompts={ev.max_prompts} "
                      "must be >= 1")
    if not ev.pass_at_k:
        errors.append("eval.pass_at_k must hold at least one k (e.g. [1])")
    for k in ev.pass_at_k:
        if not 1 <= k <= ev.num_samples:
            errors.append(f"eval.pass_at_k holds k={k}, outside [1, eval.num_samples="
                          f"{ev.num_samples}]: pass@k needs at least k samples per prompt; "
                          "raise eval.num_samples or drop that k")
    if ev.temperature < 0:
        errors.append(f"eval.temperature={ev.temperature} must be >= 0 (0: greedy)")
    elif ev.temperature == 0 and ev.num_samples > 1:
        errors.append(f"eval.temperature=0 (greedy) with eval.num_samples={ev.num_samples}: "
                      "greedy samples of a prompt are all the same answer; set "
                      "eval.temperature > 0 (e.g. 0.6) or eval.num_samples=1")
    if not 0 < ev.top_p <= 1:
        errors.append(f"eval.top_p={ev.top_p} must be in (0, 1]")
    if ev.response_length is not None and ev.response_length <= 0:
        errors.append(f"eval.response_length={ev.response_length} must be > 0 or null "
                      "(null: rollout.response_length)")
    r = cfg.rollout
    if r.engine == "vllm" and r.vllm_max_model_len < cfg.data.max_prompt_length + \
            cfg.eval_response_length:
        errors.append(f"rollout.vllm_max_model_len={r.vllm_max_model_len} is below "
                      f"data.max_prompt_length + eval.response_length = "
                      f"{cfg.data.max_prompt_length + cfg.eval_response_length}")
    for section, sources in (("train", cfg.data.train), ("eval", cfg.data.eval)):
        errors += [f"data.{section}[{i}].label={src.label!r} must be non-empty and hold no '/' "
                   "(it names metrics: eval/<label>/pass@1)"
                   for i, src in enumerate(sources)
                   if src.label is not None and (not src.label or "/" in src.label)]
    seen: dict[str, int] = {}
    for i, src in enumerate(cfg.data.eval):
        name = src.display_name
        if name in seen:
            errors.append(f"data.eval[{seen[name]}] and data.eval[{i}] are both named {name!r} "
                          f"in metrics: give one a data.eval[{i}].label")
        seen.setdefault(name, i)


def _check_lora(errors: list[str], cfg: Config) -> None:
    lora, a = cfg.model.lora, cfg.algorithm
    if lora.rank < 0:
        errors.append(f"model.lora.rank={lora.rank} must be >= 0 (0: no LoRA)")
    if lora.rank <= 0:
        return
    if lora.alpha <= 0:
        errors.append(f"model.lora.alpha={lora.alpha} must be > 0")
    if not 0.0 <= lora.dropout < 1.0:
        errors.append(f"model.lora.dropout={lora.dropout} must be in [0, 1)")
    if lora.target_modules is not None and (not lora.target_modules
                                            or not all(lora.target_modules)):
        errors.append(f"model.lora.target_modules={lora.target_modules} must name at least one "
                      "module and no empty name (null: every linear layer of the decoder)")
    if a.ref_policy_update_freq is not None:
        errors.append(f"algorithm.ref_policy_update_freq={a.ref_policy_update_freq} with "
                      f"model.lora.rank={lora.rank}: a LoRA run's reference is the base model "
                      "(adapters off), which no Polyak step can move; set "
                      "algorithm.ref_policy_update_freq=null, or model.lora.rank=0")


def warnings_for(cfg: Config) -> list[str]:
    """Settings that work but deserve a loud line at start."""
    out = []
    r, a = cfg.rollout, cfg.algorithm
    if r.async_steps > 0 and a.rho_correction is None and r.top_p < 1.0:
        out.append(f"rollout.async_steps={r.async_steps} with rollout.top_p={r.top_p}: the "
                   "off-policy (rho) correction that asynchronous runs get by default is OFF, "
                   "because with top-p truncation rho would measure the truncation; the "
                   "staleness of generated batches goes uncorrected. Use top_p=1.0 to have it")
    if cfg.model.lora.rank > 0 and cfg.model.lora.dropout > 0:
        out.append(f"model.lora.dropout={cfg.model.lora.dropout}: each forward pass over a "
                   "batch sees other dropout noise, so the ratio to the old logprobs (and the "
                   "gap to the engine's) measures noise as well as policy change; 0 avoids it")
    return out


def validate(cfg: Config) -> None:
    """Cross-field rules. Collects every problem, then fails once naming all the fields."""
    errors: list[str] = []
    e, r, a, o = cfg.experiment, cfg.rollout, cfg.algorithm, cfg.optimizer
    _choice(errors, "algorithm.kl_estimator", a.kl_estimator, {0, 1, 2, 3})
    _choice(errors, "algorithm.rho_mask", a.rho_mask, {"none", "token", "sequence"})
    _check_rho(errors, cfg)
    _check_rewards(errors, cfg.rewards)
    _check_async(errors, cfg)
    _choice(errors, "model.dtype", cfg.model.dtype, {"float32", "bfloat16"})
    _choice(errors, "model.device", cfg.model.device, {"auto", "cpu", "cuda"})
    _choice(errors, "model.attn_implementation", cfg.model.attn_implementation,
            {"sdpa", "eager", "flex", "flash_attention_2"})
    _choice(errors, "checkpoint.state_format", cfg.checkpoint.state_format, {"full", "sharded"})
    _check_gpu_settings(errors, cfg)
    _check_lora(errors, cfg)
    _choice(errors, "rollout.dtype", r.dtype, {"auto", "float32", "bfloat16"})
    _choice(errors, "data.on_bad_row", cfg.data.on_bad_row, {"error", "skip"})
    _choice(errors, "logging.wandb_mode", cfg.logging.wandb_mode, {"online", "offline", "disabled"})
    positive = {
        "experiment.total_episodes": e.total_episodes,
        "rollout.num_unique_prompts_rollout": r.num_unique_prompts_rollout,
        "rollout.num_samples_per_prompt_rollout": r.num_samples_per_prompt_rollout,
        "rollout.response_length": r.response_length,
        "rollout.max_batch_rows": r.max_batch_rows,
        "algorithm.num_mini_batches": a.num_mini_batches,
        "algorithm.num_epochs": a.num_epochs,
        "algorithm.pack_length": a.pack_length,
        "data.max_prompt_length": cfg.data.max_prompt_length,
        "optimizer.learning_rate": o.learning_rate,
        "optimizer.max_consecutive_skipped_steps": o.max_consecutive_skipped_steps,
    }
    errors += [f"{k}={v} must be > 0" for k, v in positive.items() if v <= 0]
    if r.temperature <= 0:
        errors.append(f"rollout.temperature={r.temperature} must be > 0 for training samples")
    if not 0 < r.top_p <= 1:
        errors.append(f"rollout.top_p={r.top_p} must be in (0, 1]")
    if a.beta < 0:
        errors.append(f"algorithm.beta={a.beta} must be >= 0")
    if a.beta > 0 and a.load_ref_policy is False:
        errors.append(f"algorithm.beta={a.beta} > 0 needs the reference: "
                      "algorithm.load_ref_policy=true or null")
    if a.ref_policy_update_freq is not None and (a.ref_policy_update_freq <= 0
                                                 or not cfg.loads_reference):
        errors.append(f"algorithm.ref_policy_update_freq={a.ref_policy_update_freq} needs a "
                      "positive value and a reference (algorithm.beta > 0 or "
                      "algorithm.load_ref_policy=true)")
    if a.truncated_in_baseline and not a.mask_truncated_completions:
        errors.append("algorithm.truncated_in_baseline only applies with "
                      "algorithm.mask_truncated_completions=true")
    if not 0.0 <= a.alpha <= 1.0:
        errors.append(f"algorithm.alpha={a.alpha} must be in [0, 1]")
    if a.clip_lower < 0 or a.clip_higher < 0:
        errors.append("algorithm.clip_lower and algorithm.clip_higher must be >= 0")
    if a.loss_denominator is not None and a.loss_denominator <= 0:
        errors.append(f"algorithm.loss_denominator={a.loss_denominator} must be > 0 or null")
    if a.active_sampling_max_rounds < 1:
        errors.append("algorithm.active_sampling_max_rounds must be >= 1")
    if a.no_resampling_pass_rate is not None and not 0 < a.no_resampling_pass_rate <= 1:
        errors.append(f"algorithm.no_resampling_pass_rate={a.no_resampling_pass_rate} must be "
                      "in (0, 1]")
    if a.overlong_buffer < 0 or a.overlong_buffer > r.response_length:
        errors.append(f"algorithm.overlong_buffer={a.overlong_buffer} must be in "
                      f"[0, rollout.response_length={r.response_length}]")
    _choice(errors, "algorithm.packing", a.packing, {"in_order", "first_fit_decreasing"})
    if r.num_samples_per_prompt_rollout < 2:
        errors.append("rollout.num_samples_per_prompt_rollout must be >= 2: group advantages "
                      "need at least two samples per prompt")
    if cfg.data.max_prompt_length + r.response_length > a.pack_length:
        errors.append(
            f"algorithm.pack_length={a.pack_length} is shorter than data.max_prompt_length="
            f"{cfg.data.max_prompt_length} + rollout.response_length={r.response_length}: "
            "a sequence could not fit in one packed row")
    elif cfg.data.max_prompt_length + cfg.episode_tokens > a.pack_length:
        errors.append(
            f"algorithm.pack_length={a.pack_length} is shorter than data.max_prompt_length="
            f"{cfg.data.max_prompt_length} + the episode's tokens {cfg.episode_tokens} "
            f"(rollout.workflow={r.workflow!r}: rollout.max_episode_tokens, or "
            "rollout.response_length x rollout.max_turns): an episode could not fit in one "
            "packed row")
    _check_workflow(errors, r)
    _check_eval(errors, cfg)
    if e.total_episodes > 0 and cfg.samples_per_step > 0 and cfg.num_training_steps == 0:
        errors.append(
            f"experiment.total_episodes={e.total_episodes} is less than one step's samples "
            f"(rollout.num_unique_prompts_rollout x num_samples_per_prompt_rollout = "
            f"{cfg.samples_per_step})")
    _check_distributed(errors, cfg)
    if not cfg.data.train:
        errors.append("data.train must name at least one source")
    for i, src in enumerate(cfg.data.train + cfg.data.eval):
        if src.weight <= 0:
            errors.append(f"data source '{src.name}' weight={src.weight} must be > 0")
    if cfg.checkpoint.checkpoint_state_freq < 0 or cfg.checkpoint.keep_last_n_states < 1:
        errors.append("checkpoint.checkpoint_state_freq must be >= 0 and keep_last_n_states >= 1")
    if cfg.checkpoint.save_freq < 0 or cfg.eval.local_eval_every < 0:
        errors.append("checkpoint.save_freq and eval.local_eval_every must be >= 0")
    if cfg.checkpoint.keep_last_n_checkpoints == 0 or cfg.checkpoint.keep_last_n_checkpoints < -1:
        errors.append("checkpoint.keep_last_n_checkpoints must be -1 (keep all) or >= 1")
    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))
