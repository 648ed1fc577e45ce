"""benchmarks/serve_validation.py's summary of (b) over its repeats: the medians, the pairs within
10 % and W's own run-to-run spread, from the per-pair rows."""

import statistics

import pytest

from tests.conftest import load_benchmark


def load():
    return load_benchmark("serve_validation")


def row(kind, measured, attributed, w):
    return {
        "kind": kind,
        "measured_difference_j": measured,
        "attributed_dynamic_j": attributed,
        "dynamic_error_pct": 100 * (attributed - measured) / measured,
        "w_dynamic_j": w,
    }


def test_pooled_summarises_each_kind_over_its_repeats():
    sv = load()
    rows = [
        row("long", 125.9, 127.8, 300.0),
        row("long", 153.1, 125.8, 312.0),
        row("long", 130.0, 126.0, 296.0),
        row("short", 20.0, 30.0, 100.0),
    ]
    long, short = sv.pooled(rows)
    assert long["kind"] == "long" and long["repeats"] == 3
    assert long["measured_difference_median_j"] == 130.0
    assert long["measured_difference_range_j"] == pytest.approx(153.1 - 125.9)
    assert long["attributed_dynamic_median_j"] == 126.0
    assert long["median_error_pct"] == pytest.approx(100 * (126.0 - 130.0) / 130.0)
    # 127.8 over 125.9 (+1.5 %) and 126 over 130 (-3.1 %) are within 10 %; 125.8 over 153.1 is not
    assert long["pairs_within_10_pct"] == 2
    assert long["w_run_to_run_sd_j"] == pytest.approx(statistics.stdev([300.0, 312.0, 296.0]))
    # one repeat: no spread to tell
    assert short["repeats"] == 1 and short["w_run_to_run_sd_j"] != short["w_run_to_run_sd_j"]
