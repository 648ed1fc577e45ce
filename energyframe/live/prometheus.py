"""Live power in the Prometheus text format, served over HTTP for a Prometheus server to scrape.

    energyframe monitor --prometheus-port 9464
    energyframe run --prometheus-port 9464 --power nvml -- python train.py
    energyframe monitor --prometheus-port 9464 --prometheus-address 0.0.0.0   # other machines too

It listens on ``127.0.0.1`` (this machine only) unless told another address: live power says
what a machine is doing, which is not everyone's to read.

Metrics (every one labelled ``channel``, ``source``, ``scope``, ``primary``, ``gpu``, ``rank``,
``host``; only power and energy channels):

| metric | type | what |
|---|---|---|
| ``energyframe_power_watts`` | gauge | mean power over the channel's readings of the last second |
| ``energyframe_energy_joules_total`` | counter | energy since the exporter first saw the channel |
| ``energyframe_samples_total`` | counter | readings received |
| ``energyframe_refused_samples_total`` | counter | readings refused, by ``reason`` (``ahead``, ``late``) |
| ``energyframe_counter_resets_total`` | counter | counter intervals left out (it went down or leapt) |
| ``energyframe_last_sample_timestamp_seconds`` | gauge | Unix time of the latest reading |
| ``energyframe_window_energy_joules`` | gauge | the last closed window's energy, by ``phase`` too |
| ``energyframe_window_duration_seconds`` | gauge | that window's length, by ``phase`` too |

Sum power over ``primary="true"`` channels only: a GPU's secondary channels (its instant and
1-s average power, its 20-ms samples) measure the same board again. The values are built at
scrape time from a ``PowerTracker`` (``prometheus_client``'s custom-collector pattern): nothing
is computed per sample beyond the tracker's running sums.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..errors import UsageError
from .listener import LiveListener
from .tracker import AHEAD, LATE, ChannelReading, PowerTracker

log = logging.getLogger("energyframe")

LABELS = ("channel", "source", "scope", "primary", "gpu", "rank", "host")
#: the conventional port of an exporter of this kind is one an operator picks; 9464 is free in
#: Prometheus's default port allocations list for "energy" exporters
DEFAULT_PORT = 9464
#: this machine only; ``0.0.0.0`` (or ``::``) serves every interface
DEFAULT_ADDRESS = "127.0.0.1"
#: addresses that mean "every interface"
_EVERY_INTERFACE = ("0.0.0.0", "::")


class _Collector:
    """Builds the metric families from the tracker at every scrape."""

    def __init__(self, tracker: PowerTracker) -> None:
        self.tracker = tracker

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        t = self.tracker
        power = GaugeMetricFamily(
            "energyframe_power_watts", "Mean power over the last second of readings.", labels=LABELS
        )
        energy = CounterMetricFamily(
            "energyframe_energy_joules", "Energy since the exporter first saw the channel.", labels=LABELS
        )
        samples = CounterMetricFamily("energyframe_samples", "Readings received.", labels=LABELS)
        refused = CounterMetricFamily(
            "energyframe_refused_samples",
            "Readings refused: stamped ahead of now, or older than the last one integrated.",
            labels=(*LABELS, "reason"),
        )
        resets = CounterMetricFamily(
            "energyframe_counter_resets",
            "Energy-counter intervals left out: the counter went down, or rose faster than any device draws.",
            labels=LABELS,
        )
        last = GaugeMetricFamily(
            "energyframe_last_sample_timestamp_seconds", "Unix time of the latest reading.", labels=LABELS
        )
        wall_minus_mono = time.time() - t.now()
        for r in t.readings():
            labels = self._labels(r)
            if math.isfinite(r.power_w):
                power.add_metric(labels, r.power_w)
            energy.add_metric(labels, r.energy_j)
            samples.add_metric(labels, r.samples)
            for reason in (AHEAD, LATE):
                refused.add_metric([*labels, reason], r.refused.get(reason, 0))
            resets.add_metric(labels, r.resets)
            if math.isfinite(r.last_time_s):
                last.add_metric(labels, r.last_time_s + wall_minus_mono)
        yield from (power, energy, samples, refused, resets, last)
        yield from self._windows()

    def _labels(self, r: ChannelReading) -> list[str]:
        return [
            r.channel,
            r.source,
            r.scope,
            "true" if r.primary else "false",
            r.gpu,
            str(self.tracker.rank),
            self.tracker.host,
        ]

    def _windows(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        from .tracker import gpu_label

        labels = ("phase", *LABELS)
        energy = GaugeMetricFamily(
            "energyframe_window_energy_joules", "Energy of the last closed window.", labels=labels
        )
        duration = GaugeMetricFamily(
            "energyframe_window_duration_seconds", "Length of the last closed window.", labels=labels
        )
        t = self.tracker
        for w in t.windows():
            channel = t.channel_of(w.channel)
            source, scope, primary, gpu = "", "", "true", ""
            if channel is not None:
                reading = next((r for r in t.readings() if r.channel == w.channel), None)
                source = reading.source if reading else ""
                scope, primary, gpu = (
                    channel.scope.value,
                    "true" if channel.primary else "false",
                    gpu_label(channel),
                )
            values = [w.phase, w.channel, source, scope, primary, gpu, str(t.rank), t.host]
            energy.add_metric(values, w.energy_j)
            duration.add_metric(values, w.duration_s)
        yield from (energy, duration)


class PrometheusExporter:
    """Serves a tracker's figures at ``http://ADDRESS:PORT/metrics`` from a daemon thread.

    Args:
        tracker: what to serve.
        port: the TCP port (0: any free one; ``port`` then says which).
        address: the interface to listen on (``127.0.0.1``, the default: this machine only;
            ``0.0.0.0`` or ``::``: every interface).
    """

    def __init__(self, tracker: PowerTracker, port: int = DEFAULT_PORT, address: str = DEFAULT_ADDRESS) -> None:
        from prometheus_client import CollectorRegistry

        self.tracker = tracker
        self.port = port
        self.address = address
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(tracker))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def render(self) -> str:
        """The current metrics in the text format, as a scrape gets them."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def start(self) -> PrometheusExporter:
        """Listen; raises ``UsageError`` naming the port when it cannot (taken, not allowed)."""
        from prometheus_client import start_http_server

        if not self.address.strip():
            raise UsageError(
                "--prometheus-address is empty; give 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
            )
        try:
            self._server, self._thread = start_http_server(
                self.port, addr=self.address, registry=self.registry
            )
        except OSError as e:
            raise UsageError(
                f"cannot serve Prometheus metrics on {self.address}:{self.port}: {e.strerror or e}"
            ) from e
        self.port = int(self._server.server_port)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def url(self) -> str:
        """Where it listens, as it listens: ``http://0.0.0.0:9464/metrics`` when on every
        interface (``where`` says so), never a loopback address it does not stand for."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    @property
    def where(self) -> str:
        """Who can scrape it, in words."""
        if self.address in _EVERY_INTERFACE:
            return "on every interface: other machines can scrape it"
        if self.address in ("127.0.0.1", "::1", "localhost"):
            return "this machine only (--prometheus-address 0.0.0.0 serves other machines)"
        return f"on {self.address} only"


@contextlib.contextmanager
def serving(
    port: int | None, rank: int = 0, local_rank: int = 0, address: str | None = None
) -> Iterator[list[LiveListener]]:
    """The listeners a run is given: none without a port; else a tracker, served on ``address``
    (default ``DEFAULT_ADDRESS``, this machine only) at ``port + local_rank`` (each rank of a
    machine its own port) until the block ends.

    Raises:
        UsageError: the port is taken, not allowed, or past 65535 once the rank is added; an
            address without a port, or one that cannot be listened on.
    """
    if port is None:
        if address is not None:
            raise UsageError("--prometheus-address needs --prometheus-port (the port to serve on)")
        yield []
        return
    own = port + local_rank if port else 0
    if own > 65535:
        raise UsageError(f"--prometheus-port {port} + local rank {local_rank} is past 65535")
    tracker = PowerTracker(rank=rank)
    exporter = PrometheusExporter(tracker, own, DEFAULT_ADDRESS if address is None else address).start()
    log.info("serving live power for Prometheus at %s (%s)", exporter.url, exporter.where)
    try:
        yield [tracker]
    finally:
        exporter.stop()
