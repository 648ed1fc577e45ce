"""A new plugin package: what ``energyframe new-plugin NAME --kind KIND`` writes.

One module, its entry point in ``pyproject.toml``, a README and tests that use the plugin kit
(``energyframe.testing``) and pass as written: the starting point docs/writing-plugins.md
describes, with the rules already kept (a power source's ``resolution_s`` is its sensor's update
period, polled faster than it; a reporter that copes with every result). Templates are plain
``string.Template`` text so that the braces of the generated f-strings stay as they are.
"""

from __future__ import annotations

import errno
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from string import Template

from ..errors import EnergyFrameError, UsageError

KINDS = ("power", "workload", "reporter")
GROUPS = {"power": "energyframe.power", "workload": "energyframe.workloads", "reporter": "energyframe.reporters"}
_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


@dataclass(frozen=True)
class Names:
    """How one plugin is called: what users type, the package, the module and the class."""

    name: str  # hwmon-gpu: what users type
    kind: str

    @property
    def package(self) -> str:
        return f"energyframe-{self.name}"

    @property
    def module(self) -> str:
        return "energyframe_" + self.name.replace("-", "_")

    @property
    def cls(self) -> str:
        suffix = {"power": "PowerSource", "workload": "Workload", "reporter": "Reporter"}[self.kind]
        return "".join(part.capitalize() for part in self.name.split("-")) + suffix

    def fill(self, template: str) -> str:
        return Template(template).substitute(
            name=self.name, package=self.package, module=self.module, cls=self.cls, group=GROUPS[self.kind]
        )


PYPROJECT = '''\
[build-system]
# 70.1 or newer: an older setuptools needs the `wheel` package to build this package
# (`pip install -e .`, and `pip install --no-build-isolation` with the setuptools you have)
requires = ["setuptools>=70.1"]
build-backend = "setuptools.build_meta"

[project]
name = "$package"
version = "0.1.0"
description = "energyframe plugin: $name"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["energyframe"]

[project.entry-points."$group"]
$name = "$module:$cls"

[tool.setuptools]
py-modules = ["$module"]
'''

README = '''\
# $package

An energyframe plugin: `$name` (entry point `$group`, class `$module.$cls`).

```
pip install -e .
energyframe list            # shows "$name"
python -m pytest tests      # the plugin kit's checks (energyframe.testing)
```

Installing needs setuptools 70.1 or newer (an older one needs the `wheel` package to build it).
`pyproject.toml` asks for it, and pip fetches it into its build environment; with
`--no-build-isolation` the installed setuptools builds it: `pip install "setuptools>=70.1"` first.

Written against docs/writing-plugins.md; import only from `energyframe.plugin` (and, in tests,
`energyframe.testing`).
'''

CONFTEST = '''\
import sys
from pathlib import Path

# the tests run from a checkout without installing the package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
'''

POWER = '''\
"""``$name``: power read from a file that holds microwatts (a Linux hwmon ``power1_input``).

The sensor updates its reading every ``update_s``; the polling base (``PollingSource``) reads it
every ``interval_s``, faster than that, and stamps each change midway between the two polls that
saw it (``Dedup.AUTO``), repeating a steady value often enough for the run's gap rule. Change
``open`` and ``poll`` for your device, and keep what docs/writing-plugins.md asks: SI units, the
update period as ``resolution_s``, ``PowerSourceError`` with the fix.
"""

from __future__ import annotations

from pathlib import Path

from energyframe.plugin import Channel, ClockBase, Option, PollingSource, PowerSourceError, Quantity, Scope


class $cls(PollingSource):
    """Power from a file holding microwatts."""

    DESCRIPTION = "power from a file holding microwatts (hwmon power1_input)"
    OPTIONS = (
        Option("path", "path", Path("/sys/class/hwmon/hwmon0/power1_input"), "the file holding the power in µW"),
        Option("update_s", "float", 0.1, "how often the sensor updates its reading. Units: s", minimum=0.001),
        Option("interval_s", "float", 0.02, "pause between two reads, shorter than update_s. Units: s",
               minimum=0.0005),
    )

    def open(self):
        if self.options["interval_s"] >= self.options["update_s"]:
            raise PowerSourceError(
                f"interval_s={self.options['interval_s']:g} does not read faster than the sensor updates "
                f"(update_s={self.options['update_s']:g}): give a smaller interval_s"
            )
        self.poll()  # a missing or unreadable file fails here, before anything runs
        return [
            Channel("$name", Quantity.POWER, Scope.OTHER, self.options["update_s"], ClockBase.MONOTONIC,
                    description=f"power read from {self.options['path']}")
        ]

    def poll(self):
        path = self.options["path"]
        try:
            return {"$name": int(path.read_text()) / 1e6}  # µW to W
        except FileNotFoundError as e:
            raise PowerSourceError(f"{path} does not exist: is the sensor's driver loaded? (give path=)") from e
        except PermissionError as e:
            raise PowerSourceError(f"cannot read {path}: permission denied (sudo chmod o+r {path})") from e
        except (OSError, ValueError) as e:
            raise PowerSourceError(f"cannot read a power in µW from {path}: {e}") from e

    def describe(self):
        return {"path": str(self.options["path"])}
'''

POWER_TEST = '''\
"""$cls against a fake sensor file: the plugin kit's conformance checks and accuracy harness."""

import os

import pytest
from $module import $cls

from energyframe.plugin import PowerSourceError
from energyframe.testing import check_accuracy, check_power_source, driving, sine, steps

UPDATE_S = 0.02  # the fake sensor's update period, read every 5 ms
OPTIONS = {"update_s": UPDATE_S, "interval_s": 0.005}


class FakeSensor:
    """The sensor's file, rewritten whole at each update as the kernel shows it: µW."""

    def __init__(self, path):
        self.path = path

    def write(self, truth):
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(f"{int(truth.power_w * 1e6)}\\n")
        os.replace(tmp, self.path)


@pytest.fixture
def sensor(tmp_path):
    return FakeSensor(tmp_path / "power1_input")


def test_the_source_keeps_the_plugin_contract(sensor):
    with driving(sensor.write, sine(200.0, 50.0, 0.9), update_s=UPDATE_S):
        samples = check_power_source($cls, {"path": sensor.path, **OPTIONS}, run_s=1.5)
    assert 150.0 <= min(s.value for s in samples["$name"]) <= max(s.value for s in samples["$name"]) <= 250.0


def test_window_energy_is_within_the_tolerance_this_package_claims(sensor):
    # steps between 100 and 300 W: a step inside an update moves up to 2 J of a window's 200 J
    report = check_accuracy($cls, {"path": sensor.path, **OPTIONS}, sensor.write, steps((100.0, 300.0), 0.45),
                            tolerance=0.05, update_s=UPDATE_S, duration_s=4.0, window_s=1.0)
    assert abs(report.mean_error) < 0.02


def test_a_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(PowerSourceError, match="does not exist: is the sensor's driver loaded"):
        check_power_source($cls, {"path": tmp_path / "power1_input", **OPTIONS})
'''

WORKLOAD = '''\
"""``$name``: sums of squares in pure Python, one phase per size.

Replace ``setup`` and ``phases`` with your work: each ``Phase.step`` runs one iteration, free of
allocation; the run decides how many go into a window. docs/writing-plugins.md has every member.
"""

from __future__ import annotations

from energyframe.plugin import Option, Phase, Workload


class $cls(Workload):
    """Sums of squares in pure Python, one phase per size."""

    DESCRIPTION = "sums of squares in pure Python, one phase per size"
    OPTIONS = (Option("sizes", "int_list", (1000, 10000), "numbers summed per iteration", minimum=1),)

    def setup(self):
        self.numbers = {n: list(range(n)) for n in self.options["sizes"]}

    def phases(self):
        return [
            Phase(f"sum-{n}", step=lambda xs=xs: sum(x * x for x in xs), work={"numbers": float(n)})
            for n, xs in self.numbers.items()
        ]

    def teardown(self):
        self.numbers = {}

    def info(self):
        return {"sizes": list(self.options["sizes"])}
'''

WORKLOAD_TEST = '''\
"""$cls through the plugin kit: a short real run of every phase."""

from $module import $cls

from energyframe.testing import check_workload


def test_the_workload_keeps_the_plugin_contract():
    result = check_workload($cls, {"sizes": "100,1000"})
    assert set(result.windows["phase"]) == {"sum-100", "sum-1000"}
    assert result.summary("sum-1000").work == {"numbers": 1000.0}
'''

REPORTER = '''\
"""``$name``: one CSV row per phase and channel, with the spread and the trials behind each figure.

A reporter meets every kind of run: interrupted ones, windows without energy (NaN), timing-only
runs (channel ``""``), runs with an idle baseline. It writes into the run directory (or a path
the user gave), never into the current directory, and leaves the result as it found it.
"""

from __future__ import annotations

import csv
import math

from energyframe.plugin import Option, Reporter

HEADER = ["phase", "channel", "trials", "energy_trials", "time_per_iter_s", "time_iqr_s", "energy_per_iter_j",
          "energy_iqr_j", "status"]


def _number(value):
    return "" if value is None or not math.isfinite(value) else repr(value)


class $cls(Reporter):
    """$name.csv: median time and energy per iteration, their IQR, the trials behind them."""

    DESCRIPTION = "a CSV row per phase and channel: medians, spread and trials"
    OPTIONS = (Option("path", "path", None, "file to write (default: RUN_DIR/$name.csv)"),)

    def report(self, result, run_dir):
        path = self.options["path"] or (run_dir / "$name.csv" if run_dir is not None else None)
        if path is None:
            return  # the run was not saved and no file was named: nowhere to write
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(HEADER)
            for s in result.summaries:
                t, e = s.time_per_iter_s, s.energy_per_iter_j
                writer.writerow([s.phase, s.channel, s.trials, e.n if s.channel else "", _number(t.median),
                                 _number(t.iqr), _number(e.median), _number(e.iqr), result.status])
'''

REPORTER_TEST = '''\
"""$cls through the plugin kit: every kind of result, saved and not."""

import csv

from $module import $cls

from energyframe.testing import check_reporter, sample_result


def test_the_reporter_keeps_the_plugin_contract():
    check_reporter($cls)


def test_a_window_without_energy_is_an_empty_cell(tmp_path):
    result = sample_result(variant="uncovered")
    result.save(tmp_path)
    $cls().report(result, tmp_path)
    rows = {row["phase"]: row for row in csv.DictReader((tmp_path / "$name.csv").open())}
    assert rows["second"]["trials"] == "2" and rows["second"]["energy_trials"] == "1"
'''

TEMPLATES = {
    "power": (POWER, POWER_TEST),
    "workload": (WORKLOAD, WORKLOAD_TEST),
    "reporter": (REPORTER, REPORTER_TEST),
}


def check_name(name: str) -> str:
    """``name`` if users can type it: lower-case letters and digits, words joined by ``-``.

    Raises:
        UsageError: naming the bad name and what a good one looks like.
    """
    if not _NAME.match(name):
        raise UsageError(
            f"plugin name {name!r} is not one users can type: use lower-case letters and digits, words joined "
            "by '-' (e.g. hwmon-gpu)"
        )
    return name


def write_plugin(name: str, kind: str, where: Path) -> tuple[Path, list[Path]]:
    """Write the package ``energyframe-<name>`` under ``where``; returns its folder and the files.

    Raises:
        UsageError: a bad name or kind, a folder that exists already, or a ``where`` that cannot
            be written (read-only, no permission, not a folder).
        EnergyFrameError: the files could not be written (a full disk); nothing is left half.
    """
    if kind not in KINDS:
        raise UsageError(f"unknown plugin kind {kind!r}; valid: {', '.join(KINDS)}")
    names = Names(check_name(name), kind)
    folder = where / names.package
    if folder.exists():
        raise UsageError(f"{folder} already exists: choose another name or --out")
    module, test = TEMPLATES[kind]
    files = {
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        f"{names.module}.py": module,
        "tests/conftest.py": CONFTEST,
        f"tests/test_{names.module}.py": test,
    }
    written = []
    try:
        for relative, template in files.items():
            path = folder / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(names.fill(template))
            written.append(path)
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)  # it did not exist: half a package helps no one
        raise _write_error(folder, e) from e
    return folder, written


def _write_error(folder: Path, error: OSError) -> EnergyFrameError:
    """One line for a package that could not be written: the user's folder (exit 2), or the
    disk (exit 1)."""
    reason = error.strerror or str(error)
    if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR):
        return UsageError(f"cannot write the package into {folder.parent}: {reason} (choose a writable --out)")
    if error.errno == errno.ENOSPC:
        reason = "no space left on the device"
    return EnergyFrameError(f"cannot write the package {folder}: {reason}; nothing was left behind")
