"""The console reporter's account of a run's facts: where its wall time went (``show``)."""

from energyframe.reporters.console import _sampler_cost, time_lines


def test_the_time_line_adds_up_to_the_total_and_says_what_measuring_added():
    # run.json's timings_s of a run of the README's job with nvml: its parts, the rest of the
    # process (other), the process's own start-up before the run (before_run), and the totals
    timings = {
        "sources_start": 0.65, "setup": 2.0, "phase_setup": 0.001, "warmup": 1.0, "calibration": 0.21,
        "guard": 0.0, "windows": 6.1, "between_windows": 0.53, "teardown": 0.02, "stop_sources": 0.79,
        "integrate": 0.1, "save": 0.11, "other": 0.07,
        "run": 11.581, "before_run": 1.4, "process": 12.981,
    }
    time, beyond = time_lines(timings)
    assert time == (
        "time:     13.0 s = work 8.1 s (windows 6.1 s, setup 2.0 s)"
        " + measuring 3.5 s (warmup 1.0 s, stop_sources 0.8 s, sources_start 0.7 s, between_windows 0.5 s,"
        " calibration 0.2 s, save 0.1 s, integrate 0.1 s, other 0.1 s)"
        " + start-up 1.4 s"
    )
    # the parts are the whole: work 8.121 s + measuring 3.46 s + start-up 1.4 s = 12.981 s
    assert beyond == "beyond the work: 4.9 s (37 % of the run)"


def test_short_spans_are_summed_and_a_run_without_start_up_or_timings_says_what_it_knows():
    timings = {"windows": 2.0, "sources_start": 0.02, "stop_sources": 0.03, "save": 0.04, "run": 2.09,
               "before_run": None, "process": None}
    assert time_lines(timings) == [
        "time:     2.1 s = work 2.0 s (windows 2.0 s) + measuring 0.1 s (the rest 0.1 s)",
        "beyond the work: 0.1 s (4 % of the run)",
    ]
    assert time_lines({}) == []


def test_a_source_that_reported_its_sampler_cost_shows_it():
    assert _sampler_cost({"acquisition": {"cpu_s": 0.3, "wall_s": 10.0, "cpu_share": 0.0312}}) == (
        " (sampler: 3.1 % of a core)"
    )
    assert _sampler_cost({"driver_version": "580"}) == ""
    assert _sampler_cost({"acquisition": {"cpu_share": None}}) == ""
