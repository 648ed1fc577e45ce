"""The live exporter's totals obey a run's rules: a reading stamped ahead of now is refused, a
counter that goes down (or leaps) skips only its own interval, a source that declares mW or mJ
is converted; and the exporter listens where it says it does (this machine only by default)."""

from __future__ import annotations

import logging
import socket
import time
import urllib.request

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from energyframe.cli import main
from energyframe.core.clock import ClockModel
from energyframe.errors import UsageError
from energyframe.kit.contract import PowerSource
from energyframe.lifecycle.recorder import Recorder
from energyframe.live.prometheus import PrometheusExporter, serving
from energyframe.live.tracker import PowerTracker
from energyframe.model import Channel, ClockBase, Quantity, Sample, Scope


class BatchSource(PowerSource):
    """Hands over one prepared batch per ``read()``: readings stamped on the monotonic clock
    relative to when the source started (``offset_s`` after it), so a test decides every stamp."""

    DESCRIPTION = "test"

    def __init__(self, batches, quantity=Quantity.POWER, unit="W", name="batch"):
        super().__init__(name)
        self.batches, self.quantity, self.unit = list(batches), quantity, unit

    def start(self, context):
        self.t0 = time.monotonic() - 100.0  # every planted stamp lies in the past unless planted ahead
        return [Channel("gpu0", self.quantity, Scope.GPU, 0.1, ClockBase.MONOTONIC, unit=self.unit)]

    def read(self):
        if not self.batches:
            return []
        return [Sample("gpu0", self.t0 + offset_s, value) for offset_s, value in self.batches.pop(0)]

    def stop(self):
        pass


def tracked(source: BatchSource) -> PowerTracker:
    """Every batch of ``source`` drained through a real recorder into a tracker."""
    tracker = PowerTracker(host="node7")
    recorder = Recorder([source], ClockModel(), None, warn=lambda m: None, listeners=[tracker])
    recorder.start()
    try:
        while source.batches:
            recorder.drain()
    finally:
        recorder.stop()
    return tracker


def metrics(tracker: PowerTracker) -> dict:
    text = PrometheusExporter(tracker, 0).render()
    return {
        (f.name, s.labels.get("reason", "")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.endswith("_total")
    }


def power_batches(seconds: int, watts: float, ahead_at: int | None = None):
    """One batch per second of readings every 100 ms; the reading of second ``ahead_at`` is
    stamped 1000 s ahead (a source whose clock jumped)."""
    batches = []
    for second in range(seconds):
        batch = [(second + i / 10, watts) for i in range(10)]
        if second == ahead_at:
            batch.append((1000.0 + 100.0 + second, watts))
        batches.append(batch)
    return batches


def test_a_reading_stamped_ahead_of_now_is_refused_not_integrated():
    tracker = tracked(BatchSource(power_batches(4, 100.0, ahead_at=1)))
    (r,) = tracker.readings()
    # 4 s of readings at 100 W: 3.9 s between the first and the last; once 100 202 J
    assert r.energy_j == pytest.approx(390.0)
    assert r.refused == {"ahead": 1} and r.samples == 41
    assert r.power_w == pytest.approx(100.0)
    got = metrics(tracker)
    assert got[("energyframe_energy_joules", "")] == pytest.approx(390.0)
    assert got[("energyframe_refused_samples", "ahead")] == 1
    assert got[("energyframe_refused_samples", "late")] == 0


def test_a_reading_older_than_the_last_one_integrated_is_refused_and_a_batch_is_sorted():
    batches = [[(0.2, 100.0), (0.0, 100.0), (0.1, 100.0)], [(0.3, 100.0), (0.15, 100.0)]]
    tracker = tracked(BatchSource(batches))
    (r,) = tracker.readings()
    assert r.energy_j == pytest.approx(30.0)  # 0.0 .. 0.3 s at 100 W, the late reading not counted twice
    assert r.refused == {"late": 1}


def counter_batches(values_j):
    """A counter read every 100 ms, one batch per ten readings."""
    readings = [(i / 10, v) for i, v in enumerate(values_j)]
    return [readings[i : i + 10] for i in range(0, len(readings), 10)]


def test_a_counter_that_goes_down_once_skips_only_that_interval():
    # 100 W for 1 s (up to 5000 J + 100 J), then the driver reloads: the counter restarts at 3 J
    # and rises at 100 W again for 3 s
    before = [5000.0 + 10.0 * i for i in range(11)]
    after = [3.0 + 10.0 * i for i in range(30)]
    tracker = tracked(BatchSource(counter_batches(before + after), Quantity.ENERGY, "J"))
    (r,) = tracker.readings()
    assert r.energy_j == pytest.approx(100.0 + 290.0)  # never stuck at the energy before the drop
    assert r.resets == 1 and r.power_w == pytest.approx(100.0)
    assert metrics(tracker)[("energyframe_counter_resets", "")] == 1


def test_a_counter_that_leaps_further_than_any_device_draws_skips_that_interval():
    # a reset read as a wraparound: +262 kJ in 100 ms is 2.6 MW
    values = [10.0 * i for i in range(11)] + [262_144.0 + 100.0 + 10.0 * i for i in range(10)]
    tracker = tracked(BatchSource(counter_batches(values), Quantity.ENERGY, "J"))
    (r,) = tracker.readings()
    assert r.energy_j == pytest.approx(100.0 + 90.0) and r.resets == 1


def test_a_source_in_milliwatts_and_millijoules_is_served_in_watts_and_joules():
    power = tracked(BatchSource(power_batches(2, 250_000.0), Quantity.POWER, "mW"))
    (r,) = power.readings()
    assert r.power_w == pytest.approx(250.0) and r.energy_j == pytest.approx(250.0 * 1.9)
    counter = tracked(BatchSource(counter_batches([1e6 * i for i in range(20)]), Quantity.ENERGY, "mJ"))
    (c,) = counter.readings()
    assert c.energy_j == pytest.approx(1000.0 * 19) and c.power_w == pytest.approx(10_000.0)


def test_the_exporter_listens_on_this_machine_only_by_default_and_says_where():
    exporter = PrometheusExporter(PowerTracker(), 0).start()
    try:
        host, port = exporter._server.server_address[:2]
        assert host == "127.0.0.1" and exporter.url == f"http://127.0.0.1:{port}/metrics"
        assert exporter.where.startswith("this machine only")
        with urllib.request.urlopen(exporter.url, timeout=5) as response:
            assert response.status == 200
    finally:
        exporter.stop()


def test_an_exporter_on_every_interface_says_so_and_never_prints_loopback():
    exporter = PrometheusExporter(PowerTracker(), 0, "0.0.0.0").start()
    try:
        assert exporter._server.server_address[0] == "0.0.0.0"
        assert exporter.url == f"http://0.0.0.0:{exporter.port}/metrics"
        assert exporter.where == "on every interface: other machines can scrape it"
    finally:
        exporter.stop()


@pytest.fixture
def energyframe_log():
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("energyframe")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_serving_says_the_address_it_listens_on(energyframe_log):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with serving(port):
        pass
    assert energyframe_log == [
        f"serving live power for Prometheus at http://127.0.0.1:{port}/metrics (this machine only "
        "(--prometheus-address 0.0.0.0 serves other machines))"
    ]


def test_an_address_without_a_port_or_an_empty_one_is_refused():
    with pytest.raises(UsageError, match=r"^--prometheus-address needs --prometheus-port"):
        with serving(None, address="0.0.0.0"):
            pass
    with pytest.raises(UsageError, match=r"^--prometheus-address is empty"):
        PrometheusExporter(PowerTracker(), 0, " ").start()
    for command in (["monitor", "--power", "replay:file=x.csv"], ["run", "--workload", "sleep:seconds=0.1"]):
        r = CliRunner().invoke(main, [*command, "--prometheus-address", "0.0.0.0"])
        assert r.exit_code == 2, r.output
        assert r.output.endswith("Error: --prometheus-address needs --prometheus-port (the port to serve on)\n")


def test_monitor_with_no_source_says_one_thing_not_measuring_time_only_first():
    import subprocess
    import sys

    code = (
        "from energyframe.kit import registry\n"
        "registry.auto_power_sources = lambda: ([], ['nvml: not available (no GPU)'])\n"
        "from energyframe.cli import main\n"
        "main(['monitor'], prog_name='energyframe')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == (
        "Error: energyframe monitor found no power source here (nvml: not available (no GPU)); "
        "name one with --power\n"
    )
