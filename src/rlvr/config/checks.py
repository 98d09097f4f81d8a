"""The cross-field rules of a config: `validate` collects every problem and fails once, naming
all the fields; `warnings_for` lists settings that work but deserve a loud line at start.
Names of registered parts are checked where the parts are built (`rlvr.run.build`)."""

from __future__ import annotations

import math
import re
import string
from pathlib import Path

from rlvr.config.ranges import choice_errors, range_errors
from rlvr.config.schema import (ConfigError, DataSourceConfig, JudgeConfig, RewardsConfig,
                                RolloutConfig, Config)


def _check_distributed(errors: list[str], cfg: Config) -> None:
    d = cfg.distributed
    _check_remote(errors, cfg)
    if cfg.world_size < 1:  # each count's range is checked with every number's
        errors.append(f"distributed.num_learners_per_node={d.num_learners_per_node} needs at "
                      "least one learner")
    if cfg.world_size > 1 and d.sharding == "none":
        errors.append(f"distributed.sharding=none cannot split {cfg.world_size} learners; "
                      "use ddp or fsdp")
    per_node = list(d.num_learners_per_node)
    if d.launcher == "slurm" and (len(set(per_node)) > 1 or len(per_node) > d.slurm.nodes):
        errors.append(f"distributed.num_learners_per_node={per_node}: the Slurm launcher runs "
                      "the same number of learner tasks on each of the job's first nodes (srun "
                      "--ntasks-per-node), on at most distributed.slurm.nodes="
                      f"{d.slurm.nodes} nodes")
    r = cfg.rollout
    if r.num_engines > 0 and d.launcher != "ray":
        errors.append(f"rollout.num_engines={r.num_engines} starts engine actors, "
                      "which needs distributed.launcher=ray (0 keeps the engine in process)")
    if d.data_prep_actor and (d.launcher != "ray" or r.num_engines < 1):
        errors.append("distributed.data_prep_actor=true feeds engine actors: it needs "
                      "distributed.launcher=ray and rollout.num_engines >= 1")


def _check_remote(errors: list[str], cfg: Config) -> None:
    r, d = cfg.rollout, cfg.distributed
    if r.engine != "remote":
        if r.server_addresses:
            errors.append(f"rollout.server_addresses={list(r.server_addresses)} needs "
                          f"rollout.engine=remote (not {r.engine!r})")
        if d.launcher == "slurm":
            errors.append(f"distributed.launcher=slurm runs generation on inference servers: "
                          f"set rollout.engine=remote (not {r.engine!r})")
        return
    if r.num_engines:
        errors.append(f"rollout.engine=remote generates on servers; rollout.num_engines="
                      f"{r.num_engines} starts engine actors: set it to 0")
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
    if d.launcher == "slurm" and s.nodes >= 1 and s.gpus_per_node > 0:
        # Each learner keeps a GPU of its node (the first nodes); servers take what is left.
        tp = max(r.tensor_parallel_size, 1)
        learners = (list(d.num_learners_per_node) + [0] * s.nodes)[:s.nodes]
        fit = sum(max(s.gpus_per_node - n, 0) // tp for n in learners)
        if max(learners) > s.gpus_per_node:
            errors.append(f"distributed.num_learners_per_node={list(d.num_learners_per_node)}: "
                          f"each learner needs a GPU, and distributed.slurm.gpus_per_node="
                          f"{s.gpus_per_node}")
        elif r.num_servers > fit:
            errors.append(f"rollout.num_servers={r.num_servers} servers of rollout.tensor_"
                          f"parallel_size={tp} GPUs do not fit on distributed.slurm.nodes="
                          f"{s.nodes} x gpus_per_node={s.gpus_per_node} (the learners keep one "
                          f"GPU each): {fit} fit")


def _check_async(errors: list[str], cfg: Config) -> None:
    r = cfg.rollout
    if r.inflight_updates and r.async_steps == 0:
        errors.append("rollout.inflight_updates needs rollout.async_steps >= 1 (with synchronous "
                      "generation no weights change while generating)")


def _check_rho(errors: list[str], cfg: Config) -> None:
    r = cfg.rollout
    if not cfg.uses_rho_correction:  # the clamp bounds' ranges are checked with every number's
        return
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
    if a.max_tokens_per_micro_batch is not None and a.max_tokens_per_micro_batch < a.pack_length:
        errors.append(f"algorithm.max_tokens_per_micro_batch={a.max_tokens_per_micro_batch} is "
                      f"below algorithm.pack_length={a.pack_length}: a packed row, which never "
                      "splits, must fit in a micro-batch")
    if r.colocate:
        why = []
        if r.num_engines != 0:
            why.append(f"rollout.num_engines=0 (not {r.num_engines}): the colocated "
                       "engine lives in the learner's process")
        if r.async_steps != 0:
            why.append(f"rollout.async_steps=0 (not {r.async_steps}): a sleeping engine cannot "
                       "generate while the learner trains")
        if cfg.distributed.launcher != "local":
            why.append("distributed.launcher=local")
        if why:
            errors.append("rollout.colocate=true needs " + "; ".join(why))


def _check_mini_batches(errors: list[str], cfg: Config) -> None:
    """`algorithm.num_mini_batches` changed meaning (gradient accumulation inside one optimizer
    step, now optimizer steps per batch, as in open-instruct). A config that sets it above 1
    without `gradient_accumulation_steps` was most likely written for the old meaning; run as
    it is, it would take k optimizer steps per batch where it took one, a different run with
    no error. Refused once, naming both ways to write what was meant."""
    a = cfg.algorithm
    if a.num_mini_batches > 1 and a.gradient_accumulation_steps is None:
        k = a.num_mini_batches
        errors.append(
            f"algorithm.num_mini_batches={k} now means {k} optimizer steps per batch, one per "
            "mini-batch (open-instruct's meaning); it used to mean gradient accumulation "
            "inside one optimizer step, which is now algorithm.gradient_accumulation_steps. "
            f"Say which you mean: gradient_accumulation_steps={k} and num_mini_batches=1 "
            f"keeps the old behaviour; gradient_accumulation_steps=1 (or more) with "
            f"num_mini_batches={k} takes {k} optimizer steps")


def _check_workflow(errors: list[str], r: RolloutConfig) -> None:
    if r.workflow != "single_turn" and r.max_episode_tokens and \
            r.max_episode_tokens < r.response_length:
        errors.append(f"rollout.max_episode_tokens={r.max_episode_tokens} is below "
                      f"rollout.response_length={r.response_length}: the first turn alone "
                      "could not fit")


def _check_rewards(errors: list[str], rw: RewardsConfig) -> None:
    if rw.additive_format_reward and not rw.apply_r1_style_format_reward:
        errors.append("rewards.additive_format_reward needs rewards.apply_r1_style_format_reward")
    for name in rw.custom_verifiers:
        module, _, function = name.partition(":")
        if not (module and function):
            errors.append(f"rewards.custom_verifiers: {name!r} is not a 'package.module:function' "
                          "name (a registered verifier needs no listing)")
    if rw.judge is not None:
        _check_judge(errors, rw.judge)


_RUBRIC_FIELDS = {"question", "answer", "ground_truth", "metadata"}


def _check_judge(errors: list[str], j: JudgeConfig) -> None:
    """The judge's endpoint or model, its rubric's placeholders and its score pattern. Whether
    `engine` names an engine is checked where engines are registered (`rlvr.run.build`)."""
    if not j.model:
        what = ("the model name the endpoint serves" if j.engine == "openai"
                else "the judge model's built-in name or directory")
        errors.append(f"rewards.judge.model is missing: {what}")
    if j.engine == "openai" and not j.base_url.startswith(("http://", "https://")):
        errors.append(f"rewards.judge.base_url={j.base_url!r}: rewards.judge.engine=openai "
                      "needs the endpoint's http(s) URL, e.g. http://127.0.0.1:8000/v1")
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


def _check_sampling(errors: list[str], cfg: Config) -> None:
    """Stop strings and mixture weights that are each in range but do not work together."""
    r = cfg.rollout
    errors += [f"rollout.stop_strings[{i}] is empty: the empty string is found at every "
               "position, so every completion would stop after its first token"
               for i, text in enumerate(r.stop_strings) if text == ""]
    for section, sources in (("train", cfg.data.train), ("eval", cfg.data.eval)):
        total = sum(s.weight for s in sources if math.isfinite(s.weight))
        if not math.isfinite(total):  # each weight finite, their sum not: NaN probabilities
            errors.append(f"data.{section}[].weight: the weights sum to {total}; the mixture "
                          "divides by their sum, which must be finite: scale them down")


def _check_paths(errors: list[str], cfg: Config) -> None:
    """What a path field's text alone rules out; whether it can be made on this machine
    (existing files in the way, names too long) is checked at start
    (`rlvr.run.input_checks.check_run_paths`)."""
    for name, value in (("experiment.output_dir", cfg.experiment.output_dir),
                        ("checkpoint.checkpoint_state_dir",
                         cfg.checkpoint.checkpoint_state_dir)):
        if value is None:
            continue
        if name == "experiment.output_dir" and not value.strip():
            # "" is the current directory: the run's files would land among the user's own
            errors.append(f"experiment.output_dir={value!r} is empty: name the run's directory "
                          "(e.g. runs/my-run; '.' if the current directory is meant)")
        elif "\0" in value:
            errors.append(f"{name}={value!r} holds a NUL byte, which no file name may hold")


def _check_eval(errors: list[str], cfg: Config) -> None:
    ev = cfg.eval
    if not ev.pass_at_k:
        errors.append("eval.pass_at_k must hold at least one k (e.g. [1])")
    for k in ev.pass_at_k:  # k >= 1 is k's range, checked with every number's
        if ev.num_samples >= 1 and k > ev.num_samples:
            errors.append(f"eval.pass_at_k holds k={k}, outside [1, eval.num_samples="
                          f"{ev.num_samples}]: pass@k needs at least k samples per prompt; "
                          "raise eval.num_samples or drop that k")
    if ev.temperature == 0 and ev.num_samples > 1:
        errors.append(f"eval.temperature=0 (greedy) with eval.num_samples={ev.num_samples}: "
                      "greedy samples of a prompt are all the same answer; set "
                      "eval.temperature > 0 (e.g. 0.6) or eval.num_samples=1")
    for section, sources in (("train", cfg.data.train), ("eval", cfg.data.eval)):
        errors += [f"data.{section}[{i}].label={src.label!r} must be non-empty and hold no '/' "
                   "(it names metrics: eval/<label>/pass@1)"
                   for i, src in enumerate(sources)
                   if src.label is not None and (not src.label or "/" in src.label)]
        errors += _hf_only_problems(section, sources)
    seen: dict[str, int] = {}
    for i, src in enumerate(cfg.data.eval):
        name = src.display_name
        if name in seen:
            errors.append(f"data.eval[{seen[name]}] and data.eval[{i}] are both named {name!r} "
                          f"in metrics: give one a data.eval[{i}].label")
        seen.setdefault(name, i)


def _hf_only_problems(section: str, sources: list[DataSourceConfig]) -> list[str]:
    """`subset` and `revision` name a configuration and a version of an `hf:` data set; on a
    file or a built-in they would be ignored in silence, so they are refused there."""
    problems = []
    for i, src in enumerate(sources):
        for name in ("subset", "revision"):
            value = getattr(src, name)
            if value is None:
                continue
            if not src.name.startswith("hf:"):
                problems.append(f"data.{section}[{i}].{name}={value!r}: only an hf: source has "
                                f"a {name} ({src.name!r} is a built-in or a file); remove it")
            elif not value.strip():
                problems.append(f"data.{section}[{i}].{name} is empty; remove it or name one")
    return problems


def _check_lora(errors: list[str], cfg: Config) -> None:
    lora, a = cfg.model.lora, cfg.algorithm
    if lora.rank <= 0:
        return
    if lora.target_modules is not None and (not lora.target_modules
                                            or not all(lora.target_modules)):
        errors.append(f"model.lora.target_modules={lora.target_modules} must name at least one "
                      "module and no empty name (null: every linear layer of the decoder)")
    if a.ref_policy_update_freq is not None:
        errors.append(f"algorithm.ref_policy_update_freq={a.ref_policy_update_freq} with "
                      f"model.lora.rank={lora.rank}: a LoRA run's reference is the base model "
                      "(adapters off), which no Polyak step can move; set "
                      "algorithm.ref_policy_update_freq=null, or model.lora.rank=0")


def _check_state_dir(errors: list[str], cfg: Config) -> None:
    """Training states and model checkpoints both name their entries step_NNNNNN, and every
    save replaces its folder whole: states in or under `checkpoints/` or `final/` would replace
    model saves or be deleted with them (keep_last_n_checkpoints), and a run directory inside a
    state's step_NNNNNN folder would go with that state."""
    if not cfg.checkpoint.checkpoint_state_dir:
        return
    state_dir = Path(cfg.checkpoint.checkpoint_state_dir).resolve()
    output_dir = Path(cfg.experiment.output_dir).resolve()
    given = Path(cfg.experiment.output_dir)
    models = [given / m for m in ("checkpoints", "final")
              if state_dir == output_dir / m or output_dir / m in state_dir.parents]
    if state_dir in output_dir.parents and re.fullmatch(
            r"step_\d+", output_dir.relative_to(state_dir).parts[0]):
        models = [given]
    if models:
        errors.append(f"checkpoint.checkpoint_state_dir={cfg.checkpoint.checkpoint_state_dir} "
                      f"collides with the model saves in {models[0]}: states and model "
                      "checkpoints share step_NNNNNN names and each save replaces its folder "
                      "whole, so one would replace or delete the other; give the states a folder "
                      "of their own (default: <experiment.output_dir>/state)")


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
    steps = cfg.num_training_steps * cfg.optimizer_steps_per_batch
    warm_up = cfg.warm_up_optimizer_steps
    if 0 < steps <= warm_up:
        out.append(f"optimizer.warm_up_steps={warm_up} is not below the run's {steps} optimizer "
                   "steps (num_training_steps x algorithm.num_epochs x num_mini_batches): the "
                   "learning rate never reaches optimizer.learning_rate="
                   f"{cfg.optimizer.learning_rate:g}")
    if cfg.eval.local_eval_every > 0 and not cfg.data.eval and cfg.data.eval_holdout == 0:
        out.append(f"eval.local_eval_every={cfg.eval.local_eval_every} but no prompts to "
                   "evaluate: data.eval is empty and data.eval_holdout=0, so no eval runs and "
                   "no eval metric is logged; name data.eval sets or hold out rows")
    return out


def _check_schedule(errors: list[str], o) -> None:
    if o.warm_up_steps > 0 and o.warmup_ratio > 0:
        errors.append(f"optimizer.warm_up_steps={o.warm_up_steps} and optimizer.warmup_ratio="
                      f"{o.warmup_ratio} both set the warm-up: give one")
    if o.lr_scheduler_type == "polynomial" and o.lr_end >= o.learning_rate:
        errors.append(f"optimizer.lr_end={o.lr_end:g} with lr_scheduler_type=polynomial must be "
                      f"below optimizer.learning_rate={o.learning_rate:g}: the rate decays to it")


def _check_health(errors: list[str], h) -> None:
    for what in ("logprob_diff", "kl"):
        warn, stop = getattr(h, f"mismatch_warn_{what}"), getattr(h, f"mismatch_stop_{what}")
        if warn > stop:
            errors.append(f"health.mismatch_warn_{what}={warn} is above health.mismatch_stop_"
                          f"{what}={stop}: the warning comes before the stop")


def validate(cfg: Config) -> None:
    """Cross-field rules: ConfigError naming every problem (`config_problems`) at once."""
    raise_problems(config_problems(cfg))


def raise_problems(errors: list[str]) -> None:
    """ConfigError of `errors`: one line for one, a list for several; nothing for none."""
    if len(errors) == 1:  # one line
        raise ConfigError(f"invalid config: {errors[0]}")
    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))


def config_problems(cfg: Config) -> list[str]:
    """Every problem of the config's values and of their combinations, each naming its
    fields."""
    # Every number finite and in its range (`rlvr.config.ranges`); the rules below relate them.
    errors: list[str] = range_errors(cfg) + choice_errors(cfg)
    e, r, a = cfg.experiment, cfg.rollout, cfg.algorithm
    if a.beta > 0 and a.kl_estimator == 0:
        # d's gradient as a loss is beta * grad logp, which averages to 0 over tokens the
        # policy sampled: the penalty would train nothing (`rlvr.algorithm.kl`).
        errors.append(f"algorithm.kl_estimator=0 with algorithm.beta={a.beta}: estimator 0 (d) "
                      "adds no gradient in expectation, so the run would train without a KL "
                      "penalty; use 1 or 3 (gradient of KL(policy || ref)) or 2 (of KL(ref || "
                      "policy), as GRPO); every estimator is logged as objective/kl{0..3}_avg")
    _check_rho(errors, cfg)
    _check_rewards(errors, cfg.rewards)
    _check_async(errors, cfg)
    if a.share_prompts and cfg.model.attn_implementation in ("varlen", "flash_attention_2"):
        errors.append(f"algorithm.share_prompts=true packs responses after a shared prompt, which "
                      f"model.attn_implementation={cfg.model.attn_implementation} (whole "
                      "sequences only) cannot confine: use sdpa, eager, flex or auto")
    path_errors = len(errors)
    _check_paths(errors, cfg)
    if len(errors) == path_errors:  # it resolves both paths, which a NUL byte cannot be
        _check_state_dir(errors, cfg)
    _check_gpu_settings(errors, cfg)
    _check_mini_batches(errors, cfg)
    _check_lora(errors, cfg)
    _check_schedule(errors, cfg.optimizer)
    _check_health(errors, cfg.health)
    if a.beta > 0 and a.load_ref_policy is False:
        errors.append(f"algorithm.beta={a.beta} > 0 needs the reference: "
                      "algorithm.load_ref_policy=true or null")
    if a.ref_policy_update_freq is not None and not cfg.loads_reference:
        errors.append(f"algorithm.ref_policy_update_freq={a.ref_policy_update_freq} needs a "
                      "reference (algorithm.beta > 0 or algorithm.load_ref_policy=true)")
    if a.truncated_in_baseline and not a.mask_truncated_completions:
        errors.append("algorithm.truncated_in_baseline only applies with "
                      "algorithm.mask_truncated_completions=true")
    if a.overlong_buffer > r.response_length:
        errors.append(f"algorithm.overlong_buffer={a.overlong_buffer} must be in "
                      f"[0, rollout.response_length={r.response_length}]")
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
    _check_sampling(errors, cfg)
    _check_eval(errors, cfg)
    if e.total_episodes > 0 and cfg.samples_per_step > 0 and cfg.num_training_steps == 0:
        errors.append(
            f"experiment.total_episodes={e.total_episodes} is less than one step's samples "
            f"(rollout.num_unique_prompts_rollout x num_samples_per_prompt_rollout = "
            f"{cfg.samples_per_step})")
    _check_distributed(errors, cfg)
    if not cfg.data.train:
        errors.append("data.train must name at least one source")
    return errors
