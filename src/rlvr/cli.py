"""`rlvr train|config|generate`: the command line.

`prepare` writes the built-in models into the local cache. `train` and `config` take a YAML file plus `key.sub=value` overrides (OmegaConf dotlist syntax,
checked against the typed config); a bad config exits with status 2 and names the field before
any model is loaded.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from rlvr.config import ConfigError, load_config, to_yaml
from rlvr.data.errors import DataError
from rlvr.interrupts import NumericalFault, TrainingInterrupted


def _quiet_libraries() -> None:
    # transformers' weight-loading bars and advisory warnings drown the training progress bar.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _split_args(items: list[str]) -> tuple[list[str], list[str]]:
    """YAML files (merged in order) and key.sub=value overrides, in any order."""
    overrides = [item for item in items if "=" in item]
    return [item for item in items if "=" not in item], overrides


def _cmd_train(args: argparse.Namespace) -> int:
    cfg = load_config(*_split_args(args.items))
    _quiet_libraries()
    from rlvr.trainer import train

    run = train(cfg)
    print(f"done: {cfg.num_training_steps} steps, metrics in {run.output_dir / 'metrics.jsonl'}")
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    from rlvr.build import check_registered_names

    cfg = load_config(*_split_args(args.items))
    check_registered_names(cfg)
    print(to_yaml(cfg), end="")
    print(f"# derived: num_training_steps={cfg.num_training_steps} world_size={cfg.world_size}")
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    _quiet_libraries()
    from rlvr.device import resolve_device
    from rlvr.models import load_causal_lm, load_tokenizer, resolve_model_dir
    from rlvr.rollout.transformers_engine import TransformersEngine
    from rlvr.types import SamplingParams

    model_dir = resolve_model_dir(args.model)
    tokenizer = load_tokenizer(model_dir)
    model = load_causal_lm(model_dir).to(resolve_device("auto").torch)
    engine = TransformersEngine(model, tokenizer, (tokenizer.eos_token_id,),
                                tokenizer.pad_token_id)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}],
                                        add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    params = SamplingParams(n=args.n, temperature=args.temperature, max_tokens=args.max_tokens,
                            seed=args.seed)
    for completion in engine.generate([list(ids)], params)[0]:
        print(f"[{completion.finish_reason}, {len(completion.token_ids_T)} tokens] "
              f"{completion.text}")
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


def _cmd_env(args: argparse.Namespace) -> int:
    from rlvr.environment import report

    lines = report()
    width = max(len(label) for label, _ in lines)
    for label, value in lines:
        print(f"{label:<{width}}  {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, helptext in [("train", "train a policy"), ("config", "print the resolved config")]:
        p = sub.add_parser(name, help=helptext)
        p.add_argument("items", nargs="*", metavar="CONFIG.yaml | key.sub=value",
                       help="YAML files merged in order (a base, then presets), then overrides")
    sub.add_parser("env", help="what rlvr sees: devices, bf16 support, library versions")
    p = sub.add_parser("prepare", help="convert built-in models into the local cache")
    p.add_argument("models", nargs="*", help="built-in model names (default: all)")
    g = sub.add_parser("generate", help="sample from a model or checkpoint directory")
    g.add_argument("model", help="built-in name or Hugging Face model directory")
    g.add_argument("--prompt", required=True)
    g.add_argument("--n", type=int, default=1)
    g.add_argument("--max-tokens", type=int, default=64)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    handlers = {"train": _cmd_train, "config": _cmd_config, "generate": _cmd_generate,
                "prepare": _cmd_prepare, "env": _cmd_env}
    try:
        return handlers[args.command](args)
    except ConfigError as e:
        print(f"rlvr: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, DataError) as e:
        print(f"rlvr: {e}", file=sys.stderr)
        return 2
    except TrainingInterrupted as e:
        print(f"rlvr: {e}", file=sys.stderr)
        return e.exit_code
    except NumericalFault as e:
        print(f"rlvr: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
