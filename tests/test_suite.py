"""The test suite itself: GPU tests are deselected by default and collect on a machine without one."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_tests_are_deselected_by_default(pytestconfig):
    addopts = pytestconfig.getini("addopts")  # already split as a shell would
    assert addopts[addopts.index("-m") + 1] == "not gpu"
    markers = pytestconfig.getini("markers")
    assert any(m.startswith("gpu:") for m in markers) and any(m.startswith("slow:") for m in markers)


@pytest.mark.slow
def test_gpu_tests_collect_without_a_gpu():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    collected = [line for line in proc.stdout.splitlines() if "::" in line]
    assert len(collected) >= 10
    assert any(c.startswith("tests/workloads/test_gpu_workloads.py::") for c in collected)
    assert not any(c.startswith(("tests/cli/test_cli.py::", "tests/lifecycle/test_orchestrator.py::")) for c in collected)
