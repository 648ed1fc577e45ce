"""A finished or saved run as channels, per-channel series and windows (for offline analysis).

Everything is on the run's Unix timeline (samples.parquet and windows.csv both are), which is
the monotonic timeline shifted by one constant: differences and integrals are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from energyframe.core.samples import SampleSeries
from energyframe.plugin import Channel
from energyframe.results.result import RunResult


@dataclass(frozen=True)
class RunData:
    """Args:
    meta: run.json.
    channels: every channel of every source, by name.
    series: each channel's samples, ascending. Units: s (Unix), channel units.
    windows: one row per window: phase, trial, start_s, end_s (Unix), iterations.
    """

    meta: dict
    channels: dict[str, Channel]
    series: dict[str, SampleSeries]
    windows: pd.DataFrame

    def counter_channels(self) -> list[str]:
        """Energy-counter channels whose finest shape (``Channel.shaped_by``: a 20-ms buffer) has
        samples (``gpuN``)."""
        return [
            name
            for name, c in self.channels.items()
            if c.quantity.value == "energy" and c.shaped_by and c.shaped_by[0].channel in self.series
        ]

    def phase(self, name: str) -> pd.DataFrame:
        """The windows of one phase, by trial."""
        return self.windows[self.windows["phase"] == name].sort_values("trial").reset_index(drop=True)


def from_result(result: RunResult) -> RunData:
    channels = {}
    for source in result.meta.get("sources", []):
        for c in source.get("channels", []):
            channel = Channel.from_json(c)
            channels[channel.name] = channel
    series = {}
    samples = result.samples
    for name, group in samples.groupby("channel", sort=False):
        g = group.sort_values("time_s", kind="stable")
        series[str(name)] = SampleSeries(g["time_s"].to_numpy(dtype=float), g["value"].to_numpy(dtype=float))
    w = result.windows
    columns = ["phase", "trial", "start_s", "end_s", "iterations"]
    windows = (
        w[columns].drop_duplicates(["phase", "trial"]).reset_index(drop=True)
        if not w.empty
        else pd.DataFrame(columns=columns)
    )
    return RunData(dict(result.meta), channels, series, windows)


def load_run(directory: Path | str) -> RunData:
    return from_result(RunResult.load(directory))


def gpu_info(meta: dict) -> tuple[str, str | None]:
    """(device name, driver version) from the nvml source's info, if any."""
    for source in meta.get("sources", []):
        info = source.get("info", {})
        gpus = info.get("gpus") or []
        if gpus:
            return str(gpus[0].get("name", "?")), info.get("driver_version")
    return "?", None


def window_energy_of(series: SampleSeries):
    """A function (start, end) -> energy of a power series, as energyframe integrates it."""
    from energyframe.core.energy import power_energy

    def energy(start_s: float, end_s: float) -> float:
        return power_energy(series.times_s, series.values, start_s, end_s).energy_j

    return energy


def counter_energy_of(series: SampleSeries):
    from energyframe.core.energy import counter_energy

    def energy(start_s: float, end_s: float) -> float:
        return counter_energy(series.times_s, series.values, start_s, end_s).energy_j

    return energy
