"""Which metric sinks a run writes to, chosen from the logging config."""

from __future__ import annotations

from pathlib import Path

from rlvr.config import Config
from rlvr.metrics import ConsoleSink, JsonlSink, MetricSink, TensorBoardSink, WandbSink

CONSOLE_KEYS = ["objective/verifiable_reward", "eval/scores", "loss/policy_avg",
                "val/sequence_lengths", "time/step"]


def build_sinks(cfg: Config, output_dir: Path, config_dict: dict) -> list[MetricSink]:
    sinks: list[MetricSink] = [JsonlSink(output_dir / "metrics.jsonl")]
    if cfg.logging.progress_bar:
        sinks.append(ConsoleSink(cfg.num_training_steps, CONSOLE_KEYS))
    if cfg.logging.with_tracking:
        sinks.append(TensorBoardSink(output_dir / "tensorboard"))
        if cfg.logging.wandb_mode != "disabled":
            sinks.append(WandbSink(project=cfg.logging.wandb_project, name=cfg.experiment.name,
                                   mode=cfg.logging.wandb_mode, config=config_dict,
                                   dir=output_dir))
    return sinks
