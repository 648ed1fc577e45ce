"""The power trace's lines (``report/plots.py``): a channel that alignment moved is drawn where
it was moved to, its legend says how far, and on request it is also drawn where it was recorded."""

import copy

import numpy as np
import pytest

from energyframe.report.plots import origin_s, trace_lines
from energyframe.results.result import RunResult
from energyframe.testing.results import sample_result


def with_time_map(result: RunResult, time_map: dict, resolution_s: float | None = None) -> RunResult:
    """``result`` as it would read had alignment written ``time_map`` for its channel gpu0."""
    meta = copy.deepcopy(dict(result.meta))
    meta["time_maps"] = {"gpu0": time_map}
    if resolution_s is not None:
        meta["sources"][0]["channels"][0]["resolution_s"] = resolution_s
    return RunResult(meta, result.windows, result.samples, tuple(result.summaries))


def test_a_moved_channel_is_drawn_where_alignment_put_it_and_its_legend_says_how_far():
    result = sample_result()
    (as_saved,) = trace_lines(result)
    clock = result.run_meta.clock.to_json()
    lag_s, drift, reference_s = 0.25, 0.002, clock["anchor_monotonic_s"]
    moved_run = with_time_map(result, {"lag_s": lag_s, "drift": drift, "reference_s": reference_s})
    raw, moved = trace_lines(moved_run, show_raw=True)
    assert (raw.label, raw.style, raw.dashed) == ("gpu0 as recorded", "steps-pre", True)
    np.testing.assert_array_equal(raw.times_s, as_saved.times_s)
    # on the monotonic clock a reading's true time is t - lag - drift * (t - reference)
    wall_minus_monotonic = clock["anchor_wall_s"] - clock["anchor_monotonic_s"]
    t0 = origin_s(moved_run)
    mono = as_saved.times_s + t0 - wall_minus_monotonic
    expected = mono - lag_s - drift * (mono - reference_s) + wall_minus_monotonic - t0
    np.testing.assert_allclose(moved.times_s, expected, rtol=0, atol=1e-6)
    assert (moved.label, moved.style, moved.dashed) == ("gpu0 (moved -0.25 s, drift +0.200 %)", "line", False)
    np.testing.assert_array_equal(moved.power_w, as_saved.power_w)


@pytest.mark.parametrize(
    ("time_map", "label", "style"),
    [
        ({"lag_s": 0.3}, "gpu0 (moved -0.30 s)", "steps-mid"),
        ({"lag_s": 0.0, "drift": 0.0}, "gpu0", "steps-post"),
        ({"lag_s": None, "drift": None}, "gpu0", "steps-post"),  # written as null: moves nothing
    ],
)
def test_a_moved_meter_reading_sits_mid_interval_and_a_time_map_that_moves_nothing_draws_it_as_read(
    time_map, label, style
):
    result = with_time_map(sample_result(), time_map, resolution_s=1.0)
    lines = trace_lines(result, show_raw=True)
    assert [(line.label, line.style) for line in lines if not line.dashed] == [(label, style)]
    # the recorded line only where the channel was moved
    assert [line.label for line in lines if line.dashed] == (["gpu0 as recorded"] if style == "steps-mid" else [])
