"""``energyframe report``: one self-contained HTML page, every run-data string escaped, every
number equal to windows.csv (read from the page's data-value attributes), the workload's plots.
tests/report/test_report_browser.py opens the same pages in Chromium."""

import json
import math
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.report.html import build_report, figures
from energyframe.results import rundir, store
from energyframe.sweeps.results import RESULTS_JSON
from energyframe.sweeps.workload import SweepWorkload
from tests.fakes import ListWorkload, SignalSource, busy_phase

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
#: phase names that would run, or change the page, if they were not escaped
EVIL = '<script>alert("phase")</script>'
EVIL_TOO = 'a|b <img src=x onerror=alert(1)> & "q"'
CONFIG = ef.RunSettings(trials=3, min_window_s=0.05, warmup_s=0.0)


def make_runs(root: Path) -> dict[str, Path]:
    """Runs to report on: phases with hostile names on a counter and a power channel (and a
    second one at a higher power), a pipeline of two stages, and a run with a sweep's results."""
    out = {}
    for name, watts in (("evil", 100.0), ("evil_hot", 130.0)):
        ef.run(
            ListWorkload([busy_phase(EVIL, 0.002), busy_phase(EVIL_TOO, 0.001)], name="evil"),
            power=[SignalSource(name="gpu", watts=watts)],
            reporters=[],
            out=root / name,
            settings=CONFIG,
        )
        out[name] = root / name
    pipe = ef.Pipeline(
        "two",
        [("mm", ListWorkload([busy_phase("mm", 0.002)])), ("add", ListWorkload([busy_phase("add", 0.001)]))],
    )
    ef.run(
        pipe,
        power=[SignalSource(name="gpu")],
        reporters=[],
        out=root / "pipeline",
        settings=ef.RunSettings(trials=3, min_window_s=0.05, idle_s=0.1, warmup_s=0.0),
    )
    out["pipeline"] = root / "pipeline"
    # the sweep's own figures come from the sweep workload, which reads benchmark_results.json:
    # the one recorded on an H100, beside a run that names the sweep workload
    shutil.copytree(root / "evil", root / "sweep")
    shutil.copy(FIXTURES / "sweep" / "h100-sgemm.json", root / "sweep" / RESULTS_JSON)
    meta = json.loads((root / "sweep" / "run.json").read_text())
    meta["workload"]["class"] = f"{SweepWorkload.__module__}.{SweepWorkload.__qualname__}"
    (root / "sweep" / "run.json").write_text(json.dumps(meta))
    out["sweep"] = root / "sweep"
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return make_runs(tmp_path_factory.mktemp("report"))


class Cells(HTMLParser):
    """Every <td> with a data-field, by table class: (field, value, text), row by row."""

    def __init__(self):
        super().__init__()
        self.tables: list[tuple[dict, list[list[tuple[str, str, str]]]]] = []
        self.row: list | None = None
        self.cell: list | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append((a, []))
        elif tag == "tr" and self.tables:
            self.row = []
            self.tables[-1][1].append(self.row)
            self.row_attrs = a
        elif tag == "td" and self.row is not None:
            self.cell = [a.get("data-field", ""), a.get("data-value", ""), ""]
            self.row.append(self.cell)

    def handle_endtag(self, tag):
        if tag == "td":
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[2] += data


def tables(page: str, cls: str):
    parser = Cells()
    parser.feed(page)
    return [(attrs, [r for r in rows if r]) for attrs, rows in parser.tables if attrs.get("class") == cls]


def windows_from_page(rows) -> pd.DataFrame:
    records = []
    for row in rows:
        # a number carries its exact value; text is shown as it is ("-" for a missing number)
        records.append({f: float(v) if v else (math.nan if t == "-" else t) for f, v, t in row})
    return pd.DataFrame(records)


def assert_page_numbers_equal_windows_csv(page: str, run_dirs):
    assert_tables_equal_windows_csv(tables(page, "windows"), tables(page, "summary"), run_dirs)


def assert_tables_equal_windows_csv(window_tables, summary_tables, run_dirs):
    """The windows table of each run holds exactly windows.csv; each summary median is the
    median of windows.csv's trials."""
    assert len(window_tables) == len(summary_tables) == len(run_dirs)
    for (_, rows), (_, summary), run_dir in zip(window_tables, summary_tables, run_dirs):
        csv = store.read_windows(run_dir)  # as energyframe reads it: text columns "" when empty
        shown = windows_from_page(rows)
        assert list(shown.columns) == list(csv.columns) and len(shown) == len(csv)
        for column in csv.columns:
            expected, got = csv[column].tolist(), shown[column].tolist()
            if pd.api.types.is_numeric_dtype(csv[column]):
                np.testing.assert_array_equal(
                    np.asarray(got, float), np.asarray(expected, float), err_msg=column
                )
            else:
                assert got == expected, column
        for row in summary:
            cells = {f: v for f, v, _ in row if f}
            phase, channel = row[0][2], row[1][2]
            group = csv[
                (csv["phase"] == phase) & (csv["channel"] == (channel if channel != "(timing only)" else ""))
            ]
            assert len(group) == int(cells["trials"])
            for field in ("time_per_iter_s", "energy_per_iter_j", "mean_power_w"):
                assert float(cells[f"{field}.median"]) == pytest.approx(
                    float(np.median(group[field])), rel=1e-15
                )


def test_one_run_page_is_self_contained_and_escaped(runs, tmp_path):
    saved = rundir.load(runs["evil"])
    page = build_report([saved])
    assert page.startswith("<!DOCTYPE html>")
    # nothing from the network: no http(s) sources, links to stylesheets, imports or fonts
    # (plotly.js itself, inlined, only names its web site in a link of its toolbar)
    from plotly.offline import get_plotlyjs

    ours = page.replace(get_plotlyjs(), "")
    assert len(ours) < len(page) - 1_000_000
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", ours)
    assert "@import" not in ours and "url(" not in ours
    # the hostile names are shown as text, never as markup
    assert EVIL not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#34;phase&#34;)&lt;/script&gt;" in page
    # inside the figures' JSON no "<" survives (no way out of the <script> element)
    for spec in re.findall(r'<script type="application/json" id="figure-\d+">(.*?)</script>', page, re.S):
        assert "<" not in spec and json.loads(spec)["data"]
    assert_page_numbers_equal_windows_csv(page, [runs["evil"]])
    for text in ("run directory", "status", "power sources", "Power trace", "Every window"):
        assert text in page


def test_comparison_page_has_the_comparison_and_every_run(runs):
    saved = rundir.load_all([runs["evil"], runs["evil_hot"]])
    page = build_report(saved, figures=("time", "energy", "power"))
    assert 'id="comparison"' in page and page.count('class="run"') == 2
    ((_, rows),) = tables(page, "comparison")
    assert {r[2][2] for r in rows} == {"time/iter", "energy/iter", "power"}
    power = [r for r in rows if r[2][2] == "power" and r[1][2] == "gpu"]
    assert len(power) == 2  # both phases
    for row in power:
        cells = {f: (v, t) for f, v, t in row}
        assert float(cells["run1.change_pct"][0]) == pytest.approx(30.0, rel=0.01)
        assert cells["run1.verdict"][1].startswith("1.30× more power")
        assert float(cells["run0.median"][0]) == pytest.approx(100.0, rel=0.01)
    assert_page_numbers_equal_windows_csv(page, [runs["evil"], runs["evil_hot"]])


def test_pipeline_and_sweep_sections(runs):
    page = build_report([rundir.load(runs["pipeline"])])
    assert "two: per stage, per call" in page and 'data-table="summary"' in page
    specs = [json.loads(s) for s in re.findall(r'id="figure-\d+">(.*?)</script>', page, re.S)]
    bars = [s for s in specs if s["layout"].get("title", {}).get("text", "").startswith("two: per stage")]
    assert len(bars) == 1 and [t["y"] for t in bars[0]["data"]][0] == ["mm", "add"]
    # the totals (one row, many columns) turned on their side: a line per column, exact values kept
    (attrs, lines), = tables(page, "derived transposed")
    totals = json.loads((runs["pipeline"] / "run.json").read_text())["derived"]
    (row,) = [t for t in totals if t["name"] == "summary"][0]["rows"]
    assert len(row) > 6 and [cells[0][0] for cells in lines] == list(row)
    for (field, value, _), column in zip((cells[0] for cells in lines), row):
        expected = row[column]
        if isinstance(expected, (int, float)) and not isinstance(expected, bool) and math.isfinite(expected):
            assert float(value) == expected, field
    assert re.search(r"<tr><th>sum_energy_j</th><td data-field=\"sum_energy_j\"", page)
    sweep = build_report([rundir.load(runs["sweep"])])
    for title in ("Sweep: latency heatmaps", "Sweep: speedup", "Sweep: energy against latency"):
        assert title in sweep


def test_an_error_bar_wider_than_its_value_stops_at_zero_and_says_so():
    from types import SimpleNamespace

    from energyframe.core.stats import Spread
    from energyframe.core.uncertainty import Bound

    small = Spread.of([0.140, 0.144, 0.150])  # 144 mJ
    large = Spread.of([20.0, 21.0, 22.0])
    rows = [
        SimpleNamespace(figure="energy", kind="phase", name="tiny", channel="gpu0", unit="J",
                        spreads=[small, small], bounds=[Bound(2.6), Bound(0.01)]),  # ± 1800 %, then ± 7 %
        SimpleNamespace(figure="energy", kind="phase", name="big", channel="gpu0", unit="J",
                        spreads=[large, large], bounds=[Bound(0.2), Bound(0.2)]),
    ]
    spec = figures.compare_bars(SimpleNamespace(rows=rows, labels=["a", "b"]), "energy")
    a, b = spec["data"]
    assert a["error_y"]["arrayminus"] == [pytest.approx(0.144), pytest.approx(0.2)]  # cut at the value
    assert a["error_y"]["array"] == [pytest.approx(2.6), pytest.approx(0.2)]  # above: the whole bound
    assert b["error_y"]["arrayminus"] == [pytest.approx(0.01), pytest.approx(0.2)]
    assert list(a["hovertext"]) == [figures.WIDER_NOTE, ""] and list(b["hovertext"]) == ["", ""]
    lowest = min(m - d for t in (a, b) for m, d in zip(t["y"], t["error_y"]["arrayminus"]))
    assert lowest >= 0
    assert "1 bar(s) cut at zero: the 95 % bound is wider than the value" in spec["layout"]["title"]["text"]
    rows[0].bounds = [Bound(0.01), Bound(0.01)]
    assert "cut at zero" not in figures.compare_bars(SimpleNamespace(rows=rows, labels=["a", "b"]), "energy")[
        "layout"]["title"]["text"]


def test_gantt_of_a_recorded_h200_trace(tmp_path):
    from energyframe.replay import report_figures as figures
    from energyframe.replay.capture import summarize_trace

    summarize_trace(FIXTURES / "kineto-h200" / "bloom-tiny.json.gz", tmp_path / "trace", iterations=1)
    spec = figures.gantt(tmp_path / "trace")
    kernels = sum(len(trace["base"]) for trace in spec["data"])
    assert kernels > 0 and {trace["name"] for trace in spec["data"]} <= {"gemm", "memcpy/memset", "other"}
    assert spec["layout"]["title"]["text"].startswith(f"traced iteration: {kernels} kernels")
    assert figures.gantt(tmp_path / "no-trace") is None


def test_decimation_keeps_the_extremes_of_each_bucket():
    t = np.arange(100_000, dtype=float)
    v = np.sin(t / 50.0)
    v[12345] = 10.0
    dt, dv, decimated = figures.decimate(t, v, 2000)
    assert decimated and len(dt) <= 2000 and np.all(np.diff(dt) > 0)
    assert dv.max() == 10.0 and dv.min() == v.min()
    assert figures.decimate(t[:10], v[:10], 2000)[2] is False


def test_cli_writes_into_the_run_directory_by_default(runs, tmp_path):
    target = tmp_path / "one"
    shutil.copytree(runs["evil"], target)
    result = CliRunner().invoke(main, ["report", str(target)])
    assert result.exit_code == 0 and result.output == f"wrote {target / 'report.html'}\n"
    assert (target / "report.html").read_text().startswith("<!DOCTYPE html>")
    out = tmp_path / "ab.html"
    result = CliRunner().invoke(main, ["report", str(runs["evil"]), str(runs["evil_hot"]), "--out", str(out)])
    assert result.exit_code == 0 and 'id="comparison"' in out.read_text()


def test_without_the_report_extra_the_error_names_it(runs, monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)  # as if plotly were not installed
    result = CliRunner().invoke(main, ["report", str(runs["evil"]), "--out", "x.html"])
    assert result.exit_code == 2
    assert result.output == (
        "Error: energyframe report needs plotly and jinja2 (plotly is missing): pip install 'energyframe[report]'\n"
    )


def test_a_workload_draws_its_own_figures_in_the_report(runs, tmp_path):
    """The core names no plugin's files: the replay workload reads its comparison_report.json
    and draws its figures through Workload.report_figures, found from run.json's class."""
    import shutil

    from energyframe.replay.workload import REPORT_JSON, ReplayWorkload

    run = tmp_path / "replayed"
    shutil.copytree(runs["evil"], run)
    meta = json.loads((run / "run.json").read_text())
    meta["workload"]["class"] = f"{ReplayWorkload.__module__}.{ReplayWorkload.__qualname__}"
    meta["workload"]["info"] = {"trace": "trace"}
    (run / "run.json").write_text(json.dumps(meta))
    report = {
        "full_model_inference_us": 100.0,
        "predicted_from_kernels_us": 90.0,
        "full_model_energy_j": 1.0,
        "predicted_energy_j": 0.9,
        "error_percent": -10.0,
        "energy_error_percent": -10.0,
        "tier_breakdown": {"gemm": {"predicted_us": 60.0, "predicted_energy_j": 0.6}},
    }
    (run / REPORT_JSON).write_text(json.dumps(report))
    saved = rundir.load(run)
    assert saved.workload is ReplayWorkload
    titles = [f.title for f in saved.workload_figures()]
    assert titles == ["Replay: prediction", "Replay: tiers", "Replay: the traced iteration (gantt)"]
    page = build_report([saved])
    assert "Replay: prediction" in page and f"no gantt: the trace directory {run / 'trace'} is not here" in page


def test_the_power_trace_shades_every_window_once_with_one_legend_entry_per_phase():
    from energyframe.testing import sample_result

    result = sample_result()
    fig = figures.power_trace(result)
    shapes = fig["layout"]["shapes"]
    spans = result.windows.drop_duplicates(["phase", "trial"])
    assert len(shapes) == len(spans) == 4
    assert [s["name"] for s in shapes if s["showlegend"]] == list(dict.fromkeys(spans["phase"]))
    t0 = figures.origin_s(result)
    assert [s["x0"] for s in shapes] == pytest.approx(sorted(spans["start_s"] - t0))
    assert len({s["fillcolor"] for s in shapes}) == 2
