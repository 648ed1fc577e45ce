"""``--precision``: trials go on until the 95 % interval of the median time and energy per
iteration is within the target, bounded by ``--max-time``; the precision reached per phase."""

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.lifecycle import orchestrator
from energyframe.lifecycle.config import RunSettings
from energyframe.lifecycle.precision import relative_ci_pct
from energyframe.results.display import precision_lines
from tests.fakes import ListWorkload, SignalSource, busy_phase


def test_the_relative_interval_of_a_median():
    assert relative_ci_pct([1.0, 1.0]) == float("inf")  # too few to trust
    assert relative_ci_pct([1.0, 1.0, 1.0]) == 0.0
    wide = relative_ci_pct([0.9, 1.0, 1.1])
    assert 10 < wide < 40  # t(2) = 4.3 times sqrt(pi/2) 0.1 / sqrt 3: ~31 %
    assert relative_ci_pct([0.9, 1.0, 1.1] * 10) < wide / 4


def test_a_reachable_precision_stops_at_or_near_the_minimum_trials():
    settings = RunSettings(trials=3, warmup_s=0.0, precision_pct=1000.0, max_time_s=30.0)
    phase = busy_phase("steady", seconds=0.002, iterations=100)
    result = ef.run(ListWorkload([phase]), power=[SignalSource(name="gpu")], reporters=[], settings=settings)
    summary = result.summary("steady", "gpu")
    # 3 where the last energy comes within a window's length (0.2 s; a sample comes every 10 ms);
    # a loaded machine's live thread may lag past that, and the phase then runs a window or two more
    assert 3 <= summary.trials <= 5
    assert set(summary.precision_pct) == {"time", "energy"}
    (line,) = precision_lines([summary], 1000.0)
    assert line.startswith("steady [gpu]: precision time ±") and line.endswith("(reached: ±1000 %)")


def test_an_unreachable_precision_stops_at_the_time_limit():
    settings = RunSettings(trials=3, warmup_s=0.0, precision_pct=1e-9, max_time_s=0.5)
    phase = busy_phase("steady", seconds=0.002, iterations=20)
    result = ef.run(ListWorkload([phase]), power=[SignalSource(name="gpu")], reporters=[], settings=settings)
    w = result.windows[result.windows["channel"] == "gpu"]
    assert w["trial"].nunique() > 3
    # it stops at the first window that brings the phase's windows past --max-time
    assert w["duration_s"].sum() >= 0.5
    assert w["duration_s"].iloc[:-1].sum() < 0.5
    (line,) = precision_lines([result.summary("steady", "gpu")], 1e-9)
    assert "(not reached: ±1e-09 %)" in line


def test_without_a_power_source_time_alone_decides():
    settings = RunSettings(trials=3, warmup_s=0.0, precision_pct=1000.0, max_time_s=30.0)
    result = ef.run(ListWorkload([busy_phase(iterations=5)]), power="none", reporters=[], settings=settings)
    assert result.summaries[0].trials == 3
    assert set(result.summaries[0].precision_pct) == {"time"}


@pytest.mark.parametrize("given, expected", [("1%", 1.0), ("0.5", 0.5), (" 2 % ", 2.0)])
def test_the_command_line_takes_a_percentage(given, expected, monkeypatch):
    seen = {}

    def fake_run(workload, **kw):
        seen.update(kw["settings"].given())
        raise SystemExit(0)

    monkeypatch.setattr(orchestrator, "run", fake_run)
    CliRunner().invoke(main, ["run", "--workload", "cpu-matmul", "--power", "none", "--precision", given])
    assert seen.get("precision_pct") == expected


def test_a_bad_percentage_is_one_line_naming_it():
    result = CliRunner().invoke(main, ["run", "--workload", "cpu-matmul", "--precision", "lots"])
    assert result.exit_code == 2
    assert "Invalid value for '--precision': 'lots' is not a percentage (e.g. 1% or 0.5)" in result.stderr
    assert "Traceback" not in result.output


def test_the_precision_check_waits_for_a_window_energy_at_most_a_window(monkeypatch):
    """Each check takes the energies known so far; one still being computed is waited for at
    most as long as another window would take (waiting for each cost up to half a second)."""
    from energyframe.lifecycle.measurement import Measurement

    waits = []
    real = Measurement.window_energy

    def spy(self, record, wait=True, timeout_s=None):
        waits.append((wait, timeout_s))
        return real(self, record, wait=wait, timeout_s=timeout_s)

    monkeypatch.setattr(Measurement, "window_energy", spy)
    settings = RunSettings(trials=3, warmup_s=0.0, precision_pct=1000.0, max_time_s=30.0)
    phase = busy_phase("steady", seconds=0.002, iterations=20)
    result = ef.run(ListWorkload([phase]), power=[SignalSource(name="gpu")], reporters=[], settings=settings)
    # never an unbounded wait: each at most one window's length
    assert waits and all(not wait or (timeout_s is not None and timeout_s <= 1.0) for wait, timeout_s in waits)
    # the energies came in all the same: the phase stopped once they said it was precise
    summary = result.summary("steady", "gpu")
    assert summary.trials >= 3 and summary.precision_pct["energy"] <= 1000.0
