"""Fixtures for the fault tests: the fault-injecting fake nvidia-smi on PATH."""

import json
import os
from pathlib import Path

import pytest

FAKE_BIN = Path(__file__).resolve().parents[1] / "fake_bin"


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """Write the fake nvidia-smi's scenario (tests/fake_bin/nvidia-smi lists the faults)."""
    path = tmp_path / "smi-scenario.json"
    monkeypatch.setenv("FAKE_SMI_SCENARIO", str(path))
    monkeypatch.setenv("PATH", os.pathsep.join([str(FAKE_BIN), os.environ["PATH"]]))

    def write(**scenario):
        path.write_text(json.dumps(scenario))

    write()
    return write
