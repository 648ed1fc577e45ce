"""``energyframe compare`` on real runs with known power: 10 % more energy is found significant,
the same work twice is not; every table format; the error paths."""

import io
import json
import re
import time

import pandas as pd
import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main

#: each run's five windows, exact whatever the machine's load: recorded with ``record_window``
#: at these edges, not timed around sleeps that a loaded machine stretches. Units: s.
DURATIONS_S = (0.200, 0.202, 0.199, 0.201, 0.198)
pytestmark = pytest.mark.slow  # three runs of about a second each


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def measured_run(out, csv, durations_s=DURATIONS_S, phase="sleep"):
    """A run of the replay source playing ``csv``, with windows of exactly ``durations_s``, one
    after another, recorded once the time they cover has passed."""
    with ef.measure(power=[f"replay:file={csv},loop=true"], out=out, sync=None) as m:
        start = time.monotonic()
        while time.monotonic() < start + sum(durations_s):
            time.sleep(0.01)
        edge = start
        for duration_s in durations_s:
            m.record_window(phase, edge, edge + duration_s)
            edge += duration_s
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three runs of the same windows: at 100 W, 110 W and 100 W."""
    from tests.conftest import write_power_csv

    root = tmp_path_factory.mktemp("compare")
    out = {}
    for name, watts in (("w100", 100.0), ("w110", 110.0), ("again100", 100.0)):
        csv = write_power_csv(root / f"{name}.csv", watts, period_s=0.05, duration_s=4.0)
        out[name] = measured_run(root / name, csv)
    return out


def csv_rows(text):
    return pd.read_csv(io.StringIO(text), keep_default_na=False)


def test_ten_percent_more_energy_is_significant(runs):
    result = invoke("compare", runs["w100"], runs["w110"], "--table", "csv")
    assert result.exit_code == 0, result.output
    rows = csv_rows(result.stdout)
    energy = rows[(rows["figure"] == "energy") & (rows["run"] == "w110")].iloc[0]
    assert energy["name"] == "sleep" and energy["channel"] == "replay"
    assert float(energy["ratio"]) == pytest.approx(1.10, rel=1e-6)
    assert energy["significant"] == "True" and float(energy["p_value"]) < 0.05
    assert energy["verdict"].startswith("1.10× more energy, significant (p=")
    latency = rows[(rows["figure"] == "time") & (rows["run"] == "w110")].iloc[0]
    assert latency["significant"] == "False" and "not significant" in latency["verdict"]
    # the power files differ: said on stderr, so that stdout stays one CSV table
    assert "warning: power source 'replay' options differ, w100 vs w110: file=" in result.stderr


def test_the_same_work_twice_is_not_significant(runs):
    result = invoke("compare", runs["w100"], runs["again100"], "--table", "md")
    assert result.exit_code == 0
    lines = [line for line in result.output.splitlines() if line.startswith("| sleep")]
    assert len(lines) == 2
    for line in lines:
        assert "not significant" in line and ", significant" not in line


def test_text_table_three_runs_and_labels(runs):
    result = invoke(
        "compare",
        runs["w100"],
        runs["w110"],
        runs["again100"],
        "--label",
        "base",
        "--label",
        "hot",
        "--label",
        "b2",
    )
    assert result.exit_code == 0
    out = result.output
    assert out.startswith("Against base. Each run: median (IQR/median, trials).")
    for header in ("change (hot)", "verdict (hot)", "change (b2)", "verdict (b2)"):
        assert header in out
    assert re.search(r"1\.10× more energy, significant", out) and "(IQR " in out
    # the same windows: time in hot and b2, energy in b2
    assert out.count("no change, not significant (p=1)") == 3


def test_json_and_figures(runs):
    result = invoke(
        "compare", runs["w100"], runs["w110"], "--table", "json", "--figure", "power", "--min-change", "0"
    )
    data = json.loads(result.output)
    assert data["reference"] == "w100" and data["alpha"] == 0.05 and data["min_trials"] == 3
    assert {r["figure"] for r in data["rows"]} == {"power"}
    hot = [r for r in data["rows"] if r["run"] == "w110"][0]
    assert hot["median"] == pytest.approx(110.0) and hot["significant"] is True and hot["test"] == "exact"
    assert hot["verdict"].startswith("1.10× more power, significant")
    assert data["runs"][1]["path"] == str(runs["w110"])
    assert any("options differ" in w for w in data["warnings"])


@pytest.mark.parametrize(
    "args,code,message",
    [
        (["one"], 2, "Error: compare needs at least two run directories, got 1\n"),
        (["one", "two", "--label", "x"], 2, "Error: give one --label per run: 2 run(s), 1 label(s)\n"),
        (["one", "two", "--label", "x", "--label", "x"], 2, "Error: labels must differ: x, x\n"),
        (["one", "missing"], 1, "Error: {missing} is not a run directory: it has no run.json\n"),
    ],
)
def test_errors(runs, tmp_path, args, code, message):
    paths = {"one": str(runs["w100"]), "two": str(runs["w110"]), "missing": str(tmp_path / "nothing")}
    result = invoke("compare", *[paths.get(a, a) for a in args])
    assert result.exit_code == code
    assert result.output == message.format(missing=tmp_path / "nothing")


def test_bad_option_values_are_usage_errors(runs):
    result = invoke("compare", runs["w100"], runs["w110"], "--table", "html")
    assert result.exit_code == 2 and "'html' is not one of 'text', 'md', 'csv', 'json'" in result.output
    assert invoke("compare", runs["w100"], runs["w110"], "--alpha", "1").exit_code == 2
