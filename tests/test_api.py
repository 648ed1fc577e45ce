"""The Python API a notebook user meets: ef.measured, timing only, what is logged, CO2e; and the
console output a person reads."""

from __future__ import annotations

import logging
import re

import pandas as pd
import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.cli.run import reporter_specs
from energyframe.results.display import percent


def test_measured_calls_append_to_one_run_a_window_per_call_a_phase_per_function(tmp_path, power_csv):
    calls = []
    csv = power_csv(50.0, period_s=0.02, duration_s=60.0)
    power = [f"replay:file={csv}"]

    @ef.measured(power=power, out=tmp_path / "runs", iterations=10)
    def train_epoch(n):
        calls.append(n)
        return n * 2

    @ef.measured(power=power, out=tmp_path / "runs")
    def evaluate():
        return "ok"

    assert train_epoch(3) == 6 and train_epoch(4) == 8 and evaluate() == "ok"  # values pass through
    assert calls == [3, 4]
    so_far = train_epoch.last_result  # while the run goes: integrated as the saved run will be
    assert so_far.status == "incomplete" and so_far.reason.startswith("running (pid ")
    assert list(so_far.windows["phase"]) == ["train_epoch", "train_epoch", "evaluate"]
    result = train_epoch.finish()
    assert result.complete and list(result.windows["trial"]) == [0, 1, 0]
    assert (result.windows["iterations"][:2] == 10).all()
    assert result.windows["mean_power_w"].to_numpy() == pytest.approx([50.0] * 3)
    assert result.windows["energy_j"].to_numpy() == pytest.approx(so_far.windows["energy_j"].to_numpy())
    (saved,) = (tmp_path / "runs").iterdir()  # one directory for every call
    assert re.fullmatch(r"\d{8}T\d{6}Z-measured", saved.name)
    assert ef.RunResult.load(saved).windows["phase"].tolist() == ["train_epoch", "train_epoch", "evaluate"]
    assert evaluate.last_result is result  # the same run
    train_epoch(5)  # after finish, a call starts a new run
    assert train_epoch.finish().windows["trial"].tolist() == [0]
    assert len(list((tmp_path / "runs").iterdir())) == 2


def test_a_measured_call_that_raises_has_no_window_and_is_named(tmp_path):
    @ef.measured(power="none", out=tmp_path)
    def broken(fail):
        if fail:
            raise ValueError("bad batch")

    broken(False)
    with pytest.raises(ValueError, match="bad batch"):
        broken(True)
    broken(False)
    result = broken.finish()
    assert result.complete and result.windows["trial"].tolist() == [0, 1]
    assert "call 2 of broken raised ValueError: bad batch; that call has no window" in result.warnings


def test_load_runs_is_one_table_of_every_run_and_phase(tmp_path, power_csv):
    csv = power_csv(80.0, period_s=0.02, duration_s=60.0)
    ef.run(
        "sleep:seconds=0.05",
        power=[f"replay:file={csv}"],
        reporters=[],
        out=tmp_path / "runs" / "a",
        settings=ef.RunSettings(trials=3),
    )
    ef.run(
        "sleep:seconds=0.05",
        power="none",
        reporters=[],
        out=tmp_path / "runs" / "nested" / "b",
        settings=ef.RunSettings(trials=2),
    )
    (tmp_path / "runs" / "broken").mkdir()
    (tmp_path / "runs" / "broken" / "run.json").write_text("[1, 2]")
    table = ef.load_runs(tmp_path / "runs")
    rows = table.set_index("run")
    assert sorted(table["run"]) == ["a", "b", "broken"]
    assert rows.loc["a", "status"] == "complete" and rows.loc["a", "channel"] == "replay"
    assert rows.loc["a", "trials"] == 3 and rows.loc["a", "mean_power_w"] == pytest.approx(80.0)
    assert rows.loc["a", "energy_per_iter_j"] == pytest.approx(
        80.0 * rows.loc["a", "time_per_iter_s"], rel=0.02
    )
    assert rows.loc["b", "workload"] == "sleep" and pd.isna(rows.loc["b", "energy_per_iter_j"])
    assert rows.loc["broken", "status"] == "unreadable" and "run.json" in rows.loc["broken", "reason"]
    out = CliRunner().invoke(main, ["runs", str(tmp_path / "runs")])
    assert out.exit_code == 0, out.output
    assert "sleep" in out.output and "unreadable" in out.output
    csv_out = CliRunner().invoke(main, ["runs", str(tmp_path / "runs"), "--csv"]).output
    assert csv_out.splitlines()[0].startswith(
        "run,status,reason,started_at,workload,device,phase,channel,trials"
    )
    missing = CliRunner().invoke(main, ["runs", str(tmp_path / "nowhere")])
    assert (
        missing.exit_code == 2
        and missing.output == f"Error: {tmp_path / 'nowhere'} is not a directory of runs\n"
    )


def test_power_none_means_timing_only_in_the_api_too():
    with ef.measure(power="none") as m:
        with m.window("w"):
            pass
    assert m.result.windows["channel"].tolist() == [""]
    assert m.sources == []


def test_nothing_detected_is_said_where_a_notebook_sees_it(caplog, monkeypatch):
    from energyframe.kit import registry

    monkeypatch.setattr(registry, "auto_power_sources", lambda: ([], ["nvml: not available (no GPU)"]))
    with caplog.at_level(logging.WARNING, logger="energyframe"):
        sources, notes = registry.resolve_power("auto")
    assert sources == []
    assert "no power source found, measuring time only: nvml: not available (no GPU)" in caplog.text


def test_the_console_summary_stays_when_other_reporters_are_asked_for():
    assert reporter_specs(("csv",), quiet=False) == ["console", "csv"]
    assert reporter_specs(("csv",), quiet=True) == ["csv"]
    assert reporter_specs(("console:all_channels=true", "json"), quiet=False) == [
        "console:all_channels=true",
        "json",
    ]
    assert reporter_specs(("none",), quiet=False) == []
    assert reporter_specs((), quiet=False, grid_g_per_kwh=400) == ["console:grid_g_per_kwh=400"]


@pytest.mark.parametrize(
    "fraction,text", [(0.021, "2.1%"), (1.1, "110%"), (0.00034, "0.034%"), (0.25, "25%")]
)
def test_percentages_are_written_for_people(fraction, text):
    assert percent(fraction) == text


def test_co2e_is_shown_only_when_asked(tmp_path, power_csv):
    csv = power_csv(100.0, period_s=0.02, duration_s=30.0)
    args = [
        "run",
        "--power",
        f"replay:file={csv}",
        "--workload",
        "sleep:seconds=0.1",
        "--trials",
        "2",
        "--warmup-s",
        "0",
        "--out",
    ]
    plain = CliRunner().invoke(main, [*args, str(tmp_path / "a")])
    assert plain.exit_code == 0 and "CO2e" not in plain.output
    green = CliRunner().invoke(main, [*args, str(tmp_path / "b"), "--grid-intensity", "400"])
    assert green.exit_code == 0
    # 100 W for 0.1 s (a little more on a loaded machine) is 10 J = 2.78e-6 kWh: at 400 g/kWh,
    # 1.11e-3 g per iteration; the line gives the run's own median energy at that intensity
    energy_j = ef.RunResult.load(tmp_path / "b").summary("sleep").energy_per_iter_j.median
    grams = re.search(r"sleep \[replay\]: ([0-9.e-]+) g CO2e per iteration at 400 g/kWh", green.output)
    assert grams and float(grams.group(1)) == pytest.approx(energy_j / 3.6e6 * 400, rel=1e-3)
    assert 1.1e-3 <= float(grams.group(1)) < 1.3e-3


def test_measured_rebuilds_a_source_instance_for_every_call():
    from energyframe.power.replay import ReplayPowerSource

    seen = []

    @ef.measured(power=[ReplayPowerSource(name="r", file="/nonexistent.csv")])
    def f():
        seen.append(1)

    for _ in range(2):  # each call fails to start a fresh source, the same way: never "already started"
        with pytest.raises(ef.PowerSourceError, match="replay file '/nonexistent.csv' does not exist"):
            f()
    assert seen == []


def test_every_public_name_is_declared_once_and_resolves():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of them is deprecated
        for name in ef.__all__:
            assert getattr(ef, name) is not None, name
    assert {"run", "measure", "measured", "RunSettings", "RunResult", "Workload", "Phase"} <= set(ef.__all__)
    # the plugin contract has one public home; the old top-level names are gone and point to it
    assert "Channel" not in ef.__all__
    with pytest.raises(AttributeError) as e:
        ef.Channel  # noqa: B018
    assert str(e.value) == (
        "module 'energyframe' has no attribute 'Channel'; import it from energyframe.plugin "
        "(from energyframe.plugin import Channel)"
    )
    with pytest.raises(AttributeError) as e:
        ef.Chanel  # noqa: B018
    assert str(e.value) == "module 'energyframe' has no attribute 'Chanel'"


def test_one_spelling_of_timing_only_and_of_the_settings(tmp_path):
    assert ef.run("sleep:seconds=0", power="none", reporters=[], settings=ef.RunSettings(trials=1)).complete
    for power in (None, []):  # the spellings removed in 0.x fail before anything starts
        message = f"power={power!r} names no power source; for timing only say power='none'"
        with pytest.raises(ef.UsageError) as e:
            ef.run("sleep:seconds=0", power=power, reporters=[], out=tmp_path / "run")
        assert str(e.value) == message
        with pytest.raises(ef.UsageError) as e:
            ef.measure(power=power)
        assert str(e.value) == message
    assert not (tmp_path / "run").exists()
    for given in ({"config": ef.RunSettings(trials=1)}, {}):
        with pytest.raises(TypeError) as e:  # by keyword, or in its old place (never taken for align)
            args = ("sleep:seconds=0", "none", [], None) + (() if given else (ef.RunSettings(trials=1),))
            ef.run(*args, **given)
        assert str(e.value) == "ef.run() takes no config= since 0.x: say settings=ef.RunSettings(...)"


def test_a_workload_is_told_where_it_runs_before_setup(tmp_path, monkeypatch):
    """Workloads get a context as power sources do: the rank and the run directory, never the
    launcher's environment read by the workload itself."""
    from energyframe.plugin import WorkloadContext
    from tests.fakes import ListWorkload, busy_phase

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_STEP_NUM_TASKS"):
        monkeypatch.delenv(name, raising=False)
    seen = []

    class Telling(ListWorkload):
        def setup(self):
            seen.append(self.context)

    workload = Telling([busy_phase()])
    assert workload.context == WorkloadContext()  # before the run: one process, no directory
    ef.run(workload, power="none", reporters=[], out=tmp_path / "run", settings=ef.RunSettings(trials=1))
    assert seen == [WorkloadContext(out=tmp_path / "run")]
