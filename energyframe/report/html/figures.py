"""The report's interactive plots, as plotly figures.

Every string that comes from run data goes through ``text()`` first: plotly.js draws labels as
a small subset of HTML, so a phase named ``<b>`` would otherwise turn bold (and is shown
literally after escaping).
"""

from __future__ import annotations

import html
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...results.result import RunResult
from ..plots import PALETTE, TraceLine, origin_s, trace_lines

HEIGHT = 420
LINE_SHAPES = {"line": "linear", "steps-pre": "vh", "steps-post": "hv", "steps-mid": "hvh"}


def text(value: Any) -> str:
    """A run-data string as plotly.js may show it (escaped; plotly decodes the entities)."""
    return html.escape(str(value), quote=False)


def _go():
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
    go = _go()
    lines: list[TraceLine] = trace_lines(result, all_channels=True, show_raw=True)
    windows = result.windows
    if not lines and windows.empty:
        return None
    fig = go.Figure()
    t0 = origin_s(result)
    if not windows.empty:
        spans = windows.drop_duplicates(["phase", "trial"])
        phases = list(dict.fromkeys(spans["phase"]))
        for i, phase in enumerate(phases):
            colour = PALETTE[i % len(PALETTE)]
            for j, row in enumerate(spans[spans["phase"] == phase].itertuples()):
                fig.add_shape(
                    type="rect",
                    xref="x",
                    yref="paper",
                    x0=row.start_s - t0,
                    x1=row.end_s - t0,
                    y0=0,
                    y1=1,
                    fillcolor=colour,
                    opacity=0.15,
                    line_width=0,
                    layer="below",
                    name=text(phase),
                    legendgroup=f"phase-{i}",
                    showlegend=j == 0,
                )
    primary = set(result.meta.get("primary_channels", []))
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


def compare_bars(comparison, figure: str) -> dict | None:
    """Per row of one figure, each run's median with its quartiles as error bars."""
    go = _go()
    rows = [r for r in comparison.rows if r.figure == figure and r.kind != "derived"]
    if not rows:
        return None
    fig = go.Figure()
    names = [text(f"{r.name} [{r.channel}]" if r.channel else r.name) for r in rows]
    for i, label in enumerate(comparison.labels):
        medians, low, high = [], [], []
        for r in rows:
            s = r.spreads[i]
            m = s.median if s is not None else math.nan
            medians.append(m)
            low.append(m - s.q1 if s is not None else math.nan)
            high.append(s.q3 - m if s is not None else math.nan)
        fig.add_trace(
            go.Bar(
                x=names,
                y=medians,
                name=text(label),
                marker_color=PALETTE[i % len(PALETTE)],
                error_y={"type": "data", "symmetric": False, "array": high, "arrayminus": low},
            )
        )
    unit = rows[0].unit
    fig.update_layout(
        barmode="group",
        title=f"{figure} per iteration: median, bars from the first to the third quartile",
        yaxis={"title": f"{figure} ({unit})"},
        height=HEIGHT,
        margin={"t": 50},
    )
    return fig.to_plotly_json()


def layer_bars(table) -> dict | None:
    """A pipeline's stages (or a model's layers): energy and latency per item (call x count)."""
    go = _go()
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
    go = _go()
    keys = ("whole_latency_s", "sum_latency_s", "whole_energy_j", "sum_energy_j")
    if not all(isinstance(summary.get(k), (int, float)) for k in keys):
        return None
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            f"latency: Σ layers {summary.get('latency_diff_pct', math.nan):+.1f}%",
            f"energy: Σ layers {summary.get('energy_diff_pct', math.nan):+.1f}%",
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


def _kernel_results(sweep: Mapping[str, Any]):
    from ...sweeps.results import KernelResult

    return [KernelResult.from_json(b) for b in sweep.get("benchmarks", [])]


def sweep_heatmaps(sweep: Mapping[str, Any]) -> dict | None:
    """Latency per launch over the first two swept parameters, one panel per kernel (the
    other parameters at their first value)."""
    go = _go()
    from plotly.subplots import make_subplots

    from ...sweeps.plots import at_fixed_point, series_label, varied

    results = [r for r in _kernel_results(sweep) if r.measured]
    axes = varied(results)
    if len(axes) < 2:
        return None
    x, y = axes[0], axes[1]
    multi = {k for k in {r.kernel for r in results} if len({r.block for r in results if r.kernel == k}) > 1}
    groups: dict[str, dict] = defaultdict(dict)
    for r in at_fixed_point(results, (x, y)):
        groups[series_label(r, multi)][(r.parameters[x], r.parameters[y])] = r.latency_s * 1e3
    xs = sorted({k[0] for g in groups.values() for k in g})
    ys = sorted({k[1] for g in groups.values() for k in g})
    fig = make_subplots(rows=1, cols=len(groups), subplot_titles=[text(n) for n in groups])
    for col, cells in enumerate(groups.values(), start=1):
        z = [[cells.get((xv, yv), None) for xv in xs] for yv in ys]
        fig.add_trace(
            go.Heatmap(
                x=[str(v) for v in xs],
                y=[str(v) for v in ys],
                z=z,
                coloraxis="coloraxis",
                texttemplate="%{z:.3g}",
                hovertemplate=f"{text(x)}=%{{x}} {text(y)}=%{{y}}: %{{z:.4g}} ms<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text=text(x), type="category", row=1, col=col)
        fig.update_yaxes(title_text=text(y), type="category", row=1, col=col)
    fig.update_layout(
        title="latency per launch (ms, median over trials)",
        coloraxis={"colorscale": "Viridis", "colorbar": {"title": "ms"}},
        height=HEIGHT,
        margin={"t": 80},
    )
    return fig.to_plotly_json()


def sweep_speedup(sweep: Mapping[str, Any]) -> dict | None:
    """Speedup of every kernel over the baseline along the first swept parameter."""
    go = _go()
    from ...sweeps.plots import at_fixed_point, series_label, varied

    results = [r for r in _kernel_results(sweep) if r.measured]
    axes = varied(results)
    if not axes or len({r.kernel for r in results}) < 2:
        return None
    x = axes[0]
    baseline = sweep.get("sweep", {}).get("baseline") or results[0].kernel
    multi = {k for k in {r.kernel for r in results} if len({r.block for r in results if r.kernel == k}) > 1}
    series: dict[str, dict] = defaultdict(dict)
    for r in at_fixed_point(results, (x,)):
        series[series_label(r, multi)][r.parameters[x]] = r
    if baseline not in series:
        return None
    base = series[baseline]
    fig = go.Figure()
    for i, (name, points) in enumerate(series.items()):
        xs = [v for v in sorted(points) if v in base]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[base[v].latency_s / points[v].latency_s for v in xs],
                mode="lines+markers",
                name=text(name),
                marker_color=PALETTE[i % len(PALETTE)],
            )
        )
    fig.add_hline(y=1.0, line_color="#888", line_width=1)
    fig.update_layout(
        title=text(f"speedup against {baseline} along {x}"),
        xaxis={"title": text(x), "type": "log"},
        yaxis={"title": f"speedup vs {text(baseline)}"},
        height=HEIGHT,
        margin={"t": 50},
    )
    return fig.to_plotly_json()


def sweep_energy_latency(sweep: Mapping[str, Any]) -> dict | None:
    """Energy against latency per launch, every configuration."""
    go = _go()
    results = [r for r in _kernel_results(sweep) if r.measured and r.energy_j > 0]
    if not results:
        return None
    fig = go.Figure()
    for i, kernel in enumerate(dict.fromkeys(r.kernel for r in results)):
        mine = [r for r in results if r.kernel == kernel]
        fig.add_trace(
            go.Scatter(
                x=[r.latency_s * 1e3 for r in mine],
                y=[r.energy_j * 1e3 for r in mine],
                mode="markers",
                name=text(kernel),
                hovertext=[text(r.config_label()) for r in mine],
                marker_color=PALETTE[i % len(PALETTE)],
            )
        )
    fig.update_layout(
        title="energy against latency per launch (medians)",
        xaxis={"title": "latency (ms)", "type": "log"},
        yaxis={"title": "energy (mJ)", "type": "log"},
        height=HEIGHT,
        margin={"t": 50},
    )
    return fig.to_plotly_json()


def replay_prediction(report: Mapping[str, Any]) -> dict | None:
    """The full model measured against the sum of its replayed ops, latency and energy."""
    go = _go()
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
            f"prediction: latency error {number('error_percent'):+.1f}%, "
            f"energy error {number('energy_error_percent'):+.1f}%"
        ),
        height=HEIGHT,
        margin={"t": 80},
    )
    return fig.to_plotly_json()


def gantt(trace_dir: Path, max_kernels: int = 5000) -> dict | None:
    """The traced iteration's kernels on their streams, coloured by tier (zoom to read names)."""
    go = _go()
    from ...replay.gantt import COLOURS
    from ...replay.kineto import parse

    path = trace_dir / "trace.json.gz"
    if not path.exists():
        path = trace_dir / "trace.json"
    if not path.exists():
        return None
    trace = parse(path)
    step = trace.iterations - 1 if trace.steps else None
    kernels = [k for k in trace.kernels if k.step == step] or trace.kernels
    if not kernels:
        return None
    kernels = kernels[:max_kernels]
    t0 = min(k.start_us for k in kernels)
    fig = go.Figure()
    for tier_name, colour in COLOURS.items():
        mine = [k for k in kernels if k.tier == tier_name]
        if not mine:
            continue
        fig.add_trace(
            go.Bar(
                base=[(k.start_us - t0) / 1e3 for k in mine],
                x=[max(k.duration_us, 1e-3) / 1e3 for k in mine],
                y=[f"stream {k.stream}" for k in mine],
                orientation="h",
                name=text(tier_name),
                marker_color=colour,
                hovertext=[text(f"{k.name[:120]}: {k.duration_us:.1f} µs") for k in mine],
                hoverinfo="text",
            )
        )
    busy = sum(k.duration_us for k in kernels) / 1e3
    span = (max(k.end_us for k in kernels) - t0) / 1e3
    fig.update_layout(
        barmode="overlay",
        title=f"traced iteration: {len(kernels)} kernels, {busy:.3g} ms of kernels in a {span:.3g} ms span",
        xaxis={"title": "time in the iteration (ms)"},
        height=max(220, 90 * len({str(k.stream) for k in kernels}) + 160),
        margin={"t": 50},
    )
    return fig.to_plotly_json()


def tiers(report: Mapping[str, Any]) -> dict | None:
    """Predicted time and energy by kernel tier."""
    go = _go()
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


def figures_of(items: Sequence[tuple[str, dict | None]]) -> list[tuple[str, dict]]:
    return [(caption, fig) for caption, fig in items if fig is not None]
