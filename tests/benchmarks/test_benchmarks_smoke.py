"""Every benchmark runs, in a smoke mode: the tiny model (or the fewest of the real one's
steps), seconds to a minute each, so a change that breaks one fails `make test-slow` instead of
rotting until someone wants its figure (benchmarks/time_to_accuracy.py failed at HEAD for weeks:
its evaluator called `scorer_settings(cfg)` after the signature had changed). The figures these
runs print mean nothing; the real runs are the commands in docs/benchmarks.md.

Each file of benchmarks/ is listed here, with its smoke arguments or the reason it is skipped
(a GPU, TRL, vLLM servers); a new benchmark fails `test_every_benchmark_is_listed` until it is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

# benchmark -> smoke arguments (a list), or the reason it cannot run here (a str).
SMOKE: dict[str, list[str] | str] = {
    "time_to_accuracy.py": ["--smoke"],
    "verifiers.py": ["--n", "8", "--skip-throughput"],
    "peak.py": ["--config", "configs/tiny.yaml", "--steps", "1"],
    "engine_thread.py": ["--rounds", "1", "--config", "configs/tiny.yaml"],
    "learners.py": ["--config", "configs/tiny.yaml", "--steps", "1"],
    "attention.py": ["--layers", "1", "--lengths", "128", "--tokens", "256", "--repeats", "1",
                     "--threads", "1"],
    "lora.py": ["--config", "configs/tiny.yaml", "--model", "tiny-llama", "--prompts", "2",
                "--samples", "2", "--response-length", "4", "--steps", "1", "--rank", "2"],
    "weight_sync.py": ["--model", "tiny-llama", "--pushes", "1"],
    "async_pipeline.py": ["--smoke", "--steps", "1"],
    "workflows.py": ["--episodes", "4", "--tokens", "4", "--repeats", "1", "--engines",
                     "transformers", "--model", "tiny-llama"],
    "sandbox.py": ["--n", "4", "--rounds", "1", "--base", "src"],  # this tree against itself
    "compile.py": "compiles SmolLM2-135M's decoder layers with inductor: minutes on 2 cores "
                  "(tests/learner/test_compiling.py compiles the tiny model's)",
    "generation.py": "starts vLLM against the transformers engine on SmolLM2-135M: minutes on "
                     "a CPU (tests/rollout cover both engines)",
    "remote.py": "starts vLLM inference servers for 20-step quick-start runs: many minutes",
    "vs_trl.py": "needs TRL, which rlvr does not install (its own comparison, by hand)",
    "gpu.py": "needs a CUDA GPU (tests/gpu and tests/test_gpu_benchmark.py cover its parts)",
    "gpu_generation.py": "needs a CUDA GPU (static decoding with CUDA graphs)",
    "gpu_profile.py": "needs a CUDA GPU (tests/test_gpu_benchmark.py covers its parsing)",
    "gpu_step_split.py": "needs a CUDA GPU run's metrics",
    "gpu_session.sh": "a GPU session's driver script, not a benchmark of its own",
}


def _listed() -> list[str]:
    return sorted(p.name for p in BENCHMARKS.iterdir() if p.suffix in (".py", ".sh"))


def test_every_benchmark_is_listed():
    assert sorted(SMOKE) == _listed()


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", sorted(SMOKE))
def test_benchmark_smoke(name, tmp_path):
    how = SMOKE[name]
    if isinstance(how, str):
        pytest.skip(how)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error"}
    extra = ["--output-dir", str(tmp_path / "out")] if name == "time_to_accuracy.py" else []
    done = subprocess.run([sys.executable, str(BENCHMARKS / name), *how, *extra], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=360)
    shown = (done.stdout[-3000:] + done.stderr[-3000:])
    assert done.returncode == 0, shown
    # A benchmark that reports a failed part and goes on (time_to_accuracy's and workflows'
    # children) fails the smoke run too.
    assert not re.search(r"\bfailed\b", done.stdout, re.IGNORECASE), shown
