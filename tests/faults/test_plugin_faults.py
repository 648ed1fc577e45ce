"""Plugins that block, exit, interrupt, or return the wrong things: each ends the run in bounded time
with one line naming the call, the run saved with its true status; Ctrl-C always works."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.errors import OptionError, PluginLoadError, PowerSourceError, ReporterError
from energyframe.kit import registry
from energyframe.lifecycle import recorder, reporting
from energyframe.plugin import SourceContext
from tests.fakes import ListWorkload, SignalSource, busy_phase, one_line, read_until_error

QUICK = ef.RunSettings(trials=2, min_window_s=0.05, warmup_s=0.0)

#: a plugin module for the command line: a source whose calls misbehave on request
PLUGIN = """
import os, sys, time, threading
from energyframe.plugin import Option, Reporter
from tests.fakes import SignalSource

GATE = threading.Event()
RETURNED = threading.Event()  # a blocked read() returned


class Misbehaving(SignalSource):
    DESCRIPTION = "misbehaves on request, once the run has measured for a while"
    OPTIONS = SignalSource.OPTIONS + (
        Option("fault", "str", "none", "what to do wrong"),
        Option("after_s", "float", 0.0, "behave for this long first"),
    )

    def read(self):
        fault = self.options["fault"]
        if time.monotonic() - self._t0 < self.options["after_s"]:
            return super().read()
        if fault == "block":
            GATE.wait(60)
            RETURNED.set()
        if fault == "exit":
            sys.exit(9)
        if fault == "interrupt":
            raise KeyboardInterrupt
        return super().read()


class Failing(Reporter):
    DESCRIPTION = "a reporter that fails or hangs"
    OPTIONS = (Option("hang", "bool", False, "hang instead"),)

    def report(self, result, run_dir):
        if self.options["hang"]:
            GATE.wait(60)
        raise OSError(28, "No space left on device")
"""


@pytest.fixture
def misbehaving(install_plugin):
    install_plugin("energyframe.power", "misbehaving", "ef_misbehaving", PLUGIN, "Misbehaving")
    install_plugin("energyframe.reporters", "failing", "ef_misbehaving", PLUGIN, "Failing")
    yield
    sys.modules.get("ef_misbehaving", type("m", (), {"GATE": threading.Event()})).GATE.set()


def run_cli(tmp_path, *args, workload="sleep:seconds=0.05"):
    out = tmp_path / "run"
    result = CliRunner().invoke(main, ["-q", "run", *args, "--workload", workload, "--out", str(out)])
    return result, out


def status(out):
    meta = json.loads((out / "run.json").read_text())
    return meta["status"], meta.get("reason")


@pytest.mark.parametrize(
    "fault,message",
    [
        ("block", "its read() did not return within 1 s: read() must hand over the samples the source buffered "
                  "without waiting for the device (docs/writing-plugins.md)"),
        ("exit", "read() raised sys.exit(9) (a bug in the plugin)"),
        ("interrupt", "read() raised KeyboardInterrupt (a bug in the plugin)"),
    ],
)
def test_a_read_that_blocks_exits_or_interrupts_fails_the_run_naming_the_call(misbehaving, tmp_path, fault, message):
    # the source misbehaves 1.5 s into a run of 30 windows of 0.1 s: it stops there, saved
    result, out = run_cli(tmp_path, "--power", f"misbehaving:fault={fault},period_s=0.01,after_s=1.5",
                          "--trials", "30", "--warmup-s", "0", workload="sleep:seconds=0.1")
    assert result.exit_code == 1, result.output
    if fault == "block":  # the run ended while the read was still blocked, not when it returned
        assert not sys.modules["ef_misbehaving"].RETURNED.is_set()
    assert result.stderr.strip().splitlines()[-1] == f"Error: power source 'misbehaving' failed: {message}"
    assert status(out) == ("incomplete", f"power source 'misbehaving' failed: {message}")


def test_a_failing_reporter_fails_the_run_after_it_was_saved(misbehaving, tmp_path):
    result, out = run_cli(tmp_path, "--power", "none", "--reporter", "failing")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: reporter 'failing' failed: OSError: [Errno 28] No space left on device; the run is saved in {out}"
    )
    assert status(out) == ("complete", None)


def test_reporter_errors_warn_only_warns(misbehaving, tmp_path, caplog):
    result, out = run_cli(tmp_path, "--power", "none", "--reporter", "failing", "--reporter-errors", "warn")
    assert result.exit_code == 0
    assert "warning: reporter 'failing' failed: OSError: [Errno 28] No space left on device" in caplog.messages
    assert status(out) == ("complete", None)


def test_a_reporter_that_hangs_ends_in_bounded_time(misbehaving, tmp_path, monkeypatch):
    monkeypatch.setattr(reporting, "REPORT_BUDGET_S", 0.5)
    result, out = run_cli(tmp_path, "--power", "none", "--reporter", "failing:hang=true")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: reporter 'failing' did not return within 0.5 s; the run is saved in {out}"
    )


def test_a_reporter_error_is_refused_as_an_unknown_mode():
    with pytest.raises(ef.UsageError, match="reporter_errors must be one of fail, warn, got 'ignore'"):
        ef.run(ListWorkload([busy_phase()]), power="none", reporters=[], reporter_errors="ignore")


class BlockingStart(SignalSource):
    """``open`` blocks until the test releases it; ``returned`` says whether it ever did."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.release, self.returned = threading.Event(), threading.Event()

    def open(self):
        self.release.wait(60)
        self.returned.set()
        return super().open()


class BlockingStop(SignalSource):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.release, self.returned = threading.Event(), threading.Event()

    def stop(self):
        super().stop()
        self.release.wait(60)
        self.returned.set()


def test_a_start_that_blocks_fails_the_run_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(recorder, "START_BUDGET_S", 0.5)
    with pytest.raises(PowerSourceError) as e:
        ef.run(ListWorkload([busy_phase()]), power=[BlockingStart(name="slow")], reporters=[], out=tmp_path / "r",
               settings=QUICK)
    assert one_line(e.value) == "power source 'slow' could not start: start() did not return within 0.5 s"
    assert not (tmp_path / "r").exists()  # nothing was measured: no run directory of nothing


def test_a_stop_that_blocks_is_left_behind_with_a_warning(monkeypatch):
    monkeypatch.setattr(recorder, "STOP_BUDGET_S", 0.5)
    sticky = BlockingStop(name="sticky")
    result = ef.run(ListWorkload([busy_phase()]), power=[sticky], reporters=[], settings=QUICK)
    assert not sticky.returned.is_set()  # the run ended without waiting for the blocked stop()
    sticky.release.set()
    assert result.complete and result.windows["energy_j"].notna().all()
    assert ("power source 'sticky': stop() did not return within 0.5 s; the run went on without it (samples it "
            "still held are lost)") in result.warnings


def test_ctrl_c_ends_a_start_that_blocks(tmp_path):
    timer = threading.Timer(0.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    slow = BlockingStart(name="slow")
    timer.start()
    with pytest.raises(ef.RunInterrupted):
        ef.run(ListWorkload([busy_phase()]), power=[slow], reporters=[], out=tmp_path / "r", settings=QUICK)
    assert not slow.returned.is_set()  # Ctrl-C ended the run while start() still blocked
    slow.release.set()


class WrongChannels(SignalSource):
    def start(self, context):
        super().start(context)
        return ["gpu0"]


def test_a_start_that_returns_no_channels_is_one_line(tmp_path):
    with pytest.raises(PowerSourceError) as e:
        ef.run(ListWorkload([busy_phase()]), power=[WrongChannels(name="odd")], reporters=[], settings=QUICK)
    assert one_line(e.value) == "power source 'odd' could not start: start() returned 'gpu0' (str), not a Channel"


def test_an_option_called_name_given_by_the_user(misbehaving):
    with pytest.raises(OptionError) as e:
        registry.create(registry.POWER, "misbehaving:name=x")
    assert one_line(e.value).startswith("unknown option 'name' for power source 'misbehaving'. Valid options: ")


def test_an_option_called_name_declared_by_the_plugin(install_plugin):
    install_plugin("energyframe.power", "named", "ef_named", """
        from energyframe.plugin import Option
        from tests.fakes import SignalSource

        class Named(SignalSource):
            OPTIONS = (Option("name", "str", "x", "the meter's name"),)

            def __init__(self, name=None, **options):  # its own name by keyword: it collides
                super().__init__(name, **options)
    """, "Named", dist="named-plugin")
    with pytest.raises(PluginLoadError) as e:
        registry.create(registry.POWER, "named:name=y")
    assert one_line(e.value) == (
        "power source 'named' declares an option called 'name', but its constructor takes its own name by "
        "keyword: its package must take it positionally (def __init__(self, name=None, /, **options)) or "
        "rename the option"
    )
    # one whose constructors take the name positionally has both (torchvision:name=convnext_tiny)
    model = registry.create(registry.WORKLOADS, "torchvision:name=convnext_tiny")
    assert model.name == "torchvision" and model.options["name"] == "convnext_tiny"


def test_sigterm_to_the_sampler_process_is_named():
    source = SignalSource(name="sig", period_s=0.01, mode="process")
    source.start(SourceContext())
    time.sleep(0.2)
    child = source.sampler_process.pid
    os.kill(child, signal.SIGTERM)
    _, error, _ = read_until_error(source)
    source.stop()
    assert one_line(error) == (
        f"the sig sampler process (pid {child}) was stopped by SIGTERM from outside energyframe (a job scheduler, "
        "a memory limit, an administrator?): sampling ended"
    )


def test_readings_that_all_arrive_rejected_are_named_as_such():
    from tests.faults.test_readings import ScriptedSource

    with pytest.raises(PowerSourceError) as e:
        ef.run(ListWorkload([busy_phase()]), power=[ScriptedSource(lambda t: -100.0, name="wall")], reporters=[],
               settings=QUICK)
    message = one_line(e.value)
    assert message.startswith("channel 'wall' sent ") and "reading(s) that cannot be physical (negative: " in message
    assert message.endswith("and none that can: they are kept in samples.partial.csv, never integrated")
    assert "no samples arrived" not in message


def test_the_library_raises_the_reporter_error_with_the_saved_result(tmp_path):
    from energyframe.plugin import Reporter

    class Broken(Reporter):
        DESCRIPTION = "fails"

        def report(self, result, run_dir):
            raise ValueError("no such column")

    with pytest.raises(ReporterError) as e:
        ef.run(ListWorkload([busy_phase()]), power="none", reporters=[Broken(), Broken("second")], out=tmp_path / "r",
               settings=QUICK)
    assert one_line(e.value) == (
        "reporter 'Broken' failed: ValueError: no such column; reporter 'second' failed: ValueError: no such column; "
        f"the run is saved in {tmp_path / 'r'}"
    )
    assert e.value.result.complete and e.value.exit_code == 1


def test_name_is_an_unknown_option_of_a_plugin_that_does_not_declare_it():
    with pytest.raises(OptionError, match="^unknown option 'name' for workload 'sleep'"):
        registry.create(registry.WORKLOADS, "sleep:name=x")
