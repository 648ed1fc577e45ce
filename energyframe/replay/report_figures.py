"""A replay's figures in the HTML report (``ReplayWorkload.report_figures``): the prediction
against the model, the kernel tiers, the traced iteration's gantt."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..model import ReportFigure
from ..report.html.figures import HEIGHT, PALETTE, graph_objects, signed_pct, text

if TYPE_CHECKING:
    from .tracedata import Kernel


def replay_prediction(report: Mapping[str, Any]) -> dict | None:
    """The full model measured against the sum of its replayed ops, latency and energy."""
    go = graph_objects()
    from plotly.subplots import make_subplots

    def number(key: str) -> float:
        value = report.get(key)
        return float(value) if isinstance(value, (int, float)) else math.nan

    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("latency per iteration (µs)", "energy per iteration (J)")
    )
    for col, pairs in enumerate(
        (
            (
                ("full model", "full_model_inference_us"),
                ("full model, one CUDA graph", "full_model_graph_inference_us"),
                ("Σ replayed ops", "predicted_from_kernels_us"),
            ),
            (
                ("full model", "full_model_energy_j"),
                ("full model, one CUDA graph", "full_model_graph_energy_j"),
                ("Σ replayed ops", "predicted_energy_j"),
            ),
        ),
        start=1,
    ):
        shown = [(name, number(key)) for name, key in pairs if math.isfinite(number(key))]
        if not shown:
            continue
        fig.add_trace(
            go.Bar(
                x=[s[0] for s in shown],
                y=[s[1] for s in shown],
                marker_color=PALETTE[: len(shown)],
                showlegend=False,
            ),
            row=1,
            col=col,
        )
    if not fig.data:
        return None
    fig.update_layout(
        title=(
            f"prediction: latency error {signed_pct(report.get('error_percent'))}, "
            f"energy error {signed_pct(report.get('energy_error_percent'))}"
        ),
        height=HEIGHT,
        margin={"t": 80},
    )
    return fig.to_plotly_json()


def gantt(trace_dir: Path, max_kernels: int = 5000) -> dict | None:
    """The traced iteration's kernels on their streams, coloured by tier (zoom to read names)."""
    go = graph_objects()
    from .gantt import COLOURS, busy_and_span_ms, last_iteration
    from .kineto import parse

    path = _trace_file(trace_dir)
    if path is None:
        return None
    kernels = last_iteration(parse(path))
    if not kernels:
        return None
    kernels = kernels[:max_kernels]
    t0 = min(k.start_us for k in kernels)
    fig = go.Figure()
    for tier_name, colour in COLOURS.items():
        mine = [k for k in kernels if k.tier == tier_name]
        if mine:
            fig.add_trace(_tier_bars(go, mine, t0, tier_name, colour))
    busy, span = busy_and_span_ms(kernels)
    fig.update_layout(
        barmode="overlay",
        title=f"traced iteration: {len(kernels)} kernels, {busy:.3g} ms of kernels in a {span:.3g} ms span",
        xaxis={"title": "time in the iteration (ms)"},
        height=max(220, 90 * len({str(k.stream) for k in kernels}) + 160),
        margin={"t": 50},
    )
    return fig.to_plotly_json()


def _trace_file(trace_dir: Path) -> Path | None:
    """The directory's trace: trace.json.gz, else trace.json; None without either."""
    for name in ("trace.json.gz", "trace.json"):
        if (trace_dir / name).exists():
            return trace_dir / name
    return None


def _tier_bars(go: Any, kernels: list[Kernel], t0: float, tier_name: str, colour: str) -> Any:
    """One tier's kernels as horizontal bars on their streams, from ``t0``, named on hover. Units: ms."""
    return go.Bar(
        base=[(k.start_us - t0) / 1e3 for k in kernels],
        x=[max(k.duration_us, 1e-3) / 1e3 for k in kernels],
        y=[f"stream {k.stream}" for k in kernels],
        orientation="h",
        name=text(tier_name),
        marker_color=colour,
        hovertext=[text(f"{k.name[:120]}: {k.duration_us:.1f} µs") for k in kernels],
        hoverinfo="text",
    )


def tiers(report: Mapping[str, Any]) -> dict | None:
    """Predicted time and energy by kernel tier."""
    go = graph_objects()
    breakdown = report.get("tier_breakdown") or {}
    if not breakdown:
        return None
    from plotly.subplots import make_subplots

    names = [text(k) for k in breakdown]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("predicted latency (µs)", "predicted energy (J)"))
    for col, key in ((1, "predicted_us"), (2, "predicted_energy_j")):
        values = [v.get(key) if isinstance(v, Mapping) else None for v in breakdown.values()]
        fig.add_trace(
            go.Bar(x=names, y=values, marker_color=PALETTE[col - 1], showlegend=False), row=1, col=col
        )
    fig.update_layout(title="by kernel tier", height=HEIGHT - 60, margin={"t": 80})
    return fig.to_plotly_json()


def gantt_figure(trace_dir: Path) -> ReportFigure:
    """The traced iteration's gantt, or why there is none."""
    title = "Replay: the traced iteration (gantt)"
    try:
        chart = gantt(trace_dir) if trace_dir.is_dir() else None
    except UsageError as e:
        return ReportFigure(title, None, f"the trace in {trace_dir} could not be read: {e}")
    if chart is None:
        if trace_dir.is_dir():
            return ReportFigure(title, None, f"no gantt: the trace in {trace_dir} has no GPU kernels")
        return ReportFigure(title, None, f"no gantt: the trace directory {trace_dir} is not here")
    return ReportFigure(title, chart)
