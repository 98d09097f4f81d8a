"""`rlvr train|launch|serve|eval|config|generate|report|merge`: the command line.

`prepare` writes the built-in models into the local cache. `train` and `config` take a YAML
file plus `key.sub=value` overrides (OmegaConf dotlist syntax, checked against the typed
config); a bad config exits with status 2 and names the field before any model is loaded.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

# Only light modules here: `rlvr --help` and a usage error import no torch (main imports the
# exceptions of the heavy modules once the arguments are parsed).
from rlvr.config import ConfigError, load_config, to_yaml
from rlvr.console import configure_logging
from rlvr.run.errors import (EngineLost, EngineUnavailable, LearnerLost, NoLearningSignal,
    NumericalFault, ResumeRefused, RunFinished, SaveFailed, RunUnhealthy, SlurmJobFailed,
    TrainingInterrupted, VerifierFault)


def _quiet_libraries() -> None:
    # Before the heavy imports: the libraries' C++ sides read their log levels at import.
    from rlvr.console import quiet_third_party

    quiet_third_party()


def _split_args(items: list[str]) -> tuple[list[str], list[str]]:
    """YAML files (merged in order) and key.sub=value overrides, in any order."""
    overrides = [item for item in items if "=" in item]
    return [item for item in items if "=" not in item], overrides


# Starting over: the earlier run in the output directory is moved aside (rlvr.checkpoint.rerun).
OVERWRITE = "checkpoint.resume=false"


def _cmd_train(args: argparse.Namespace) -> int:
    if not args.items:  # a newcomer asking what it takes: no default run into ./runs/rlvr
        args.subparser.print_usage(sys.stderr)
        print("rlvr train: name a config file, e.g. rlvr train configs/tiny.yaml (then "
              "key.sub=value overrides)", file=sys.stderr)
        return 2
    yamls, overrides = _split_args(args.items)
    return _train(load_config(yamls, [*overrides, *([OVERWRITE] if args.overwrite else [])]))


def _train(cfg) -> int:
    _quiet_libraries()
    from rlvr.launch import launch

    # Under distributed.launcher, with the inference servers it needs; a Slurm job that does
    # not exit 0 raises SlurmJobFailed, so the exit code is the job's.
    run = launch(cfg)
    if run is None:  # a learner rank other than 0: it served rank 0, which reports the run
        return 0
    print(f"done: {cfg.num_training_steps} steps, metrics in {run.output_dir / 'metrics.jsonl'}")
    return 0


def _cmd_launch(args: argparse.Namespace) -> int:
    """`rlvr train` under the launcher named on the command line; `slurm --no-wait` submits the
    job and returns."""
    yamls, overrides = _split_args(args.items)
    cfg = load_config(yamls, [*overrides, *([OVERWRITE] if args.overwrite else []),
                              f"distributed.launcher={args.launcher}"])
    if not args.no_wait:
        return _train(cfg)
    if args.launcher != "slurm":
        raise ConfigError(f"--no-wait submits a Slurm job; the {args.launcher} launcher trains "
                          "in this process")
    from rlvr.launch.slurm import submit

    job = submit(cfg)
    print(f"exit code will be in {job.files.exit_code} when the job ends")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    """An inference server for a model or checkpoint, set up as training sets its servers up;
    runs until SIGINT/SIGTERM (or until the server dies: then exits 1). Every route needs the
    key from RLVR_SERVER_KEY / RLVR_SERVER_KEY_FILE; without one, a server on a loopback
    address gets a fresh key in <output_dir>/server.key, and any other address is refused."""
    import signal
    import time

    from rlvr.device import DeviceUnavailable, resolve_device
    from rlvr.run.input_checks import directory_problem
    from rlvr.launch.servers import server_settings
    from rlvr.models import resolve_model_dir
    from rlvr.serving import ServerProcess
    from rlvr.serving.auth import is_loopback, key_from_env, new_key, run_key_path, write_key_file

    from rlvr.plugins import import_plugins

    # Everything is checked before the key file is written: a refused command leaves no file.
    cfg = load_config(*_split_args(args.items))
    # As in every process of a run; the server's own process inherits the list (`server_env`).
    import_plugins(cfg.experiment.plugins)
    try:
        model_dir = resolve_model_dir(args.model)
    except FileNotFoundError as e:  # its message names the config field; here it is the argument
        raise ConfigError(str(e).replace("model.name_or_path=", "the MODEL_OR_CHECKPOINT "
                                         "argument ", 1)) from None
    try:
        device = resolve_device(cfg.model.device)
    except DeviceUnavailable as e:
        raise ConfigError(str(e)) from None
    settings = server_settings(cfg, model_dir, device.type,
                               device.bf16_compute(cfg.model.bf16_autocast),
                               host=args.host, port=args.port)
    key = key_from_env()
    if key is None:
        if not is_loopback(args.host):
            raise ConfigError(f"rlvr serve --host {args.host}: a server on an address other "
                              "than loopback needs a key (RLVR_SERVER_KEY_FILE=<a 0600 file>, "
                              "or RLVR_SERVER_KEY); refusing to serve without one")
        output_dir = cfg.experiment.output_dir
        if (problem := directory_problem(Path(output_dir))) is not None:
            raise ConfigError(f"experiment.output_dir={output_dir} (where the server's key is "
                              f"written): {problem}")
        key = new_key()
        key_file = write_key_file(run_key_path(output_dir), key).resolve()
        print(f"rlvr: a new server key is in {key_file} (clients: RLVR_SERVER_KEY_FILE="
              f"{key_file})", flush=True)
    server = ServerProcess(settings, log_path=args.log, key=key)
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    with server.start(args.startup_timeout):
        print(f"serving {model_dir} at {server.address} (health: {server.address}/health)",
              flush=True)
        while not stop and server.alive():
            time.sleep(0.5)
    if not stop:
        print(f"rlvr: the inference server at {server.address} exited", file=sys.stderr)
        return 1
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    from rlvr.run.input_checks import check_registered_names

    if args.reference:  # the schema's reference page (docs/reference/config.md), no config
        from rlvr.config.reference import main as reference

        return reference(["-"])
    cfg = load_config(*_split_args(args.items))
    check_registered_names(cfg)
    print(to_yaml(cfg), end="")
    print(f"# derived: num_training_steps={cfg.num_training_steps} world_size={cfg.world_size}")
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    """Score a model or checkpoint with the config's eval sets and settings
    (`rlvr.run.offline_eval`)."""
    yamls, overrides = _split_args(args.items)
    if not yamls:
        raise ConfigError("rlvr eval needs a config file after the model (the eval sets and "
                          "settings come from it), e.g. rlvr eval runs/x/final configs/tiny.yaml")
    # Last, so the model given wins over the config's.
    cfg = load_config(yamls, [*overrides, f"model.name_or_path={args.model}"])
    _quiet_libraries()
    from rlvr.run.offline_eval import (check_output, default_output, evaluate_model, print_table,
                                   results_record, write_results)

    path = Path(args.output) if args.output else default_output(args.model, cfg)
    check_output(path, args.model)  # before the model loads
    result, seconds = evaluate_model(cfg)
    record = results_record(args.model, cfg, result, seconds,
                            config={"files": [str(y) for y in yamls], "overrides": overrides})
    print_table(record)
    write_results(path, record)
    print(f"eval results: {path} ({seconds:.1f} s)")
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    _quiet_libraries()
    from rlvr.checkpoint.adapters import is_adapter_checkpoint, load_merged_model
    from rlvr.data.templates import load_chat_template, prompt_ids
    from rlvr.device import resolve_device
    from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir
    from rlvr.rollout.transformers.engine import TransformersEngine
    from rlvr.types import SamplingParams

    model_dir = resolve_model_dir(args.model)
    tokenizer = load_tokenizer(model_dir)
    # Before the model loads: a bad template choice fails at once.
    template = load_chat_template(args.chat_template, tokenizer, field="--chat-template")
    ids = prompt_ids(template, [{"role": "user", "content": args.prompt}])
    if is_adapter_checkpoint(model_dir):  # a LoRA run's checkpoint: merged on the fly
        model = load_merged_model(model_dir)
    else:
        model = load_causal_lm(model_dir)
    model = model.to(resolve_device("auto").torch)
    engine = TransformersEngine(model, tokenizer, (tokenizer.eos_token_id,),
                                tokenizer.pad_token_id)
    temperature = args.temperature if args.temperature is not None else (
        1.0 if args.n > 1 else 0.0)
    params = SamplingParams(n=args.n, temperature=temperature, max_tokens=args.max_tokens,
                            stop_strings=template.stop_strings,
                            seed=args.seed)
    for completion in engine.generate([list(ids)], params)[0]:
        print(f"[{completion.finish_reason}, {len(completion.token_ids_T)} tokens] "
              f"{completion.text}")
    return 0


def _cmd_merge(args: argparse.Namespace) -> int:
    """A LoRA checkpoint's adapter merged into its base: a plain model directory."""
    _quiet_libraries()
    from rlvr.checkpoint.adapters import merge_adapter_checkpoint

    try:
        out = merge_adapter_checkpoint(args.checkpoint, args.out, args.dtype)
    except ValueError as e:  # into itself; an adapter config naming no base
        print(f"rlvr: {e}", file=sys.stderr)
        return 2
    print(f"merged {args.checkpoint} into {out}")
    return 0


def _cmd_prepare(args: argparse.Namespace) -> int:
    """Materialise the offline assets once, so training and tests start without conversion."""
    _quiet_libraries()
    import time

    from rlvr.models import BUILTIN_MODELS, resolve_model_dir

    for name in args.models or list(BUILTIN_MODELS):
        start = time.perf_counter()
        path = resolve_model_dir(name)
        print(f"model {name}: {path} ({time.perf_counter() - start:.1f} s)")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    try:
        from rlvr.report import ReportError, write_report
    except ImportError as e:  # the optional `report` extra
        print(f"rlvr: report needs matplotlib and pandas ({e}); install them with "
              "pip install -e '.[report]'", file=sys.stderr)
        return 2
    try:
        path = write_report(args.runs, args.output)
    except ReportError as e:
        print(f"rlvr: {e}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    """What the run will take here: a short calibration, then memory, tokens and time
    (`rlvr.plan`), printed, and kept in experiment.output_dir/plan.json for `rlvr report`."""
    if not args.items:
        args.subparser.print_usage(sys.stderr)
        print("rlvr plan: name a config file, e.g. rlvr plan configs/quickstart.yaml",
              file=sys.stderr)
        return 2
    cfg = load_config(*_split_args(args.items))
    _quiet_libraries()
    import json

    from rlvr.plan import make_plan, write_plan
    from rlvr.plan.render import render_plan

    record = make_plan(cfg, args.gen_tokens, described=" ".join(args.items))
    print(json.dumps(record, indent=2) if args.json else render_plan(record).rstrip("\n"))
    if not args.no_save:
        print(f"plan: {write_plan(record, cfg.experiment.output_dir)}", file=sys.stderr)
    return 0


def _cmd_env(args: argparse.Namespace) -> int:
    from rlvr.environment import report

    lines = report()
    width = max(len(label) for label, _ in lines)
    for label, value in lines:
        print(f"{label:<{width}}  {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        default=None,
                        help="rlvr's log lines from this level (default: info, or "
                             "$RLVR_LOG_LEVEL); RLVR_DEBUG=1 also shows the libraries' own "
                             "lines (engines, torch, transformers), silenced otherwise")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in [("train", "train a policy"), ("config", "print the resolved config")]:
        p = sub.add_parser(name, help=helptext)
        p.add_argument("items", nargs="*", metavar="CONFIG.yaml | key.sub=value",
                       help="YAML files merged in order (a base, then presets), then overrides")
        p.set_defaults(subparser=p)
    sub.choices["train"].add_argument(
        "--overwrite", action="store_true", help="start over (checkpoint.resume=false): an "
        "earlier run in experiment.output_dir is moved aside to OUTPUT_DIR.old-N")
    sub.choices["config"].add_argument(
        "--reference", action="store_true", help="print the configuration reference (every "
        "field: type, default, allowed values, comment) generated from the schema, as Markdown")
    sub.add_parser("env", help="what rlvr sees: devices, bf16 support, library versions")
    pl = sub.add_parser("plan", help="before launch: memory, tokens and time a run will take "
                                     "here, from a short calibration")
    pl.add_argument("items", nargs="*", metavar="CONFIG.yaml | key.sub=value")
    pl.add_argument("--json", action="store_true", help="print the plan as JSON")
    pl.add_argument("--gen-tokens", type=int, default=None, metavar="N",
                    help="new tokens the calibration generates (default: "
                         "rollout.response_length, whole completions: their lengths and "
                         "rewards, at the cost of one step's generation); fewer is quicker, "
                         "and completions cut at N count as running to response_length")
    pl.add_argument("--no-save", action="store_true", help="do not write "
                    "experiment.output_dir/plan.json")
    pl.set_defaults(subparser=pl)
    la = sub.add_parser("launch", help="train under a launcher (local, ray, slurm), starting "
                                       "the inference servers the config asks for")
    la.add_argument("launcher", choices=["local", "ray", "slurm"],
                    help="sets distributed.launcher; slurm submits one job (or runs in the "
                         "current allocation) and exits with its exit code")
    la.add_argument("items", nargs="*", metavar="CONFIG.yaml | key.sub=value")
    la.add_argument("--overwrite", action="store_true", help="as rlvr train --overwrite")
    la.add_argument("--no-wait", action="store_true",
                    help="slurm: submit the job and return (its logs and exit code land in "
                         "OUTPUT_DIR/slurm/)")
    v = sub.add_parser("serve", help="an inference server (as training runs it) for a "
                                     "model or checkpoint")
    v.add_argument("model", metavar="MODEL_OR_CHECKPOINT", help="built-in name or Hugging Face "
                   "directory (a run's final/ or checkpoints/step_*)")
    v.add_argument("items", nargs="*", metavar="CONFIG.yaml | key.sub=value",
                   help="settings from a run's config (the engine's rollout options, "
                   "rollout.dtype, model.device, experiment.seed)")
    v.add_argument("--host", default="127.0.0.1", help="address to bind; other than loopback "
                   "only with a key (RLVR_SERVER_KEY_FILE or RLVR_SERVER_KEY)")
    v.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    v.add_argument("--log", type=Path, default=None, help="server log file (default: none)")
    v.add_argument("--startup-timeout", type=float, default=600.0)
    e = sub.add_parser("eval", help="score a model or checkpoint on the config's eval sets "
                                    "(pass@k, maj@n per set), as training does")
    e.add_argument("model", metavar="MODEL_OR_CHECKPOINT", help="built-in name, Hugging Face "
                   "directory, or a run's checkpoints/step_* or final directory")
    e.add_argument("items", nargs="+", metavar="CONFIG.yaml | key.sub=value",
                   help="YAML files merged in order, then overrides (eval.num_samples=8 ...)")
    e.add_argument("--output", default=None, help="where to write the results (default: "
                   "experiment.output_dir/eval/MODEL.json, the model's path with / as --; "
                   "never inside the model's directory)")
    r = sub.add_parser("report", help="an HTML page of a run's curves and completions (or "
                                      "several runs side by side)")
    r.add_argument("runs", nargs="+", metavar="RUN_DIR", help="a run's output_dir; several "
                   "are compared on the same plots")
    r.add_argument("--output", default=None, help="where to write the page (default: "
                   "RUN_DIR/report.html; for several runs the first's report_compare.html)")
    m = sub.add_parser("merge", help="merge a LoRA checkpoint's adapter into its base model: "
                                     "a plain model directory")
    m.add_argument("checkpoint", help="a LoRA run's checkpoints/step_* or final directory")
    m.add_argument("out", help="the model directory to write")
    m.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="dtype the base is loaded, merged and saved in")
    p = sub.add_parser("prepare", help="convert built-in models into the local cache")
    p.add_argument("models", nargs="*", help="built-in model names (default: all)")
    g = sub.add_parser("generate", help="sample from a model or checkpoint directory")
    g.add_argument("model", help="built-in name, Hugging Face model directory, or a LoRA "
                   "checkpoint (merged on the fly)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--n", type=int, default=1, help="answers to sample (default: 1)")
    g.add_argument("--max-tokens", type=int, default=64,
                   help="new tokens per answer at most (default: 64)")
    g.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature (default: 0, greedy, for one answer; 1.0 when "
                        "--n asks for several: n greedy answers would all be the same)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    g.add_argument("--chat-template", default="tokenizer",
                   help="as data.chat_template: tokenizer (default), r1_zero, plain, or a Jinja "
                        "file")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        configure_logging(args.log_level)
    except ValueError as e:  # RLVR_LOG_LEVEL names no level
        return _fail(e, 2)
    handlers = {"train": _cmd_train, "launch": _cmd_launch, "serve": _cmd_serve,
                "config": _cmd_config,
                "generate": _cmd_generate,
                "prepare": _cmd_prepare, "env": _cmd_env, "eval": _cmd_eval, "report": _cmd_report,
                "merge": _cmd_merge, "plan": _cmd_plan}
    # Every exit code is listed in docs/faults.md.
    try:
        return handlers[args.command](args)
    except RunFinished as e:  # a rerun of a finished run: nothing to do, and not a failure
        print(f"rlvr: {e}")
        return 0
    except (ConfigError, FileNotFoundError, ResumeRefused) as e:
        return _fail(e, 2)
    except TrainingInterrupted as e:
        return _fail(e, e.exit_code)
    except NumericalFault as e:
        return _fail(e, 3)
    except (EngineLost, EngineUnavailable) as e:
        return _fail(e, 4)
    except VerifierFault as e:
        return _fail(e, 5)
    except NoLearningSignal as e:
        return _fail(e, 6)
    except SaveFailed as e:  # disk full (or another failed write) saving a state or a model
        return _fail(e, 7)
    except LearnerLost as e:  # a learner rank died, raised or hung
        return _fail(e, 8)
    except RunUnhealthy as e:  # a health gate: the run was surely wasted (`rlvr.run.health`)
        return _fail(e, 9)
    except SlurmJobFailed as e:  # the job's own exit code (the trainer's, when it ran)
        return _fail(e, e.exit_code)
    except Exception as e:  # the errors of modules that import torch, imported only now
        code = _heavy_exit_code(e)
        if code is None:
            raise
        return _fail(e, code)


def _heavy_exit_code(error: Exception) -> int | None:
    """The exit code of an error class from a module that imports torch (None: not one), so
    that `rlvr --help` and a usage error import none of them."""
    from rlvr.data.errors import DataError
    from rlvr.distributed.learner_group import LearnerGroupError
    from rlvr.learner.memory_plan import MemoryPlanError
    from rlvr.serving.auth import ServerKeyError
    from rlvr.serving.server import ServerStartError

    for errors, code in [((DataError, ServerKeyError, MemoryPlanError), 2),
                         (ServerStartError, 4), (LearnerGroupError, 8)]:
        if isinstance(error, errors):
            return code
    return None


def _fail(error: BaseException, code: int) -> int:
    """An error the user can act on: one line on stderr, and `code`; the traceback too with
    RLVR_DEBUG=1."""
    if os.environ.get("RLVR_DEBUG") == "1":
        traceback.print_exception(error)
    print(f"rlvr: {error}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
