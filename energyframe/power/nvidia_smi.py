"""``nvidia-smi``: GPU power from one long-lived ``nvidia-smi --query-gpu ... -lms N`` child.

For machines where NVML's Python bindings cannot be used, and for users of the earlier tool who
want its CSV log. The child is started once (a new process per reading costs ~0.5 s), read line
by line as a ``Stream`` of the polling base, and parsed by header name. ``power.draw.instant``
is preferred: on Ampere and newer ``power.draw`` and ``power.draw.average`` are 1-second
averages that lag the load. Timestamps are nvidia-smi's (local time, ms) and are mapped onto the
run's timeline.

Each way the child can fail ends in one clear message: it exits (its exit code and last error
line), it stops printing while alive (``silence_s``), it prints lines that do not parse, it
prints far more rows than asked for, its header lacks a field that was asked for or names a
unit of power energyframe does not know, or its timestamps lie far from this machine's clock
(a time-zone mismatch). Its standard error is read all along (a child whose warnings fill the
pipe would block), and its last lines explain an exit. Data problems are not repaired here:
``[N/A]`` values are skipped (never read as 0) with a warning when a field that had values loses
them; negative or absurd power values are passed on unchanged for the run to flag; a power value
the header does not promise (``129840 mW`` under ``[W]``, ``0xFFFF``) is passed on as NaN, said
once, so the windows around it are flagged ``invalid_reading`` (``smi_format.power_reading``).
"""

from __future__ import annotations

import collections
import datetime as dt
import math
import re
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import PowerSourceError
from ..kit.polling import PollingSource, Stream
from ..model import Channel, ClockBase, Detection, Quantity, Sample, Scope, Timing
from ..offline.smi_format import (
    AVERAGE_WINDOW_S,
    POWER_FIELDS,
    STATE_FIELDS,
    check_power_header,
    header_name,
    header_unit,
    power_reading,
)
from ..options import Option
from .devices import cuda_visible_devices, rank_gpus

MISSING = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}
#: rows that arrive later than this after nvidia-smi stamped them mean it cannot keep up. Units: s.
LATE_S = 1.0
#: this many unparsable lines in a row mean the output is not what we asked for
MAX_BAD_LINES = 20
#: more rows than this many times what ``-lms`` asks for, over a second, is a flood
FLOOD_FACTOR = 10.0
#: the header may take this many times ``silence_s`` (the driver initialising)
HEADER_SILENCE_FACTOR = 3.0
#: rows stamped this far from this machine's clock (either way) come from another clock or
#: time zone: every window would be uncovered. Units: s.
FAR_S = 60.0
#: lines of nvidia-smi's standard error kept to explain its exit
STDERR_LINES = 20


def parse_timestamp(text: str) -> float:
    """``2026/11/22 03:04:04.160`` (local time) to Unix seconds."""
    return dt.datetime.strptime(text.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()


def parse_number(text: str) -> float | None:
    text = text.strip()
    if text in MISSING:
        return None
    if text.startswith("0x"):
        return float(int(text, 16))
    return float(text.split()[0])


def supported_fields(executable: str) -> set[str]:
    """The query fields this nvidia-smi knows (``--help-query-gpu``)."""
    proc = subprocess.run([executable, "--help-query-gpu"], capture_output=True, text=True, timeout=30)
    names: set[str] = set()
    for line in proc.stdout.splitlines():
        if line.startswith('"'):  # '"clocks.current.sm" or "clocks.sm"': every alias counts
            names.update(re.findall(r'"([a-z0-9_.]+)"', line))
    return names


class NvidiaSmiPowerSource(PollingSource):
    """GPU power read from a running ``nvidia-smi`` (one child, read continuously)."""

    DESCRIPTION = "NVIDIA GPU power from one long-lived nvidia-smi child (CSV, parsed by header)"
    OPTIONS = (
        Option("interval_ms", "int", 20, "nvidia-smi's -lms period. Units: ms", minimum=1),
        Option("gpus", "list", None, "GPU indices or UUIDs for nvidia-smi -i (default: all)"),
        Option("log", "path", None, "also write nvidia-smi's raw CSV to this file"),
        Option("prefix", "str", "", "prepended to channel names (to run beside the nvml source)"),
        Option("executable", "str", "nvidia-smi", "the nvidia-smi program"),
        Option(
            "silence_s",
            "float",
            5.0,
            "nvidia-smi printing nothing for this long, while running, is a failure. Units: s",
            minimum=0.1,
        ),
    )
    AUTO_PRIORITY = 50
    AUTO_SCOPE = Scope.GPU
    PER_PROCESS = True  # under torchrun each rank reads its own GPU

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        self._proc: subprocess.Popen | None = None
        self._by_column: dict[str, Channel] = {}
        self._info: dict = {}
        self._logs: list = []
        self._columns: list[str] = []
        self._gpus: list[str] = []
        self._warned: set[str] = set()
        self._had_value: set[str] = set()
        self._units: dict[str, str | None] = {}
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._stderr_reader: threading.Thread | None = None

    @classmethod
    def detect(cls) -> Detection:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            return Detection(False, "nvidia-smi is not on PATH")
        try:
            proc = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return Detection(False, f"nvidia-smi -L failed: {e}")
        gpus = [line for line in proc.stdout.splitlines() if line.startswith("GPU ")]
        if proc.returncode != 0 or not gpus:
            return Detection(False, (proc.stderr or proc.stdout).strip()[:200] or "nvidia-smi sees no GPU")
        return Detection(True, f"{len(gpus)} GPU(s)")

    # -- start ---------------------------------------------------------------------------------
    def open(self) -> Sequence[Channel]:
        exe = self._executable()
        fields = self._query_fields(exe)
        select_gpus = self._gpu_selection()
        self._gpus = self._list_gpus(exe, select_gpus)
        cmd = [
            exe,
            f"--query-gpu={','.join(fields)}",
            "--format=csv,nounits",
            "-lms",
            str(self.options["interval_ms"]),
            *select_gpus,
        ]
        self._open_logs()
        self._start_child(exe, cmd)
        header = self._read_header()
        self._write_log(header)
        self._read_columns(header, fields)
        self._make_channels()
        self._info = {"command": cmd, "power_field": self._power_field, "fields": fields, "gpus": self._gpus}
        if self._power_field != "power.draw.instant":
            self.warn(
                f"this nvidia-smi has no power.draw.instant; using {self._power_field}, which on Ampere and newer "
                "is a 1-s average that lags changes of load"
            )
        return list(self._by_column.values())

    def _executable(self) -> str:
        """The path of the ``executable`` option's program.

        Raises:
            PowerSourceError: it is not on PATH.
        """
        exe = shutil.which(self.options["executable"])
        if exe is None:
            raise PowerSourceError(
                f"{self.options['executable']!r} is not on PATH (is the NVIDIA driver installed?)"
            )
        return exe

    def _query_fields(self, exe: str) -> list[str]:
        """The fields to ask for: the time, the GPU, every power field this nvidia-smi knows (the
        first of ``POWER_FIELDS`` is the one read) and the state fields it knows.

        Raises:
            PowerSourceError: nvidia-smi does not run, or knows none of the power fields.
        """
        try:
            known = supported_fields(exe)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PowerSourceError(f"could not run {exe} --help-query-gpu: {e}") from e
        power = [f for f in POWER_FIELDS if f in known]
        if not power:
            raise PowerSourceError(f"{exe} offers none of the power fields {', '.join(POWER_FIELDS)}")
        self._power_field = power[0]
        return ["timestamp", "index", "uuid", *power, *[f for f in STATE_FIELDS if f in known]]

    def _gpu_selection(self) -> list[str]:
        """nvidia-smi's ``-i`` for the ``gpus`` option or, under a launcher, the rank's GPU
        (nothing: every GPU)."""
        chosen = list(self.options["gpus"] or [])
        if not chosen and self.context.devices:  # the rank's GPU, under a launcher
            chosen, notes = rank_gpus(self.context.devices, cuda_visible_devices())
            for note in notes:
                self.warn(note)
        return ["-i", ",".join(chosen)] if chosen else []

    def _open_logs(self) -> None:
        """The raw CSV logs to copy nvidia-smi's output into: the run's raw folder's and the
        ``log`` option's."""
        raw_dir = self.context.raw_dir
        for path in (raw_dir / "nvidia-smi.csv" if raw_dir else None, self.options["log"]):
            if path is not None:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                self._logs.append(open(path, "w"))

    def _start_child(self, exe: str, cmd: list[str]) -> None:
        """Start the long-lived nvidia-smi, and the thread that reads its standard error.

        Raises:
            PowerSourceError: it could not be started.
        """
        try:
            self._proc = self.spawn(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
        except OSError as e:
            raise PowerSourceError(f"could not start {exe}: {e}") from e
        self._stderr_reader = threading.Thread(target=self._drain_stderr, name="energyframe-nvidia-smi-stderr", daemon=True)
        self._stderr_reader.start()

    def _read_columns(self, header: str, fields: list[str]) -> None:
        """The columns nvidia-smi's header names, and the unit of each power column.

        Raises:
            PowerSourceError: a power unit energyframe does not know, or no column for the time,
                the GPU or the power field (``_check_columns``).
        """
        self._columns = [header_name(h) for h in header.split(",")]
        self._units = {header_name(h): header_unit(h) for h in header.split(",") if header_name(h) in POWER_FIELDS}
        for field_name, unit in self._units.items():
            why = check_power_header(field_name, unit)
            if why:
                raise PowerSourceError(f"{why} (it printed {header.strip()!r})")
        self._check_columns(header, fields)

    def _check_columns(self, header: str, fields: list[str]) -> None:
        """Refuse a header without the time, the GPU or the power field; say which other fields
        asked for it lacks.

        Raises:
            PowerSourceError: one of the three is missing.
        """
        missing = [f for f in ("timestamp", "index", self._power_field) if f not in self._columns]
        if missing:
            raise PowerSourceError(
                f"nvidia-smi's header lacks {missing} (it printed {header.strip()!r}; asked for "
                f"{','.join(fields)}): this nvidia-smi names its columns differently"
            )
        absent = [f for f in fields if f not in self._columns and f not in missing]
        if absent:
            self.warn(
                f"nvidia-smi's header has no column for {', '.join(absent)} (it printed {header.strip()!r}); "
                "those readings are not recorded"
            )

    def _read_header(self) -> str:
        proc = self._proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None  # started with pipes
        wait_s = HEADER_SILENCE_FACTOR * self.options["silence_s"]
        ready, _, _ = select.select([proc.stdout], [], [], wait_s)
        header = proc.stdout.readline() if ready else ""
        if header:
            return header
        if ready:  # end of output: the child is exiting, give it the moment it takes
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            raise PowerSourceError(
                f"nvidia-smi started but printed nothing for {wait_s:.1f} s: the driver may be hung"
            )
        code = proc.wait()
        err = self._last_error()
        raise PowerSourceError(f"nvidia-smi exited at once (code {code})" + (f": {err[:300]}" if err else ""))

    def _drain_stderr(self) -> None:
        """Read nvidia-smi's standard error as it comes (a full pipe would stop the child), keeping
        the last lines to explain an exit."""
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        try:
            for line in proc.stderr:
                if line.strip():
                    self._stderr.append(line.strip())
        except (OSError, ValueError):  # the pipe was closed under us at stop
            return

    def _last_error(self) -> str:
        """nvidia-smi's last error line, once it has exited and its standard error is read."""
        if self._stderr_reader is not None:
            self._stderr_reader.join(timeout=5)
        return self._stderr[-1] if self._stderr else ""

    @staticmethod
    def _list_gpus(exe: str, select_gpus: list[str]) -> list[str]:
        """The indices of the GPUs to read (one short nvidia-smi call before the long one)."""
        try:
            proc = subprocess.run(
                [exe, "--query-gpu=index", "--format=csv,noheader", *select_gpus],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PowerSourceError(f"could not list the GPUs with {exe}: {e}") from e
        gpus = [line.strip() for line in proc.stdout.splitlines() if line.strip().isdigit()]
        if proc.returncode != 0 or not gpus:
            detail = (proc.stderr or proc.stdout).strip()[:300]
            raise PowerSourceError(f"nvidia-smi lists no GPU{' (' + detail + ')' if detail else ''}")
        return gpus

    def _make_channels(self) -> None:
        prefix = self.options["prefix"]
        period = self.options["interval_ms"] / 1e3
        # NVIDIA's help text: each power.draw* reading "is accurate to within +/- 5 watts"
        averaged: dict[str, Any] = {"timing": Timing.PERIOD_END, "averaging_s": AVERAGE_WINDOW_S, "accuracy_w": 5.0}
        for index in self._gpus:
            base = f"{prefix}gpu{index}"
            self._by_column[f"{index}:{self._power_field}"] = Channel(
                base,
                Quantity.POWER,
                Scope.GPU,
                max(period, 0.1),
                ClockBase.WALL,
                description=f"nvidia-smi {self._power_field}",
                **({"accuracy_w": 5.0} if self._power_field == "power.draw.instant" else averaged),
            )
            if self._power_field != "power.draw.average" and "power.draw.average" in self._columns:
                self._by_column[f"{index}:power.draw.average"] = Channel(
                    f"{base}.power_average",
                    Quantity.POWER,
                    Scope.GPU,
                    max(period, 0.1),
                    ClockBase.WALL,
                    primary=False,
                    description="nvidia-smi power.draw.average: a 1-s average that lags the load",
                    **averaged,
                )
            for field, (suffix, unit) in STATE_FIELDS.items():
                if field in self._columns:
                    self._by_column[f"{index}:{field}"] = Channel(
                        f"{base}.{suffix}",
                        Quantity.STATE,
                        Scope.GPU,
                        period,
                        ClockBase.WALL,
                        unit=unit,
                        primary=False,
                        description=f"nvidia-smi {field}",
                    )

    # -- acquisition ---------------------------------------------------------------------------
    def tasks(self) -> Sequence[Stream]:
        return [
            Stream(
                self._rows,
                name="nvidia-smi",
                silent_after_s=self.options["silence_s"],
                on_silence=self._silence,
            )
        ]

    def _silence(self, quiet_s: float) -> str:
        return (
            f"nvidia-smi is running but printed nothing for {quiet_s:.1f} s (a row was due every "
            f"{self.options['interval_ms']} ms): the driver may be hung; run nvidia-smi by hand and check dmesg"
        )

    def _rows(self) -> Iterator[list[Sample]]:
        """Samples from each line nvidia-smi prints, until it exits."""
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        bad_in_a_row = 0
        flood = _RateCheck(len(self._gpus) * 1000.0 / self.options["interval_ms"])
        for line in proc.stdout:
            self._write_log(line)
            rows = flood.count()
            if rows is not None:
                raise PowerSourceError(
                    f"nvidia-smi printed {rows[0]} rows in {rows[1]:.1f} s where -lms {self.options['interval_ms']} "
                    f"asks for about {flood.expected_per_s:.0f} a second: its output is not what was asked for"
                )
            batch = self._handle(line)
            if batch is not None:
                bad_in_a_row = 0
                yield batch
                continue
            bad_in_a_row += 1
            if bad_in_a_row == 1:
                self.warn(f"nvidia-smi printed a line that does not parse: {line.strip()[:120]!r}")
            if bad_in_a_row >= MAX_BAD_LINES:
                raise PowerSourceError(
                    f"nvidia-smi printed {MAX_BAD_LINES} lines in a row that do not parse, e.g. {line.strip()[:120]!r}"
                )
            yield []  # alive, though saying nothing useful
        if not self.stopping:
            code = proc.wait()
            last = self._last_error()[:300]
            raise PowerSourceError(
                f"nvidia-smi exited unexpectedly (code {code})" + (f": {last}" if last else "")
            )

    def _parse(self, line: str) -> dict | None:
        """A row as {column: text}, or None when it does not fit the header."""
        parts = [p.strip() for p in line.rstrip("\n").split(",")]
        if len(parts) != len(self._columns):
            return None
        row = dict(zip(self._columns, parts))
        if not row["index"].isdigit():
            return None
        return row

    def _handle(self, line: str) -> list[Sample] | None:
        """One output line as samples; None when it cannot be parsed."""
        if not line.strip():
            return []
        row = self._parse(line)
        if row is None:
            return None
        try:
            t = parse_timestamp(row["timestamp"])
        except ValueError:
            return None
        self._check_clock(t, row["timestamp"])
        batch = []
        for column, text in row.items():
            key = f"{row['index']}:{column}"
            channel = self._by_column.get(key)
            if channel is None:
                continue
            try:
                value = self._value(column, text, row)
            except ValueError:
                return None
            if value is not None:
                batch.append(Sample(channel.name, t, value))
                self._had_value.add(key)
            elif key in self._had_value:  # [N/A] and [Not Supported] are skipped, never zeros
                self._warn_once(
                    f"na:{key}",
                    f"nvidia-smi reports {column} of GPU {row['index']} as {text or 'empty'} since "
                    f"{row['timestamp']}; those readings are skipped, not read as 0",
                )
        return batch

    def _value(self, column: str, text: str, row: Mapping[str, str]) -> float | None:
        """A field's value: power in W by the header's unit (NaN, said once, for a value the
        header does not promise), a state as printed; None when nvidia-smi printed none.

        Raises:
            ValueError: a state value that is no number.
        """
        if column not in POWER_FIELDS:
            return parse_number(text)
        watts, why = power_reading(text, self._units.get(column))
        if why is None:
            return watts
        self._warn_once(
            f"unit:{column}",
            f"nvidia-smi printed {column} of GPU {row['index']} as {why} ({row['timestamp']}); such readings are "
            "not read as watts: they are kept out, and the windows around them are flagged invalid_reading",
        )
        return math.nan

    def _check_clock(self, t: float, stamp: str) -> None:
        """Rows stamped far from this machine's clock come from another clock or time zone.

        Raises:
            PowerSourceError: naming both times and the likely cause.
        """
        late = time.time() - t
        if abs(late) > FAR_S:
            now = dt.datetime.now().strftime("%Y/%m/%d %H:%M:%S")
            side = "ahead of" if late < 0 else "behind"
            raise PowerSourceError(
                f"nvidia-smi stamps its rows {abs(late):.0f} s {side} this machine's clock ({stamp} at {now}): "
                "it runs in another time zone than this process (check TZ), or its clock is not this machine's; "
                "no window could be covered"
            )
        if late > LATE_S:
            self._warn_once(
                "late", f"nvidia-smi rows arrive {late:.1f} s after their timestamps: it is falling behind"
            )

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.warn(message)

    def _write_log(self, line: str) -> None:
        for f in self._logs:
            f.write(line)
            f.flush()

    def close(self) -> None:
        for f in self._logs:
            f.close()
        self._logs = []

    def describe(self) -> Mapping[str, Any]:
        return self._info


class _RateCheck:
    """Counts rows per second; says (rows, seconds) once they come far faster than expected."""

    def __init__(self, expected_per_s: float) -> None:
        self.expected_per_s = expected_per_s
        self._since = time.monotonic()
        self._rows = 0

    def count(self) -> tuple[int, float] | None:
        self._rows += 1
        elapsed = time.monotonic() - self._since
        if elapsed < 1.0:
            if self._rows > FLOOD_FACTOR * self.expected_per_s + 100:
                return self._rows, max(elapsed, 1e-3)
            return None
        rows, self._since, self._rows = self._rows, time.monotonic(), 0
        return (rows, elapsed) if rows > FLOOD_FACTOR * self.expected_per_s * elapsed + 100 else None
