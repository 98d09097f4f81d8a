"""One Ray session per test module (starting Ray costs 3-10 s); modules skip without Ray."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray", reason="Ray is not importable (pip install 'ray==2.60.*')",
                              exc_type=ImportError)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    # 4 logical CPUs on any machine: 2 learners and an engine actor must fit (they share cores)
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=128 * 2**20,
             log_to_driver=False)
    yield ray
    ray.shutdown()
