"""Formatting for people: SI prefixes, the summary table. Stored values are never formatted.

Text that comes from a run (a phase or window name, a channel, a warning, a path, an error)
reaches the terminal through ``printable``: a control character is shown as its escape
(``\x1b``), so a name holding ``ESC ] 0;... BEL ESC [2J`` cannot retitle the window, clear the
screen or move the cursor; in rich tables and lines (``cell_text``) its ``[markup]`` is shown as
written too.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core.stats import Spread
from ..core.summary import PhaseSummary

_PREFIXES = [(1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n")]

#: what a terminal acts on rather than shows: C0 controls (ESC, BEL, CR, backspace...), DEL, C1
#: controls (0x9b is a one-byte CSI), and the marks that reverse the direction text is shown in
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_KEEPING_LINES = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object, lines: bool = False) -> str:
    """``value`` as text a terminal shows as written: every control character as its escape
    (``"a\x1b[2Jb"`` -> ``a\\x1b[2Jb``). ``lines``: keep line ends (a message of several lines)."""
    return (_CONTROL_KEEPING_LINES if lines else _CONTROL).sub(_escaped, str(value))


def cell_text(value: object) -> str:
    """``printable`` for rich (a table cell, a printed line): its ``[markup]`` shown as written."""
    return escape(printable(value))


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


def plain_number(value: object, digits: int = 4) -> str:
    """A number for people, without the float's noise: ``digits`` significant digits
    (``0.9999994`` -> ``1``, ``0.0999999`` -> ``0.1``, ``0.300217`` -> ``0.3002``), and from
    10 000 up, the whole number and its milliths (a Unix time ``1795905125.4656925`` ->
    ``1795905125.466``), where ``:g`` would write ``1.79591e+09``. NaN or None -> ``-``;
    anything not a number as it is."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if abs(value) >= 10_000:
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{value:.{digits}g}"


#: plurals that do not end in a plain ``s``
_IRREGULAR = {"queries": "query", "batches": "batch", "boxes": "box", "series": "series", "data": "datum"}


def singular(unit: str) -> str:
    """A unit of work as it reads after a slash or a number of one: ``items`` -> ``item``,
    ``tokens`` -> ``token``, ``queries`` -> ``query`` (``J/item``, not ``J/items``); a unit that
    is not a plural is left as it is (``s``, ``flop``, ``GB``)."""
    if unit in _IRREGULAR:
        return _IRREGULAR[unit]
    if len(unit) > 3 and unit.endswith("ies"):
        return unit[:-3] + "y"
    if len(unit) > 2 and unit.endswith("s") and not unit.endswith(("ss", "us", "is")) and unit[-2].islower():
        return unit[:-1]
    return unit


def percent(fraction: float) -> str:
    """``0.021`` -> ``2.1%``, ``1.1`` -> ``110%``: two significant digits, never exponents."""
    value = 100 * fraction
    if abs(value) >= 10:
        return f"{value:.0f}%"
    return f"{value:.2g}%"


def relative_iqr(spread: Spread) -> str:
    if spread.n < 2 or not math.isfinite(spread.relative_iqr):
        return "-"
    return percent(spread.relative_iqr)


def trials_cell(s: PhaseSummary) -> str:
    """Trials measured, and how many of them have an energy when not all do (never hidden)."""
    if s.channel and s.energy_per_iter_j.n < s.trials:
        return f"{s.energy_per_iter_j.n} of {s.trials}"
    return str(s.trials)


def bound_text(pct: float) -> str:
    """``0.91`` -> ``± 0.9 %``: the 95 % bound of a figure, two significant digits."""
    if not math.isfinite(pct):
        return ""
    return f"± {pct:.2g} %" if pct < 10 else f"± {pct:.0f} %"


def with_bound(value: str, pct: float) -> str:
    """``1.011 J`` and 0.91 -> ``1.011 J ± 0.9 %`` (the value alone without a bound)."""
    text = bound_text(pct)
    return f"{value} {text}" if text and value != "-" else value


def _with_spread(value: str, spread: Spread) -> str:
    spread_text = relative_iqr(spread)
    return value if spread_text == "-" else f"{value} ±{spread_text}"


#: columns of text (left-aligned); the others hold figures
_TEXT_COLUMNS = ("phase", "channel", "flags")


def _add_columns(table: Table, names: Sequence[str]) -> None:
    """Text columns left-aligned, figures right-aligned; a long cell folds."""
    for name in names:
        table.add_column(name, justify="left" if name in _TEXT_COLUMNS else "right", overflow="fold")


def summary_table(summaries: Sequence[PhaseSummary], title: str | None = None, wide: bool = True) -> Table:
    """The table ``energyframe run``, ``show`` and ``RunResult.table()`` print.

    ``wide=False`` fits a terminal: the spread (IQR/median) joins the time, the 95 % bound
    (``uncertainty.py``) the energy, and the iteration count and dynamic energy (when no phase
    has one) are left out.
    """
    table = Table(title=cell_text(title) if title is not None else None, show_lines=False, header_style="bold")
    dynamic = any(s.dynamic_energy_per_iter_j for s in summaries)
    if wide:
        _add_columns(table, ["phase", "channel", "trials", "iters", "time/iter", "IQR", "energy/iter", "±95%",
                             "IQR", "power", "dyn. energy/iter", "flags"])
    else:
        _add_columns(table, ["phase", "channel", "trials", "time/iter ±IQR", "energy/iter ±95%", "power",
                             *(["dyn. energy/iter"] if dynamic else []), "flags"])
    for s in summaries:
        shown = _SummaryText.of(s)
        table.add_row(*(shown.wide_row(s) if wide else shown.narrow_row(s, dynamic)))
    return table


@dataclass(frozen=True)
class _SummaryText:
    """One phase summary's texts that the wide and the narrow table both show."""

    phase: str
    channel: str
    flags: str
    time: str
    energy: str
    dynamic: str
    power: str
    bound_pct: float

    @classmethod
    def of(cls, s: PhaseSummary) -> _SummaryText:
        dyn = s.dynamic_energy_per_iter_j
        return cls(
            phase=cell_text(s.phase),
            channel=cell_text(s.channel or "(timing only)"),
            flags=cell_text(", ".join(s.flags)),
            time=si(s.time_per_iter_s.median, "s"),
            energy=si(s.energy_per_iter_j.median, "J"),
            dynamic=si(dyn.median, "J") if dyn else "-",
            power=si(s.mean_power_w.median, "W"),
            bound_pct=s.energy_bound_pct if s.channel else math.nan,  # timing only: no energy
        )

    def wide_row(self, s: PhaseSummary) -> list[str]:
        """Every figure in a column of its own."""
        return [self.phase, self.channel, trials_cell(s), str(s.iterations), self.time,
                relative_iqr(s.time_per_iter_s), self.energy, bound_text(self.bound_pct) or "-",
                relative_iqr(s.energy_per_iter_j), self.power, self.dynamic, self.flags]

    def narrow_row(self, s: PhaseSummary, dynamic: bool) -> list[str]:
        """The spread beside the time, the bound beside the energy; the dynamic energy only when
        a phase has one."""
        return [self.phase, self.channel, trials_cell(s), _with_spread(self.time, s.time_per_iter_s),
                with_bound(self.energy, self.bound_pct), self.power,
                *([self.dynamic] if dynamic else []), self.flags]


def precision_lines(summaries: Sequence[PhaseSummary], target_pct: float) -> list[str]:
    """``--precision``'s outcome per phase: the 95 % interval of the median reached, of time and
    energy per iteration, against the target."""
    lines = []
    for s in summaries:
        reached = s.precision_pct
        parts = [f"{k} ±{v:.2g} %" for k, v in reached.items()]
        if not parts:
            continue
        met = all(v <= target_pct for v in reached.values())
        where = printable(f"{s.phase} [{s.channel}]" if s.channel else s.phase)
        lines.append(
            f"{where}: precision {', '.join(parts)} over {s.trials} trials "
            f"({'reached' if met else 'not reached'}: ±{target_pct:g} %)"
        )
    return lines


def windows_table(windows, all_channels: bool, primary: Sequence[str]) -> Table:
    """Every window for people: start relative to the first window, SI units, flags."""
    table = Table(header_style="bold")
    _add_columns(table, ("phase", "trial", "channel", "start", "duration", "iters", "time/iter", "energy",
                         "power", "flags"))
    if windows.empty:
        return table
    origin = float(windows["start_s"].min())
    for row in windows.itertuples(index=False):
        channel = str(getattr(row, "channel", "") or "")
        if channel and not all_channels and channel not in primary:
            continue
        table.add_row(*_window_row(row, channel, origin))
    return table


def _window_row(row, channel: str, origin_s: float) -> list[str]:
    """One window's cells: its start after ``origin_s``, its figures in SI units, its flags."""
    energy = si(_float(getattr(row, "energy_j", None)), "J")
    return [
        cell_text(row.phase),
        str(row.trial),
        cell_text(channel or "(timing only)"),
        f"+{float(row.start_s) - origin_s:.3f} s",
        si(float(row.duration_s), "s"),
        str(row.iterations),
        si(float(row.time_per_iter_s), "s"),
        with_bound(energy, _float(getattr(row, "energy_bound_pct", None)) or math.nan),
        si(_float(getattr(row, "mean_power_w", None)), "W"),
        cell_text(str(getattr(row, "flags", "") or "").replace(";", ", ")),
    ]


def _float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


_UNITS = {"_s": "s", "_j": "J", "_w": "W", "_wh": "Wh"}


def cell(column: str, value) -> str:
    """A derived-table value for people: SI prefixes by the unit in the column name."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return _number_cell(column, value)


def _number_cell(column: str, value: float) -> str:
    """A number by what its column's name ends with: a rate, a percentage (signed for an error
    or a difference), a unit (SI prefixed); else an integer whole, a float to four digits."""
    if column.endswith("_per_s"):
        return f"{value:.4g}/s"
    if column.endswith("_pct"):
        return f"{value:+.2f}%" if "error" in column or "diff" in column else f"{value:.2f}%"
    unit = next((unit for suffix, unit in _UNITS.items() if column.endswith(suffix)), None)
    if unit is not None:
        return si(float(value), unit)
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def derived_columns(table) -> list[str]:
    """A ``DerivedTable``'s columns: those it declares for display, else every column in the
    order the rows first name them."""
    columns: list[str] = list(table.display)
    if not columns:
        for row in table.rows:
            columns += [c for c in row if c not in columns]
    return columns


def derived_table(table) -> Table:
    """A workload's DerivedTable; a one-row table is shown as name/value pairs."""
    columns = derived_columns(table)
    caption = cell_text(table.note) if table.note else None
    title = cell_text(table.title) if table.title else None
    if len(table.rows) == 1:
        return _pairs_table(columns, table.rows[0], title, caption)
    out = Table(title=title, header_style="bold", caption=caption, caption_justify="left")
    for column in columns:
        out.add_column(cell_text(column), overflow="fold")
    for row in table.rows:
        out.add_row(*(cell_text(cell(c, row.get(c))) for c in columns))
    return out


def _pairs_table(columns: Sequence[str], row, title: str | None, caption: str | None) -> Table:
    """A one-row table turned on its side: a line per column, its name and its value."""
    out = Table(title=title, caption=caption, caption_justify="left", show_header=False)
    out.add_column("figure")
    out.add_column("value", justify="right")
    for column in columns:
        out.add_row(cell_text(column), cell_text(cell(column, row.get(column))))
    return out


def render(renderable, width: int = 140) -> str:
    """Render a rich object to plain text."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=False, color_system=None).print(renderable)
    return buffer.getvalue()


# -- Markdown: cells escaped so that a value shows as written -----------------------------------
_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def md_text(value: object) -> str:
    """Text that Markdown shows as written: no markup, no raw HTML, no table breaks, no control
    character (``printable``)."""
    text = printable(" ".join(str(value).splitlines())).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", " ".join(text.splitlines()))


def md_code(value: object) -> str:
    """A path or an option set as inline code (shown as written), when it has no backquote."""
    text = printable(" ".join(str(value).splitlines()))
    return f"`{text}`" if "`" not in text else md_text(text)


def md_table(columns: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] = ()) -> list[str]:
    """A GitHub-flavoured Markdown table; cells are escaped here."""
    right = list(right) or [False] * len(columns)
    lines = ["| " + " | ".join(md_text(c) for c in columns) + " |"]
    lines.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
    lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in rows]
    return lines
