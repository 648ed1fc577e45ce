"""Every example in examples/ runs (pyperf's rule: an example nobody runs is already broken)."""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
# examples that need a GPU are exercised by tests marked gpu
GPU_ONLY: set[str] = set()


def test_examples_exist():
    assert EXAMPLES


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.name not in GPU_ONLY], ids=lambda p: p.name)
def test_example_runs(path, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
