"""A serve-bench run's figures in the HTML report (``ServeBenchWorkload.report_figures``): each
request's energy against its tokens, and the measured power with the requests stacked on it.

Both are drawn from the saved run: requests.csv and the segment windows, through the same
attribution the run used, so the report shows what the run computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..model import ReportFigure
from ..plugin import RunResult
from ..report.html.figures import HEIGHT, PALETTE, decimate, graph_objects, text
from ..report.plots import TraceLine, origin_s, trace_lines
from .attribution import Attribution, Segments, attribute
from .client import OK
from .requests import read_requests, spans_of
from .segments import measured_segments

#: the requests drawn one by one in the stacked power (the most energetic); the rest are one band
MAX_STACKED = 40
#: beyond this many segments, the stacked power is drawn on this many equal bins (energy kept)
MAX_SEGMENTS_DRAWN = 2000


def report_figures(run_dir: Path, result: RunResult) -> Sequence[ReportFigure]:

    frame = read_requests(run_dir)
    if frame.empty:
        note = "no requests.csv in the run directory (the run ended before its files were saved)"
        return (ReportFigure("Serving: energy per request", None, note),)
    primary = list(result.run_meta.primary_channels)
    segments = measured_segments(result.windows, primary)
    workload = result.run_meta.workload
    weight = float((workload.options if workload else {}).get("prefill_weight", 1.0))
    attribution = attribute(spans_of(frame), segments, weight)
    return (
        ReportFigure(
            "Serving: each request's energy against its tokens (95 % bounds)", energy_against_tokens(frame)
        ),
        ReportFigure(
            "Serving: measured power, each request's share stacked on it",
            stacked_power(result, frame, segments, attribution),
            None if primary else "no power measured: nothing to stack",
        ),
    )


def energy_against_tokens(frame) -> dict | None:
    """Energy against output tokens, prefill energy against prompt tokens; failed requests apart."""
    go = graph_objects()
    from plotly.subplots import make_subplots

    if not np.isfinite(frame["energy_j"].to_numpy(dtype=float)).any():
        return None
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            "energy against output tokens",
            "energy before the first token against prompt tokens",
        ),
    )
    for k, (label, rows) in enumerate(
        (("ok", frame[frame["status"] == OK]), ("failed", frame[frame["status"] != OK]))
    ):
        if rows.empty:
            continue
        hover = [text(f"{r.request_id} ({r.status})") for r in rows.itertuples()]
        for col, (x, y, err) in enumerate(
            (("output_tokens", "energy_j", "energy_bound_j"), ("prompt_tokens", "prefill_energy_j", None)),
            start=1,
        ):
            fig.add_trace(
                go.Scatter(
                    x=rows[x], y=rows[y], mode="markers", name=label, legendgroup=label, showlegend=col == 1,
                    marker={"color": PALETTE[k], "size": 6},
                    error_y={"type": "data", "array": rows[err], "visible": True} if err else None,
                    text=hover, hovertemplate="%{text}<br>%{x} tokens, %{y:.4g} J<extra></extra>",
                ),
                row=1, col=col,
            )  # fmt: skip
    fig.update_xaxes(title_text="tokens")
    fig.update_yaxes(title_text="energy (J)")
    fig.update_layout(height=HEIGHT, margin={"t": 60})
    return fig.to_plotly_json()


def _steps(starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A value per segment as a step line: two points per segment."""
    return np.column_stack([starts, ends]).ravel(), np.repeat(values, 2)


def rebinned(
    starts: np.ndarray, ends: np.ndarray, power_w: np.ndarray, bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Contiguous segments' power on ``bins`` equal bins, each bin's energy kept (the cumulative
    energy read at the bins' edges): a long load's thousands of segments drawn in a page's size."""
    if len(starts) <= bins:
        return starts, ends, power_w
    cumulative = np.concatenate([[0.0], np.cumsum(np.nan_to_num(power_w) * (ends - starts))])
    edges = np.linspace(starts[0], ends[-1], bins + 1)
    energy = np.diff(np.interp(edges, np.concatenate([starts[:1], ends]), cumulative))
    return edges[:-1], edges[1:], energy / np.diff(edges)


def stacked_power(result: RunResult, frame, segments: Segments, attribution: Attribution) -> dict | None:
    """Each request's share of each segment's power (its energy share over the segment's
    length), stacked; the idle segments; the measured power on top."""
    if not len(segments) or not np.isfinite(segments.energy_j).any():
        return None
    go = graph_objects()
    t0 = origin_s(result)
    starts, ends = segments.starts_s - t0, segments.ends_s - t0
    with np.errstate(divide="ignore", invalid="ignore"):
        power = np.where(ends > starts, segments.energy_j / (ends - starts), math.nan)
    fig = go.Figure()
    for k, (name, values) in enumerate(_bands(frame, segments, attribution, power)):
        x, y = _steps(*rebinned(starts, ends, values, MAX_SEGMENTS_DRAWN))
        fig.add_trace(
            go.Scatter(
                x=x, y=y, name=text(name), mode="lines", stackgroup="requests", line={"width": 0.5},
                fillcolor=PALETTE[k % len(PALETTE)] if not name.startswith("idle") else "#DDDDDD",
            )
        )  # fmt: skip
    for line in _measured_lines(result):
        times, watts, _ = decimate(line.times_s, line.power_w, 2 * MAX_SEGMENTS_DRAWN)
        fig.add_trace(
            go.Scatter(
                x=times,
                y=watts,
                name=text(f"{line.label} (measured)"),
                mode="lines",
                line={"color": "black", "width": 1},
            )
        )
    fig.update_layout(
        height=HEIGHT + 60,
        xaxis={"title": "time since the run started (s)", "rangeslider": {"visible": True}},
        yaxis={"title": "power (W)"},
        margin={"t": 50},
    )
    return fig.to_plotly_json()


def _bands(
    frame, segments: Segments, attribution: Attribution, power_w: np.ndarray
) -> list[tuple[str, np.ndarray]]:
    """The stack's bands, each a power per segment: the ``MAX_STACKED`` requests of most energy
    one by one, the others together, and the idle segments' power. Units: W."""
    req, seg, share, _ = attribution.shares
    taken = share * power_w[seg]
    order = np.argsort([-(r.energy_j if math.isfinite(r.energy_j) else 0.0) for r in attribution.requests])
    shown = order[:MAX_STACKED]
    bands: list[tuple[str, np.ndarray]] = []
    for i in shown:
        mine = req == i
        bands.append(
            (
                str(frame["request_id"].iloc[i]),
                np.bincount(seg[mine], weights=taken[mine], minlength=len(segments)),
            )
        )
    rest = ~np.isin(req, shown)
    if rest.any():
        label = f"{len(order) - len(shown)} other requests"
        bands.append((label, np.bincount(seg[rest], weights=taken[rest], minlength=len(segments))))
    busy = np.zeros(len(segments), dtype=bool)
    busy[seg] = True
    bands.append(("idle (no request active)", np.where(busy, 0.0, power_w)))
    return bands


def _measured_lines(result: RunResult) -> list[TraceLine]:
    """The run's measured power of its primary channels, drawn over the stack."""
    primary = set(result.run_meta.primary_channels)
    return [line for line in trace_lines(result, all_channels=False) if line.name in primary]
