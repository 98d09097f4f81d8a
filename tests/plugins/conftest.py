"""A user's plugin module, written into the test's directory under a name of its own (a second
test's module is another module, not a stale import), and the process state a plugin touches,
put back after each test: the working directory, sys.path, the plugin variables that
`rlvr.plugins.import_plugins` sets for child processes, and the registries' entries."""

from __future__ import annotations

import sys
import uuid

import pytest

from rlvr.plugins import PLUGIN_PATH_ENV, PLUGINS_ENV
from tests.plugins.user_plugin import PLUGIN_SOURCE


def _registries():
    from rlvr.algorithm.advantages import ADVANTAGE_NORMALIZATIONS
    from rlvr.algorithm.losses import POLICY_LOSSES
    from rlvr.rollout import ENGINES
    from rlvr.workflows import WORKFLOWS

    return [POLICY_LOSSES, ADVANTAGE_NORMALIZATIONS, ENGINES, WORKFLOWS]


@pytest.fixture(autouse=True)
def _plugin_state_ends_with_the_test(monkeypatch):
    """The verifiers are put back by tests/conftest.py; the other registries here."""
    for key in (PLUGINS_ENV, PLUGIN_PATH_ENV):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    saved = [(r, dict(r._entries), dict(r._origins), dict(r._defined_by)) for r in _registries()]
    yield
    for registry, entries, origins, defined_by in saved:
        for table, before in ((registry._entries, entries), (registry._origins, origins),
                              (registry._defined_by, defined_by)):
            table.clear()
            table.update(before)


@pytest.fixture
def plugin(tmp_path, monkeypatch) -> str:
    """The name of a plugin module (PLUGIN_SOURCE) in tmp_path, the working directory."""
    name = f"user_plugin_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(PLUGIN_SOURCE)
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)
