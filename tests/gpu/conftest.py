"""GPU tests: run with `pytest -m gpu tests/gpu` on a machine with CUDA; skipped elsewhere (the
default `make test` runs them as skips, so they stay importable and ready)."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))
