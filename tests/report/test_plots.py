"""The power-trace PNG of a run."""

from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from tests.fakes import ListWorkload, SignalSource, busy_phase


def test_plot_command_and_reporter(tmp_path):
    out = tmp_path / "run"
    ef.run(
        ListWorkload([busy_phase()]),
        power=[SignalSource(name="gpu")],
        reporters=["plot"],
        out=out,
        settings=ef.RunSettings(trials=2, min_window_s=0.1),
    )
    png = out / "power-trace.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    result = CliRunner().invoke(main, ["plot", str(out), "--out", str(tmp_path / "again.png")])
    assert result.exit_code == 0 and (tmp_path / "again.png").exists()


def test_a_timing_only_run_says_it_has_no_power(tmp_path):
    """Its windows on the run's own time axis (not Unix seconds), and no empty power axis."""
    from energyframe.report.plots import missing_power, origin_s
    from energyframe.results.result import RunResult

    out = tmp_path / "run"
    ef.run("sleep:seconds=0.01", power="none", reporters=[], out=out, settings=ef.RunConfig(trials=2))
    result = CliRunner().invoke(main, ["plot", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "power-trace.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = RunResult.load(out)
    assert missing_power(saved) == "no power channels: this run measured timing only"
    assert origin_s(saved) == saved.windows["start_s"].min()  # the axis starts at the first window
