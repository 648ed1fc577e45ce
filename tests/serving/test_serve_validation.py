"""benchmarks/serve_validation.py's parts on the CPU: its (a), (b) and (c) against the tests'
server with constant replayed power, on a schedule twenty times faster. The numbers mean nothing
here (the fake server draws no power); the script's runs, comparisons and tables must work."""

import json

import pytest

from tests.conftest import load_benchmark, write_power_csv
from tests.serving.server import FakeServer

pytestmark = pytest.mark.slow  # eight short runs


def test_the_validation_runs_and_writes_its_tables(tmp_path):
    bench = load_benchmark("serve_validation")
    csv = write_power_csv(tmp_path / "power.csv", 100.0, period_s=0.01, duration_s=2.0)
    with FakeServer(ttft_s=0.01, gap_s=0.002, usage="always") as server:
        target = bench.Target(
            server.url, "tiny", (f"replay:file={csv},loop=true",), time_scale=0.05, idle_s=0.2
        )
        report = bench.validate(tmp_path, target, {"a", "b"}, repeats=1)
    text = bench.write_report(report, tmp_path)
    assert [r["n"] for r in report["identical"]] == [8]
    assert [(r["kind"], r["k_ok"]) for r in report["marginal"]] == [("W+K overlap", 4), ("W+K after", 4)]
    for row in report["marginal"]:  # constant power: the K requests add only the span's difference
        assert row["measured_difference_j"] == pytest.approx(0.0, abs=2.0)
        assert row["attributed_dynamic_j"] == pytest.approx(0.0, abs=1e-6)
    kinds = {(r["run"], r["kind"]) for r in report["leaderboard"]}
    assert ("WK-overlap-0", "prefill-heavy (K)") in kinds and ("WK-after-0", "ordinary") in kinds
    assert "## (b) marginal truth" in text and (tmp_path / "serve_validation.md").read_text().startswith(
        "# serve-bench"
    )
    assert json.loads((tmp_path / "serve_validation.json").read_text())["parts"] == ["a", "b"]
