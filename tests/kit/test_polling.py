"""The polling base (energyframe.kit.polling) and its process mode (energyframe.kit.sampler): one drain
per read, dedup, error latching, the watchdog, reaping, a child that outlives its parent; and the
HTTP PDU example against a local http.server."""

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pytest

import energyframe as ef
from energyframe.core.energy import power_energy
from energyframe.errors import PowerSourceError
from energyframe.kit.polling import Dedup, Poller, PollingSource, Stream
from energyframe.plugin import Channel, ClockBase, Quantity, Sample, Scope, SourceContext
from tests.fakes import ScriptedSource, SignalSource, logged_samples, read_until, read_until_error, wait_until

ROOT = Path(__file__).resolve().parents[2]


# -- dedup ----------------------------------------------------------------------------------------


class Scripted(PollingSource):
    CHANNELS = [
        Channel("keep", Quantity.ENERGY, resolution_s=0.1),
        Channel("ticks", Quantity.ENERGY, resolution_s=0.1),
        Channel("changes", Quantity.POWER, resolution_s=0.1),
    ]

    def open(self):
        return self.CHANNELS

    def dedup(self, channel):
        return {"keep": Dedup.KEEP, "ticks": Dedup.TICKS, "changes": Dedup.CHANGES}[channel.name]


def stamp_all(source, polls, interval_s=0.01):
    """Feed ``(poll midpoint, value)`` pairs through the base's stamping, as its poll loop does."""
    out, prev = [], None
    for mid, value in polls:
        readings = {c.name: value for c in source.CHANNELS}
        out += source._stamp(readings, mid, prev, interval_s)
        prev = mid
    return {c.name: [(round(s.time_s, 3), s.value) for s in out if s.channel == c.name] for c in source.CHANNELS}


def test_dedup_stamps_changes_between_polls_holds_a_level_and_keeps_a_steady_channel_alive():
    source = Scripted(name="s")
    source._open_here()
    polls = [(1.00, 5.0), (1.04, 5.0), (1.08, 6.0), (1.12, 6.0), (1.17, 6.0), (1.21, 6.0), (1.25, 7.0)]
    polls += [(round(1.25 + 0.04 * i, 2), 7.0) for i in range(1, 9)]  # 7 W until 1.57
    by = stamp_all(source, polls)
    assert by["keep"] == [(mid, v) for mid, v in polls]
    # a counter's first value is not a tick; each change lies midway between the two polls
    assert by["ticks"] == [(1.06, 6.0), (1.23, 7.0)]
    # power: the first value and each change; 6 W stood 1.7 update periods, so the update one
    # period before the change still showed it (1.13); 7 W, unchanged, is repeated once it has
    # stood two periods, stamped one period before the poll that saw it (1.57 - 0.1)
    assert by["changes"] == [(1.0, 5.0), (1.06, 6.0), (1.13, 6.0), (1.23, 7.0), (1.47, 7.0)]


def test_a_tick_seen_across_polls_more_than_a_period_apart_is_stamped_within_a_period_of_the_later():
    # the poller was held 0.35 s (a host that froze the process): the counter ticked three or
    # four times meanwhile, and the value the later poll read is the last tick's, which came
    # within one update period (0.1 s) before it. Midway between the polls (1.175) would put
    # that value 0.1-0.2 s early; within the last period (1.30) it is at most half a period off
    source = Scripted(name="s")
    source._open_here()
    by = stamp_all(source, [(1.00, 5.0), (1.35, 9.0), (1.39, 9.0), (1.43, 10.0)])
    assert by["ticks"] == [(1.30, 9.0), (1.41, 10.0)]
    # its bracket is still counted as it was: the polls 0.35 s apart
    assert source._poll_brackets["ticks"] == pytest.approx([0.35, 0.04])


def test_the_default_dedup_follows_the_poll_rate():
    class Auto(PollingSource):
        CHANNELS = [
            Channel("counter", Quantity.ENERGY, resolution_s=0.1),
            Channel("power", Quantity.POWER, resolution_s=0.1),
            Channel("fast", Quantity.POWER, resolution_s=0.001),
        ]

        def open(self):
            return self.CHANNELS

    source = Auto(name="auto")
    source._open_here()
    polls = [(1.0, 5.0), (1.01, 5.0), (1.02, 6.0)]
    # polled every 10 ms: the 0.1-s channels are stamped at their changes, the 1-ms one kept
    by = stamp_all(source, polls, interval_s=0.01)
    assert by["counter"] == [(1.015, 6.0)]
    assert by["power"] == [(1.0, 5.0), (1.015, 6.0)]
    assert by["fast"] == [(1.0, 5.0), (1.01, 5.0), (1.02, 6.0)]
    # a stream (no poll interval) keeps every reading
    source._poll_last.clear()
    assert source._stamp({"power": 5.0}, 2.0, None, None) == [Sample("power", 2.0, 5.0)]
    assert source._stamp({"power": 5.0}, 2.01, None, None) == [Sample("power", 2.01, 5.0)]


class Sensor:
    """An instant power sensor read at ``t`` seconds: it shows ``profile`` at its last update;
    it updates every ``period_s`` from a phase of ``first_s``. Closed form: a test can poll it
    at any simulated time."""

    def __init__(self, profile, period_s, first_s, until_s):
        self.updates = np.arange(first_s, until_s, period_s)
        self.values = profile(self.updates)

    def at(self, t):
        return float(self.values[np.searchsorted(self.updates, t, side="right") - 1])


def window_errors(samples, sensor, rng, windows=200):
    """Relative errors of windows of 0.5-3 s against the line through the sensor's own updates
    (what a perfect reader of this sensor can know)."""
    t = np.array([s.time_s for s in samples])
    v = np.array([s.value for s in samples])
    errors = []
    for start in rng.uniform(2.0, 55.0, windows):
        end = start + rng.uniform(0.5, 3.0)
        truth = power_energy(sensor.updates, sensor.values, start, end).energy_j
        errors.append(abs(power_energy(t, v, start, end, 0.1).energy_j / truth - 1))
    return np.array(errors)


@pytest.mark.parametrize(
    "profile",
    [lambda t: 300 + 200 * np.sin(2 * np.pi * t / 1.3), lambda t: np.where((t + 0.37) % 2.0 < 1.0, 100.0, 400.0)],
    ids=["sine", "square"],
)
def test_default_sampling_of_a_sensor_5_percent_slower_than_declared_is_unbiased(profile):
    # a 0.1-s sensor that updates every 0.105 s, polled every ~10 ms with a simulated clock. The
    # old default (every poll a sample) lags by half an update: 1.9 % mean error on the sine, 3 %
    # on the square; repeating an unchanged value every period puts a step before each late
    # update (1.0 % mean, 6.8 % max on the sine); stamping changes only spreads each step of the
    # square over its whole flat stretch (3.9 % mean). The base must do better than all of them.
    class Declared(PollingSource):
        CHANNELS = [Channel("p", Quantity.POWER, Scope.GPU, 0.1)]

        def open(self):
            return self.CHANNELS

    rng = np.random.default_rng(7)
    sensor = Sensor(profile, 0.105, rng.uniform(0, 0.1), 61.0)
    source = Declared(name="declared")
    source._open_here()
    samples, prev, t = [], None, 0.05
    while t < 60.0:
        samples += source._stamp({"p": sensor.at(t)}, t, prev, 0.01)
        prev, t = t, t + 0.01 * rng.uniform(0.9, 1.1)
    errors = window_errors(samples, sensor, rng)
    assert errors.mean() < 0.005 and errors.max() < 0.03, (errors.mean(), errors.max())
    gaps = np.diff([s.time_s for s in samples])
    assert gaps.max() < 3 * 0.1  # never a gap for the run to flag


def test_readings_for_undeclared_channels_fail_the_source():
    class Wrong(Scripted):
        def poll(self):
            return {"gpu7": 1.0}

    source = Wrong(name="wrong")
    source.start(SourceContext())
    samples, error, _ = read_until_error(source)
    source.stop()
    assert samples == []
    assert (
        str(error)
        == "power source 'wrong' produced a sample for channel 'gpu7', which open() did not declare"
    )


# -- one drain per read, latching, stop ---------------------------------------------------------


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_read_hands_over_what_accumulated_and_then_nothing(mode, tmp_path):
    source = SignalSource(name="sig", period_s=0.005, mode=mode)
    source.start(SourceContext(raw_dir=tmp_path / "raw"))
    log = tmp_path / "raw" / "sampler.log"

    def taken():  # samples taken so far: counted in this process, or logged by the child
        return 3 * source.polls if mode == "thread" else sum(logged_samples(log).values())

    wait_until(lambda: taken() >= 30, "ten polls")
    source.stop()
    first = source.read()
    assert len(first) == taken() and {s.channel for s in first} == {"sig", "sig.power", "sig.clock"}
    assert source.read() == []
    assert source.read() == []


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_failure_is_raised_once_after_the_samples_before_it(mode):
    source = SignalSource(name="sig", watts=100.0, period_s=0.005, fail_after_s=0.3, mode=mode)
    source.start(SourceContext())
    samples, error, _ = read_until_error(source)
    assert str(error) == "meter unplugged (test)"
    counter = [s.value for s in samples if s.channel == "sig"]
    assert len(counter) > 10
    assert max(counter) <= 100.0 * 0.3  # every sample was taken before the failing poll
    assert counter == sorted(counter)
    assert source.read() == []  # raised once: the run already knows
    source.stop()
    assert source.read() == []


def test_thread_mode_reports_what_its_loops_cost():
    source = SignalSource(name="sig", period_s=0.005)
    source.start(SourceContext())
    samples = read_until(source, lambda got: len(got) >= 30)
    source.stop()
    samples += source.read()
    cost = source.info()["acquisition"]
    loop = cost["loops"]["sig"]
    assert loop["polls"] == sum(s.channel == "sig" for s in samples)  # a sample a poll
    # in thread mode the share is the loops' threads' CPU time, not the measured process's
    assert cost["cpu_s"] == pytest.approx(loop["cpu_s"], abs=1e-5) and cost["wall_s"] > 0
    assert "start_cpu_s" not in cost and source.info() == source.info()  # stopped: it stays put


def test_process_mode_runs_in_a_child_that_is_reaped_on_stop(tmp_path):
    source = SignalSource(name="sig", period_s=0.005, mode="process")
    source.start(SourceContext(raw_dir=tmp_path / "raw"))
    proc = source.sampler_process
    assert proc.pid != os.getpid() and proc.poll() is None
    samples = read_until(source, len)
    source.stop()
    samples += source.read()
    assert proc.returncode == 0
    log = (tmp_path / "raw" / "sampler.log").read_text().splitlines()
    assert log[0].startswith("C,") and log[-1].startswith("Q,")
    info = dict(source.info())
    cost = info.pop("acquisition")
    assert info == {"mode": "process"}
    # what sampling cost the child, for run.json: its CPU time over its sampling time, and each
    # loop's calls (the polls its samples came from)
    assert cost["wall_s"] > 0 and cost["cpu_share"] == pytest.approx(cost["cpu_s"] / cost["wall_s"], abs=1e-4)
    assert cost["start_cpu_s"] > 0
    assert cost["loops"]["sig"]["polls"] == sum(s.channel == "sig" for s in samples)  # a sample a poll


def test_process_mode_start_errors_come_back_as_they_are():
    with pytest.raises(PowerSourceError) as e:
        SignalSource(name="sig", fail_on_start=True, mode="process").start(SourceContext())
    assert str(e.value) == "no such meter (test)"


def test_process_mode_needs_a_class_importable_by_name():
    class Local(Scripted):
        OPTIONS = SignalSource.OPTIONS

    with pytest.raises(PowerSourceError) as e:
        Local(name="local", mode="process").start(SourceContext())
    assert str(e.value) == (
        "power source 'local' cannot run in a separate process: its class "
        "test_process_mode_needs_a_class_importable_by_name.<locals>.Local is not importable by name "
        "(define it in a module, or use mode=thread)"
    )


def test_the_child_exits_when_its_parent_dies(tmp_path):
    script = textwrap.dedent(
        """
        import os, sys, time
        sys.path.insert(0, sys.argv[1])
        from energyframe.plugin import SourceContext
        from tests.fakes import SignalSource, read_until_error
        source = SignalSource(name="sig", mode="process")
        source.start(SourceContext())
        print(source.sampler_process.pid, flush=True)
        os._exit(0)  # dies without stopping its source
        """
    )
    parent = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert parent.returncode == 0, parent.stderr
    child = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited; only its parent's wait is missing


# -- the watchdog and streams -------------------------------------------------------------------


class Hanging(Scripted):
    """Polls once, then hangs in the driver."""

    def tasks(self):
        from energyframe.kit.polling import Poller

        return [Poller(self._poll, 0.01, name="hanging", silent_after_s=0.3, on_silence=self._silence)]

    def _poll(self):
        if getattr(self, "_polled", False):
            self._poll_stop.wait(30)
        self._polled = True
        return {"keep": 1.0}

    def _silence(self, quiet_s):
        return f"the driver has not answered for {quiet_s:.0f}+ s"


def test_a_loop_that_stops_coming_round_fails_the_source():
    source = Hanging(name="h")
    source.start(SourceContext())
    samples, error, _ = read_until_error(source)
    source.stop()
    assert [s.value for s in samples] == [1.0]
    assert str(error) == "the driver has not answered for 0+ s"


class Lines(PollingSource):
    """A stream over a child's stdout: one sample per line, the child started through spawn."""

    def open(self):
        code = "import sys, time\nfor i in range(30):\n print(i, flush=True); time.sleep(0.01)\nsys.exit(3)"
        self.proc = self.spawn([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        return [Channel("n", Quantity.STATE, Scope.OTHER, 0.01, ClockBase.MONOTONIC)]

    def tasks(self):
        return [Stream(self._lines, name="lines")]

    def _lines(self):
        for line in self.proc.stdout:
            yield [Sample("n", time.monotonic(), float(line))]
        if not self.stopping:
            raise PowerSourceError(f"the child exited with code {self.proc.wait()}")


def test_a_stream_ending_fails_the_source_after_its_samples():
    source = Lines(name="lines")
    source.start(SourceContext())
    samples, error, _ = read_until_error(source)
    source.stop()
    assert [s.value for s in samples] == [float(i) for i in range(30)]
    assert str(error) == "the child exited with code 3"


def test_stop_reaps_what_the_source_spawned():
    source = Lines(name="lines")
    source.start(SourceContext())
    source.stop()
    assert source.proc.returncode is not None
    assert source.read() is not None  # readable after stop, and no error: the end was asked for


class Command(PollingSource):
    """Runs a shell script on every poll (a vendor's tool that prints the power) and reads the
    last number it printed."""

    def __init__(self, script, timeout_s=30.0):
        super().__init__(name="cmd")
        self.script, self.timeout_s = script, timeout_s

    def open(self):
        return [Channel("cmd", Quantity.POWER, Scope.OTHER, 0.1)]

    def poll(self):
        return {"cmd": float(self.run_command(["sh", "-c", self.script], self.timeout_s).split()[-1])}


def test_a_command_that_does_not_end_is_killed_with_its_children(tmp_path):
    # the script's own child keeps its output open: killing the shell alone would leave the poll
    # waiting for the end of that output as long as the child lives
    pid_file = tmp_path / "pid"
    source = Command(f"sleep 60 & echo $! > {pid_file}; wait", timeout_s=0.5)
    with pytest.raises(PowerSourceError) as e:
        source.poll()
    assert str(e.value) == "power source 'cmd': sh did not finish within 0.5 s (killed)"
    wait_until(lambda: not alive(int(pid_file.read_text())), "the script's child to be killed")
    assert Command("echo 41.5").poll() == {"cmd": 41.5}
    with pytest.raises(PowerSourceError) as e:
        Command("echo no meter >&2; exit 3").poll()
    assert str(e.value) == "power source 'cmd': sh exited with code 3: no meter"


def test_stop_kills_the_command_a_poll_waits_for_and_a_second_stop_does_nothing(tmp_path, monkeypatch):
    import energyframe.kit.polling as polling

    # were the command not killed, the loop would be waited for until the command's timeout
    # and this test would fail: the thread would still run after stop()
    monkeypatch.setattr(polling, "JOIN_TIMEOUT_S", 120.0)
    pid_file = tmp_path / "pid"
    source = Command(f"sleep 60 & echo $! > {pid_file}; wait", timeout_s=120.0)
    closed = []
    source.close = lambda: closed.append(True)
    source.start(SourceContext())
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), "the command to start")
    (thread,) = source._poll_threads
    source.stop()
    assert not thread.is_alive()
    assert not alive(int(pid_file.read_text()))
    assert source.read() == []  # a poll cut short by the stop is no failure
    joins = []
    thread.join = lambda timeout=None: joins.append(timeout)
    source.stop()
    assert joins == [] and closed == [True]


def test_a_second_stop_does_not_wait_again_for_a_loop_stuck_in_a_call(monkeypatch):
    import energyframe.kit.polling as polling

    monkeypatch.setattr(polling, "JOIN_TIMEOUT_S", 0.05)
    release = threading.Event()

    class Stuck(Scripted):
        def poll(self):
            release.wait(60)  # a driver call that does not return
            return {"keep": 1.0}

    source = Stuck(name="stuck")
    source.start(SourceContext())
    (thread,) = source._poll_threads
    source.stop()  # waits JOIN_TIMEOUT_S for the loop, in vain
    assert thread.is_alive()
    joins = []
    thread.join = lambda timeout=None: joins.append(timeout)
    source.stop()
    assert joins == []  # docs/polling.md: a second stop() does nothing
    release.set()


def test_a_source_that_floods_fails_instead_of_eating_memory():
    class Flood(Scripted):
        MAX_PENDING = 1000

        def poll(self):
            return {"keep": 1.0}

        def poll_interval_s(self):
            return 0.0

    source = Flood(name="flood")
    source.start(SourceContext())
    samples, error, _ = read_until_error(source)
    source.stop()
    assert len(samples) > 1000
    assert str(error) == (
        "power source 'flood' holds more than 1000 samples nobody read: it produces far more than its "
        "channels' update periods allow"
    )


# -- the HTTP PDU example -----------------------------------------------------------------------


def load_example():
    path = ROOT / "examples" / "http_pdu_source.py"
    spec = importlib.util.spec_from_file_location("http_pdu_source", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["http_pdu_source"] = module
    spec.loader.exec_module(module)
    return module, path


class PDU:
    """A PDU on 127.0.0.1 serving ``{"watts": W}``; ``body`` may be set to break it."""

    def __init__(self, watts):
        self.watts = watts
        self.body = None
        self.served = 0  # requests answered
        pdu = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = pdu.body if pdu.body is not None else json.dumps({"watts": pdu.watts}).encode()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)
                pdu.served += 1

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/outlet/3"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def pdu():
    server = PDU(231.5)
    yield server
    server.close()


def test_the_http_pdu_example_is_under_40_lines():
    _, path = load_example()
    text = path.read_text()
    code = text[text.index("import json") : text.index('if __name__ == "__main__":')]
    assert len([line for line in code.splitlines() if line.strip()]) <= 40


def test_the_http_pdu_example_measures_what_the_pdu_serves(pdu):
    module, _ = load_example()
    source = module.HTTPPDUPowerSource(name="pdu", url=pdu.url, interval_s=0.05, averaging_s=0.05)
    channels = source.start(SourceContext())
    wait_until(lambda: pdu.served >= 6, "six readings")
    pdu.watts = 300.0
    served = pdu.served
    # the third reply after the change was asked for once the source took in the second
    wait_until(lambda: pdu.served >= served + 3, "three readings after the change")
    source.stop()
    samples = source.read()
    assert [c.name for c in channels] == ["pdu"] and channels[0].scope == Scope.SYSTEM_WALL
    values = [s.value for s in samples]
    assert len(values) > 5 and values[0] == 231.5 and values[-1] == 300.0
    assert [s.time_s for s in samples] == sorted(s.time_s for s in samples)


def test_the_http_pdu_example_fails_clearly(pdu):
    module, _ = load_example()
    with pytest.raises(PowerSourceError, match="cannot read the PDU at http://127.0.0.1:1/x: URLError"):
        module.HTTPPDUPowerSource(name="pdu", url="http://127.0.0.1:1/x").start(SourceContext())
    source = module.HTTPPDUPowerSource(name="pdu", url=pdu.url, interval_s=0.05)
    source.start(SourceContext())
    wait_until(lambda: pdu.served >= 2, "two readings")
    pdu.body = b"<html>maintenance</html>"
    samples, error, _ = read_until_error(source)
    source.stop()
    assert samples and all(s.value == 231.5 for s in samples)
    assert str(error).startswith(f"cannot read the PDU at {pdu.url}: JSONDecodeError")


def test_the_http_pdu_example_in_a_run(pdu):
    module, _ = load_example()
    source = module.HTTPPDUPowerSource(name="pdu", url=pdu.url, interval_s=0.05, averaging_s=0.05)
    with ef.measure(power=[source], sync=None) as m:
        with m.window("w"):
            time.sleep(0.5)
    row = m.result.windows.iloc[0]
    assert row["channel"] == "pdu" and row["mean_power_w"] == pytest.approx(231.5)
    assert inspect.getsource(module.HTTPPDUPowerSource).count("\n") < 40


def test_a_poller_says_where_in_its_call_it_reads():
    assert Poller(lambda: {}, 0.01).reads_at == 0.5
    assert Poller(lambda: {}, 0.01, reads_at=0.0).reads_at == 0.0
    with pytest.raises(ValueError, match="reads_at"):
        Poller(lambda: {}, 0.01, reads_at=1.5)


# -- how precisely a polled counter's ticks are stamped -------------------------------------------


class Ticking(PollingSource):
    """A counter that ticks every 50 ms, polled every 2 ms: its ticks are stamped between polls."""

    def open(self):
        self._t0 = time.monotonic()
        return [Channel("ticks", Quantity.ENERGY, Scope.GPU, 0.05)]

    def poll_interval_s(self):
        return 0.002

    def poll(self):
        return {"ticks": float(int((time.monotonic() - self._t0) / 0.05))}


def test_a_polled_counter_says_its_stamps_lie_within_half_its_median_bracket():
    source = Ticking(name="t")
    source.start(SourceContext())
    read_until(source, lambda got: len(got) >= 4)
    source.stop()
    brackets = source.info()["acquisition"]["tick_brackets_s"]["ticks"]
    assert source.stamp_half_widths_s() == {"ticks": brackets["median"] / 2}
    # a source whose samples carry their own times stamps no tick
    signal = SignalSource(name="sig", period_s=0.005)
    signal.start(SourceContext())
    read_until(signal, len)
    signal.stop()
    assert signal.stamp_half_widths_s() == {}


class Stamping(ScriptedSource):
    """Any source may say how precisely it stamped a counter's ticks."""

    def __init__(self, half_width_s):
        super().__init__(lambda t: 100.0 * t, "cpu0", Quantity.ENERGY, Scope.CPU)
        self.half_width_s = half_width_s

    def stamp_half_widths_s(self):
        return {"cpu0": self.half_width_s, "not-mine": 1.0}


@pytest.mark.parametrize("half_width_s", [0.006, None])
def test_the_run_sets_each_counters_stamp_half_width_from_its_source(tmp_path, half_width_s):
    source = Stamping(half_width_s) if half_width_s else ScriptedSource(lambda t: 100.0 * t, "cpu0", Quantity.ENERGY, Scope.CPU)
    with ef.measure(power=[source], sync=None, out=tmp_path / "run") as m:
        with m.window("w"):
            time.sleep(0.25)
    channel = ef.load_run(tmp_path / "run").run_meta.channels["cpu0"]
    # a counter stamped within ±6 ms says so in run.json; a source that says nothing leaves 0
    assert channel.stamp_s == (half_width_s or 0.0)
    assert "not-mine" not in ef.load_run(tmp_path / "run").run_meta.channels
