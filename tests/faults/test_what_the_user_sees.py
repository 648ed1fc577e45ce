"""What a person reads while a run goes and after it: log lines above the progress bars, no
``nan`` in a bar or a title, which phase of how many without a terminal, percentages that read
as percentages and agree with each other, no empty table or empty power axis posing as a
result, and the statistic the docs define being the one the code computes."""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.compare import statistics, tables
from energyframe.errors import UsageError
from energyframe.lifecycle.progress import RunProgress
from energyframe.model import Phase
from tests.fakes import ListWorkload

DOCS = Path(__file__).resolve().parents[2] / "docs"


# -- while it runs -----------------------------------------------------------------------------
@pytest.fixture
def cli_log_handler():
    """Installs the handler the command line puts on the ``energyframe`` logger (plain lines to
    the stderr of the moment: the test's, once it runs)."""
    logger = logging.getLogger("energyframe")
    installed = []

    def install() -> logging.Handler:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        installed.append(handler)
        return handler

    yield install
    for handler in installed:
        logger.removeHandler(handler)


def test_log_lines_go_through_the_bars_console_while_the_bars_are_drawn(cli_log_handler, capsys):
    from rich.logging import RichHandler

    logger = logging.getLogger("energyframe")
    plain = cli_log_handler()
    with RunProgress(show=True) as bars:
        routed = [h for h in logger.handlers if isinstance(h, RichHandler)]
        assert plain not in logger.handlers  # nothing writes around the bars
        assert len(routed) == 1 and routed[0].console is bars._progress.console
        logger.warning("warning: the meter lags")
    assert plain in logger.handlers  # given back once the bars are gone
    assert not any(isinstance(h, RichHandler) for h in logger.handlers)
    assert capsys.readouterr().err.count("warning: the meter lags") == 1


def test_log_lines_written_elsewhere_are_left_alone(tmp_path):
    logger = logging.getLogger("energyframe")
    to_file = logging.FileHandler(tmp_path / "run.log")
    logger.addHandler(to_file)
    try:
        with RunProgress(show=True):
            assert to_file in logger.handlers
    finally:
        logger.removeHandler(to_file)
        to_file.close()


def test_a_window_of_unknown_length_gets_a_bar_without_nan():
    with RunProgress(show=True) as bars:
        bars.phase("command", 1)
        bars.window_opening(math.nan, "1/1")  # a fixed workload: not calibrated
        descriptions = [t.description for t in bars._progress.tasks]
        bars.window_closed()
        bars.window_opening(5.0, "1/1")
        with_length = [t.description for t in bars._progress.tasks]
        bars.window_closed()
        bars.window_opening(1.0, "1/1")  # too short for its own bar
        short = [t.description for t in bars._progress.tasks]
    assert descriptions[-1] == "    window 1/1"
    assert with_length[-1] == "    window 1/1 (~5 s)"
    assert short == ["  command: trials"]


def test_without_a_terminal_each_phase_says_which_of_how_many(caplog):
    caplog.set_level(logging.INFO, logger="energyframe")
    phases = [Phase(name=n, step=lambda: time.sleep(0.001), iterations=2) for n in ("a", "b")]
    ef.run(ListWorkload(phases), power="none", reporters=[], settings=ef.RunSettings(trials=1, warmup_s=0.0))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("phase ")]
    assert [line.split(":")[0] for line in lines] == ["phase 1 of 2 'a'", "phase 2 of 2 'b'"]


# -- show --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def timing_only(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("timing") / "run"
    ef.run("sleep:seconds=0.01", power="none", reporters=[], out=out, settings=ef.RunSettings(trials=3, warmup_s=0.0))
    return out


def test_show_of_a_run_whose_parts_were_all_short_sums_them(timing_only):
    meta = json.loads((timing_only / "run.json").read_text())
    meta["timings_s"] = {"run": 0.5, "process": 0.5, "windows": 0.04, "save": 0.01}
    (timing_only / "run.json").write_text(json.dumps(meta))
    result = CliRunner().invoke(main, ["show", str(timing_only)])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("time:")]
    # no part of 0.05 s or more: each group says its total, the time no span names is "other"
    assert line == "time:     0.5 s = work 0.0 s + measuring 0.5 s (other 0.5 s)"


# -- the HTML report ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def noisy(tmp_path_factory) -> Path:
    """Windows of 10 ms and 50 ms in turn: the IQR is above 100 % of the median."""
    lengths = iter([0.01, 0.05] * 10)
    phase = Phase(name="noisy", step=lambda: time.sleep(next(lengths)), iterations=1, warmup=0)
    out = tmp_path_factory.mktemp("noisy") / "run"
    ef.run(ListWorkload([phase]), power="none", reporters=[], out=out, settings=ef.RunSettings(trials=4))
    return out


def test_an_iqr_above_100_percent_reads_as_a_percentage(noisy, tmp_path):
    pytest.importorskip("plotly")
    pytest.importorskip("jinja2")
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(noisy), "--out", str(out)])
    assert result.exit_code == 0, result.output
    cells = re.findall(r'<td data-field="time_per_iter_s\.iqr" data-value="[^"]*">([^<]*)</td>', out.read_text())
    (text,) = cells
    assert re.fullmatch(r"\d{3}%", text), text  # e.g. 133%, never 1.3e+02%
    compared = CliRunner().invoke(main, ["compare", str(noisy), str(noisy)])
    assert "e+" not in compared.output and f"(IQR {text}, 4)" in compared.output


def test_a_timing_only_run_says_so_instead_of_an_empty_power_axis(timing_only):
    pytest.importorskip("plotly")
    from energyframe.report.html import run_figures
    from energyframe.results import rundir

    figures, notes = run_figures(rundir.load(timing_only), 20000)
    assert not any(caption.startswith("Power trace") for caption, _ in figures)
    assert notes == ["no power channels: this run measured timing only"]


def test_a_replay_title_without_energy_says_it_was_not_measured():
    pytest.importorskip("plotly")
    from energyframe.replay.report_figures import replay_prediction

    report = {
        "full_model_inference_us": 100.0,
        "predicted_from_kernels_us": 90.0,
        "error_percent": -10.0,
        "energy_error_percent": math.nan,
    }
    title = replay_prediction(report)["layout"]["title"]["text"]
    assert title == "prediction: latency error -10.0%, energy error not measured"


# -- compare -----------------------------------------------------------------------------------
def windows_of(values, phase="p") -> pd.DataFrame:
    return pd.DataFrame(
        {"phase": phase, "trial": range(len(values)), "channel": "", "time_per_iter_s": values, "flags": ""}
    )


def test_a_change_under_a_tenth_of_a_percent_reads_the_same_in_both_columns():
    reference = [1.0, 1.001, 0.999, 1.0005, 0.9995]
    faster = [v * 0.99984 for v in reference]
    comparison = statistics.compare_trials(["a", "b"], [windows_of(reference), windows_of(faster)], figures=["time"])
    (row,) = comparison.rows
    assert tables.change_text(row, 1) == "-0.016%"
    assert tables.verdict_text(row, 1).startswith("0.016% faster, ")
    assert statistics.factor_text(1.0005, "time") == "0.05% slower"
    assert statistics.percent_text(-1.2345) == "-1.23%"


def test_runs_with_no_phase_in_common_print_no_empty_table():
    comparison = statistics.compare_trials(["a", "b"], [windows_of([1.0] * 3, "x"), windows_of([1.0] * 3, "y")])
    notes = ["nothing to compare: no phase of a is in another run", "only in a: x", "only in b: y"]
    assert tables.text_table(comparison) == "\n".join(notes) + "\n"
    assert tables.markdown_table(comparison) == "\n".join(f"- {n}" for n in notes) + "\n"


@pytest.mark.parametrize("alpha", [math.nan, math.inf, 0.0, 1.0, -0.5])
def test_a_significance_level_no_verdict_can_use_is_refused(alpha):
    with pytest.raises(UsageError, match=re.escape(f"alpha must be a number between 0 and 1 (exclusive), got {alpha!r}")):
        statistics.compare_trials(["a", "b"], [windows_of([1.0] * 3), windows_of([2.0] * 3)], alpha=alpha)


def test_u_is_what_the_docs_say_it_is():
    """docs/comparing.md: U counts the pairs in which the reference's trial is larger."""
    text = " ".join((DOCS / "comparing.md").read_text().split())
    assert (
        "U counts the pairs (reference trial, run trial) in which the reference's trial is larger, a tie "
        "counting one half" in text
    )
    rng = np.random.default_rng(3)
    for _ in range(20):
        reference = rng.integers(0, 6, size=rng.integers(3, 9)).astype(float)
        run = rng.integers(0, 6, size=rng.integers(3, 9)).astype(float)
        pairs = sum((a > b) + 0.5 * (a == b) for a in reference for b in run)
        assert statistics.mann_whitney(reference, run).u == pytest.approx(pairs)
        # the p-value is two-sided: the same whichever run comes first
        assert statistics.mann_whitney(run, reference).p_value == pytest.approx(
            statistics.mann_whitney(reference, run).p_value
        )
    comparison = statistics.compare_trials(["a", "b"], [windows_of([1.0, 2.0, 3.0]), windows_of([4.0, 5.0, 6.0])])
    (record,) = [r for r in tables.long_rows(comparison) if r["run"] == "b"]
    assert record["u"] == 0.0  # no trial of the reference is larger than one of b


# -- runs, figures and units (the first hour) --------------------------------------------------
@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """A folder of runs: one timing-only (no workload device, no channel), one with energy and
    work counted in items, with a reason long enough to be cut at 80 columns."""
    from tests.fakes import SignalSource, busy_phase

    root = tmp_path_factory.mktemp("runs")
    with ef.measure(power="none", out=root / "timing-only") as m:
        for _ in range(3):
            with m.window("step"):
                pass
    ef.run(
        ListWorkload([busy_phase(work={"items": 8.0})]),
        power=[SignalSource(name="gpu", watts=200.0)],
        reporters=[],
        out=root / "with-energy",
        settings=ef.RunSettings(trials=3, min_window_s=0.05, warmup_s=0.0),
    )
    return root


def test_runs_prints_no_nan_and_cuts_no_value(two_runs: Path):
    r = CliRunner().invoke(main, ["runs", str(two_runs)])
    assert r.exit_code == 0, r.output
    assert "nan" not in r.output and "…" not in r.output
    row = next(line for line in r.output.splitlines() if "timing-only" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:6] == ["timing-only", "complete", "-", "-", "step", "-"]  # workload, device, channel


def test_load_runs_gives_the_energy_bound_of_each_row(two_runs: Path):
    table = ef.load_runs(two_runs)
    energy = table[table["run"] == "with-energy"].iloc[0]
    summary = ef.load_run(two_runs / "with-energy").summary("busy")
    assert summary.energy_bound is not None  # the run has one: the table must carry it
    assert energy["energy_uncertainty_j"] == pytest.approx(summary.energy_bound.total_j)
    assert energy["energy_uncertainty_j"] > 0
    timing = table[table["run"] == "timing-only"].iloc[0]
    assert pd.isna(timing["energy_uncertainty_j"])  # no energy, no bound: empty, never 0


def test_work_units_read_singular_after_a_slash(two_runs: Path):
    r = CliRunner().invoke(main, ["show", str(two_runs / "with-energy")])
    line = next(line for line in r.output.splitlines() if " J/" in line)
    assert " J/item, " in line and line.endswith(" items/s")
    from energyframe.results.display import singular

    assert [singular(u) for u in ("items", "requests", "tokens", "queries", "batches", "s", "class")] == [
        "item", "request", "token", "query", "batch", "s", "class"
    ]


def test_figures_in_the_html_report_carry_no_float_noise():
    from energyframe.results.display import plain_number

    # a duration just under 1 s and a window of 10 update periods of 0.09999999999999998 s
    assert plain_number(0.9999994) == "1" and plain_number(0.09999999999999998) == "0.1"
    assert plain_number(0.3002171) == "0.3002" and plain_number(1795905125.4656925) == "1795905125.466"
    assert plain_number(float("nan")) == "-" and plain_number(3) == "3" and plain_number("auto") == "auto"
