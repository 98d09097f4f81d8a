"""Where one learner update's time goes: `benchmarks/gpu.py --profile DIR` runs an update under
torch.profiler (CPU and, on CUDA, CUDA activity; no shapes or stacks, so it stays cheap) and
breaks its device time down here.

The breakdown (`profile_breakdown`, printed by `describe_profile`): the update's wall time
against the device's busy time (the union of its kernels, so idle gaps show); device time by
category (`categorise`: matmul, attention, head/softmax, optimizer, elementwise/reduction,
memcpy/memset, other), by name and by where the launching op ran, since by name alone the
head's casts and reductions look like the trunk's; device time by span of `Learner.update`
(forward, loss, backward, optimizer) with the head's share of each (what the forward runs after
the decoder, its backward and recomputation); the 15 kernels of most time with their calls.
Written to DIR: <setting>.txt (the breakdown and the profile's key_averages table) and
<setting>.trace.json.gz (the chrome trace; dropped over 7 MiB gzipped). Without CUDA the same
breakdown groups the CPU ops' self time: the dry run exercises it.

What it is not: a benchmark. It runs no update of its own choosing and times nothing but the
one it is handed (`profile_update`'s `update`); building the model and the learner, and
comparing settings, are `benchmarks/gpu.py`'s job. torch.profiler records; what is written here
is only the attribution of its events, for which no library served (the profiler's own tables
group by name, not by the learner's spans or by trunk and head).
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import shutil
import traceback
from collections import Counter, defaultdict
from typing import Callable, NamedTuple

import torch

# Kernel (CUDA) or op (CPU) name -> category: the first pattern that matches, case ignored.
# Attention comes before matmul (a fused attention kernel's name can hold "cutlass"), the
# head's softmax and gather before elementwise (their kernels are "..._elementwise_kernel"s).
CATEGORY_PATTERNS = (
    ("memcpy/memset", r"^(memcpy|memset)\b"),
    ("attention", r"flash|fmha|varlen|sdpa|scaled_dot_product|attention|attn"),
    ("optimizer", r"adam|foreach|multi_tensor_apply|lpnorm|vector_norm"),
    ("head/softmax", r"softmax|logsumexp|gather|scatter|nll_loss|cross_entropy"),
    ("matmul", r"gemm|gemv|cutlass|cublas|xmma|nvjet|wgmma|^triton_tem_fused_\w*mm"
               r"|^aten::(mm|addmm|bmm|baddbmm|_scaled_mm)$"),
    ("elementwise/reduction",
     r"^triton_|elementwise|reduce|copy|cast|fill|index|embedding|^aten::_*(to|add|sub|mul|"
     r"div|neg|exp|log|pow|rsqrt|sqrt|reciprocal|sum|mean|amax|max|min|silu|sigmoid|tanh|cos|"
     r"sin|abs|where|clamp|zero|zeros|ones|full|cat|stack|arange|eq|ne|gt|lt|ge|le|tril|triu|"
     r"bitwise_\w+|logical_\w+|isinf|isnan)_?$"),
)
CATEGORIES = tuple(c for c, _ in CATEGORY_PATTERNS) + ("other",)
SPAN_PREFIX = "learner."  # the spans Learner.update opens: learner.forward, .loss, ...
FORWARD_SPANS = ("forward", "old_logprobs", "reference")
TRUNK_SPAN = "bench.trunk"  # opened around each decoder call while profiling (`trunk_span`)
BACKWARD_FUNCTION = 1  # torch's RecordScope of an autograd node's own event
# A gzipped trace larger than this is dropped (table and breakdown kept): the session bundles
# two traces in one file, and the device tool returns files of at most 16 MiB.
TRACE_LIMIT_BYTES = 7 * 2**20


def categorise(name: str, context: str = "trunk") -> str:
    """The category (`CATEGORIES`) of a kernel or CPU op by its name and `context`: "head"
    (what the learner's forward runs after the decoder: the output projection, the cast,
    logsumexp and gather of the vocabulary chunk, the hidden states' gathering; their
    backward and recomputation), "optimizer" (inside learner.optimizer) or "trunk". By name
    alone the head's casts and reductions look like the trunk's, and an eager attention's
    softmax like the head's; the head's projection stays a matmul."""
    category = next((c for c, p in CATEGORY_PATTERNS if re.search(p, name, re.I)), "other")
    if context == "optimizer" and category != "memcpy/memset":
        return "optimizer"  # grad clipping's and zeroing's elementwise kernels too
    if context == "head" and category in ("elementwise/reduction", "head/softmax", "other"):
        return "head/softmax"
    if context != "head" and category == "head/softmax":
        return "attention" if "softmax" in name.lower() else "elementwise/reduction"
    return category


def busy_ms(intervals_us: list[tuple[float, float]]) -> float:
    """Milliseconds covered by the union of (start, end) intervals in microseconds: device time
    with overlapping streams counted once."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals_us):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total / 1e3


@contextlib.contextmanager
def trunk_span(model: torch.nn.Module):
    """A `TRUNK_SPAN` profiler span around each call of the model's decoder (embedding and
    layers), so that the rest of a forward span is known to be the head (`op_contexts`)."""
    from torch.profiler import record_function

    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    opened = []

    def enter(module, args):
        opened.append(record_function(TRUNK_SPAN))
        opened[-1].__enter__()

    def leave(module, args, output):
        opened.pop().__exit__(None, None, None)

    handles = ([] if decoder is None else
               [decoder.register_forward_pre_hook(enter), decoder.register_forward_hook(leave)])
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _ancestors(event):
    while event is not None:
        yield event
        event = event.cpu_parent


def op_contexts(ops: list) -> dict[int, tuple[str, str]]:
    """(span, context) of each CPU op, keyed by id(op): the `learner.*` span it ran in (by
    time, since the backward's ops run on autograd's own thread; "outside" if none) and its
    context for `categorise`. The head is what a forward span runs after its decoder call
    (`TRUNK_SPAN`; what runs before it builds the decoder's inputs), plus the backward nodes of
    those ops, matched as torch matches them (sequence number, forward thread); a checkpointed
    head chunk's recomputation runs inside such a node."""
    windows = sorted((e.time_range.start, e.time_range.end, e.name[len(SPAN_PREFIX):])
                     for e in ops if e.name.startswith(SPAN_PREFIX))
    trunk_ends = [e.time_range.end for e in ops if e.name == TRUNK_SPAN]
    span_of, node_of, head_ops = {}, {}, set()
    for e in ops:
        start = e.time_range.start
        opened, span_of[id(e)] = next(((a, s) for a, b, s in windows if a <= start <= b),
                                      (None, "outside"))
        node_of[id(e)] = next((a for a in _ancestors(e) if a.scope == BACKWARD_FUNCTION), None)
        if (span_of[id(e)] in FORWARD_SPANS and node_of[id(e)] is None
                and any(opened <= end <= start for end in trunk_ends)
                and all(a.name != TRUNK_SPAN for a in _ancestors(e))):
            head_ops.add(id(e))

    def forward_nodes(head: bool) -> set[tuple[int, int]]:
        return {(e.sequence_nr, e.thread) for e in ops if (id(e) in head_ops) == head
                and e.sequence_nr >= 0 and span_of[id(e)] != "backward"}

    # An op that records no node carries the next node's number: a number both sides carry
    # (where the head starts and ends) is left out rather than guessed.
    head_nodes = forward_nodes(True) - forward_nodes(False)
    contexts = {}
    for e in ops:
        node = node_of[id(e)]
        if span_of[id(e)] == "optimizer":
            context = "optimizer"
        elif id(e) in head_ops or (node is not None
                                   and (node.sequence_nr, node.fwd_thread) in head_nodes):
            context = "head"
        else:
            context = "trunk"
        contexts[id(e)] = (span_of[id(e)], context)
    return contexts


class KernelTime(NamedTuple):
    name: str
    category: str
    span: str  # the learner span that launched it; "unlinked": no launching op recorded
    head: bool
    ms: float
    calls: int = 1


def kernel_times(events) -> list[KernelTime]:
    """Every kernel of a profile (device time, with the span and context of the CPU op that
    launched it) or, where it has no device activity (CPU), every op's self time."""
    from torch.autograd import DeviceType

    ops = [e for e in events if e.device_type == DeviceType.CPU and not e.is_async]
    contexts = op_contexts(ops)
    unmatched = Counter((e.name, e.time_range.end - e.time_range.start)
                        for e in device_kernels(events))
    on_device, rows = bool(unmatched), []
    for e in ops:
        span, context = contexts[id(e)]
        if not on_device and not e.is_user_annotation:  # CPU: the op's own time
            rows.append(KernelTime(e.name, categorise(e.name, context), span,
                                   context == "head", e.self_cpu_time_total / 1e3))
        for k in e.kernels:
            # A CPU span's GPU annotation comes linked to it too: count real kernels only.
            if unmatched[(k.name, k.duration)] > 0:
                unmatched[(k.name, k.duration)] -= 1
                rows.append(KernelTime(k.name, categorise(k.name, context), span,
                                       context == "head", k.duration / 1e3))
    return rows + [KernelTime(name, categorise(name), "unlinked", False, n * us / 1e3, n)
                   for (name, us), n in unmatched.items() if n > 0]


def device_kernels(events) -> list:
    """The profile's device events that are kernels, copies or sets: not the GPU side of a
    span, nor a sync event (recorded where asked; an older torch has no `activity_type`)."""
    from torch.autograd import DeviceType

    return [e for e in events if e.device_type != DeviceType.CPU and not e.is_user_annotation
            and getattr(e, "activity_type", None) not in ("gpu_user_annotation", "cuda_sync")]


def _by_time(ms: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 3) for k, v in sorted(ms.items(), key=lambda kv: -kv[1])}


def profile_breakdown(rows: list[KernelTime], wall_ms: float, busy: float, activity: str,
                      top: int = 15) -> dict:
    """Device (or CPU op) time by category, by span (and the head's share of each span), and
    the `top` kernels by time with their calls, against the update's wall time."""
    categories = dict.fromkeys(CATEGORIES, 0.0)
    spans, head_spans = defaultdict(float), defaultdict(float)
    name_ms, name_calls = defaultdict(float), Counter()
    name_categories: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        categories[r.category] += r.ms
        spans[r.span] += r.ms
        if r.head:
            head_spans[r.span] += r.ms
        name_ms[r.name] += r.ms
        name_calls[r.name] += r.calls
        name_categories[r.name][r.category] += r.ms
    ranked = sorted(name_ms, key=lambda name: -name_ms[name])[:top]
    return {"activity": activity, "wall_ms": round(wall_ms, 3), "busy_ms": round(busy, 3),
            "idle_ms": round(max(wall_ms - busy, 0.0), 3), "busy_fraction": busy / wall_ms,
            "kernel_ms": round(sum(r.ms for r in rows), 3),
            "kernel_calls": sum(r.calls for r in rows), "categories_ms": _by_time(categories),
            "spans_ms": _by_time(spans), "head_ms": _by_time(head_spans),
            "head_matmul_ms": round(sum(r.ms for r in rows
                                        if r.head and r.category == "matmul"), 3),
            "top": [{"name": name[:300], "ms": round(name_ms[name], 3),
                     "calls": name_calls[name],
                     "category": name_categories[name].most_common(1)[0][0]}
                    for name in ranked]}


def describe_profile(p: dict) -> str:
    """A few lines: wall against busy time, categories, spans, the top kernels."""
    if "error" in p:
        return f"  profile failed: {p['error']}"
    kernels = "kernels" if p["activity"] == "cuda" else "CPU ops (self time)"
    share = lambda v: f"{v:.1f} ms {100 * v / max(p['kernel_ms'], 1e-9):.0f}%"  # noqa: E731
    head = p["head_ms"]
    spans = [f"{s} {v:.1f} ms" + (f" (head {head[s]:.1f})" if head.get(s) else "")
             for s, v in p["spans_ms"].items()]
    lines = [f"  profile ({p['activity']}): wall {p['wall_ms']:.1f} ms, busy {p['busy_ms']:.1f} "
             f"ms ({100 * p['busy_fraction']:.1f}%), idle {p['idle_ms']:.1f} ms; "
             f"{p['kernel_calls']} {kernels}, {p['kernel_ms']:.1f} ms",
             "  by category: " + ", ".join(f"{c} {share(v)}"
                                          for c, v in p["categories_ms"].items() if v > 0),
             "  by span: " + ", ".join(spans)
             + f"; the head's matmuls {p['head_matmul_ms']:.1f} ms",
             "  top: ms, calls, category, name"]
    lines += [f"  {k['ms']:10.2f} {k['calls']:6d}  {k['category']:<21} {k['name'][:100]}"
              for k in p["top"]]
    return "\n".join(lines + [f"  files: {', '.join(p.get('files', []))}"
                              + (f" ({p['trace_note']})" if p.get("trace_note") else "")])


def profile_update(update: Callable[[], float], model: torch.nn.Module, device: torch.device,
                   directory: str, name: str) -> dict:
    """`update()` (one learner update of `model` on `device`, returning its wall seconds with
    the device drained) run under torch.profiler, and its `profile_breakdown`; its key_averages
    table and gzipped chrome trace written to `directory` as <name>.txt and
    <name>.trace.json.gz."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with trunk_span(model), profile(activities=activities) as prof:
        took = update()
    events = prof.events()
    rows = kernel_times(events)
    intervals = [(e.time_range.start, e.time_range.end) for e in device_kernels(events)]
    on_device = bool(intervals)
    breakdown = profile_breakdown(rows, took * 1e3,
                                  busy_ms(intervals) if on_device else sum(r.ms for r in rows),
                                  "cuda" if on_device else "cpu")
    os.makedirs(directory, exist_ok=True)
    stem = os.path.join(directory, re.sub(r"[^A-Za-z0-9._-]", "_", name))
    breakdown.update(write_trace(prof, stem + ".trace.json.gz"))
    breakdown["files"] = [stem + ".txt"] + breakdown.get("files", [])
    table = prof.key_averages().table(
        sort_by="self_device_time_total" if on_device else "self_cpu_time_total",
        row_limit=40, max_name_column_width=100)
    with open(stem + ".txt", "w") as f:
        f.write(f"{name}\n{describe_profile(breakdown)}\n\n{table}\n")
    return breakdown


def profile_or_error(*args) -> dict:
    """`profile_update(*args)`, or the error it raised: the setting's timed figures stand."""
    try:
        return profile_update(*args)
    except Exception as error:  # an out-of-memory or a profiler failure
        traceback.print_exc()
        return {"error": f"{type(error).__name__}: {error}"[:500]}


def write_trace(prof, path: str) -> dict:
    """The profile's chrome trace gzipped at `path`, unless larger than `TRACE_LIMIT_BYTES`."""
    raw = path.removesuffix(".gz")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)
    size = os.path.getsize(path)
    if size <= TRACE_LIMIT_BYTES:
        return {"files": [path]}
    os.remove(path)
    return {"trace_note": f"trace dropped: {size / 2**20:.1f} MiB gzipped, over "
                          f"{TRACE_LIMIT_BYTES / 2**20:.0f} MiB"}
