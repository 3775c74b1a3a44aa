"""Without the openai-agents extra: importing works, constructing names the extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from actors import SessionRegistry
from actors.integrations.openai_agents import AgentsSession
from persistence import open_store
from protocol import ConfigurationError

ROOT = Path(__file__).resolve().parents[3]


def test_importing_the_adapter_does_not_import_the_sdk():
    code = (
        "import sys, actors.integrations.openai_agents; "
        "assert 'agents' not in sys.modules, 'the SDK was imported eagerly'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_constructing_without_the_sdk_raises_configuration_error_naming_the_extra(sqlite_path, monkeypatch):
    for name in [m for m in sys.modules if m == "agents" or m.startswith("agents.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "agents", None)  # the fault: "not installed"
    store = open_store(sqlite_path)
    with SessionRegistry(store) as registry:
        with pytest.raises(ConfigurationError, match=r"session-actors\[openai-agents\]"):
            AgentsSession(registry, "no-sdk")
    store.close()
