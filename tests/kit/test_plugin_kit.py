"""The plugin kit (energyframe.testing) catches the mistakes that bite: each test plants one in a
small plugin and shows the kit failing with the name of the rule broken, in one line. A correct
plugin of each kind passes, and so do the documentation's examples (tests/test_docs.py)."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

from energyframe import plugin
from energyframe.plugin import (
    Channel,
    ClockBase,
    Dedup,
    Option,
    Phase,
    PollingSource,
    PowerSource,
    PowerSourceError,
    Quantity,
    Reporter,
    Sample,
    Scope,
    Timing,
    Workload,
)
from energyframe.testing import (
    RULES,
    ContractError,
    check_power_source,
    check_reporter,
    check_workload,
    sample_result,
    sample_results,
)

RUN_S = 1.2


class Device:
    """A fake sensor on the monotonic clock: power that changes all the time, shown as it was at
    the sensor's last update (every ``update_s``); its counter holds the exact energy up to then.
    ``frozen_after_s``: the counter stops there (a stuck ``energy_uj``)."""

    def __init__(self, update_s: float = 0.05, frozen_after_s: float | None = None, watts: float | None = None):
        self.t0 = time.monotonic()
        self.update_s, self.frozen_after_s, self.watts = update_s, frozen_after_s, watts

    def _last_update(self) -> float:
        t = time.monotonic() - self.t0
        if self.frozen_after_s is not None:
            t = min(t, self.frozen_after_s)
        return math.floor(t / self.update_s) * self.update_s

    def power_w(self) -> float:
        if self.watts is not None:
            return self.watts
        return 200.0 + 100.0 * math.sin(2 * math.pi * self._last_update() / 0.7)

    def energy_j(self) -> float:
        t = self._last_update()
        if self.watts is not None:
            return self.watts * t
        return 200.0 * t - 100.0 * 0.7 / (2 * math.pi) * (math.cos(2 * math.pi * t / 0.7) - 1.0)


class Meter(PollingSource):
    """A correct instant-power sensor on the polling base: 50-ms updates, polled every 5 ms."""

    DESCRIPTION = "a fake power sensor"
    OPTIONS = (Option("interval_s", "float", 0.005, "pause between polls. Units: s"),)
    UPDATE_S = 0.05
    RESOLUTION_S = 0.05
    QUANTITY = Quantity.POWER

    def open(self):
        self.device = self.make_device()
        return [Channel("meter", self.QUANTITY, Scope.GPU, self.RESOLUTION_S, ClockBase.MONOTONIC, **self.extra())]

    def make_device(self):
        return Device(self.UPDATE_S)

    def extra(self):
        return {}

    def poll(self):
        reading = self.device.power_w() if self.QUANTITY == Quantity.POWER else self.device.energy_j()
        return {"meter": reading}


class Counter(Meter):
    """A correct energy counter: 50-ms ticks, polled every 5 ms (the base stamps the ticks)."""

    QUANTITY = Quantity.ENERGY


def broken_rule(check, *args, **kwargs) -> str:
    """The rule the check names, after asserting its message is one line that starts with it."""
    with pytest.raises(ContractError) as e:
        check(*args, **kwargs)
    message = str(e.value)
    assert e.value.rule in RULES
    assert message.startswith(f"rule {e.value.rule}: ") and "\n" not in message
    return e.value.rule


# -- correct plugins pass ----------------------------------------------------------------------


@pytest.mark.parametrize("cls", [Meter, Counter])
def test_correct_sources_pass(cls):
    samples = check_power_source(cls, run_s=RUN_S)
    assert len(samples["meter"]) >= 15  # about one per 50-ms update, not one per 5-ms poll
    assert len(samples["meter"]) < 100


# -- power sources: what start() declares ------------------------------------------------------


def test_zero_resolution():
    class ZeroResolution(Meter):
        RESOLUTION_S = 0.0

    assert broken_rule(check_power_source, ZeroResolution, run_s=RUN_S) == "resolution"


@pytest.mark.parametrize("declared_s", [0.5, 0.01])
def test_a_resolution_that_is_not_the_update_period(declared_s):
    class WrongResolution(Counter):
        RESOLUTION_S = declared_s
        OPTIONS = (Option("interval_s", "float", 0.002, "pause between polls. Units: s"),)

    assert broken_rule(check_power_source, WrongResolution, run_s=RUN_S) == "resolution"


def test_period_end_without_its_averaging_period():
    class NoAveraging(Meter):
        def extra(self):
            return {"timing": Timing.PERIOD_END, "averaging_s": 0.0}

    assert broken_rule(check_power_source, NoAveraging, run_s=RUN_S) == "averaging"


def test_polling_at_the_sensors_own_update_rate_aliases_its_ticks():
    class Aliasing(Counter):
        OPTIONS = (Option("interval_s", "float", 0.05, "pause between polls. Units: s"),)

    assert broken_rule(check_power_source, Aliasing, run_s=RUN_S) == "poll-rate"


def test_start_raising_file_not_found():
    class MissingFile(Meter):
        def open(self):
            Path("/no/such/hwmon/power1_input").read_text()

    assert broken_rule(check_power_source, MissingFile, run_s=RUN_S) == "start-errors"


def test_start_raising_power_source_error_is_the_sources_own_documented_error():
    class NoDevice(Meter):
        def open(self):
            raise PowerSourceError("no hwmon device here (load the driver)")

    with pytest.raises(PowerSourceError, match="no hwmon device here"):
        check_power_source(NoDevice, run_s=RUN_S)


def test_an_option_called_name():
    class NamedOption(Meter):  # a constructor that takes its own name by keyword: the two collide
        OPTIONS = (Option("name", "str", "x", "a sensor name"),)

        def __init__(self, name=None, **options):
            super().__init__(name, **options)

    assert broken_rule(check_power_source, NamedOption, run_s=RUN_S) == "option-name"


def test_an_option_called_name_beside_a_positional_name_keeps_the_contract():
    class NamedSensor(Meter):  # as docs/writing-plugins.md allows (torchvision:name=convnext_tiny)
        OPTIONS = (*Meter.OPTIONS, Option("name", "str", "x", "a sensor name"))

    samples = check_power_source(NamedSensor, {"name": "left"}, run_s=RUN_S)
    assert samples["meter"]
    sensor = NamedSensor("namedsensor", name="left")  # as the registry builds it
    assert sensor.name == "namedsensor" and sensor.options["name"] == "left"


# -- power sources: what read() hands over -------------------------------------------------------


@pytest.mark.parametrize("declared,stamp", [(ClockBase.MONOTONIC, time.time), (ClockBase.WALL, time.monotonic)])
def test_the_wrong_clock_base(declared, stamp):
    class WrongClock(Meter):
        def open(self):
            self.device = Device(self.UPDATE_S)
            return [Channel("meter", Quantity.POWER, Scope.GPU, 0.05, declared)]

        def poll(self):
            return [Sample("meter", stamp(), self.device.power_w())]

    assert broken_rule(check_power_source, WrongClock, run_s=RUN_S) == "clock-base"


@pytest.mark.parametrize("cls", [Meter, Counter])
def test_values_a_million_times_too_large(cls):
    class MicroUnits(cls):
        def poll(self):
            return {"meter": super().poll()["meter"] * 1e6}  # µW or µJ given as W or J

    assert broken_rule(check_power_source, MicroUnits, run_s=RUN_S) == "units"


@pytest.mark.parametrize("blocks_s", [1.5, 12.0])
def test_a_read_that_blocks(blocks_s):
    release, returned = threading.Event(), threading.Event()

    class Blocking(Meter):
        def read(self):
            release.wait(blocks_s)  # waits for the device instead of handing over the buffer
            returned.set()
            return super().read()

    assert broken_rule(check_power_source, Blocking, run_s=RUN_S) == "read-budget"
    if blocks_s > RUN_S + plugin.READ_BUDGET_S:
        assert not returned.is_set()  # the kit did not wait for the blocked read to return
    release.set()


def test_repeating_unchanged_values_once_per_period_on_a_late_sensor():
    # the old Dedup.CHANGES: an unchanged value repeated once per resolution_s; on a sensor that
    # updates 5 % slower than declared, the repeat lands just before each update. The planted
    # source places that repeat by the sensor's own update times, not by when its poll thread
    # happens to run, so a loaded machine cannot move it past the update.
    class RepeatsEveryPeriod(Meter):
        UPDATE_S = 0.0525

        def poll(self):
            value = self.device.power_w()
            updated = self.device.t0 + self.device._last_update()
            last = getattr(self, "last", None)
            self.last = (value, updated)
            if last is None:
                return [Sample("meter", updated, value)]
            if value == last[0]:
                return []
            repeat_at = max(last[1], updated - (self.UPDATE_S - self.RESOLUTION_S))  # a period after the last change
            return [Sample("meter", repeat_at, last[0]), Sample("meter", updated, value)]

    assert broken_rule(check_power_source, RepeatsEveryPeriod, run_s=RUN_S) == "repeats"


def test_a_stalled_counter_repeated_as_fresh():
    class StallsButRepeats(Counter):
        def make_device(self):
            return Device(self.UPDATE_S, frozen_after_s=0.4)

        def dedup(self, channel):
            return Dedup.KEEP  # every poll a sample, frozen or not

    assert broken_rule(check_power_source, StallsButRepeats, run_s=RUN_S) == "stalled-counter"


def test_a_constant_power_repeated_too_seldom():
    class OnlyChanges(Meter):
        def make_device(self):
            return Device(self.UPDATE_S, watts=250.0)

        def poll(self):  # changes only: a steady load goes silent
            value = self.device.power_w()
            if getattr(self, "last", None) == value:
                return []
            self.last = value
            return [Sample("meter", time.monotonic(), value)]

    assert broken_rule(check_power_source, OnlyChanges, run_s=RUN_S) == "keep-alive"


def test_a_stop_that_is_not_idempotent():
    class StopsOnce(Meter):
        def stop(self):
            super().stop()
            del self.device  # releases the device: a second stop() raises AttributeError

    assert broken_rule(check_power_source, StopsOnce, run_s=RUN_S) == "stop"


def test_a_source_without_the_polling_base_that_raises_other_errors():
    class Raw(PowerSource):
        DESCRIPTION = "a hand-written source"

        def start(self, context):
            return [Channel("raw", Quantity.POWER, Scope.GPU, 0.05)]

        def read(self):
            raise KeyError("buffer")

        def stop(self):
            pass

    assert broken_rule(check_power_source, Raw, run_s=RUN_S) == "read-errors"


# -- workloads ---------------------------------------------------------------------------------


def _step():
    time.sleep(0.001)


def test_a_correct_workload_passes():
    class Two(Workload):
        DESCRIPTION = "two phases"

        def phases(self):
            return [Phase("a", _step), Phase("b", _step)]

    assert set(check_workload(Two).windows["phase"]) == {"a", "b"}


def test_duplicate_phase_names():
    class Twice(Workload):
        DESCRIPTION = "one name for two phases"

        def phases(self):
            return [Phase("step", _step), Phase("step", _step, work={"items": 2})]

    assert broken_rule(check_workload, Twice) == "phase-names"


# -- reporters ---------------------------------------------------------------------------------


class Lines(Reporter):
    """A correct reporter: a line per phase and channel into RUN_DIR/lines.txt (or nowhere)."""

    DESCRIPTION = "lines"

    def report(self, result, run_dir):
        lines = [f"{s.phase} {s.channel or '-'} {s.energy_per_iter_j.median!r} ({s.energy_per_iter_j.n} of {s.trials})"
                 for s in result.summaries]
        if run_dir is not None:
            (run_dir / "lines.txt").write_text("\n".join(lines) + "\n")


def test_a_correct_reporter_passes():
    check_reporter(Lines)


def test_a_reporter_that_assumes_every_trial_has_energy():
    class RoundsEnergy(Reporter):
        DESCRIPTION = "energy in whole millijoules"

        def report(self, result, run_dir):
            for s in result.primary_summaries():
                for e in result.windows[result.windows["phase"] == s.phase]["energy_j"]:
                    int(e * 1000)  # NaN for an uncovered window

    assert broken_rule(check_reporter, RoundsEnergy) == "report-variants"


def test_a_reporter_that_writes_into_the_current_directory():
    class Here(Reporter):
        DESCRIPTION = "summary.txt, wherever"

        def report(self, result, run_dir):
            Path("summary.txt").write_text(result.status)

    assert broken_rule(check_reporter, Here) == "report-cwd"


def test_a_reporter_that_changes_the_result():
    class InMillijoules(Reporter):
        DESCRIPTION = "shows energy in mJ"

        def report(self, result, run_dir):
            result.windows["energy_j"] *= 1e3  # converted in place: the next reporter reads mJ as J

    assert broken_rule(check_reporter, InMillijoules) == "report-mutates"


def test_a_reporter_that_blocks(monkeypatch):
    from energyframe.lifecycle import reporting

    monkeypatch.setattr(reporting, "REPORT_BUDGET_S", 0.5)
    gate = threading.Event()

    class Hangs(Reporter):
        DESCRIPTION = "waits for a network share"

        def report(self, result, run_dir):
            gate.wait(30)

    try:
        assert broken_rule(check_reporter, Hangs) == "report-budget"
    finally:
        gate.set()


# -- the results a reporter meets ----------------------------------------------------------------


def test_sample_results_cover_what_runs_produce():
    results = dict(sample_results())
    assert len(results) == 5
    uncovered = sample_result(variant="uncovered")
    assert uncovered.windows["energy_j"].isna().sum() == 1
    assert "uncovered" in set(uncovered.windows["flags"])
    partial = uncovered.summary("second")
    assert partial.energy_per_iter_j.n == 1 and partial.trials == 2 and "partial" in partial.flags
    timing = sample_result(variant="timing-only")
    assert set(timing.windows["channel"]) == {""} and all(s.channel == "" for s in timing.summaries)
    dynamic = sample_result(variant="dynamic")
    assert dynamic.windows["dynamic_energy_j"].notna().all()
    assert all(s.dynamic_energy_per_iter_j is not None for s in dynamic.summaries)
    assert not sample_result(complete=False).complete
    first, second = sample_result(), sample_result()
    first.meta["changed"] = True
    assert "changed" not in second.meta  # each call is a copy
    with pytest.raises(ValueError, match="unknown variant 'nan'; valid: power, uncovered, timing-only, dynamic"):
        sample_result(variant="nan")


def test_every_rule_is_documented():
    text = (Path(__file__).resolve().parents[2] / "docs" / "writing-plugins.md").read_text()
    missing = [rule for rule in RULES if f"`{rule}`" not in text]
    assert not missing, f"rules missing from docs/writing-plugins.md: {missing}"


# -- the one import path ---------------------------------------------------------------------------


def test_energyframe_plugin_exports_every_name_the_docs_tell_authors_to_import():
    import re

    docs = Path(__file__).resolve().parents[2] / "docs"
    text = (docs / "writing-plugins.md").read_text() + (docs / "polling.md").read_text()
    paragraph = text[text.index("**Import everything a plugin needs") : text.index("Test your plugin with")]
    named = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", paragraph)) - {"energyframe", "DeprecationWarning"}
    imported = set()
    for block in re.findall(r"from energyframe\.plugin import \(?([^)\n]+)", text):
        imported |= {name.strip() for name in block.split(",") if name.strip()}
    wanted = named | imported | {"mode_option", "READ_BUDGET_S"}
    missing = sorted(name for name in wanted if not hasattr(plugin, name))
    assert not missing, f"energyframe.plugin lacks what the docs tell authors to import: {missing}"
    assert {"PollingSource", "Dedup", "mode_option", "RunResult", "SampleSeries"} <= wanted


def test_help_on_the_plugin_module_is_readable():
    import pydoc

    text = pydoc.render_doc(plugin, renderer=pydoc.plaintext)
    assert len(text.splitlines()) <= 300
    for name in ("PowerSource", "Workload", "Reporter", "PollingSource", "mode_option", "READ_BUDGET_S"):
        assert name in text


# -- the accuracy harness ----------------------------------------------------------------------------

SHOWN = {"w": 0.0}  # the fake sensor the harness drives: what it shows now


class Shown(PollingSource):
    """Reads the fake sensor every 5 ms; it updates every 20 ms. ``GAIN``: a calibration error."""

    DESCRIPTION = "a fake sensor the harness drives"
    OPTIONS = (Option("interval_s", "float", 0.005, "pause between polls. Units: s"),)
    GAIN = 1.0

    def open(self):
        return [Channel("shown", Quantity.POWER, Scope.GPU, 0.02, ClockBase.MONOTONIC)]

    def poll(self):
        return {"shown": SHOWN["w"] * self.GAIN}


def drive(truth):
    SHOWN["w"] = truth.power_w


def test_the_accuracy_harness_measures_windows_against_the_truth():
    from energyframe.testing import check_accuracy, monotonic_windows, sine

    report = check_accuracy(Shown, None, drive, sine(200.0, 80.0, 1.1), tolerance=0.03, update_s=0.02,
                            duration_s=3.0, window_s=0.5)
    # windows the fake device was late around (a loaded machine) are excused, not judged
    assert len(report.windows) + len(report.excused) == 6 and report.windows and report.max_error <= 0.03
    assert abs(report.mean_error) < 0.01
    edges = monotonic_windows(report.result)
    starts = sorted(w.start_s for w in (*report.windows, *report.excused))
    assert edges["start_s"].to_numpy() == pytest.approx(starts, abs=1e-6)


def test_a_window_whose_sampling_was_held_up_is_excused_not_judged():
    from energyframe.testing import check_accuracy, sine

    class HeldUpOnce(Shown):  # the poll thread held up once, as on a loaded machine: a gap
        polls = 0

        def poll(self):
            self.polls += 1
            if self.polls == 200:  # about a second into the 3 s of windows, by the count of polls
                time.sleep(0.3)
            return super().poll()

    report = check_accuracy(HeldUpOnce, None, drive, sine(200.0, 80.0, 1.1), tolerance=0.03, update_s=0.02,
                            duration_s=3.0, window_s=0.5)
    gaps = [w for w in report.excused if "gap" in w.flags.split(";")]
    assert gaps  # the window with the gap is left out...
    assert all("gap" not in w.flags.split(";") for w in report.windows)
    assert report.windows and report.max_error <= 0.03  # ...and the others judged


def test_windows_around_a_late_fake_device_are_excused_not_judged():
    from energyframe.testing import check_accuracy, steps

    stalled = []

    def stalling(truth):  # the fake device's thread stalls once, for longer than a window
        if truth.elapsed_s > 1.2 and not stalled:
            stalled.append(truth.elapsed_s)
            time.sleep(0.6)
        drive(truth)

    report = check_accuracy(Shown, None, stalling, steps((100.0, 200.0), 0.4), tolerance=0.03, update_s=0.02,
                            duration_s=3.0, window_s=0.5)
    assert stalled and report.excused  # the windows at the stall are left out...
    assert all(w.end_s < report.excused[0].start_s or w.start_s > report.excused[-1].end_s for w in report.windows)
    assert report.windows and report.max_error <= 0.03  # ...and the others judged


def test_a_source_5_percent_high_misses_the_tolerance_it_claims():
    from energyframe.testing import check_accuracy, steps

    class High(Shown):
        GAIN = 1.05

    with pytest.raises(ContractError) as e:
        check_accuracy(High, None, drive, steps((100.0, 200.0), 0.4), tolerance=0.02, update_s=0.02,
                       duration_s=2.0, window_s=0.5)
    assert e.value.rule == "accuracy"
    assert str(e.value).startswith("rule accuracy: channel 'shown': window 1 of 4 (0.5")
    assert "beyond the 2.00% claimed" in str(e.value)
