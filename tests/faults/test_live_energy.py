"""The live-energy API people use in loops and servers: every window's callback runs, or the run
says how many did not and why; a callback that blocks never holds a handle's energy or the end of
the run hostage; a window's iteration count and a window asked for by name are checked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

import energyframe as ef
from energyframe.errors import UsageError
from tests.fakes import ScriptedSource

#: a hang guard, not a timing assertion: on a loaded machine the wait is merely longer. Units: s.
GUARD_S = 10.0


def steady():
    return ScriptedSource(lambda t: 100.0)


@pytest.mark.slow
def test_a_blocking_callback_holds_neither_the_energy_nor_the_other_subscribers_and_is_named():
    """Every window's callback runs, or the run says how many did not and why: a callback that
    blocks (a dashboard whose server stopped answering) once held every later window's
    ``energy_j`` forever, the other subscribers' windows too (1461 of 3000 delivered), and the end
    of the run for 30 s, with no word."""
    release = threading.Event()
    counted = []

    def blocking(energy):
        release.wait()

    try:
        with ef.measure(power=[steady()]) as m:
            m.on_window_energy(blocking)
            m.on_window_energy(counted.append)
            handles = []
            for _ in range(20):
                with m.window("step") as w:
                    pass
                handles.append(w)
            try:  # the last window's energy is known although the first callback still blocks
                assert handles[-1].energy(timeout_s=GUARD_S) is not None
            except AssertionError:
                release.set()  # today: let the run end now rather than after its 30 s
                raise
        result = m.result
    finally:
        release.set()
    assert len(counted) == 20  # the other subscriber heard every window
    (named,) = [w for w in result.warnings if "live-energy subscriber" in w]
    assert "blocking did not return within" in named
    assert "19 of 20 windows' energies did not reach it" in named  # how many, said


def test_a_negative_iteration_count_set_on_an_open_window_is_refused():
    with ef.measure(power="none") as m:
        with pytest.raises(UsageError, match=r"^iterations must be a whole number of at least 1, got -7$"):
            with m.window("step") as w:
                w.iterations = -7
        with m.window("step") as w:
            w.iterations = 3
    assert list(m.result.windows["iterations"]) == [3]  # never -7 (it saved -1.43 J per iteration)


def test_window_energy_of_an_unknown_window_is_a_usage_error():
    with ef.measure(power=[steady()]) as m:
        with m.window("step"):
            pass
        with pytest.raises(UsageError, match=r"^no window named 'x' has closed"):
            m.window_energy("x")
        assert m.window_energy("step", timeout_s=GUARD_S) is not None  # by name: its last closed window


SIGTERM_WHILE_SOURCES_START = """
import os, signal, sys, time
import energyframe as ef
from energyframe.plugin import Channel, ClockBase, PowerSource, Quantity, Scope

class TermOnStart(PowerSource):
    DESCRIPTION = "test"
    def start(self, context):
        os.kill(os.getpid(), signal.SIGTERM)  # a job scheduler stops the run while sources start
        time.sleep(2)
        return [Channel("gpu0", Quantity.POWER, Scope.GPU, 0.01, ClockBase.MONOTONIC)]
    def read(self):
        return []
    def stop(self):
        pass

try:
    ef.run("sleep:seconds=0.01", power=[TermOnStart("term")], reporters=[], settings=ef.RunSettings(trials=1))
except ef.RunInterrupted as e:
    print(e)
    sys.exit(e.exit_code)
"""


def test_sigterm_while_the_sources_start_is_reported_as_sigterm():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SIGTERM_WHILE_SOURCES_START)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert done.stdout.startswith("terminated by SIGTERM while the run started"), done.stdout
