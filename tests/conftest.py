"""Shared fixtures: the tiny model built from a config (no download), loaded once per session;
and how tests are sorted for parallel runs (docs/testing.md).

Tests that start a real component (a Ray cluster, the vLLM server, the local Slurm cluster, or
several training ranks in processes of their own) are marked `component`, found here by the fixtures that start it (a test that runs vLLM in its own
process carries the mark itself), so `make test-fast` can leave them out. Under pytest-xdist
(`-n N --dist loadgroup`) the tests of one component share an `xdist_group` and so one worker:
one vLLM server and one Slurm cluster per run, never two Ray clusters at once on 2 cores.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

# Under pytest-xdist each worker is a process of its own: one torch thread each, so N workers
# use N cores (the tiny model gains little from a second thread); alone, both cores.
_DEFAULT_THREADS = "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2"
torch.set_num_threads(int(os.environ.get("RLVR_TEST_THREADS", _DEFAULT_THREADS)))

# xdist group -> the fixtures that start that component (a test asking for one, directly or
# through another fixture, uses it).
COMPONENT_FIXTURES = {
    # a Ray cluster per module
    "ray": {"ray_session", "fake_gpu_cluster", "two_nodes", "ray_nodes"},
    "vllm_server": {"vllm_server"},  # `rlvr serve`, once per session (tests/serving)
    "slurm": {"local_slurm"},  # the local Slurm cluster, once per session (tests/launch)
    "ranks": {"two_rank_story"},  # two learner ranks over gloo (tests/checkpoint)
}


def pytest_collection_modifyitems(config, items):
    parallel = config.pluginmanager.hasplugin("xdist")
    for item in items:
        for group, fixtures in COMPONENT_FIXTURES.items():
            if fixtures & set(item.fixturenames):
                item.add_marker(pytest.mark.component)
                if parallel:
                    item.add_marker(pytest.mark.xdist_group(group))
                break


@pytest.fixture(scope="session")
def tiny_model_dir() -> str:
    from rlvr.models import resolve_model_dir

    return resolve_model_dir("tiny-llama")


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from rlvr.models import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture
def tiny_model(tiny_model_dir):
    from rlvr.models import load_causal_lm

    return load_causal_lm(tiny_model_dir)


@pytest.fixture(autouse=True)
def _verifiers_registered_by_a_test_end_with_it():
    """A test that registers a verifier, or uses a `module:function` one from its tmp_path, leaves
    it in the registry; every later scorer in the process would tell its workers to import that
    module, gone with the test's sys.path ("a verifier worker failed to start:
    ModuleNotFoundError"). Each test gets the registry as it found it."""
    from rlvr.rewards.registry import VERIFIERS

    entries, origins = dict(VERIFIERS._entries), dict(VERIFIERS._origins)
    yield
    VERIFIERS._entries.clear()
    VERIFIERS._entries.update(entries)
    VERIFIERS._origins.clear()
    VERIFIERS._origins.update(origins)


@pytest.fixture(autouse=True)
def _fp32_unless_asked(monkeypatch):
    """Tests compare numbers at fp32 tolerances; on a CPU with native bf16, `model.bf16_autocast`
    null would turn bf16 on. Pin the detection to "not native" (tests of the detection itself
    patch `rlvr.device.cpu_flags`)."""
    import rlvr.device

    monkeypatch.setattr(rlvr.device, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr("rlvr.run.build.cpu_has_native_bf16", lambda: False, raising=False)


# A real one-node Slurm cluster, for the Slurm launcher's tests and the composition matrix:
# started once per session with `../shared/tools/start-local-slurm.sh` (Debian's Slurm, no
# munge, fake GPU devices for --gres) and always stopped at the end with `stop-local-slurm.sh`.
_ROOT = Path(__file__).resolve().parents[1]
SLURM_TOOLS = _ROOT.parent / "shared" / "tools"
START_TIMEOUT_S = 900  # a first start installs the Debian packages


@pytest.fixture(scope="session")
def local_slurm():
    """The node's short host name (what `scontrol show hostnames` gives the job)."""
    start, stop = SLURM_TOOLS / "start-local-slurm.sh", SLURM_TOOLS / "stop-local-slurm.sh"
    if not start.exists() or not stop.exists():
        pytest.skip(f"no local Slurm cluster: {start} or {stop} is missing")
    if os.geteuid() != 0:
        pytest.skip("starting the local Slurm cluster needs root (it installs packages and "
                    "runs slurmctld/slurmd)")
    try:
        done = subprocess.run([str(start)], capture_output=True, text=True,
                              timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{start} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        host = subprocess.run(["hostname", "-s"], capture_output=True, text=True,
                              check=True).stdout.strip()
        yield host
    finally:
        subprocess.run([str(stop)], capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def ray_session():
    """One Ray session per test module (starting Ray costs 3-10 s); a module skips without Ray.
    4 logical CPUs on any machine: 2 learners and an engine actor must fit (they share cores)."""
    ray = pytest.importorskip("ray", reason="Ray is not importable (pip install 'ray==2.60.*')",
                              exc_type=ImportError)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=128 * 2**20,
             log_to_driver=False)
    yield ray
    ray.shutdown()
