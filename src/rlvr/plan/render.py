"""`rlvr plan`'s table: a plan record (`records.plan_record`) as plain text lines, readable on
a terminal and in a log file alike (no colour, fixed columns).

Not here: the figures (`predict`); the report's predicted-against-measured table
(`rlvr.report.plan_panel`).
"""

from __future__ import annotations

from typing import Any

GIB = 1024 ** 3

SECONDS = (("generation", "generation (engine)"), ("scoring", "scoring (verifiers)"),
           ("learner", "learner update"), ("weight_sync", "weight sync"),
           ("step", "step"), ("total", "all steps + start-up"))
MEMORY = (("policy_params", "policy parameters"), ("reference_params", "reference parameters"),
          ("gradients", "gradients"), ("optimizer", "optimizer state (AdamW)"),
          ("activations", "activations (largest micro-batch)"),
          ("engine_weights", "engine weights"), ("kv_cache", "engine KV cache"),
          ("runtime", "before the model: libraries, data"), ("peak", "peak"),
          ("device_total", "device total"))
MEANS = ("rows", "kept_groups")
TOKENS = (("prompt", "prompt tokens"), ("response", "response tokens"),
          ("learner", "learner tokens (packed)"), ("rows", "packed rows (mean)"),
          ("row_width", "row width"), ("kept_groups", "groups trained (mean)"))


def render_plan(record: dict[str, Any]) -> str:
    p, c, s = record["prediction"], record["calibration"], record["shape"]
    lines = [f"rlvr plan: {record.get('config', '')}",
             f"on {c['device']}, engine {c['engine']}; calibration took {c['seconds']:.1f} s "
             f"(build {c['build_s']:.1f} s)", "",
             f"a step ({s['prompts_per_step']} prompts x {s['samples_per_prompt']} samples, "
             f"{s['num_steps']} steps):"]
    # Rows and groups are means over steps (a step may keep no group): one decimal.
    lines += _rows([(label, f"{p['tokens'][key]:,.{1 if key in MEANS else 0}f}")
                    for key, label in TOKENS])
    lines += ["", "time a step (mean):"]
    lines += _rows([(label, _duration(p["seconds"][key])) for key, label in SECONDS])
    lines += ["", f"memory ({c['learner']['memory_source']}):"]
    lines += _rows([(label, f"{p['memory'][key] / GIB:.2f} GiB") for key, label in MEMORY])
    lines += ["", "fits the device's memory: " + ("yes" if p["fits"] else "NO")]
    lines += [f"  - {a}" for a in p["assumptions"]]
    return "\n".join(lines) + "\n"


def _rows(pairs: list[tuple[str, str]]) -> list[str]:
    width = max(len(label) for label, _ in pairs)
    return [f"  {label:<{width}}  {value:>12}" for label, value in pairs]


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.2f} s"
