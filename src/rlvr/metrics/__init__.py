"""Step metrics: where they go (`sinks`) and the learner's throughput and MFU (`throughput`);
the samples behind them, as Parquet trace files (`traces`)."""

from rlvr.metrics.console import ConsoleSink
from rlvr.metrics.sinks import (JsonlSink, MetricSink, MetricsLogger, StepTimer,
                                TensorBoardSink, WandbSink, build_sinks)
from rlvr.metrics.throughput import (ModelShape, default_peak_flops, learner_throughput, mfu,
                                     transformer_flops_per_token)
from rlvr.metrics.traces import TraceRow, TraceWriter, eval_rows, training_rows

__all__ = ["ConsoleSink", "JsonlSink", "MetricSink", "MetricsLogger", "StepTimer",
           "TensorBoardSink", "WandbSink", "build_sinks", "ModelShape", "default_peak_flops",
           "learner_throughput", "mfu", "transformer_flops_per_token", "TraceRow", "TraceWriter",
           "eval_rows", "training_rows"]
