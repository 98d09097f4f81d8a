"""Learner speed and memory on whatever device runs it, for models of real shapes built from
their configs (random weights, no download), compared across settings in one process: seconds
per update, tokens per second, MFU against the device's measured bf16 matmul peak and against
its datasheet, and peak memory.

    python benchmarks/gpu.py                                  # Qwen2.5-1.5B's shape, the defaults
    python benchmarks/gpu.py --shape qwen2.5-1.5b --setting sdpa-shared-ckpt --setting varlen \\
        --setting varlen-mb8k --setting varlen-mb8k-compile --out runs/gpu.jsonl
    python benchmarks/gpu.py --shape qwen2.5-7b --setting varlen-ckpt-bf16w
    python benchmarks/gpu.py --setting varlen-mb16k-compile --steps 2 --profile runs/profile
    python benchmarks/gpu.py --setting varlen-fit-compile --max-memory-gb 60   # the memory plan
    python benchmarks/gpu.py --device cpu --shape tiny --tokens 2048 --steps 1   # a dry run

A setting is a name made of dash-separated words, applied to the learner as the config would:
  auto | sdpa | eager | flex | varlen | flash_attention_2   model.attn_implementation
  shared | whole                  algorithm.share_prompts true | false (default: the layout
                                   `packed_layout` resolves for the attention and device)
  ckpt | ckptN                     gradient checkpointing of every layer | every Nth layer
                                   (transformers' `every_n_layers`, where it has it)
  compile                          model.compile (each decoder layer, inductor by default)
  mbNk | mbN                       algorithm.max_tokens_per_micro_batch = N*1024 | N
  bf16w                            model.dtype=bfloat16 (weights and AdamW state in bf16; else
                                   fp32 master weights with bf16 autocast)
  headNk                           the vocabulary head's chunk: N*1024 response tokens' logits
                                   at a time (`rlvr.learner.forward.LOGIT_CHUNK_TOKENS`: 1,024)
  fsdp                             FSDP2 over one rank, as learner ranks run (`shard_policy`):
                                   fp32 master weights, each layer's weights cast to bf16 for
                                   its passes (mixed precision), bf16 activations, no autocast
  fit                              the learner's memory plan (`rlvr.learner.memory_plan`)
                                   chooses checkpointing (unless ckpt; not with ckptN) and the
                                   budget (unless mbNk) from probes of rows of --pack-length,
                                   within --max-memory-gb: both config fields left null
e.g. `varlen-mb8k-compile`. Each setting gets a fresh model and learner and reports a line and,
with --out, a JSON record appended as soon as it is measured (a timeout keeps what was done).

The update is a DAPO step over groups of `--group-size` samples sharing a prompt (prompts of
up to `--prompt-tokens`, responses of a quarter to all of `--response-tokens`), `--tokens`
sequence tokens in all, packed into rows of `--pack-length`. The same sequences are used for
every setting, so seconds per update compare layouts that run different token counts. The first
update (two with compile: allocator warm-up, kernel selection, compilation; with fit, the
memory plan's probes) is not counted. A fit setting's line and record say what the plan chose
("plan: none (no allocator figures)" on CPU, where the learner plans nothing).

FLOPs (`rlvr.metrics.throughput.update_flops`): 6 per decoder weight per token run, 6 H V per
response token for the output projection (the learner computes no other logits), and 12 x
heads x head_dim per attended (query, key) pair per layer, pairs counted from positions (what a
varlen kernel computes; a dense mask's extra pairs are not work). Recomputation (checkpointing,
the chunked head's backward) is not counted. The measured peak is the best of 8192^3 bf16
matmuls (`measure_matmul_flops`); the datasheet's is the dense bf16 figure
(`datasheet_peak_flops`). Generation speed is `benchmarks/generation.py`'s job.

--profile DIR: after a setting's timed updates, one more update under torch.profiler, broken
down by `gpu_profile` (beside this script): wall against busy device time, device time by
category, by span of `Learner.update` and the head's share, the top kernels. Printed, and in
the JSON record as "profile"; tables and chrome traces written to DIR.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import inspect
import json
import os
import random
import re
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass

import torch

# Run as a script, this folder is sys.path[0]; loaded by path (tests/test_gpu_benchmark.py), it
# is appended, where it shadows no installed module.
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from gpu_profile import describe_profile, profile_or_error  # noqa: E402

# Model shapes from their published configs (hidden, layers, heads, kv heads, MLP, vocab).
SHAPES = {
    "qwen2.5-0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                         tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, intermediate_size=8960, vocab_size=151936,
                         tie_word_embeddings=True),
    "qwen2.5-7b": dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                       num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
                       tie_word_embeddings=False),
    # the quick start's model (SmolLM2-135M-Instruct): a shape CPUs measure in minutes
    "smollm2-135m": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, intermediate_size=1536, vocab_size=49152,
                         tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128, vocab_size=512,
                 tie_word_embeddings=True),
}
ATTENTIONS = ("auto", "sdpa", "eager", "flex", "varlen", "flash_attention_2")


@dataclass(frozen=True)
class Setting:
    name: str
    attention: str = "auto"
    share_prompts: bool | None = None
    checkpoint_every: int = 0  # 0: no activation checkpointing
    compile: bool = False
    max_tokens_per_micro_batch: int | None = None  # None: the command line's
    bf16_weights: bool = False
    fsdp: bool = False  # FSDP2 over a world of one: mixed precision instead of autocast
    head_chunk_tokens: int | None = None  # None: the learner's LOGIT_CHUNK_TOKENS
    fit: bool = False  # the learner's memory plan chooses what the fields above leave open


def parse_setting(name: str) -> Setting:
    """A `Setting` from its name (see the module docstring); ValueError for an unknown word."""
    fields: dict = {"name": name}
    for word in name.split("-"):
        if word in ATTENTIONS:
            fields["attention"] = word
        elif word in ("shared", "whole"):
            fields["share_prompts"] = word == "shared"
        elif m := re.fullmatch(r"ckpt(\d*)", word):
            fields["checkpoint_every"] = int(m.group(1) or 1)
        elif word == "compile":
            fields["compile"] = True
        elif m := re.fullmatch(r"mb(\d+)(k?)", word):
            fields["max_tokens_per_micro_batch"] = int(m.group(1)) * (1024 if m.group(2) else 1)
        elif word == "bf16w":
            fields["bf16_weights"] = True
        elif m := re.fullmatch(r"head(\d+)k", word):
            fields["head_chunk_tokens"] = int(m.group(1)) * 1024
        elif word in ("fit", "fsdp"):
            fields[word] = True
        else:
            raise ValueError(f"setting {name!r}: unknown word {word!r}")
    if fields.get("fit") and fields.get("checkpoint_every", 0) > 1:
        # The learner checkpoints every layer or none; a plan has no every-Nth choice.
        raise ValueError(f"setting {name!r}: fit takes ckpt, not ckptN")
    return Setting(**fields)


def build_model(args: argparse.Namespace, attention: str, device: torch.device,
                bf16_weights: bool) -> torch.nn.Module:
    """A model of `args.shape` with random weights, built on `device` (no host copy), or
    `args.model`'s weights."""
    from rlvr.learner.attention import CONFIG_NAMES, register_varlen_attention
    from rlvr.models import load_causal_lm

    dtype = "bfloat16" if bf16_weights else "float32"
    if args.model:
        return load_causal_lm(args.model, dtype, attention).to(device)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    register_varlen_attention()
    config = Qwen2Config(**SHAPES[args.shape], max_position_embeddings=32768,
                         attn_implementation=CONFIG_NAMES[attention])
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    return model.to(torch.bfloat16) if bf16_weights else model


def build_sequences(args: argparse.Namespace, vocab_size: int) -> list:
    """Groups of `args.group_size` samples sharing a random prompt, `args.tokens` sequence
    tokens in all (the same list for every setting)."""
    from rlvr.algorithm.packing import SequenceToPack

    rng = random.Random(0)
    seqs, total = [], 0
    while total < args.tokens:
        prompt = [rng.randrange(3, vocab_size)
                  for _ in range(rng.randint(args.prompt_tokens // 2, args.prompt_tokens))]
        for k in range(args.group_size):
            n = rng.randint(max(args.response_tokens // 4, 1), args.response_tokens)
            response = [rng.randrange(3, vocab_size) for _ in range(n)]
            seqs.append(SequenceToPack(prompt, response, [-2.0] * n,
                                       advantage=1.0 if k % 2 else -1.0, index=len(seqs)))
            total += len(prompt) + n
    return seqs


def enable_checkpointing(model: torch.nn.Module, every: int) -> None:
    """Activation checkpointing of every `every`-th decoder layer (transformers'
    `every_n_layers`, where the installed version has it; else of every layer)."""
    if every <= 0:
        return
    options = {"gradient_checkpointing_kwargs": {"use_reentrant": False}}
    if "every_n_layers" in inspect.signature(model.gradient_checkpointing_enable).parameters:
        options["every_n_layers"] = every
    elif every > 1:
        raise ValueError(f"checkpointing every {every} layers needs transformers' every_n_layers")
    model.gradient_checkpointing_enable(**options)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_update(learner, batch, loss, device: torch.device) -> tuple[float, object]:
    """Seconds of one learner update (the device drained before and after) and its result."""
    synchronize(device)
    start = time.perf_counter()
    result = learner.update(batch, loss, num_micro_batches=1, num_epochs=1, temperature=1.0)
    synchronize(device)
    return time.perf_counter() - start, result


def learner_settings(args: argparse.Namespace, setting: Setting, bf16: bool,
                     warmups: int) -> LearnerSettings:
    """The learner's `LearnerSettings` for `setting`. Without fit, the benchmark checkpoints
    (`enable_checkpointing`) and the budget is mbNk's or --max-tokens-per-micro-batch; with
    fit, what ckpt and mbNk leave open is None, for the memory plan to choose before the first
    update from rows of --pack-length within --max-memory-gb (`Learner.plan_memory`)."""
    from rlvr.learner import LearnerSettings
    from rlvr.learner.memory_plan import GIB

    plan = {}
    if setting.fit:
        plan = dict(gradient_checkpointing=True if setting.checkpoint_every else None,
                    pack_length=args.pack_length,
                    max_memory_bytes=(None if args.max_memory_gb is None
                                      else round(args.max_memory_gb * GIB)))
    default_budget = None if setting.fit else args.max_tokens_per_micro_batch
    return LearnerSettings(
        learning_rate=1e-7, lr_scheduler_type="constant", warm_up_steps=0,
        total_optimizer_steps=args.steps + warmups + bool(args.profile),
        # FSDP2's mixed precision casts the weights itself (`shard_policy`), as on learner ranks
        bf16_autocast=bf16 and not setting.bf16_weights and not setting.fsdp,
        compile_backend=args.compile_backend if setting.compile else None,
        max_tokens_per_micro_batch=setting.max_tokens_per_micro_batch or default_budget,
        **plan)


def plan_fields(learner) -> dict:
    """What a fit setting's memory plan chose, for its record and line: "plan" in words (or
    why there was none) and the checkpointing and budget the learner then ran with."""
    from rlvr.device import device_memory

    plan = learner.memory_plan
    if plan is None:  # CPU, or ckpt and mbNk both given: nothing left to choose
        why = ("no allocator figures" if device_memory(learner.device) is None
               else "ckpt and mbNk leave nothing to choose")
        return {"plan": f"none ({why})", "plan_gradient_checkpointing": None,
                "plan_max_tokens_per_micro_batch": None, "plan_fits": None}
    return {"plan": plan.describe(), "plan_gradient_checkpointing": plan.gradient_checkpointing,
            "plan_max_tokens_per_micro_batch": plan.max_tokens_per_micro_batch,
            "plan_fits": plan.fits}


@contextlib.contextmanager
def head_chunk(tokens: int | None):
    """The learner's vocabulary-head chunk set to `tokens` response tokens for one setting
    (a module constant, read at each forward pass), then put back; None leaves it."""
    from rlvr.learner import forward

    before = forward.LOGIT_CHUNK_TOKENS
    forward.LOGIT_CHUNK_TOKENS = tokens or before
    try:
        yield
    finally:
        forward.LOGIT_CHUNK_TOKENS = before


def one_rank_world(device):
    """This process as the only rank of a process group on `device`'s backend: FSDP2 needs one
    for the fsdp settings (`leave_world` ends it)."""
    from rlvr.device import bind
    from rlvr.distributed.ray_session import free_endpoint
    from rlvr.distributed.world import init_world

    bind(device)  # NCCL's rank takes the current GPU
    host, port = free_endpoint()
    return init_world(0, 1, f"tcp://{host}:{port}", device.backend, timeout_s=600)


def leave_world(world) -> None:
    """`one_rank_world`'s process group destroyed, if there is one (`destroy_world` leaves a
    world of one alone, for the trainer's sake)."""
    import torch.distributed as dist

    if world is not None and dist.is_initialized():
        dist.destroy_process_group()


def run_setting(args: argparse.Namespace, setting: Setting, device, seqs: list,
                peaks: dict[str, float], world=None) -> dict:
    """One setting measured: a fresh model and learner, warm-up updates, then timed ones.
    `world`: the one-rank process group an fsdp setting shards over (`one_rank_world`)."""
    from rlvr.algorithm.losses import LossParams, compute_policy_loss
    from rlvr.algorithm.packing import pack_sequences
    from rlvr.device import memory_metrics
    from rlvr.distributed.sharding import shard_policy, sharded_forward_logprobs
    from rlvr.learner import Learner
    from rlvr.learner.attention import packed_layout, varlen_kernel
    from rlvr.learner.forward import forward_logprobs
    from rlvr.metrics.throughput import update_flops

    layout = packed_layout(setting.attention, setting.share_prompts, device.type)
    bf16 = device.bf16_compute(None if args.bf16 == "auto" else args.bf16 == "on")
    model = build_model(args, layout.attention, device.torch, setting.bf16_weights)
    if not setting.fit:  # with fit the learner checkpoints (ckpt), or its plan decides
        enable_checkpointing(model, setting.checkpoint_every)
    forward_fn = forward_logprobs
    if setting.fsdp:
        # bf16 weights need no mixed precision: `shard_policy` casts only wider ones
        shard_policy(model, "fsdp", False, world, device, bf16)
        forward_fn = sharded_forward_logprobs
    warmups = 2 if setting.compile else 1
    learner = Learner(model, None, learner_settings(args, setting, bf16, warmups),
                      forward_fn=forward_fn, device=device.torch)
    batch = pack_sequences(seqs, args.pack_length, share_prompts=layout.share_prompts,
                           strategy="first_fit_decreasing")
    params = LossParams(0.2, 0.28, 0.0, 2, float(batch.num_response_tokens))
    loss = lambda inputs: compute_policy_loss("dapo", inputs, params)  # noqa: E731
    flops = update_flops(model, batch)
    half = bf16 or setting.bf16_weights
    kernel = varlen_kernel(torch.empty(1, dtype=torch.bfloat16 if half else torch.float32,
                                       device=device.torch))
    memory_metrics(device.torch)  # resets the CUDA peak: this setting's own from here
    seconds, memory, warm_up_s = [], {}, 0.0
    for step in range(warmups + args.steps):
        took, result = timed_update(learner, batch, loss, device.torch)
        for key, value in result.memory.items():
            memory[key] = max(memory.get(key, value), value)
        if step < warmups:
            warm_up_s += took
        else:
            seconds.append(took)
    per_update = statistics.median(seconds)
    sequence_tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in seqs)
    record = {
        **asdict(setting), "attention": layout.attention, "share_prompts": layout.share_prompts,
        "shape": args.model or args.shape, "bf16_compute": bf16,
        "varlen_kernel": kernel if layout.attention == "varlen" else None,
        # a fit setting's: the plan's, read after the first update ran it
        "max_tokens_per_micro_batch": learner.settings.max_tokens_per_micro_batch,
        "rows": batch.num_rows,
        "tokens_run": batch.num_tokens, "sequence_tokens": sequence_tokens,
        "response_tokens": batch.num_response_tokens, "warm_up_s": warm_up_s,
        "seconds_per_update": per_update, "seconds": seconds,
        "tokens_per_s": batch.num_tokens / per_update,
        "sequence_tokens_per_s": sequence_tokens / per_update,
        "flops": asdict(flops), "achieved_tflops": flops.total / per_update / 1e12,
        "mfu_measured_peak": flops.total / per_update / peaks["measured"],
        "mfu_datasheet": (flops.total / per_update / peaks["datasheet"]
                          if peaks.get("datasheet") else None),
        "peak_memory_gb": memory.get("memory/peak_gb", memory.get("memory/peak_rss_gb")),
        "grad_norm": result.grad_norm,
        **(plan_fields(learner) if setting.fit else {}),
    }
    if args.profile:  # after the timed updates, so profiling cannot slow them
        update = lambda: timed_update(learner, batch, loss, device.torch)[0]  # noqa: E731
        record["profile"] = profile_or_error(update, model, device.torch, args.profile,
                                             setting.name)
    del learner, model
    return record


def describe(record: dict) -> str:
    if "error" in record:
        return f"{record['name']:<28} {record['error']}"
    datasheet = (f"{100 * record['mfu_datasheet']:.1f}%" if record["mfu_datasheet"] is not None
                 else "-")
    return (f"{record['name']:<28} {record['attention']:>8} "
            f"{'shared' if record['share_prompts'] else 'whole':>6} "
            f"{record['seconds_per_update']:7.3f} s {record['tokens_run']:>7} tok "
            f"{record['tokens_per_s']:>9,.0f} tok/s {record['sequence_tokens_per_s']:>9,.0f} "
            f"seq-tok/s {record['achieved_tflops']:7.1f} TFLOP/s "
            f"MFU {100 * record['mfu_measured_peak']:5.1f}% (datasheet {datasheet}) "
            f"peak {record['peak_memory_gb']:6.1f} GB warm-up {record['warm_up_s']:5.1f} s"
            + (f" plan: {record['plan']}" if "plan" in record else ""))


def measure_peaks(device, bf16: bool, size: int) -> dict[str, float]:
    from rlvr.metrics.throughput import datasheet_peak_flops, measure_matmul_flops

    dtype = torch.bfloat16 if bf16 else torch.float32
    peaks = {"measured": measure_matmul_flops(dtype, size=size, seconds=1.0,
                                              device=device.torch)}
    if device.type == "cuda":
        peaks["datasheet"] = datasheet_peak_flops(torch.cuda.get_device_name(device.torch))
    return peaks


def header(device, peaks: dict[str, float]) -> dict:
    import transformers

    from rlvr.device import describe_host

    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": device.describe(), "host": describe_host(),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers.__version__,
            "measured_peak_tflops": peaks["measured"] / 1e12,
            "datasheet_peak_tflops": (peaks["datasheet"] / 1e12 if peaks.get("datasheet")
                                      else None)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 2)[2])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--model", default="", help="a local HF model directory instead")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--bf16", default="auto", choices=["auto", "on", "off"],
                        help="bf16 compute (autocast over fp32 weights); auto: where native")
    parser.add_argument("--setting", action="append", default=[],
                        help="a setting to measure (repeatable); default: auto")
    parser.add_argument("--tokens", type=int, default=32768, help="sequence tokens per update")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--response-tokens", type=int, default=1024)
    parser.add_argument("--pack-length", type=int, default=4096)
    parser.add_argument("--max-tokens-per-micro-batch", type=int, default=16384,
                        help="the budget of a setting without mbNk or fit")
    parser.add_argument("--max-memory-gb", type=float, default=None,
                        help="GiB of the GPU a fit setting's memory plan may count on "
                             "(model.max_memory_gb); default: what is free")
    parser.add_argument("--steps", type=int, default=3, help="timed updates (after warm-up)")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--peak-size", type=int, default=8192,
                        help="matmul size of the peak probe")
    parser.add_argument("--out", default="", help="append one JSON record per setting here")
    parser.add_argument("--profile", default="", metavar="DIR",
                        help="profile one more update per setting; tables and traces in DIR")
    args = parser.parse_args(argv)
    args.settings = [parse_setting(s) for s in (args.setting or ["auto"])]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from rlvr.device import resolve_device

    device = resolve_device(args.device)
    bf16 = device.bf16_compute(None if args.bf16 == "auto" else args.bf16 == "on")
    peaks = measure_peaks(device, bf16, args.peak_size if device.type == "cuda" else 1024)
    head = header(device, peaks)
    print(json.dumps(head), flush=True)
    vocab = SHAPES[args.shape]["vocab_size"] if not args.model else 32000
    seqs = build_sequences(args, vocab)
    print(f"{args.model or args.shape}: {len(seqs)} sequences in groups of {args.group_size}, "
          f"{sum(len(s.prompt_ids) + len(s.response_ids) for s in seqs)} sequence tokens, "
          f"rows of {args.pack_length}; peak {peaks['measured'] / 1e12:.1f} TFLOP/s measured"
          + (f", {peaks['datasheet'] / 1e12:.0f} datasheet" if peaks.get("datasheet") else ""),
          flush=True)
    world = one_rank_world(device) if any(s.fsdp for s in args.settings) else None
    try:
        return run_settings(args, device, seqs, peaks, head, world)
    finally:
        leave_world(world)


def run_settings(args: argparse.Namespace, device, seqs: list, peaks: dict[str, float],
                 head: dict, world) -> int:
    """Each setting measured and reported in turn; 1 if any failed, else 0."""
    failures = 0
    for setting in args.settings:
        try:
            with head_chunk(setting.head_chunk_tokens):
                record = run_setting(args, setting, device, seqs, peaks, world)
        except getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError) as error:
            record = {"name": setting.name, "error": f"out of memory: {str(error)[:200]}"}
            failures += 1
        except Exception as error:  # one setting's failure must not cost the others
            traceback.print_exc()
            record = {"name": setting.name, "error": f"{type(error).__name__}: {error}"[:500]}
            failures += 1
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(describe(record), flush=True)
        if "profile" in record:
            print(describe_profile(record["profile"]), flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps({**head, **record}) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
