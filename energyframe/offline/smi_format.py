"""nvidia-smi's CSV format: the fields energyframe asks for, the names nvidia-smi prints for them,
and what their values mean. Shared by the live ``nvidia-smi`` source (which writes such a log)
and the offline log reader (``logs/nvidia_smi_csv.py``, which reads it back, and the earlier
tool's logs): both read a power value by ``power_reading``, so a unit is handled one way.

A power column's unit comes from its header (``power.draw.instant [W]``; W when the header
names none) and, when nvidia-smi prints one, from the value (``131.60 W``): mW and kW are
converted to W. A value in a unit the header does not promise (``129840 mW`` under ``[W]``),
in no unit energyframe knows, or that is no decimal number (``0xFFFF``) is refused, never read
as watts.
"""

from __future__ import annotations

import re

import numpy as np

from ..core.samples import POWER_UNITS

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
#: what nvidia-smi (and loggers) print for a reading they do not have, lower case
MISSING_TEXT = frozenset(
    {"", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "unknown error", "-"}
)
_UNIT = re.compile(r"\s*\[([^\]]*)\]\s*$")
_HEX = re.compile(r"[-+]?0x", re.IGNORECASE)
_VALUE = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)\s*(\S*)", re.IGNORECASE)


def header_name(text: str) -> str:
    """A header cell as the field name asked for: ``power.draw.instant [W]`` -> ``power.draw.instant``."""
    name = _UNIT.sub("", text.strip())
    return HEADER_ALIASES.get(name, name)


def header_unit(text: str) -> str | None:
    """The unit a header cell names: ``power.draw.instant [W]`` -> ``W``; None when it names none."""
    match = _UNIT.search(text.strip())
    return match.group(1).strip() if match else None


def check_power_header(field: str, unit: str | None) -> str | None:
    """Why a power column of this unit cannot be read (None when it can: W, mW, kW, or none)."""
    if unit is None or unit in POWER_UNITS:
        return None
    return f"nvidia-smi's header gives {field} in {unit!r}, not a unit of power energyframe knows (W, mW, kW)"


def power_reading(text: str, unit: str | None) -> tuple[float | None, str | None]:
    """A power value as nvidia-smi printed it, in W, under a header of ``unit``.

    Returns:
        (watts, None); (None, None) when nvidia-smi printed no value (``[N/A]``); (None, why)
        when the value is not one the header promises.
    """
    text = text.strip()
    if text.lower() in MISSING_TEXT:
        return None, None
    match = None if _HEX.match(text) else _VALUE.fullmatch(text)
    if match is None:
        what = "a hexadecimal value" if _HEX.match(text) else "no decimal number"
        return None, f"{text!r} is {what}, not a power"
    written = match.group(2)
    why = _unit_problem(text, written, unit)
    if why is not None:
        return None, why
    return float(match.group(1)) * POWER_UNITS[written or unit or "W"], None


def _unit_problem(text: str, written: str | None, unit: str | None) -> str | None:
    """Why a value printed with its own unit (``written``, if any) cannot be read under a header
    of ``unit``: another unit than the header promises, or one energyframe does not know."""
    if written and unit is not None and written != unit:
        return f"{text!r} is in {written}, but the header promises {unit}"
    if POWER_UNITS.get(written or unit or "W") is None:
        return f"{text!r} is in {written!r}, not a unit of power energyframe knows (W, mW, kW)"
    return None


def power_readings(texts, unit: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, str | None]:
    """``power_reading`` of a whole column (each distinct text read once).

    Returns:
        values in W (NaN where none), whether each row has one, whether each was refused, and
        why the first refused one was.
    """
    import pandas as pd

    codes, distinct = pd.factorize(pd.Series(list(texts), dtype=object).astype(str), sort=False)
    read = [power_reading(text, unit) for text in distinct] or [(None, None)]
    value_of = np.array([np.nan if v is None else v for v, _why in read], dtype=float)
    present_of = np.array([v is not None for v, _why in read], dtype=bool)
    refused_of = np.array([why is not None for _v, why in read], dtype=bool)
    refused = refused_of[codes]
    first = read[codes[refused][0]][1] if refused.any() else None
    return value_of[codes], present_of[codes], refused, first
