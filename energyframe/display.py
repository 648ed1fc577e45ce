"""Formatting for people: SI prefixes, the summary table. Stored values are never formatted."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from .stats import Spread
from .windows import PhaseSummary

_PREFIXES = [(1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n")]


def si(value: float | None, unit: str, digits: int = 4) -> str:
    """``0.00123, "s"`` -> ``1.23 ms``; NaN or None -> ``-``."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if value == 0:
        return f"0 {unit}"
    magnitude = abs(value)
    for scale, prefix in _PREFIXES:
        if magnitude >= scale * 0.9995:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    scale, prefix = _PREFIXES[-1]
    return f"{value / scale:.{digits}g} {prefix}{unit}"


def relative_iqr(spread: Spread) -> str:
    if spread.n < 2 or not math.isfinite(spread.relative_iqr):
        return "-"
    return f"{100 * spread.relative_iqr:.2g}%"


def summary_table(summaries: Sequence[PhaseSummary], title: str | None = None) -> Table:
    """The table ``energyframe run``, ``show`` and ``RunResult.table()`` print."""
    table = Table(title=title, show_lines=False, header_style="bold")
    for name, justify in [
        ("phase", "left"),
        ("channel", "left"),
        ("trials", "right"),
        ("iters", "right"),
        ("time/iter", "right"),
        ("IQR", "right"),
        ("energy/iter", "right"),
        ("IQR", "right"),
        ("power", "right"),
        ("dyn. energy/iter", "right"),
        ("flags", "left"),
    ]:
        table.add_column(name, justify=justify, overflow="fold")
    for s in summaries:
        table.add_row(
            s.phase,
            s.channel or "(timing only)",
            str(s.trials),
            str(s.iterations),
            si(s.time_per_iter_s.median, "s"),
            relative_iqr(s.time_per_iter_s),
            si(s.energy_per_iter_j.median, "J"),
            relative_iqr(s.energy_per_iter_j),
            si(s.mean_power_w.median, "W"),
            si(s.dynamic_energy_per_iter_j.median, "J") if s.dynamic_energy_per_iter_j else "-",
            ", ".join(s.flags),
        )
    return table


def render(renderable, width: int = 140) -> str:
    """Render a rich object to plain text."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=False, color_system=None).print(renderable)
    return buffer.getvalue()
