"""``energyframe compare`` on real runs with known power: 10 % more energy is found significant,
the same work twice is not; every table format; the error paths."""

import io
import json
import re

import pandas as pd
import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main

CONFIG = ef.RunSettings(trials=5)
#: a sleep of 0.4 s per window: a few ms of scheduler jitter on a loaded machine stay well under
#: the 1 % minimum change, so the same work twice is "not significant" whatever the load
SLEEP_S = 0.4
pytestmark = pytest.mark.slow  # three runs of 2 s each


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three runs of the same work (5 windows of a sleep): at 100 W, 110 W and 100 W."""
    from tests.conftest import write_power_csv

    root = tmp_path_factory.mktemp("compare")
    out = {}
    for name, watts in (("w100", 100.0), ("w110", 110.0), ("again100", 100.0)):
        csv = write_power_csv(root / f"{name}.csv", watts, period_s=0.05, duration_s=4.0)
        ef.run(
            f"sleep:seconds={SLEEP_S}",
            power=[f"replay:file={csv},loop=true"],
            reporters=[],
            out=root / name,
            settings=CONFIG,
        )
        out[name] = root / name
    return out


def csv_rows(text):
    return pd.read_csv(io.StringIO(text), keep_default_na=False)


def test_ten_percent_more_energy_is_significant(runs):
    result = invoke("compare", runs["w100"], runs["w110"], "--table", "csv")
    assert result.exit_code == 0, result.output
    rows = csv_rows(result.stdout)
    energy = rows[(rows["figure"] == "energy") & (rows["run"] == "w110")].iloc[0]
    assert energy["name"] == "sleep" and energy["channel"] == "replay"
    assert float(energy["ratio"]) == pytest.approx(1.10, rel=0.01)
    assert energy["significant"] == "True" and float(energy["p_value"]) < 0.05
    # the verdict names the ratio it measured (1.09-1.11 on a loaded machine: sleep windows
    # stretch, and energy is power x time)
    assert energy["verdict"].startswith(f"{float(energy['ratio']):.2f}× more energy, significant (p=")
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
    # 1.09-1.11 on a loaded machine (sleep windows stretch, and energy is power x time)
    assert re.search(r"1\.(09|10|11)× more energy, significant", out) and "(IQR " in out


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
