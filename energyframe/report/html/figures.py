"""The report's interactive plots, as plotly figures.

Every string that comes from run data goes through ``text()`` first: plotly.js draws labels as
a small subset of HTML, so a phase named ``<b>`` would otherwise turn bold (and is shown
literally after escaping).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...results.result import RunResult
from ..plots import PALETTE, TraceLine, origin_s, trace_lines

HEIGHT = 420
LINE_SHAPES = {"line": "linear", "steps-pre": "vh", "steps-post": "hv", "steps-mid": "hvh"}


def text(value: Any) -> str:
    """A run-data string as plotly.js may show it (escaped; plotly decodes the entities)."""
    return html.escape(str(value), quote=False)


def signed_pct(value: Any) -> str:
    """A signed percentage for a title (``+3.2%``), or ``not measured`` where there is none (a
    timing-only run has no energy error)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "not measured"
    return f"{value:+.1f}%"


def graph_objects():
    import plotly.graph_objects as go

    return go


def decimate(times_s: np.ndarray, values: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """At most ``max_points`` points: beyond, the minimum and the maximum of each of
    ``max_points / 2`` equal buckets, in time order, so that spikes stay visible."""
    n = len(times_s)
    if n <= max_points:
        return times_s, values, False
    buckets = max(1, max_points // 2)
    edges = np.linspace(0, n, buckets + 1).astype(int)
    keep: list[int] = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        if hi <= lo:
            continue
        chunk = values[lo:hi]
        a, b = lo + int(np.argmin(chunk)), lo + int(np.argmax(chunk))
        keep.extend(sorted({a, b}))
    index = np.asarray(keep)
    return times_s[index], values[index], True


def power_trace(result: RunResult, max_points: int = 20000, title: str = "") -> dict | None:
    """Every power channel over time, windows shaded by phase; zoom with the mouse or the
    range slider."""
    go = graph_objects()
    lines: list[TraceLine] = trace_lines(result, all_channels=True, show_raw=True)
    windows = result.windows
    if not lines:  # no empty power axis pretending to be a measurement (the page says why)
        return None
    fig = go.Figure()
    t0 = origin_s(result)
    if not windows.empty:
        # every shape set at once: add_shape copies the layout's shapes each time, so a run of
        # 800 windows (a serve-bench load's segments) took minutes
        fig.update_layout(shapes=window_shapes(windows, t0))
    primary = set(result.run_meta.primary_channels)
    for line in lines:
        t, v, decimated = decimate(line.times_s, line.power_w, max_points)
        label = text(line.label) + (" (min/max per bucket)" if decimated else "")
        fig.add_trace(
            go.Scatter(
                x=t,
                y=v,
                mode="lines",
                name=label,
                line={
                    "shape": LINE_SHAPES[line.style],
                    "width": 1.2,
                    "dash": "dash" if line.dashed else "solid",
                },
                visible=True if line.name in primary or not primary else "legendonly",
            )
        )
    fig.update_layout(
        title=text(title),
        height=HEIGHT + 60,
        xaxis={"title": "time since the run started (s)", "rangeslider": {"visible": True}},
        yaxis={"title": "power (W)", "fixedrange": False},
        margin={"t": 50},
    )
    return fig.to_plotly_json()


def window_shapes(windows, t0: float) -> list[dict]:
    """Each window as a shaded rectangle, coloured by phase, one legend entry per phase."""
    spans = windows.drop_duplicates(["phase", "trial"])
    shapes = []
    for i, phase in enumerate(dict.fromkeys(spans["phase"])):
        rows = spans[spans["phase"] == phase]
        for j, (start, end) in enumerate(zip(rows["start_s"], rows["end_s"])):
            shapes.append(
                {
                    "type": "rect",
                    "xref": "x",
                    "yref": "paper",
                    "x0": float(start) - t0,
                    "x1": float(end) - t0,
                    "y0": 0,
                    "y1": 1,
                    "fillcolor": PALETTE[i % len(PALETTE)],
                    "opacity": 0.15,
                    "line": {"width": 0},
                    "layer": "below",
                    "name": text(phase),
                    "legendgroup": f"phase-{i}",
                    "showlegend": j == 0,
                }
            )
    return shapes


@dataclass(frozen=True)
class BarErrors:
    """One run's bars: medians, the error bar's extent below and above each, and the rows whose
    95 % bound is wider than the value (their bar is cut at zero, and its hover text says so)."""

    medians: list[float]
    low: list[float]
    high: list[float]
    wider: list[bool]


def _bar_errors(rows, i: int, bounded: bool) -> BarErrors:
    """Each row's median of run ``i`` and its error bar: the 95 % bound where the runs record
    one (energy), else the quartiles. A bar never reaches below zero: energy and time are not
    negative, so a bound wider than the value (``144 mJ ± 1812 %``) is cut at zero and flagged."""
    out = BarErrors([], [], [], [])
    for r in rows:
        s = r.spreads[i]
        m = s.median if s is not None else math.nan
        below, above = _bound_extent(r, i) if bounded else _quartile_extent(s, m)
        wider = bool(math.isfinite(m) and m >= 0 and math.isfinite(below) and below > m)
        out.medians.append(m)
        out.low.append(m if wider else below)
        out.high.append(above)
        out.wider.append(wider)
    return out


def _bound_extent(row, i: int) -> tuple[float, float]:
    """How far run ``i``'s error bar reaches below and above its median: its 95 % bound either
    way (NaN where the run records none)."""
    bound = row.bounds[i] if i < len(row.bounds) else None
    width = bound.total_j if bound is not None else math.nan
    return width, width


def _quartile_extent(spread, median: float) -> tuple[float, float]:
    """How far an error bar reaches below and above ``median``: to the first and the third
    quartile (NaN where the run lacks the row)."""
    if spread is None:
        return math.nan, math.nan
    return median - spread.q1, spread.q3 - median


#: the hover text of a bar whose bound is wider than its value
WIDER_NOTE = "the 95 % bound is wider than the value: the bar stops at zero"


def compare_bars(comparison, figure: str) -> dict | None:
    """Per row of one figure, each run's median with its 95 % bound (energy of runs that record
    one) or its quartiles as error bars, never below zero."""
    go = graph_objects()
    rows = [r for r in comparison.rows if r.figure == figure and r.kind != "derived"]
    if not rows:
        return None
    fig = go.Figure()
    names = _bar_names(rows)
    bounded = any(b is not None for r in rows for b in r.bounds)
    cut = 0
    for i, label in enumerate(comparison.labels):
        bars = _bar_errors(rows, i, bounded)
        cut += sum(bars.wider)
        fig.add_trace(_run_bars(go, names, bars, label, i))
    fig.update_layout(
        barmode="group",
        title=_bars_title(figure, bounded, cut),
        yaxis={"title": f"{figure} ({rows[0].unit})", "rangemode": "tozero"},
        height=HEIGHT,
        margin={"t": 70 if cut else 50},
    )
    return fig.to_plotly_json()


def _bar_names(rows) -> list[str]:
    """Each row as its bars are labelled: the phase, and the channel in brackets."""
    return [text(f"{r.name} [{r.channel}]" if r.channel else r.name) for r in rows]


def _run_bars(go, names: list[str], bars: BarErrors, label: str, i: int):
    """Run ``i``'s bars, in its colour, with asymmetric error bars and a note on each cut bar."""
    return go.Bar(
        x=names,
        y=bars.medians,
        name=text(label),
        marker_color=PALETTE[i % len(PALETTE)],
        error_y={"type": "data", "symmetric": False, "array": bars.high, "arrayminus": bars.low},
        hovertext=[WIDER_NOTE if w else "" for w in bars.wider],
    )


def _bars_title(figure: str, bounded: bool, cut: int) -> str:
    """What the bars and their error bars show, and how many were cut at zero."""
    title = (
        f"{figure} per iteration: median, bars its 95 % bound (a difference inside both is not called real)"
        if bounded
        else f"{figure} per iteration: median, bars from the first to the third quartile"
    )
    if cut:
        title += f"<br>{cut} bar(s) cut at zero: {WIDER_NOTE.split(':')[0]}"
    return title


def layer_bars(table) -> dict | None:
    """A pipeline's stages (or a model's layers): energy and latency per item (call x count)."""
    go = graph_objects()
    from plotly.subplots import make_subplots

    rows = [r for r in table.rows if r.get("stage") is not None]
    if not rows:
        return None
    names = [text(r["stage"]) for r in rows]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, subplot_titles=("energy (J)", "latency (s)"))
    for col, key in ((1, "total_energy_j"), (2, "total_latency_s")):
        fig.add_trace(
            go.Bar(
                y=names,
                x=[r.get(key) for r in rows],
                orientation="h",
                name=key,
                marker_color=PALETTE[col - 1],
                showlegend=False,
            ),
            row=1,
            col=col,
        )
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_layout(
        title=text(f"{table.title}: per item (per call x count)"),
        height=max(HEIGHT, 18 * len(rows) + 120),
        margin={"t": 70},
    )
    return fig.to_plotly_json()


def closure(summary: Mapping[str, Any]) -> dict | None:
    """The sum of the layers against the whole model, for latency and energy."""
    go = graph_objects()
    keys = ("whole_latency_s", "sum_latency_s", "whole_energy_j", "sum_energy_j")
    if not all(isinstance(summary.get(k), (int, float)) for k in keys):
        return None
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            f"latency: Σ layers {signed_pct(summary.get('latency_diff_pct'))}",
            f"energy: Σ layers {signed_pct(summary.get('energy_diff_pct'))}",
        ),
    )
    for col, (whole, total, unit) in enumerate(
        (("whole_latency_s", "sum_latency_s", "s"), ("whole_energy_j", "sum_energy_j", "J")), start=1
    ):
        fig.add_trace(
            go.Bar(
                x=["whole model", "Σ layers"],
                y=[summary[whole], summary[total]],
                marker_color=[PALETTE[0], PALETTE[1]],
                showlegend=False,
            ),
            row=1,
            col=col,
        )
        fig.update_yaxes(title_text=unit, row=1, col=col)
    fig.update_layout(
        title="closure: the per-layer sum against the whole model", height=HEIGHT, margin={"t": 80}
    )
    return fig.to_plotly_json()


def figures_of(items: Sequence[tuple[str, dict | None]]) -> list[tuple[str, dict]]:
    return [(caption, fig) for caption, fig in items if fig is not None]
