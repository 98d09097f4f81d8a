"""The checks of a run's input that need no model: every name the config picks from a registry
exists, the verifiers the data names load and can be called, a judge is configured where rows
ask for one, the chat template writes turns for a multi-turn workflow, the code sandbox can
isolate where answers' code runs, the run's directories can be made, and the longest sequence
fits the model's positions (read from its config.json, not its weights). Each raises
ConfigError naming the field; `rlvr.run.build` runs them before any model loads, and launchers
whose trainer runs elsewhere run them before writing a job's files
(`rlvr.run.build.check_run_inputs`).
"""

from __future__ import annotations

import errno
import inspect
import json
import logging
import math
import os
import stat
from pathlib import Path

from rlvr.config import Config, ConfigError
from rlvr.data import DataBundle, LoadedData
from rlvr.data.templates import check_template_choice, load_chat_template
from rlvr.plugins import check_main_entries, import_plugins
from rlvr.run.paths import RunPaths
from rlvr.workflows.chat import check_turns

log = logging.getLogger(__name__)


def _engine_errors(cfg: Config, engines) -> list[str]:
    """What the named engine's record says this config asks of it in vain (it cannot span
    devices, sleep, or start beside the local launcher's ranks), and its own config checks
    (`Engine.checks`: settings only it reads). For `auto`, the checks of each engine `auto`
    may take here (an available one); the facts are asked once `auto` is resolved
    (`rlvr.run.build`), since the engine it takes depends on the machine."""
    r, d = cfg.rollout, cfg.distributed
    if r.engine == "auto":
        sleepers = sorted(e.name for e in engines.values() if e.can_sleep)
        colocate = ([f"rollout.colocate=true needs an engine named that can sleep while the "
                     f"learner trains (rollout.engine={' or '.join(sleepers) or 'none'}): "
                     "rollout.engine=auto may take one that cannot"] if r.colocate else [])
        return colocate + [e for engine in engines.values()
                if engine.auto_preference is not None and engine.available() is None
                and engine.checks is not None for e in engine.checks(cfg)]
    try:
        engine = engines.lookup(r.engine)
    except ValueError:  # an unknown name, reported with the other names
        return []
    errors = []
    if r.tensor_parallel_size > 1 and not engine.tensor_parallel:
        errors.append(f"rollout.tensor_parallel_size={r.tensor_parallel_size} needs an engine "
                      f"that spans several devices, which rollout.engine={r.engine} does not")
    if r.colocate and not engine.can_sleep:
        errors.append(f"rollout.colocate=true needs an engine that can sleep while the learner "
                      f"trains, which rollout.engine={r.engine} cannot")
    if (d.launcher == "local" and cfg.world_size > 1 and r.num_engines == 0
            and not engine.beside_local_ranks):
        # Found by the composition matrix (docs/composition.md): the run hung at the engine.
        errors.append(f"rollout.engine={r.engine} cannot start in learner rank 0's process while "
                      f"the local launcher's ranks (distributed.num_learners_per_node="
                      f"{list(d.num_learners_per_node)}) hold its process group: its start "
                      "would wait on that group for ever. Generate on inference servers "
                      "(rollout.engine=remote, started by the launcher) or engine actors "
                      "(distributed.launcher=ray), or with rollout.engine=transformers")
    return errors + (list(engine.checks(cfg)) if engine.checks is not None else [])


def check_registered_names(cfg: Config) -> None:
    """Every name the config picks from a registry exists; ConfigError naming all that do not.
    Here rather than in `rlvr.config`, which imports no part of rlvr."""
    from rlvr.algorithm.advantages import ADVANTAGE_NORMALIZATIONS
    from rlvr.algorithm.losses import POLICY_LOSSES
    from rlvr.learner.schedule import SCHEDULES
    from rlvr.rewards import is_known_verifier
    from rlvr.rewards.scorer import AGGREGATORS
    from rlvr.rollout import ENGINES
    from rlvr.workflows import WORKFLOWS

    import_plugins(cfg.experiment.plugins)  # what they register is named below
    a = cfg.algorithm
    choices = [("optimizer.lr_scheduler_type", cfg.optimizer.lr_scheduler_type, SCHEDULES),
               ("rewards.reward_aggregator", cfg.rewards.reward_aggregator, AGGREGATORS)]
    errors = [f"{field}={value!r} is not one of {sorted(known)}"
              for field, value, known in choices if value not in known]
    # Registries take 'package.module:name' too (`rlvr.registry`): imported now, so a typo
    # fails before any model loads.
    registered = [("algorithm.loss_fn", a.loss_fn, POLICY_LOSSES),
                  ("algorithm.advantage_normalization_type", a.advantage_normalization_type,
                   ADVANTAGE_NORMALIZATIONS),
                  ("rollout.workflow", cfg.rollout.workflow, WORKFLOWS)]
    if cfg.rollout.engine != "auto":
        registered.append(("rollout.engine", cfg.rollout.engine, ENGINES))
    for field, value, registry in registered:
        try:
            registry.lookup(value)
        except ValueError as e:  # "loss_fn 'x' is not one of..." -> "algorithm.loss_fn='x' is..."
            errors.append(f"{field}={value!r}{str(e).removeprefix(f'{registry.kind} {value!r}')}")
    errors += [f"rewards.remap_verifier.{source}={target!r} is not a known verifier"
               for source, target in cfg.rewards.remap_verifier.items()
               if not is_known_verifier(target)]
    errors += check_template_choice(cfg.data.chat_template,
                                    multi_turn=cfg.rollout.workflow != "single_turn")
    errors += _judge_errors(cfg, ENGINES)
    errors += _engine_errors(cfg, ENGINES)
    check_main_entries(cfg)  # what a script registered, where other processes need it
    if a.loss_denominator is not None and a.loss_fn in POLICY_LOSSES \
            and POLICY_LOSSES.lookup(a.loss_fn).per == "sequence":
        # Such a loss averages each sequence's tokens, then divides by the sequence count; a
        # constant in place of that count is neither GRPO (mean over sequences) nor Dr.GRPO
        # (token sums over a constant, no per-sequence mean).
        errors.append(f"algorithm.loss_denominator={a.loss_denominator} with algorithm.loss_fn="
                      f"{a.loss_fn}: {a.loss_fn} averages each sequence's tokens and then the "
                      "sequences, so a constant denominator makes it neither GRPO nor Dr.GRPO; "
                      "for Dr.GRPO use algorithm.loss_fn=dapo with the constant (configs/presets"
                      f"/dr_grpo.yaml), for {a.loss_fn} leave algorithm.loss_denominator=null")
    if len(errors) == 1:  # one line
        raise ConfigError(f"invalid config: {errors[0]}")
    if errors:
        raise ConfigError("invalid config:\n  - " + "\n  - ".join(errors))


def _judge_errors(cfg: Config, engines: object) -> list[str]:
    """`rewards.judge.engine` names an engine that loads a model here, or `openai`; the API
    key it names is set. (An engine on servers would reach the policy's own: a judge on a
    server is `openai` with that server's base_url.)"""
    j = cfg.rewards.judge
    if j is None:
        return []
    known = sorted({name for name in engines if not engines[name].uses_servers} | {"openai"})
    if j.engine not in known:
        return [f"rewards.judge.engine={j.engine!r} is not one of {known}"]
    if j.engine == "openai" and j.api_key_env and not os.environ.get(j.api_key_env):
        return [f"rewards.judge.api_key_env={j.api_key_env!r}: that environment variable is "
                "not set"]
    return []


def check_judge_configured(cfg: Config, loaded: LoadedData) -> None:
    """Rows that name `llm_judge` need `rewards.judge`: ConfigError before any model loads."""
    from rlvr.rewards.judge import JUDGE_VERIFIER

    if cfg.rewards.judge is not None:
        return
    sources = [examples for _, examples in loaded.train + loaded.eval]
    users = sorted({e.source for examples in sources for e in examples
                    if JUDGE_VERIFIER in e.verifiers})
    if users:
        raise ConfigError(f"data sources {users} name the '{JUDGE_VERIFIER}' verifier, which "
                          "needs rewards.judge (its engine and model, or openai base_url)")


def verifiers_used(data: DataBundle) -> set[str]:
    """The verifier names the run's training and eval prompts carry (remapped)."""
    prompts = [p for _, source, _ in data.train.sources for p in source] + data.eval_prompts
    return {name for p in prompts for name in p.verifiers}


def check_code_sandbox(cfg: Config, data: DataBundle) -> None:
    """A run that executes answers' code (the `code` verifier, the tool_use workflow) needs the
    sandbox's namespaces. Where the kernel refuses them: ConfigError, or, with
    rewards.allow_weak_sandbox=true, a warning, and the weak mode for this process and the
    verifier workers it starts (`rlvr.rewards.sandbox`, docs/sandbox.md)."""
    if "code" not in verifiers_used(data) and cfg.rollout.workflow != "tool_use":
        return
    from rlvr.rewards.sandbox import ALLOW_WEAK_ENV, namespaces_refused

    reason = namespaces_refused()
    if reason is None:
        return
    if not cfg.rewards.allow_weak_sandbox:
        raise ConfigError(f"{reason}. This run executes answers' code: set "
                          "rewards.allow_weak_sandbox=true to run it with in-process guards "
                          "only (no filesystem, network or process isolation; docs/sandbox.md)")
    log.warning("code sandbox: %s; rewards.allow_weak_sandbox=true: answers' code runs with "
                "in-process guards only (docs/sandbox.md)", reason)
    os.environ[ALLOW_WEAK_ENV] = "1"


def check_custom_verifiers(cfg: Config, loaded: LoadedData) -> None:
    """Every `package.module:function` verifier the data names (directly or through
    `rewards.remap_verifier`) is one the config lists (`rewards.custom_verifiers`, or a remap
    target), imports and can be called as a verifier is: ConfigError naming each one that
    cannot, before any model loads (else every sample would score an error)."""
    from rlvr.rewards.registry import get_verifier, verifier_inputs

    users: dict[str, set[str]] = {}
    for src, examples in loaded.train + loaded.eval:
        for name in {v for e in examples for v in e.verifiers} | ({src.verifier} - {None}):
            users.setdefault(name, set()).add(src.name)
    for source, target in cfg.rewards.remap_verifier.items():
        users.setdefault(target, set()).add(f"rewards.remap_verifier.{source}")
    errors = []
    # The config names code to run; the data only picks among what it named (a downloaded
    # dataset whose rows name `builtins:open` or `shutil:rmtree` would have them called on the
    # policy's text). Refused before anything is imported: an import runs the module.
    allowed = set(cfg.rewards.custom_verifiers) | set(cfg.rewards.remap_verifier.values())
    for name in sorted(n for n in users if ":" in n):
        where = f"verifier {name!r} (named by {', '.join(sorted(users[name]))})"
        if name not in allowed:
            errors.append(f"{where} is a function to import and run, which the data cannot "
                          f"choose: list it in the config, rewards.custom_verifiers=[{name!r}]")
            continue
        try:
            fn = get_verifier(name)
            extra = {key: None for key in verifier_inputs(name)}
        except Exception as e:  # noqa: BLE001  the import runs the user's module: anything
            errors.append(f"{where} cannot be loaded: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}")
            continue
        try:
            inspect.signature(fn).bind("completion", "ground truth", **extra)
        except TypeError as e:
            errors.append(f"{where} cannot be called as fn(completion, ground_truth"
                          f"{''.join(f', {k}=' for k in extra)}): {e}")
        except ValueError:  # a builtin without a signature: called as it is
            pass
    if len(errors) == 1:
        raise ConfigError(errors[0])
    if errors:
        raise ConfigError("invalid verifiers:\n  - " + "\n  - ".join(errors))


def check_template_turns(cfg: Config, tokenizer: object) -> None:
    """A multi-turn workflow needs a chat template that writes turns: ConfigError if the one
    `data.chat_template` picks cannot (tried on a short conversation; no model needed). For
    `tool_use` that includes a `tool` message: a template that allows only user and assistant
    turns (Gemma's raises "Conversation roles must alternate") would fail at every tool call."""
    if cfg.rollout.workflow == "single_turn":
        return
    roles = ("user", "tool") if cfg.rollout.workflow == "tool_use" else ("user",)
    try:
        check_turns(tokenizer, load_chat_template(cfg.data.chat_template, tokenizer).render,
                    roles)
    except ValueError as e:
        raise ConfigError(f"data.chat_template={cfg.data.chat_template!r} with rollout.workflow="
                          f"{cfg.rollout.workflow!r}: {e}") from e


def check_run_paths(cfg: Config) -> None:
    """The run's directory and its states' can be made: every part of each path that exists is
    a directory (a file there failed at mkdir after the model loaded, or at the first state
    save after a trained step), and every name fits the filesystem (NAME_MAX, PATH_MAX).
    ConfigError naming the field, before anything is written."""
    output = cfg.experiment.output_dir
    state = cfg.checkpoint.checkpoint_state_dir
    paths = [("experiment.output_dir", output, Path(output)),
             ("checkpoint.checkpoint_state_dir", state, Path(state)) if state else
             ("experiment.output_dir", output, RunPaths(output).state)]
    for field, value, path in paths:  # the first problem: the default state/ is under output
        if (problem := directory_problem(path)) is not None:
            raise ConfigError(f"{field}={value}: {problem}")


# Room left under a run's directory for the paths of its own files
# (checkpoints/step_000001/model-00001-of-00002.safetensors, ...).
_OWN_FILES_BYTES = 128


def directory_problem(path: Path) -> str | None:
    """Why `path` cannot be (or be made) a directory here, or None: a part of it that exists
    and is not a directory, a part that cannot be reached, a NUL byte, a name longer than the
    filesystem allows. Nothing is created."""
    text = os.fsencode(path)
    if b"\0" in text:
        return "the path holds a NUL byte, which no file name may hold"
    if not text:
        return "the path is empty"
    prefix, existing = Path(), Path(".")
    for part in path.parts:  # "/", "tmp", "run": each existing part a directory
        prefix = prefix / part
        try:
            if not stat.S_ISDIR(os.stat(prefix).st_mode):
                return f"{prefix} exists and is not a directory"
            existing = prefix
        except FileNotFoundError:
            if os.path.lexists(prefix):
                return f"{prefix} is a symbolic link to nothing"
            break
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:  # said below, with the limit
                break
            return f"{prefix} cannot be reached: {e.strerror or e}"  # EACCES above it, ELOOP
    name_max = _pathconf(existing, "PC_NAME_MAX", 255)
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            return (f"the name {part[:40]!r}... is {len(os.fsencode(part))} bytes long; this "
                    f"filesystem allows at most {name_max}")
    path_max = _pathconf(existing, "PC_PATH_MAX", 4096)
    length = len(os.fsencode(os.path.abspath(path)))
    if length + _OWN_FILES_BYTES > path_max:
        return (f"the path is {length} bytes long; with the run's own files under it (up to "
                f"{_OWN_FILES_BYTES} bytes more) it passes this system's limit of {path_max}")
    return None


def _pathconf(path: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(path, name)
    except (OSError, ValueError):  # not defined there: the usual Linux limit
        return default


# Config keys that give a model's position limit, in order (GPT-2 writes n_positions).
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length",
                  "seq_length")
# RoPE scalings that extend the positions by their factor beyond the config's count (serving
# engines derive their longest sequence the same way); llama3 and longrope ones are counted
# already.
_EXTENDING_ROPE = ("linear", "dynamic", "yarn")


def model_position_limit(model_dir: str) -> tuple[int, str] | None:
    """(the most positions the model places, the config key it comes from), read from the
    model's config.json (no weights, no code run); None where there is no config.json here (a
    hub id not downloaded, a LoRA checkpoint's adapter) or it names no limit. ConfigError where
    config.json is not a JSON object or its rope scaling is not one of the shapes transformers
    writes (a dict, or a dict of them per layer type, with a finite number as factor)."""
    # no torch import at module level
    from rlvr.models.checks import is_positive_int, read_model_config, text_config

    path = Path(model_dir) / "config.json"
    config = read_model_config(model_dir)
    if config is None:
        return None
    config = text_config(config)  # a multimodal model's language model
    for key in _POSITION_KEYS:
        limit = config.get(key)
        if is_positive_int(limit):
            break
    else:
        return None
    rope_key = "rope_scaling" if config.get("rope_scaling") else "rope_parameters"
    rope = config.get(rope_key) or {}
    if not isinstance(rope, dict):
        raise ConfigError(f"{path}: {rope_key}={rope!r} is not a JSON object")
    scalings = [rope] if "factor" in rope or "rope_type" in rope or "type" in rope else \
        [v for v in rope.values() if isinstance(v, dict)]  # per layer type (transformers 5)
    for scaling in scalings:
        kind = scaling.get("rope_type") or scaling.get("type")
        if kind not in _EXTENDING_ROPE:
            continue
        factor = scaling.get("factor")
        if not _finite_number(factor) or factor <= 0:
            raise ConfigError(f"{path}: {rope_key} {kind} factor={factor!r} is not a finite "
                              "positive number")
        base = scaling.get("original_max_position_embeddings") or limit
        if not is_positive_int(base):
            raise ConfigError(f"{path}: {rope_key} original_max_position_embeddings={base!r} "
                              "is not a positive integer")
        if factor > 1:
            limit = max(limit, int(base * factor))
            key = f"{key} with rope {kind} x{factor:g}"
    return limit, key


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and \
        math.isfinite(value)


def check_position_limit(cfg: Config, model_dir: str, trains: bool = True) -> None:
    """The longest sequence the run makes fits the model's positions: the prompt limit plus
    an eval answer, and plus a training episode for a run that `trains` or whose workflow
    plays several turns (eval plays the run's episodes too, `rlvr.producer.evaluation`). A
    longer one failed mid-run (GPT-2's position table: IndexError) or generated past what the
    model was trained on for minutes. ConfigError naming the fields, before any weights load."""
    found = model_position_limit(model_dir)
    if found is None:
        return
    limit, key = found
    r, prompt = cfg.rollout, cfg.data.max_prompt_length
    spans = []
    if trains or r.workflow != "single_turn":
        if r.workflow == "single_turn":
            spans.append((f"rollout.response_length={r.response_length}", cfg.episode_tokens))
        elif r.max_episode_tokens:
            spans.append((f"rollout.max_episode_tokens={r.max_episode_tokens}",
                           cfg.episode_tokens))
        else:
            spans.append((f"rollout.response_length={r.response_length} x rollout.max_turns="
                          f"{r.max_turns}", cfg.episode_tokens))
    if cfg.eval.response_length is not None:
        spans.append((f"eval.response_length={cfg.eval.response_length}",
                      cfg.eval.response_length))
    elif not trains:  # an eval answer is as long as a training one
        spans.append((f"rollout.response_length={r.response_length} (eval.response_length="
                      "null)", r.response_length))
    errors = [f"data.max_prompt_length={prompt} + {what} = {prompt + tokens} tokens, more than "
              f"the model's {limit} positions ({key} in {Path(model_dir) / 'config.json'}, "
              f"model.name_or_path={cfg.model.name_or_path!r}): lower them"
              for what, tokens in spans if prompt + tokens > limit]
    if len(errors) == 1:
        raise ConfigError(errors[0])
    if errors:
        raise ConfigError("sequences too long for the model:\n  - " + "\n  - ".join(errors))
