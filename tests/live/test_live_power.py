"""Live power: the tracker's arithmetic, the listener fan-out, the Prometheus text format (parsed
back with prometheus_client's own parser), `energyframe run --prometheus-port`, `energyframe
monitor`, and a real Prometheus server scraping a run (Debian's `prometheus`, .ci/install-prometheus).

Without the prometheus binary the server test skips and says why; with
ENERGYFRAME_PROMETHEUS_REQUIRED=1 (CI, once .ci/install-prometheus installed it) it fails instead."""

import json
import math
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

import energyframe as ef
from energyframe.cli import main
from energyframe.core.clock import ClockModel
from energyframe.errors import UsageError
from energyframe.live.listener import Fanout, LiveListener, WindowEnergy
from energyframe.live.prometheus import PrometheusExporter, serving
from energyframe.live.tracker import PowerTracker, gpu_label
from energyframe.model import Channel, ClockBase, Quantity, Sample, Scope
from tests.conftest import write_power_csv

COUNTER = Channel("gpu0", Quantity.ENERGY, Scope.GPU, resolution_s=0.1)
POWER = Channel("gpu0.power_instant", Quantity.POWER, Scope.GPU, primary=False)
WALL = Channel("wall", Quantity.POWER, Scope.SYSTEM_WALL)
CLOCKS = Channel("gpu0.sm_clock", Quantity.STATE, Scope.GPU, unit="MHz")


def tracker_at(now: float = 10.0) -> PowerTracker:
    return PowerTracker(rank=3, host="node7", now=lambda: now)


def test_a_counter_gives_its_increments_and_its_power_over_the_last_second():
    t = tracker_at()
    t.on_channels("nvml", [COUNTER, CLOCKS])
    # ticks every 100 ms at 300 W, then the driver reloads (the counter restarts near 0)
    times = [i / 10 for i in range(21)]
    t.on_samples("nvml", COUNTER, times, [1000.0 + 30.0 * i for i in range(21)])
    (r,) = t.readings()  # the clock channel is not a power channel
    assert r.channel == "gpu0" and r.gpu == "0" and r.primary and r.source == "nvml"
    assert r.energy_j == pytest.approx(600.0) and r.power_w == pytest.approx(300.0) and r.samples == 21
    t.on_samples("nvml", COUNTER, [2.1, 2.2], [5.0, 35.0])
    (r,) = t.readings()
    assert r.energy_j == pytest.approx(630.0)  # the reset's interval left out, never negative
    assert r.last_time_s == 2.2


def test_power_is_integrated_as_the_windows_integrate_it():
    t = tracker_at()
    t.on_samples("meter", WALL, [0.0, 1.0, 2.0, 2.5], [100.0, 200.0, 200.0, 100.0])
    (r,) = t.readings()
    assert r.energy_j == pytest.approx(150.0 + 200.0 + 75.0)  # trapezoids
    # the last second of readings: 1.5 .. 2.5 holds 2.0 and 2.5 -> (200 + 100)/2
    assert r.power_w == pytest.approx(150.0)
    one = tracker_at()
    one.on_samples("meter", WALL, [5.0], [42.0])
    assert one.readings()[0].power_w == 42.0 and one.readings()[0].energy_j == 0.0


def test_gpu_labels_come_from_gpu_channels_only():
    assert gpu_label(Channel("smi.gpu1.power", Quantity.POWER, Scope.GPU)) == "1"
    assert gpu_label(COUNTER) == "0" and gpu_label(WALL) == ""
    assert gpu_label(Channel("gpux", Quantity.POWER, Scope.GPU)) == ""


class Recording(LiveListener):
    def __init__(self):
        self.got = []

    def on_samples(self, source, channel, times_s, values):
        self.got.append((source, channel.name, list(times_s), list(values)))


class Broken(LiveListener):
    def on_samples(self, source, channel, times_s, values):
        raise RuntimeError("dashboard down")


def test_the_fanout_maps_wall_times_leaves_out_impossible_readings_and_drops_a_broken_listener():
    clock = ClockModel()
    meter = Channel("wall", Quantity.POWER, Scope.SYSTEM_WALL, clock=ClockBase.WALL)
    good, warnings = Recording(), []
    fan = Fanout([Broken(), good], warnings.append)
    wall = clock.to_unix(100.0)
    batch = [Sample("wall", wall, 120.0), Sample("wall", wall + 1, -5.0), Sample("wall", wall + 2, math.nan)]
    fan.samples("wattsup", batch, {"wall": meter}, clock)
    fan.samples("wattsup", batch[:1], {"wall": meter}, clock)
    assert [g[:2] for g in good.got] == [("wattsup", "wall")] * 2
    assert good.got[0][2] == [pytest.approx(100.0, abs=1e-6)] and good.got[0][3] == [120.0]
    assert warnings == ["live listener Broken failed and was dropped: RuntimeError: dashboard down"]


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_the_exposition_parses_with_prometheus_names_types_and_labels():
    t = tracker_at()
    t.on_channels("nvml", [COUNTER, POWER])
    t.on_samples("nvml", COUNTER, [9.0, 9.5, 10.0], [0.0, 150.0, 300.0])
    t.on_samples("nvml", POWER, [9.5, 10.0], [280.0, 320.0])
    t.on_window(WindowEnergy("train-step", 2, "gpu0", 12.5, 0.25))
    text = PrometheusExporter(t, port=0).render()
    got = families(text)
    assert got["energyframe_power_watts"].type == "gauge"
    assert got["energyframe_energy_joules"].type == "counter"  # exposed as ..._total
    assert "energyframe_energy_joules_total{" in text and "energyframe_samples_total{" in text
    power = {s.labels["channel"]: s for s in got["energyframe_power_watts"].samples}
    assert power["gpu0"].value == pytest.approx(300.0) and power["gpu0.power_instant"].value == pytest.approx(300.0)
    assert power["gpu0"].labels == {
        "channel": "gpu0", "source": "nvml", "scope": "gpu", "primary": "true", "gpu": "0", "rank": "3", "host": "node7",
    }
    assert power["gpu0.power_instant"].labels["primary"] == "false"
    energy = {s.labels["channel"]: s.value for s in got["energyframe_energy_joules"].samples}
    assert energy == {"gpu0": pytest.approx(300.0), "gpu0.power_instant": pytest.approx(150.0)}
    (window,) = got["energyframe_window_energy_joules"].samples
    assert window.value == 12.5 and window.labels["phase"] == "train-step" and window.labels["gpu"] == "0"
    (length,) = got["energyframe_window_duration_seconds"].samples
    assert length.value == 0.25
    stamp = {s.labels["channel"]: s.value for s in got["energyframe_last_sample_timestamp_seconds"].samples}
    assert stamp["gpu0"] == pytest.approx(time.time(), abs=5)


def test_a_taken_port_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(UsageError, match=rf"^cannot serve Prometheus metrics on 127\.0\.0\.1:{port}: "):
            PrometheusExporter(tracker_at(), port, "127.0.0.1").start()
    with pytest.raises(UsageError, match=r"^--prometheus-port 65535 \+ local rank 1 is past 65535$"):
        with serving(65535, local_rank=1):
            pass


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


@pytest.fixture
def power_csv(tmp_path):
    return write_power_csv(tmp_path / "power.csv", 250.0, duration_s=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_run_serves_live_power_while_it_goes(power_csv, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    runner = threading.Thread(
        target=CliRunner().invoke,
        args=(main, ["run", "--power", f"replay:file={power_csv},scope=gpu,prefix=gpu0.", "--prometheus-port", str(port),
                     "--idle", "0", "--trials", "1", "--out", str(tmp_path / "r"), "--", "sleep", "3"]),
    )
    runner.start()
    text = ""
    deadline = time.monotonic() + 30
    while "energyframe_power_watts{" not in text and time.monotonic() < deadline:
        time.sleep(0.3)
        try:
            text = scrape(url)
        except OSError:
            continue
    runner.join(timeout=60)
    (power,) = families(text)["energyframe_power_watts"].samples
    assert power.value == pytest.approx(250.0) and power.labels["gpu"] == "0" and power.labels["rank"] == "0"
    with pytest.raises(OSError):  # the exporter stops with the run
        scrape(url)
    assert json.loads((tmp_path / "r" / "run.json").read_text())["status"] == "complete"


@pytest.mark.slow
def test_each_windows_energy_reaches_the_exporter_while_the_run_goes(power_csv):
    tracker = PowerTracker(rank=0, host="node7")
    result = ef.run(
        "sleep:seconds=0.5",
        power=[f"replay:file={power_csv},scope=gpu,prefix=gpu0."],
        reporters=[],
        settings=ef.RunSettings(trials=2, idle_s=0.0, warmup_s=0.0),
        listeners=[tracker],
    )
    windows = tracker.windows()  # the last window of each phase, per channel
    assert [(w.phase, w.channel, w.trial) for w in windows] == [("sleep", "gpu0.replay", 1)]
    final = result.windows[(result.windows["phase"] == "sleep") & (result.windows["trial"] == 1)]
    (w,) = windows
    # the live number is the run's own (the same pipeline, on the samples around the window)
    assert w.energy_j == pytest.approx(float(final["energy_j"].iloc[0]), rel=1e-6)
    assert w.energy_j == pytest.approx(250.0 * w.duration_s, rel=0.01)
    (sample,) = families(PrometheusExporter(tracker, 0).render())["energyframe_window_energy_joules"].samples
    assert sample.labels["phase"] == "sleep" and sample.labels["gpu"] == "0" and sample.value == w.energy_j


@pytest.mark.slow
def test_monitor_shows_each_channel_and_serves_it(power_csv):
    port = free_port()
    r = CliRunner().invoke(
        main,
        ["monitor", "--power", f"replay:file={power_csv},scope=gpu,prefix=gpu0.", "--duration", "2.5", "--refresh", "0.5",
         "--prometheus-port", str(port)],
    )
    assert r.exit_code == 0, r.output
    assert "energyframe monitor: live power" in r.output
    row = next(line for line in r.output.splitlines() if "gpu0.replay" in line)
    assert "250.0 W" in row and "replay" in row and "gpu" in row


def test_monitor_needs_a_power_source():
    r = CliRunner().invoke(main, ["monitor", "--power", "none"])
    assert r.exit_code == 2
    assert r.output == "Error: energyframe monitor needs a power source; 'none' measures nothing to show\n"


def prometheus_binary() -> str:
    found = os.environ.get("ENERGYFRAME_PROMETHEUS") or shutil.which("prometheus")
    if found:
        return found
    reason = "no prometheus binary (Debian's prometheus package: .ci/install-prometheus)"
    if os.environ.get("ENERGYFRAME_PROMETHEUS_REQUIRED") == "1":
        pytest.fail(f"ENERGYFRAME_PROMETHEUS_REQUIRED=1 but {reason}")
    pytest.skip(reason)


def query(api: str, expr: str) -> list:
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())["data"]["result"]


@pytest.mark.slow
def test_a_real_prometheus_server_scrapes_a_run(power_csv, tmp_path):
    binary = prometheus_binary()
    target, web = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: energyframe\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
    )
    server = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{web}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = f"http://127.0.0.1:{web}"
    try:
        tracker = PowerTracker(rank=0, host="node7")
        exporter = PrometheusExporter(tracker, target, "127.0.0.1").start()
        done = threading.Event()

        def measure():
            try:
                # one 12-s window: long enough for the server to start and scrape a few times
                ef.run("sleep:seconds=12", power=[f"replay:file={power_csv},scope=gpu,prefix=gpu0."], reporters=[],
                       listeners=[tracker], settings=ef.RunSettings(trials=1, warmup_s=0.0))
            finally:
                done.set()

        threading.Thread(target=measure, daemon=True).start()
        found: list = []
        deadline = time.monotonic() + 40
        while not found and time.monotonic() < deadline and not done.is_set():
            time.sleep(0.5)
            try:
                found = query(api, 'energyframe_power_watts{job="energyframe"}')
                energy = query(api, "energyframe_energy_joules_total")
            except OSError:  # the server is still starting
                continue
        done.wait(timeout=60)
        exporter.stop()
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert found, "Prometheus scraped no energyframe_power_watts while the run went"
    (series,) = found
    assert float(series["value"][1]) == pytest.approx(250.0)
    labels = series["metric"]
    assert labels["channel"] == "gpu0.replay" and labels["gpu"] == "0" and labels["host"] == "node7"
    assert labels["rank"] == "0" and labels["instance"] == f"127.0.0.1:{target}"
    assert energy and float(energy[0]["value"][1]) >= 0
