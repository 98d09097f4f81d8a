"""`rlvr eval MODEL_OR_CHECKPOINT CONFIG...`: score a model outside training, the way training
scores it, so the base model and every checkpoint of a run are measured alike.

What it is: from a config (its `model.name_or_path` replaced by the model given: a built-in name,
a Hugging Face directory, or a run's `checkpoints/step_*` / `final`), build only what evaluation
needs (prompts and tokenizer through `rlvr.run.build.build_data`, one engine in this process per
`rollout.engine`, the verifier scorer), run the same `rlvr.producer.evaluation.Evaluator` as the
training loop (the config's workflow plays each episode, its tools and turns included), print a
table per eval set and write the results atomically (into `experiment.output_dir/eval/`, never
into the model's directory).
What it is not: no learner, optimizer, reference model or Ray actors are built (a config's
engine actors become one engine here), and nothing of a run's output directory is touched
besides the results file.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rlvr.run.build import build_data, plan_devices, prepare_process
from rlvr.run.settings import engine_settings, eval_settings, scorer_settings
from rlvr.checkpoint import write_text_atomic
from rlvr.config import Config, ConfigError
from rlvr.console import phase
from rlvr.run.input_checks import check_code_sandbox
from rlvr.models import TRUST_REMOTE_CODE
from rlvr.producer.evaluation import EvalResult, Evaluator
from rlvr.rewards.scorer import RewardScorer
from rlvr.rollout import RolloutEngine, create_engine

log = logging.getLogger(__name__)


@dataclass
class EvalParts:
    """What an evaluation outside training touches, built by `build_eval`."""

    evaluator: Evaluator
    engine: RolloutEngine
    scorer: RewardScorer

    def close(self) -> None:
        self.engine.close()
        self.scorer.close()


def build_eval(cfg: Config) -> EvalParts:
    """Data (bad rows fail first), then one engine in this process, then the scorer."""
    prepare_process(cfg)
    model_dir, tokenizer, data = build_data(cfg)
    check_code_sandbox(cfg, data)  # a code verifier or tool_use runs answers' code here too
    if cfg.rollout.num_engines > 0:
        log.info("rlvr eval runs one %s engine in this process (rollout.num_engines=%d "
                 "applies to training)", cfg.rollout.engine, cfg.rollout.num_engines)
    devices = plan_devices(cfg, None)
    # No learner shares the device: a colocated engine has no reason to sleep.
    settings = replace(engine_settings(cfg, devices.type, devices.bf16), colocate=False)
    with phase("engine") as done:
        engine = create_engine(cfg.rollout.engine, model_dir, settings,
                               generation_eos_ids(model_dir, tokenizer), tokenizer.pad_token_id)
        done["detail"] = type(engine).__name__
    return EvalParts(evaluator=Evaluator(data.eval_sets, eval_settings(cfg), tokenizer),
                     engine=engine,
                     scorer=RewardScorer.from_settings(scorer_settings(cfg, tokenizer)))


def generation_eos_ids(model_dir: str, tokenizer) -> tuple[int, ...]:
    """The ids that end an answer: the tokenizer's EOS and the model's generation config's
    (read from the directory, as the model's own `generation_config` would be, without
    loading the weights)."""
    from transformers import AutoConfig, GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_dir).eos_token_id  # a JSON file: no code
    except OSError:  # no generation_config.json: transformers derives it from config.json
        config = AutoConfig.from_pretrained(model_dir, trust_remote_code=TRUST_REMOTE_CODE)
        eos = getattr(config, "eos_token_id", None)
    ids = set() if eos is None else set(eos) if isinstance(eos, (list, tuple)) else {eos}
    return tuple(sorted({tokenizer.eos_token_id} | ids))


def evaluate_model(cfg: Config) -> tuple[EvalResult, float]:
    """Build, evaluate once, close; the result and the seconds the evaluation took."""
    parts = build_eval(cfg)
    try:
        start = time.perf_counter()
        with phase(f"eval of {cfg.model.name_or_path}: "
                   f"{sum(len(s.prompts) for s in parts.evaluator.sets)} prompts") as done:
            result = parts.evaluator.run(parts.engine, parts.scorer)
            done["detail"] = f"eval/scores={result.metrics.get('eval/scores', float('nan')):.3g}"
        return result, time.perf_counter() - start
    finally:
        parts.close()


def default_output(model: str, cfg: Config) -> Path:
    """`experiment.output_dir/eval/<model>.json`, the model as given with its path separators
    as `--` (`runs/x/final` -> `runs--x--final.json`): never the model's own directory (a base
    model's may be shared, and a second config would overwrite the first's results), and one
    file per model, so the checkpoints of a run scored with one config sit side by side."""
    label = re.sub(r"[^\w.-]+", "--", model.strip("./")).strip("-.")[-200:] or "model"
    return Path(cfg.experiment.output_dir) / "eval" / f"{label}.json"


def check_output(path: Path, model: str) -> None:
    """ConfigError where the results would land inside the model's directory."""
    if Path(model).is_dir():
        model_dir = Path(model).resolve()
        if model_dir == path.resolve() or model_dir in path.resolve().parents:
            raise ConfigError(f"rlvr eval writes {path}, inside the model's directory "
                              f"{model}: results are written beside models, never into them; "
                              "set experiment.output_dir or --output elsewhere")


def results_record(model: str, cfg: Config, result: EvalResult, seconds: float,
                   config: dict | None = None) -> dict:
    """What the results file holds: the model, its training step when it is a checkpoint, the
    config it was scored with (`config`: its files and overrides), the eval settings, every
    metric, and each set's figures by short name."""
    info = Path(model) / "rlvr_checkpoint.json"
    step = json.loads(info.read_text()).get("step") if info.is_file() else None
    ev = cfg.eval
    return {
        "model": model,
        "step": step,
        "config": config or {},
        "eval": {"num_samples": ev.num_samples, "pass_at_k": list(ev.pass_at_k),
                 "temperature": ev.temperature, "top_p": ev.top_p,
                 "response_length": cfg.eval_response_length, "max_prompts": ev.max_prompts,
                 "seed": cfg.experiment.seed},
        "metrics": result.metrics,
        "sets": {s.name: {"num_prompts": s.num_prompts, **_short(s.name, s.metrics)}
                 for s in result.sets},
        "seconds": seconds,
    }


def _short(name: str, metrics: dict[str, float]) -> dict[str, float]:
    prefix = f"eval/{name}/"
    return {k[len(prefix):]: v for k, v in metrics.items() if k.startswith(prefix)}


def write_results(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")


def print_table(record: dict, console=None) -> None:
    """One row per eval set: prompts, pass@k, maj@n, mean reward, stop rate, mean length."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    # A pipe or file has no width to respect (rich would assume 80 columns and cut titles).
    console = console or Console(width=None if sys.stdout.isatty() else 200)
    columns: list[str] = []
    for figures in record["sets"].values():
        columns += [c for c in figures if c not in columns and c != "num_prompts"]
    ev = record["eval"]
    table = Table(title=f"{record['model']}: {ev['num_samples']} sample(s) per prompt, "
                        f"temperature {ev['temperature']}", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    table.add_column("set", no_wrap=True)
    for title in ["prompts", *columns]:
        table.add_column(_COLUMN_TITLES.get(title, title), justify="right", no_wrap=True)
    for name, figures in record["sets"].items():
        table.add_row(name, str(figures["num_prompts"]),
                      *[f"{figures[c]:.3f}" if c in figures else "-" for c in columns])
    console.print(table)


_COLUMN_TITLES = {"mean_reward": "reward", "stop_rate": "stopped", "sequence_lengths": "tokens"}
