"""``nvidia-smi``: GPU power from one long-lived ``nvidia-smi --query-gpu ... -lms N`` child.

For machines where NVML's Python bindings cannot be used, and for users of the earlier tool who
want its CSV log. The child is started once (a new process per reading costs ~0.5 s), read line
by line on a thread, and parsed by header name. ``power.draw.instant`` is preferred: on Ampere
and newer ``power.draw`` and ``power.draw.average`` are 1-second averages that lag the load.
Timestamps are nvidia-smi's (local time, ms) and are mapped onto the run's timeline.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import PowerSourceError
from ..interfaces import Channel, ClockBase, Detection, PowerSource, Quantity, Sample, Scope, SourceContext
from ..options import Option

POWER_FIELDS = ("power.draw.instant", "power.draw", "power.draw.average")
STATE_FIELDS = {
    "clocks.sm": ("sm_clock", "MHz"),
    "clocks.mem": ("mem_clock", "MHz"),
    "temperature.gpu": ("temperature", "C"),
    "clocks_event_reasons.active": ("clock_events", "bits"),
}
#: header names nvidia-smi prints for the fields we ask for (it renames some)
HEADER_ALIASES = {
    "clocks.current.sm": "clocks.sm",
    "clocks.current.memory": "clocks.mem",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",
}
MISSING = {"[N/A]", "N/A", "[Not Supported]", "Not Supported", "[Unknown Error]", ""}
#: rows that arrive later than this after nvidia-smi stamped them mean it cannot keep up. Units: s.
LATE_S = 1.0
#: this many unparsable lines in a row mean the output is not what we asked for
MAX_BAD_LINES = 20
_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")


def header_name(text: str) -> str:
    name = _UNIT.sub("", text.strip())
    return HEADER_ALIASES.get(name, name)


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


class NvidiaSmiPowerSource(PowerSource):
    """GPU power read from a running ``nvidia-smi`` (one child, read continuously)."""

    DESCRIPTION = "NVIDIA GPU power from one long-lived nvidia-smi child (CSV, parsed by header)"
    OPTIONS = (
        Option("interval_ms", "int", 20, "nvidia-smi's -lms period. Units: ms", minimum=1),
        Option("gpus", "list", None, "GPU indices or UUIDs for nvidia-smi -i (default: all)"),
        Option("log", "path", None, "also write nvidia-smi's raw CSV to this file"),
        Option("prefix", "str", "", "prepended to channel names (to run beside the nvml source)"),
        Option("executable", "str", "nvidia-smi", "the nvidia-smi program"),
    )
    AUTO_PRIORITY = 50
    AUTO_SCOPE = Scope.GPU

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        self._proc: subprocess.Popen | None = None
        self._thread: threading.Thread | None = None
        self._pending: list[Sample] = []
        self._lock = threading.Lock()
        self._error: str | None = None
        self._stopping = False
        self._channels: dict[str, Channel] = {}
        self._info: dict = {}
        self._warn = print
        self._logs: list = []

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

    def start(self, context: SourceContext) -> Sequence[Channel]:
        self._warn = context.warn
        exe = shutil.which(self.options["executable"])
        if exe is None:
            raise PowerSourceError(
                f"{self.options['executable']!r} is not on PATH (is the NVIDIA driver installed?)"
            )
        try:
            known = supported_fields(exe)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise PowerSourceError(f"could not run {exe} --help-query-gpu: {e}") from e
        power = [f for f in POWER_FIELDS if f in known]
        if not power:
            raise PowerSourceError(f"{exe} offers none of the power fields {', '.join(POWER_FIELDS)}")
        self._power_field = power[0]
        fields = ["timestamp", "index", "uuid", *power, *[f for f in STATE_FIELDS if f in known]]
        select = ["-i", ",".join(self.options["gpus"])] if self.options["gpus"] else []
        self._gpus = self._list_gpus(exe, select)
        cmd = [
            exe,
            f"--query-gpu={','.join(fields)}",
            "--format=csv,nounits",
            "-lms",
            str(self.options["interval_ms"]),
            *select,
        ]
        for path in (context.raw_dir / "nvidia-smi.csv" if context.raw_dir else None, self.options["log"]):
            if path is not None:
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                self._logs.append(open(path, "w"))
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
        except OSError as e:
            raise PowerSourceError(f"could not start {exe}: {e}") from e
        header = self._proc.stdout.readline()
        if not header:
            err = self._proc.stderr.read().strip()
            self._proc.wait()
            raise PowerSourceError(f"nvidia-smi exited at once (code {self._proc.returncode}): {err[:300]}")
        self._write_log(header)
        self._columns = [header_name(h) for h in header.split(",")]
        missing = {"timestamp", "index", self._power_field} - set(self._columns)
        if missing:
            self._reap()
            raise PowerSourceError(f"nvidia-smi's header lacks {sorted(missing)}: {header.strip()!r}")
        self._make_channels()
        self._info = {"command": cmd, "power_field": self._power_field, "fields": fields, "gpus": self._gpus}
        if self._power_field != "power.draw.instant":
            context.warn(
                f"this nvidia-smi has no power.draw.instant; using {self._power_field}, which on Ampere and newer "
                "is a 1-s average that lags changes of load"
            )
        self._thread = threading.Thread(target=self._read_loop, name="energyframe-nvidia-smi", daemon=True)
        self._thread.start()
        return list(self._channels.values())

    @staticmethod
    def _list_gpus(exe: str, select: list[str]) -> list[str]:
        """The indices of the GPUs to read (one short nvidia-smi call before the long one)."""
        try:
            proc = subprocess.run(
                [exe, "--query-gpu=index", "--format=csv,noheader", *select],
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
        for index in self._gpus:
            base = f"{prefix}gpu{index}"
            self._channels[f"{index}:{self._power_field}"] = Channel(
                base,
                Quantity.POWER,
                Scope.GPU,
                max(period, 0.1),
                ClockBase.WALL,
                description=f"nvidia-smi {self._power_field}",
            )
            if self._power_field != "power.draw.average" and "power.draw.average" in self._columns:
                self._channels[f"{index}:power.draw.average"] = Channel(
                    f"{base}.power_average",
                    Quantity.POWER,
                    Scope.GPU,
                    max(period, 0.1),
                    ClockBase.WALL,
                    primary=False,
                    description="nvidia-smi power.draw.average: a 1-s average that lags the load",
                )
            for field, (suffix, unit) in STATE_FIELDS.items():
                if field in self._columns:
                    self._channels[f"{index}:{field}"] = Channel(
                        f"{base}.{suffix}",
                        Quantity.STATE,
                        Scope.GPU,
                        period,
                        ClockBase.WALL,
                        unit=unit,
                        primary=False,
                        description=f"nvidia-smi {field}",
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

    def _handle(self, line: str) -> bool:
        """Turn one output line into samples; False when it cannot be parsed."""
        if not line.strip():
            return True
        row = self._parse(line)
        if row is None:
            return False
        try:
            t = parse_timestamp(row["timestamp"])
        except ValueError:
            return False
        batch = []
        for column, text in row.items():
            channel = self._channels.get(f"{row['index']}:{column}")
            if channel is None:
                continue
            try:
                value = parse_number(text)
            except ValueError:
                return False
            if value is not None:  # [N/A] and [Not Supported] are skipped, not zeros
                batch.append(Sample(channel.name, t, value))
        arrival = time.time()
        if arrival - t > LATE_S and not getattr(self, "_warned_late", False):
            self._warned_late = True
            self._warn(
                f"nvidia-smi rows arrive {arrival - t:.1f} s after their timestamps: it is falling behind"
            )
        with self._lock:
            self._pending.extend(batch)
        return True

    def _write_log(self, line: str) -> None:
        for f in self._logs:
            f.write(line)
            f.flush()

    def _read_loop(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        bad_in_a_row = 0
        for line in self._proc.stdout:
            self._write_log(line)
            if self._handle(line):
                bad_in_a_row = 0
                continue
            bad_in_a_row += 1
            if bad_in_a_row == 1:
                self._warn(f"nvidia-smi printed a line that does not parse: {line.strip()[:120]!r}")
            if bad_in_a_row >= MAX_BAD_LINES:
                self._error = f"nvidia-smi printed {MAX_BAD_LINES} lines in a row that do not parse, e.g. {line.strip()[:120]!r}"
                self._reap()
                return
        if not self._stopping:
            code = self._proc.wait()
            err = self._proc.stderr.read().strip() if self._proc.stderr else ""
            self._error = f"nvidia-smi exited unexpectedly (code {code})" + (f": {err[:300]}" if err else "")

    def read(self) -> list[Sample]:
        with self._lock:
            out, self._pending = self._pending, []
        if not out and self._error is not None:
            raise PowerSourceError(self._error)
        return out

    def stop(self) -> None:
        self._stopping = True
        self._reap()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for f in self._logs:
            f.close()
        self._logs = []

    def _reap(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def info(self) -> Mapping[str, Any]:
        return self._info
