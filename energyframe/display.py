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


_UNITS = {"_s": "s", "_j": "J", "_w": "W", "_wh": "Wh"}


def cell(column: str, value) -> str:
    """A derived-table value for people: SI prefixes by the unit in the column name."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if column.endswith("_per_s"):
        return f"{value:.4g}/s"
    if column.endswith("_pct"):
        return f"{value:+.2f}%" if "error" in column or "diff" in column else f"{value:.2f}%"
    for suffix, unit in _UNITS.items():
        if column.endswith(suffix):
            return si(float(value), unit)
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def derived_table(table) -> Table:
    """A workload's DerivedTable; a one-row table is shown as name/value pairs."""
    columns: list[str] = list(table.display)
    if not columns:
        for row in table.rows:
            columns += [c for c in row if c not in columns]
    caption = table.note or None
    if len(table.rows) == 1:
        out = Table(title=table.title, caption=caption, caption_justify="left", show_header=False)
        out.add_column("figure")
        out.add_column("value", justify="right")
        row = table.rows[0]
        for column in columns:
            out.add_row(column, cell(column, row.get(column)))
        return out
    out = Table(title=table.title, header_style="bold", caption=caption, caption_justify="left")
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in table.rows:
        out.add_row(*(cell(c, row.get(c)) for c in columns))
    return out


def render(renderable, width: int = 140) -> str:
    """Render a rich object to plain text."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=False, color_system=None).print(renderable)
    return buffer.getvalue()
