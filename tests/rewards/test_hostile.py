"""Hostile completions against every registered verifier: nothing hangs past its limit, nothing
crashes the process, every failure is counted.

Adding a verifier without a ground truth here fails `test_every_verifier_has_a_ground_truth`, so
the hostile set always covers the whole registry.
"""

import json
import random
import time


import rlvr.rewards  # noqa: F401  (registers the built-ins)
from rlvr.rewards.registry import VERIFIERS
from rlvr.rewards.scorer import RewardScorer, ScoreRequest

TIMEOUT_S = 1.0

# A well-formed ground truth per verifier name (what a real data row would carry).
GROUND_TRUTHS = {
    "gsm8k": "42", "last_number": "42", "math": "\\frac{1}{2}", "strict_math": "\\frac{1}{2}",
    "string_matcher": "paris", "string_f1": json.dumps(["the city of paris"]),
    "max_length": "50", "up_to_max_length": "50",
    "ifeval": json.dumps([{"id": "punctuation:no_comma", "kwargs": {}},
                          {"id": "length_constraints:number_words",
                           "kwargs": {"relation": "less than", "num_words": 50}}]),
    "code": json.dumps({"tests": ["assert add(1, 2) == 3"]}),
}


def hostile_completions(seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    nasty = [
        "9" * 100_000,  # a 100 KB number
        "x" * 100_000, "\\boxed{" * 5_000, "}" * 5_000, "{" * 20_000,
        "\\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}",  # deeply nested LaTeX
        "\\boxed{10^{10^{10^{10^{10}}}}}", "\\boxed{9^{9^{9^{9}}}}", "$2^{2^{2^{2^{2^{2}}}}}$",
        "\\boxed{" + "+".join(["x"] * 5_000) + "}", "$" * 10_000, "\\left(" * 2_000,
        "The final answer is " + "\\sqrt{" * 500 + "2" + "}" * 500,
        "```python\nwhile True:\n    pass\n```",
        "```python\nimport os\nwhile True:\n    os.fork()\n```",
        "```python\nx = bytearray(10**10)\n```",
        "```python\nimport socket\nsocket.create_connection(('8.8.8.8', 53))\n```",
        "```python\nimport sys\nsys.setrecursionlimit(10**6)\ndef f(n): return f(n + 1)\nf(0)\n```",
        "```python\nraise SystemExit(0)\n```", "```python\nimport os\nos.kill(os.getppid(), 9)\n```",
        "<think>" * 10_000, "</think>" * 3_000 + "<answer>" * 3_000, "\x00" * 10_000,
        "\uffff" * 1_000, "🤖" * 20_000, "\n" * 50_000, "\t " * 30_000,
        '{"a": ' * 3_000, "- " * 20_000, "*" * 50_000, "P.S. " * 10_000,
    ]
    while len(nasty) < 220:
        size = rng.choice([10, 1_000, 30_000])
        kind = rng.randrange(4)
        if kind == 0:  # binary garbage, as a model emitting raw bytes would decode them
            nasty.append(bytes(rng.randrange(256) for _ in range(size)).decode("latin-1"))
        elif kind == 1:  # random LaTeX-ish tokens
            nasty.append(" ".join(rng.choice(["\\frac", "{", "}", "^", "_", "\\boxed", "$",
                                              "1", "x", "\\sqrt", "\\", "="])
                                  for _ in range(size // 4)))
        elif kind == 2:  # random unicode
            nasty.append("".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(size)))
        else:  # numbers with junk separators
            nasty.append(",".join(str(rng.randrange(10**6)) for _ in range(size // 8)) + ".")
    return nasty


def builtin_verifiers() -> list[str]:
    """rlvr's own verifiers (tests register deliberately broken ones of their own)."""
    return sorted(name for name, verifier in VERIFIERS.items()
                  if ":" not in name and verifier.score.__module__.startswith("rlvr."))


def test_every_verifier_has_a_ground_truth():
    assert not sorted(set(builtin_verifiers()) - set(GROUND_TRUTHS))


def test_hostile_inputs_are_bounded_and_counted():
    completions = hostile_completions()
    assert len(completions) >= 200
    names = builtin_verifiers()
    requests = [ScoreRequest(f"{name}/{i}", text, GROUND_TRUTHS[name], (name,))
                for name in names for i, text in enumerate(completions)]
    with RewardScorer(num_workers=2, timeout_s=TIMEOUT_S) as scorer:
        start = time.monotonic()
        outcomes = scorer.score(requests)
        elapsed = time.monotonic() - start
        flagged = sum(1 for o in outcomes if o.timed_out or o.error)
        counted = scorer.metrics_since_last()
        assert [o.score for o in scorer.score([ScoreRequest("after", "42", "42", ("gsm8k",))])] \
            == [1.0]  # the scorer still works afterwards
    assert len(outcomes) == len(requests)
    assert all(o.score == o.score and abs(o.score) < 1e6 for o in outcomes)  # finite numbers
    assert counted["reward/verifier_errors"] + counted["reward/verifier_timeouts"] == flagged
    # Every request either finished or was cut at the limit: the batch is bounded by the
    # timeouts spread over two workers plus the fast ones (generous for a loaded machine).
    timeouts = counted["reward/verifier_timeouts"]
    assert elapsed < timeouts * TIMEOUT_S / 2 * 1.5 + 0.2 * len(requests) + 30
    print(f"{len(requests)} requests over {len(names)} verifiers in {elapsed:.1f} s: "
          f"{counted['reward/verifier_errors']} errors, {timeouts} timeouts")
