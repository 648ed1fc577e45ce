"""A Ctrl-C that comes before a run started (while the command line loads, while the plugins
load) is one line and exit 130, as one later is: never a KeyboardInterrupt traceback, never
click's ``Aborted!`` with exit 1. Real processes, real signals (``Popen.send_signal``: a
background job of a non-interactive shell would ignore SIGINT)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import write_power_csv


def energyframe_in_process(code: str, *argv: str) -> subprocess.CompletedProcess:
    """``energyframe ARGV`` in a process of its own, ``code`` run first (the place where the
    process sends itself a signal)."""
    script = textwrap.dedent(code) + "\nfrom energyframe.__main__ import main\nsys.argv = ['energyframe', *sys.argv[1:]]\nmain()\n"
    return subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=120)


SIGINT_WHILE_PLUGINS_LOAD = """
import os, signal, sys
from energyframe.kit import registry
real_create = registry.create
def create(kind, spec):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the workload's plugin is being made
    time.sleep(5)  # the signal's handler raises in here
    return real_create(kind, spec)
import time
registry.create = create
"""


def test_sigint_while_the_plugins_load_is_exit_130_and_one_line(tmp_path):
    out = tmp_path / "r"
    done = energyframe_in_process(SIGINT_WHILE_PLUGINS_LOAD, "run", "--power", "none", "--workload",
                                  "sleep:seconds=0.1", "--out", str(out))
    assert done.returncode == 130, done.stderr
    assert done.stderr == (
        "Error: interrupted by SIGINT before the run started (loading the plugins): nothing was measured\n"
    )
    assert not out.exists()


SIGINT_WHILE_THE_COMMAND_LINE_LOADS = """
import builtins, os, signal, sys
real_import = builtins.__import__
def importing(name, *args, **kwargs):
    if name == "click":  # the command line's first import of its own
        builtins.__import__ = real_import
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = importing
"""


def test_sigint_while_the_command_line_loads_is_exit_130_and_one_line():
    done = energyframe_in_process(SIGINT_WHILE_THE_COMMAND_LINE_LOADS, "show", "nowhere")
    assert done.returncode == 130, done.stderr
    assert done.stderr == "Error: interrupted by SIGINT while energyframe started; nothing was done\n"


SIGINT_WHILE_ARGUMENTS_ARE_READ = """
import os, signal, sys
import click
real_parse = click.Command.parse_args
def parse_args(self, ctx, args):
    os.kill(os.getpid(), signal.SIGINT)
    return real_parse(self, ctx, args)
click.Command.parse_args = parse_args
"""


def test_sigint_while_the_arguments_are_read_is_exit_130_not_aborted():
    done = energyframe_in_process(SIGINT_WHILE_ARGUMENTS_ARE_READ, "show", "nowhere")
    assert done.returncode == 130, done.stderr
    assert done.stderr == "Error: interrupted by SIGINT\n"


#: ``energyframe ARGV`` as its console script runs it (``energyframe.__main__.main``), saying on
#: stderr when that function is about to run: a signal before it meets Python's own start-up
#: and the import of the package's few lines, which no program can speak for
STARTED_THEN_ENERGYFRAME = (
    "import sys\n"
    "from energyframe.__main__ import main\n"
    "sys.argv = ['energyframe', *sys.argv[1:]]\n"
    "sys.stderr.write('started\\n'); sys.stderr.flush()\n"
    "main()\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.3, 0.8, 1.3, 2.5])
def test_sigint_at_any_moment_of_a_run_is_exit_130_and_one_error_line(tmp_path, delay_s):
    power = write_power_csv(tmp_path / "p.csv", 100.0, duration_s=60)
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [sys.executable, "-c", STARTED_THEN_ENERGYFRAME, "run", "--power", f"replay:file={power}", "--workload",
         "sleep:seconds=0.3", "--trials", "30", "--warmup-s", "0", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None and proc.stderr.readline() == "started\n"
    time.sleep(delay_s)  # the moment the signal comes: not asserted, only varied
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Aborted!" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0].startswith("Error: interrupted by SIGINT"), stderr
