"""``nvml``: GPU energy from NVML's total-energy counter, interpolated between its ticks.

The counter (mJ since the driver loaded) changes every ~100 ms; every change is recorded with
its time, so a window's energy is exact at both edges instead of off by up to a tick per edge.
Instant power (field 186), 1-s average power (185) and the driver's 20-ms power-sample buffer
are recorded as secondary channels; SM and memory clocks, temperature and clock-event reasons
annotate each window, and windows where the GPU was throttled are flagged.

Sampling runs in a separate process by default (``mode=process``): one counter read blocks for
~3 ms in the driver, and polling it from the measured process would compete with it.
``mode=thread`` samples in a thread of the measured process instead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import OptionError, PowerSourceError
from ..interfaces import Channel, Detection, PowerSource, Sample, Scope, SourceContext, WindowAnnotation
from ..options import Option
from .nvml_sampler import (
    CHANNEL_KINDS,
    CLOCK_EVENT_REASONS,
    THROTTLING,
    Sampler,
    SamplerConfig,
    load_pynvml,
    nvml_error_message,
)

#: how long the sampler process may take to open NVML and the GPUs. Units: s.
START_TIMEOUT_S = 60.0


def cuda_visible_devices() -> str | None:
    """``CUDA_VISIBLE_DEVICES`` as UUIDs when torch has already initialised CUDA in this process
    (exact), else as set in the environment (indices are then read in PCI order)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    torch = sys.modules.get("torch")
    if torch is not None and value is not None:
        try:
            if torch.cuda.is_initialized():
                uuids = []
                for i in range(torch.cuda.device_count()):
                    uuids.append("GPU-" + str(torch.cuda.get_device_properties(i).uuid))
                return ",".join(uuids)
        except Exception:  # older torch without .uuid: fall back to the variable
            pass
    return value


class NVMLPowerSource(PowerSource):
    """NVIDIA GPUs through NVML (nvidia-ml-py)."""

    DESCRIPTION = "NVIDIA GPU energy: NVML counter interpolated between ticks, plus power and clocks"
    OPTIONS = (
        Option("gpus", "list", None, "NVML indices or UUIDs (default: the GPUs CUDA sees, else all)"),
        Option(
            "interval_ms",
            "float",
            1.0,
            "pause between two counter polls (a poll takes ~3 ms). Units: ms",
            minimum=0.0,
        ),
        Option(
            "channels",
            "list",
            CHANNEL_KINDS,
            "what to record besides the counter: instant, average, samples, state",
        ),
        Option(
            "mode",
            "choice",
            "process",
            "sample in a separate process, or a thread of this one",
            choices=("process", "thread"),
        ),
    )
    AUTO_PRIORITY = 100
    AUTO_SCOPE = Scope.GPU

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        unknown = set(self.options["channels"]) - set(CHANNEL_KINDS)
        if unknown:
            raise OptionError(
                f"option 'channels' of power source {self.name!r} has unknown kind(s) {sorted(unknown)}; "
                f"valid: {', '.join(CHANNEL_KINDS)}"
            )
        self._channels: list[Channel] = []
        self._info: dict = {}
        self._warnings: list[str] = []
        self._pending: list[Sample] = []
        self._lock = threading.Lock()
        self._error: str | None = None
        self._warn = print
        # process mode
        self._proc: subprocess.Popen | None = None
        self._out_path: Path | None = None
        self._out_is_temporary = False
        self._closed = False
        self._offset = 0
        self._partial = ""
        self._index: list[str] = []
        self._stopping = False
        self._done = False
        # thread mode
        self._sampler: Sampler | None = None

    @classmethod
    def detect(cls) -> Detection:
        try:
            nvml = load_pynvml()
        except PowerSourceError as e:
            return Detection(False, str(e))
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            return Detection(False, nvml_error_message(nvml, e, "start"))
        try:
            count = nvml.nvmlDeviceGetCount()
            names = sorted(
                {str(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)}
            )
        except nvml.NVMLError as e:
            return Detection(False, nvml_error_message(nvml, e, "list the GPUs"))
        finally:
            nvml.nvmlShutdown()
        if count == 0:
            return Detection(False, "NVML sees no GPU")
        return Detection(True, f"{count} GPU(s): {', '.join(names)}")

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, context: SourceContext) -> Sequence[Channel]:
        self._warn = context.warn
        kinds = list(self.options["channels"])
        requested = list(self.options["gpus"]) if self.options["gpus"] else None
        interval_s = self.options["interval_ms"] / 1e3
        visible = cuda_visible_devices()
        if self.options["mode"] == "thread":
            self._sampler = Sampler(
                load_pynvml(), requested, kinds, interval_s, self._take, self._note, visible
            )
            self._channels, self._info = self._sampler.open()
            self._sampler.start()
        else:
            self._start_process(SamplerConfig(requested, kinds, interval_s, visible), context.raw_dir)
        self._info["mode"] = self.options["mode"]
        for warning in self._warnings:
            context.warn(warning)
        return self._channels

    def _take(self, batch: list[Sample]) -> None:
        with self._lock:
            self._pending.extend(batch)

    def _note(self, message: str) -> None:
        self._warnings.append(message)
        if self._channels:  # after start: report at once
            self._warn(message)

    def _start_process(self, config: SamplerConfig, raw_dir: Path | None) -> None:
        if raw_dir is not None:
            raw_dir.mkdir(parents=True, exist_ok=True)
            self._out_path = raw_dir / "nvml-sampler.log"
            log = open(raw_dir / "nvml-sampler.stderr", "w")
        else:
            fd, name = tempfile.mkstemp(prefix="energyframe-nvml-", suffix=".log")
            os.close(fd)
            self._out_path = Path(name)
            self._out_is_temporary = True
            log = subprocess.DEVNULL
        self._out_path.write_text("")
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "energyframe.power.nvml_sampler",
                    config.to_json(),
                    str(self._out_path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # a Ctrl-C in the terminal reaches us, and we stop it cleanly
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._channels:
            self._read_lines()
            if self._error is not None:
                self._reap()
                raise PowerSourceError(self._error)
            if self._proc.poll() is not None and not self._channels:
                self._read_lines()
                if self._channels:
                    break
                if self._error is not None:
                    raise PowerSourceError(self._error)
                raise PowerSourceError(
                    f"the NVML sampler process exited with code {self._proc.returncode} before it started"
                    + self._stderr_tail(raw_dir)
                )
            if time.monotonic() > deadline:
                self._reap()
                raise PowerSourceError(
                    f"the NVML sampler did not open the GPUs within {START_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.01)

    def _stderr_tail(self, raw_dir: Path | None) -> str:
        if raw_dir is None or not (raw_dir / "nvml-sampler.stderr").exists():
            return ""
        text = (raw_dir / "nvml-sampler.stderr").read_text().strip().splitlines()
        return (": " + text[-1]) if text else ""

    def _read_lines(self) -> None:
        """Parse what the sampler process appended since the last call."""
        assert self._out_path is not None
        with open(self._out_path) as f:
            f.seek(self._offset)
            chunk = f.read()
            self._offset = f.tell()
        if not chunk:
            return
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()  # an incomplete last line waits for the rest
        batch = []
        for line in lines:
            kind, _, rest = line.partition(",")
            if kind == "S":
                index, t, value = rest.split(",")
                batch.append(Sample(self._index[int(index)], float(t), float(value)))
            elif kind == "C":
                header = json.loads(rest)
                self._channels = [Channel.from_json(c) for c in header["channels"]]
                self._index = [c.name for c in self._channels]
                self._info = header["info"]
            elif kind == "W":
                self._note(rest)
            elif kind == "E":
                self._error = rest
            elif kind == "Q":
                self._done = True
        if batch:
            self._take(batch)

    def read(self) -> list[Sample]:
        if self._proc is not None and not self._closed:
            self._read_lines()
            if (
                self._error is None
                and not self._stopping
                and self._proc.poll() is not None
                and not self._done
            ):
                self._read_lines()
                if self._error is None:
                    self._error = f"the NVML sampler process died (exit code {self._proc.returncode})"
        elif self._sampler is not None and self._sampler.error:
            self._error = self._sampler.error
        with self._lock:
            out, self._pending = self._pending, []
        if not out and self._error is not None:
            raise PowerSourceError(self._error)
        return out

    def stop(self) -> None:
        self._stopping = True
        if self._sampler is not None:
            self._sampler.stop()
            return
        self._reap()
        if self._out_path is not None and not self._closed:
            self._read_lines()  # what the sampler wrote last stays readable after stop()
            self._closed = True
            if self._out_is_temporary:
                self._out_path.unlink(missing_ok=True)

    def _reap(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def info(self) -> Mapping[str, Any]:
        return self._info

    # -- per-window annotations --------------------------------------------------------------
    def annotate(self, channel, start_s, end_s, series) -> WindowAnnotation:
        gpu = channel.name.split(".")[0]
        columns: dict[str, Any] = {}
        flags: list[str] = []
        for suffix, column, how in (
            ("sm_clock", "sm_clock_mhz", "mean"),
            ("mem_clock", "mem_clock_mhz", "mean"),
            ("temperature", "temperature_c", "max"),
        ):
            s = series.get(f"{gpu}.{suffix}")
            if s is not None:
                inside = s.between(start_s, end_s)
                if len(inside):
                    columns[column] = float(
                        np.mean(inside.values) if how == "mean" else np.max(inside.values)
                    )
        events = series.get(f"{gpu}.clock_events")
        if events is not None:
            inside = events.between(start_s, end_s)
            if len(inside):
                bits = 0
                for value in inside.values:
                    bits |= int(value)
                columns["clock_event_reasons"] = f"0x{bits:x}"
                active = [name for bit, name in CLOCK_EVENT_REASONS.items() if bits & bit]
                flags += [f"throttled:{name}" for name in active if name in THROTTLING]
        return WindowAnnotation(columns, tuple(flags))
