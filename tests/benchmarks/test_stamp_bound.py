"""benchmarks/stamp_bound.py runs through on the fake NVML and writes its rows: the stamp
half-width the run took follows the brackets the sampler measured."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "stamp_bound.py"


def test_the_benchmark_measures_each_pause_and_writes_its_rows(tmp_path):
    out = tmp_path / "rows.json"
    command = [sys.executable, str(SCRIPT), "--intervals", "4", "--windows", "3", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(out.read_text())
    assert row["interval_ms"] == 4 and row["windows"] == 3
    # a 3-ms query and a 4-ms pause, each a sleep of that long at the least: the polls around a
    # tick 7 ms apart or more, however loaded the machine; the stamps within half
    assert row["stamp_s_ms"] == pytest.approx(row["bracket_median_ms"] / 2, rel=1e-12)
    assert row["stamp_s_ms"] > 2.0
    assert "| 4 ms | 3 |" in done.stdout
