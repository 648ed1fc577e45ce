"""A sweep's figures in the HTML report (``SweepWorkload.report_figures``): latency heatmaps,
speedup against the baseline, energy against latency."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..report.html.figures import HEIGHT, PALETTE, graph_objects, text

if TYPE_CHECKING:
    from .results import KernelResult


def _kernel_results(sweep: Mapping[str, Any]):
    from .results import KernelResult

    return [KernelResult.from_json(b) for b in sweep.get("benchmarks", [])]


def sweep_heatmaps(sweep: Mapping[str, Any]) -> dict | None:
    """Latency per launch over the first two swept parameters, one panel per kernel (the
    other parameters at their first value)."""
    go = graph_objects()
    from plotly.subplots import make_subplots

    from .plots import varied

    results = [r for r in _kernel_results(sweep) if r.measured]
    axes = varied(results)
    if len(axes) < 2:
        return None
    x, y = axes[0], axes[1]
    groups = _latency_cells(results, x, y)
    xs = sorted({k[0] for g in groups.values() for k in g})
    ys = sorted({k[1] for g in groups.values() for k in g})
    fig = make_subplots(rows=1, cols=len(groups), subplot_titles=[text(n) for n in groups])
    for col, cells in enumerate(groups.values(), start=1):
        fig.add_trace(_heatmap(go, cells, (x, xs), (y, ys)), row=1, col=col)
        fig.update_xaxes(title_text=text(x), type="category", row=1, col=col)
        fig.update_yaxes(title_text=text(y), type="category", row=1, col=col)
    fig.update_layout(
        title="latency per launch (ms, median over trials)",
        coloraxis={"colorscale": "Viridis", "colorbar": {"title": "ms"}},
        height=HEIGHT,
        margin={"t": 80},
    )
    return fig.to_plotly_json()


def _latency_cells(results: list[KernelResult], x: str, y: str) -> dict[str, dict]:
    """Per series, the latency per launch (ms) at each (x, y) of the slice at the first
    values of the other parameters."""
    from .plots import at_fixed_point, multi_block, series_label

    multi = multi_block(results)
    groups: dict[str, dict] = defaultdict(dict)
    for r in at_fixed_point(results, (x, y)):
        groups[series_label(r, multi)][(r.parameters[x], r.parameters[y])] = r.latency_s * 1e3
    return groups


def _heatmap(go, cells: Mapping[tuple[Any, Any], float], x_axis: tuple[str, list], y_axis: tuple[str, list]):
    """One series' panel: the latency at each (x, y), empty where the slice has none."""
    (x, xs), (y, ys) = x_axis, y_axis
    z = [[cells.get((xv, yv), None) for xv in xs] for yv in ys]
    return go.Heatmap(
        x=[str(v) for v in xs],
        y=[str(v) for v in ys],
        z=z,
        coloraxis="coloraxis",
        texttemplate="%{z:.3g}",
        hovertemplate=f"{text(x)}=%{{x}} {text(y)}=%{{y}}: %{{z:.4g}} ms<extra></extra>",
    )


def sweep_speedup(sweep: Mapping[str, Any]) -> dict | None:
    """Speedup of every kernel over the baseline along the first swept parameter."""
    go = graph_objects()
    from .plots import varied

    results = [r for r in _kernel_results(sweep) if r.measured]
    axes = varied(results)
    if not axes or len({r.kernel for r in results}) < 2:
        return None
    x = axes[0]
    baseline = sweep.get("sweep", {}).get("baseline") or results[0].kernel
    series = _series_along(results, x)
    if baseline not in series:
        return None
    base = series[baseline]
    fig = go.Figure()
    for i, (name, points) in enumerate(series.items()):
        fig.add_trace(_speedup_line(go, name, points, base, i))
    fig.add_hline(y=1.0, line_color="#888", line_width=1)
    fig.update_layout(
        title=text(f"speedup against {baseline} along {x}"),
        xaxis={"title": text(x), "type": "log"},
        yaxis={"title": f"speedup vs {text(baseline)}"},
        height=HEIGHT,
        margin={"t": 50},
    )
    return fig.to_plotly_json()


def _series_along(results: list[KernelResult], x: str) -> dict[str, dict]:
    """Per series, the results by their value of ``x``, at the first values of the other
    parameters."""
    from .plots import at_fixed_point, multi_block, series_label

    multi = multi_block(results)
    series: dict[str, dict] = defaultdict(dict)
    for r in at_fixed_point(results, (x,)):
        series[series_label(r, multi)][r.parameters[x]] = r
    return series


def _speedup_line(
    go, name: str, points: Mapping[Any, KernelResult], base: Mapping[Any, KernelResult], i: int
):
    """One series' speedup against the baseline series at the x values both have, in the
    ``i``-th colour."""
    xs = [v for v in sorted(points) if v in base]
    return go.Scatter(
        x=xs,
        y=[base[v].latency_s / points[v].latency_s for v in xs],
        mode="lines+markers",
        name=text(name),
        marker_color=PALETTE[i % len(PALETTE)],
    )


def sweep_energy_latency(sweep: Mapping[str, Any]) -> dict | None:
    """Energy against latency per launch, every configuration."""
    go = graph_objects()
    results = [r for r in _kernel_results(sweep) if r.measured and r.energy_j > 0]
    if not results:
        return None
    fig = go.Figure()
    for i, kernel in enumerate(dict.fromkeys(r.kernel for r in results)):
        fig.add_trace(_kernel_scatter(go, kernel, [r for r in results if r.kernel == kernel], i))
    fig.update_layout(
        title="energy against latency per launch (medians)",
        xaxis={"title": "latency (ms)", "type": "log"},
        yaxis={"title": "energy (mJ)", "type": "log"},
        height=HEIGHT,
        margin={"t": 50},
    )
    return fig.to_plotly_json()


def _kernel_scatter(go, kernel: str, mine: list[KernelResult], i: int):
    """One kernel's configurations at (latency, energy) in ms and mJ, in the ``i``-th colour."""
    return go.Scatter(
        x=[r.latency_s * 1e3 for r in mine],
        y=[r.energy_j * 1e3 for r in mine],
        mode="markers",
        name=text(kernel),
        hovertext=[text(r.config_label()) for r in mine],
        marker_color=PALETTE[i % len(PALETTE)],
    )
