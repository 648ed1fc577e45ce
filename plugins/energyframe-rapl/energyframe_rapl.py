"""``rapl``: CPU package and DRAM energy from Linux powercap (Intel RAPL; AMD exposes the same).

Each zone's ``energy_uj`` is a cumulative counter in µJ that the CPU updates about once a
millisecond (``update_ms``) and that wraps at ``max_energy_range_uj``. The counter's update
period is the channels' ``resolution_s``; the polling base (``energyframe.plugin.PollingSource``)
reads every zone every ``interval_ms``, faster than that, and stamps each tick midway between the
poll that last saw the old value and the first that sees the new one (``Dedup.AUTO`` makes the
channels ``TICKS``). The wraps are undone here; a counter that falls back far below the wrap
range (a driver reload) is a reset, passed on as the decrease it is, so that energyframe flags
the windows across it ``counter_reset`` instead of adding a wrap range of energy.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from energyframe.plugin import (
    Channel,
    ClockBase,
    Detection,
    Option,
    PollingSource,
    PowerSourceError,
    Quantity,
    Scope,
    Timing,
    mode_option,
)

DEFAULT_ROOT = Path("/sys/class/powercap")
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")
_PERMISSION_HINT = (
    "since Linux 5.10 the RAPL counters are readable by root only; run as root, or grant read "
    "access with: sudo chmod o+r {root}/intel-rapl:*/energy_uj"
)
#: no RAPL zone draws this much: a counter that fell back so far that undoing a wrap would mean
#: more than this since the last poll was reset (a driver reload), not wrapped. Units: W.
MAX_ZONE_POWER_W = 10_000.0


@dataclass
class _Zone:
    path: Path
    name: str  # package-0, dram, core, uncore, psys
    channel: Channel
    max_range_uj: int
    last_raw_uj: int | None = None
    last_read_s: float = 0.0
    wraps: int = 0
    resets: int = 0

    def energy_j(self, raw_uj: int, now_s: float) -> float:
        """The counter in J since the source opened, wraps undone. A reset is passed on as the
        decrease it is (energyframe flags the windows across it ``counter_reset``)."""
        last = self.last_raw_uj
        if last is not None and raw_uj < last:
            wrapped_j = (raw_uj + self.max_range_uj - last) * 1e-6
            if wrapped_j <= MAX_ZONE_POWER_W * max(now_s - self.last_read_s, 1e-3):
                self.wraps += 1  # the counter wrapped; a decrease is never negative energy
            else:
                self.resets += 1
        self.last_raw_uj, self.last_read_s = raw_uj, now_s
        return (raw_uj + self.wraps * self.max_range_uj) * 1e-6


def _read_int(path: Path, root: Path) -> int:
    try:
        return int(path.read_text().strip())
    except PermissionError as e:
        raise PowerSourceError(
            f"cannot read {path}: permission denied; " + _PERMISSION_HINT.format(root=root)
        ) from e
    except (OSError, ValueError) as e:
        raise PowerSourceError(f"cannot read {path}: {e}") from e


def _channel_for(package: int, sub: int | None, name: str, resolution_s: float) -> Channel:
    if name == "psys":
        return Channel(
            "psys",
            Quantity.ENERGY,
            Scope.OTHER,
            resolution_s,
            ClockBase.MONOTONIC,
            description="RAPL platform (psys) energy",
            timing=Timing.EXACT,
        )
    if sub is None:
        return Channel(
            f"cpu{package}",
            Quantity.ENERGY,
            Scope.CPU,
            resolution_s,
            ClockBase.MONOTONIC,
            description=f"RAPL {name} energy",
            timing=Timing.EXACT,
        )
    scope = Scope.DRAM if name == "dram" else Scope.CPU
    return Channel(
        f"cpu{package}.{name}",
        Quantity.ENERGY,
        scope,
        resolution_s,
        ClockBase.MONOTONIC,
        primary=name == "dram",
        description=f"RAPL {name} energy of package {package}",
        timing=Timing.EXACT,
    )


def find_zones(root: Path) -> list[tuple[Path, int, int | None, str]]:
    """Every RAPL zone under ``root``: (path, package, subzone, name), in a stable order."""
    found = []
    if not root.is_dir():
        return found
    for entry in sorted(root.iterdir()):
        match = _ZONE.match(entry.name)
        if not match or not (entry / "energy_uj").exists():
            continue
        package = int(match.group(1))
        sub = int(match.group(2)) if match.group(2) is not None else None
        name = (entry / "name").read_text().strip() if (entry / "name").exists() else entry.name
        found.append((entry, package, sub, name))
    return found


class RAPLPowerSource(PollingSource):
    """CPU package and DRAM energy counters from Linux powercap."""

    DESCRIPTION = "CPU package and DRAM energy from Linux powercap (RAPL)"
    OPTIONS = (
        Option("root", "path", DEFAULT_ROOT, "powercap folder (a fake tree for tests)"),
        Option("zones", "list", None, "zone names to keep, e.g. package-0,dram (default: all)"),
        Option("update_ms", "float", 1.0, "how often the CPU updates the counters (about 1 ms). Units: ms",
               minimum=0.1),
        Option("interval_ms", "float", 0.5, "polling period, shorter than update_ms. Units: ms", minimum=0.05),
        mode_option("process"),
    )
    AUTO_PRIORITY = 10
    AUTO_SCOPE = Scope.CPU

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        self._zones: list[_Zone] = []

    @classmethod
    def detect(cls) -> Detection:
        zones = find_zones(DEFAULT_ROOT)
        if not zones:
            return Detection(False, f"no RAPL zones under {DEFAULT_ROOT}")
        try:
            _read_int(zones[0][0] / "energy_uj", DEFAULT_ROOT)
        except PowerSourceError as e:
            return Detection(False, str(e))
        return Detection(True, f"{len(zones)} RAPL zone(s)")

    def open(self) -> Sequence[Channel]:
        root: Path = self.options["root"]
        wanted = self.options["zones"]
        zones = find_zones(root)
        if not zones:
            raise PowerSourceError(
                f"no RAPL zones under {root} (this CPU, kernel or virtual machine does not expose "
                "powercap; check that the intel_rapl_common or amd_energy driver is loaded)"
            )
        if wanted:
            names = {z[3] for z in zones}
            unknown = sorted(set(wanted) - names)
            if unknown:
                raise PowerSourceError(
                    f"no RAPL zone named {unknown[0]!r}; zones here: {', '.join(sorted(names))}"
                )
            zones = [z for z in zones if z[3] in wanted]
        if self.options["interval_ms"] >= self.options["update_ms"]:
            raise PowerSourceError(
                f"interval_ms={self.options['interval_ms']:g} does not poll faster than the counters update "
                f"(update_ms={self.options['update_ms']:g}): their ticks would alias; give a smaller interval_ms"
            )
        resolution_s = self.options["update_ms"] / 1e3  # how often the counter changes, not how often it is read
        self._zones = [
            _Zone(
                path,
                name,
                _channel_for(package, sub, name, resolution_s),
                _read_int(path / "max_energy_range_uj", root),
            )
            for path, package, sub, name in zones
        ]
        self.poll()  # fails here, before the run starts, when the counters are unreadable
        return [z.channel for z in self._zones]

    def poll(self) -> dict[str, float]:
        root = self.options["root"]
        readings = {}
        for zone in self._zones:
            resets = zone.resets
            readings[zone.channel.name] = zone.energy_j(_read_int(zone.path / "energy_uj", root), time.monotonic())
            if zone.resets > resets:
                self.warn(
                    f"the RAPL counter of {zone.path.name} ({zone.name}) was reset (it fell back further than "
                    "a wraparound allows): the windows across it are flagged counter_reset"
                )
        return readings

    def describe(self) -> Mapping[str, Any]:
        return {
            "root": str(self.options["root"]),
            "zones": {
                z.channel.name: {"zone": z.path.name, "name": z.name, "wraps": z.wraps, "resets": z.resets}
                for z in self._zones
            },
        }
