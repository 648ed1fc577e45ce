"""nvidia-smi's CSV format: the fields energyframe asks for, the names nvidia-smi prints for them,
and what their values mean. Shared by the live ``nvidia-smi`` source (which writes such a log)
and the offline log reader (``logs.py``, which reads it back, and the earlier tool's logs)."""

from __future__ import annotations

import re

#: power fields, preferred first: on Ampere and newer ``power.draw`` and ``power.draw.average``
#: are 1-second averages that lag the load; ``power.draw.instant`` does not
POWER_FIELDS = ("power.draw.instant", "power.draw", "power.draw.average")
#: state fields and the channel suffix and unit each becomes
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
#: ``power.draw`` and ``power.draw.average`` average over the last second (Ampere and newer). Units: s.
AVERAGE_WINDOW_S = 1.0
_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")


def header_name(text: str) -> str:
    """A header cell as the field name asked for: ``power.draw.instant [W]`` -> ``power.draw.instant``."""
    name = _UNIT.sub("", text.strip())
    return HEADER_ALIASES.get(name, name)
