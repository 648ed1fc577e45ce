"""``rapl``: CPU package and DRAM energy from Linux powercap (Intel RAPL; AMD exposes the same).

Each zone's ``energy_uj`` is a cumulative counter in µJ that wraps at ``max_energy_range_uj``.
The polling base (``energyframe.kit.polling``) reads every zone every ``interval_ms`` in a thread and
stamps each reading at the middle of the poll; the wraps are undone here. energyframe
interpolates the counter at window edges.
"""

from __future__ import annotations

import re
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
)

DEFAULT_ROOT = Path("/sys/class/powercap")
_ZONE = re.compile(r"^intel-rapl:(\d+)(?::(\d+))?$")
_PERMISSION_HINT = (
    "since Linux 5.10 the RAPL counters are readable by root only; run as root, or grant read "
    "access with: sudo chmod o+r {root}/intel-rapl:*/energy_uj"
)


@dataclass
class _Zone:
    path: Path
    name: str  # package-0, dram, core, uncore, psys
    channel: Channel
    max_range_uj: int
    last_raw_uj: int | None = None
    wraps: int = 0

    def energy_j(self, raw_uj: int) -> float:
        if self.last_raw_uj is not None and raw_uj < self.last_raw_uj:
            self.wraps += 1  # the counter wrapped; a decrease is never negative energy
        self.last_raw_uj = raw_uj
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
        Option("interval_ms", "float", 10.0, "polling period. Units: ms", minimum=1.0),
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
        resolution_s = self.options["interval_ms"] / 1e3
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
        return {z.channel.name: z.energy_j(_read_int(z.path / "energy_uj", root)) for z in self._zones}

    def describe(self) -> Mapping[str, Any]:
        return {
            "root": str(self.options["root"]),
            "zones": {
                z.channel.name: {"zone": z.path.name, "name": z.name, "wraps": z.wraps} for z in self._zones
            },
        }
