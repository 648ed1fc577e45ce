"""A sweep's plots (PNG): latency heatmap over two parameters, latency against one parameter,
speedup against a baseline kernel, and energy against latency with each point's Pareto front.

Each plot takes one slice: the parameters not on its axes stay at the first value swept.
matplotlib (``energyframe[plots]``) is imported when a plot is drawn; without it a sweep keeps its
numbers and warns that the plots were not drawn.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..kit import extras
from ..report.plots import PALETTE, pyplot
from .results import KernelResult, SweepResult


def safe_name(text: str, limit: int = 80) -> str:
    """``text`` as a plain file name: letters, digits, ``_``, ``-`` and ``.`` only, no leading dot,
    no separators (a name from a results file never leaves the directory it is written into)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(text)).lstrip(".")[:limit]
    return name or "_"


def series_label(r: KernelResult, multi_block: set[str]) -> str:
    """The legend name of a result: its kernel, with its block where a kernel ran with several."""
    return f"{r.kernel} {'x'.join(map(str, r.block))}" if r.kernel in multi_block else r.kernel


def _setup():
    return pyplot("sweep plots")


def varied(results: list[KernelResult]) -> list[str]:
    """Parameters that take more than one value, in sweep order."""
    if not results:
        return []
    names = list(results[0].parameters)
    return [n for n in names if len({r.parameters.get(n) for r in results}) > 1]


def at_fixed_point(results: list[KernelResult], free: tuple[str, ...]) -> list[KernelResult]:
    """The results whose other parameters equal those of the first result."""
    first = results[0].parameters
    return [r for r in results if all(r.parameters.get(k) == v for k, v in first.items() if k not in free)]


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats in both coordinates (lower is better)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any(
            (x2 <= x and y2 <= y) and (x2 < x or y2 < y) for j, (x2, y2) in enumerate(points) if j != i
        ):
            front.append(i)
    return front


def multi_block(results: list[KernelResult]) -> set[str]:
    """The kernels measured with more than one block (their series are named with the block)."""
    kernels = {r.kernel for r in results}
    return {k for k in kernels if len({r.block for r in results if r.kernel == k}) > 1}


def _fixed_text(cut: list[KernelResult], free: tuple[str, ...]) -> str:
    """For a title: the parameters a slice holds fixed (empty when it holds none)."""
    fixed = {k: v for k, v in cut[0].parameters.items() if k not in free}
    return "  " + str(fixed) if fixed else ""


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def heatmap(sweep: SweepResult, path: Path, x: str, y: str) -> Path | None:
    results = [r for r in sweep.results if r.measured]
    if not results:
        return None
    cut = at_fixed_point(results, (x, y))
    groups = _latency_cells(cut, x, y, multi_block(results))
    xs = sorted({r.parameters[x] for r in cut})
    ys = sorted({r.parameters[y] for r in cut})
    plt = _setup()
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups) + 1, 3.8), squeeze=False)
    for ax, (name, cells) in zip(axes[0], groups.items()):
        _heatmap_panel(fig, ax, name, cells, (x, xs), (y, ys))
    fig.suptitle(f"Latency per launch (median){_fixed_text(cut, (x, y))}", fontsize=10)
    return _save(plt, fig, path)


def _latency_cells(
    cut: list[KernelResult], x: str, y: str, multi: set[str]
) -> dict[str, dict[tuple[Any, Any], float]]:
    """Per series, the latency per launch (ms) at each (x, y) of the slice."""
    groups: defaultdict[str, dict[tuple[Any, Any], float]] = defaultdict(dict)
    for r in cut:
        groups[series_label(r, multi)][(r.parameters[x], r.parameters[y])] = r.latency_s * 1e3
    return groups


def _heatmap_panel(
    fig,
    ax,
    name: str,
    cells: dict[tuple[Any, Any], float],
    x_axis: tuple[str, list[Any]],
    y_axis: tuple[str, list[Any]],
) -> None:
    """One series' heatmap: the latency at each (x, y) the slice has, NaN where it has none."""
    (x, xs), (y, ys) = x_axis, y_axis
    grid = [[cells.get((xv, yv), math.nan) for xv in xs] for yv in ys]
    image = ax.imshow(grid, origin="lower", cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(xs)), [str(v) for v in xs])
    ax.set_yticks(range(len(ys)), [str(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(name, fontsize=10)
    _label_cells(ax, grid)
    fig.colorbar(image, ax=ax, label="latency per launch (ms)")


def _label_cells(ax, grid: list[list[float]]) -> None:
    """Write each measured cell's value on it."""
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7, color="w")


def _lines(sweep: SweepResult, path: Path, x: str, baseline: str | None) -> Path | None:
    """Latency against ``x`` per series or, with a ``baseline`` series, each series' speedup
    against it (None when nothing was measured or the baseline was not)."""
    results = [r for r in sweep.results if r.measured]
    if not results:
        return None
    cut = at_fixed_point(results, (x,))
    series = _series_along(cut, x, multi_block(results))
    if baseline is not None and baseline not in series:
        return None
    plt = _setup()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for color, (name, points) in zip(PALETTE * 4, series.items()):
        if baseline is None:
            _latency_line(ax, points, color, name)
        else:
            _speedup_line(ax, points, series[baseline], color, name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(x)
    if baseline is None:
        ax.set_yscale("log")
        ax.set_ylabel("latency per launch (ms), median ± IQR/2")
    else:
        ax.axhline(1.0, color="#888", lw=0.8)
        ax.set_ylabel(f"speedup vs {baseline}")
    ax.set_title(
        f"{'Latency' if baseline is None else 'Speedup'} vs {x}{_fixed_text(cut, (x,))}",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(plt, fig, path)


def _series_along(cut: list[KernelResult], x: str, multi: set[str]) -> dict[str, dict[Any, KernelResult]]:
    """Per series, the slice's results by their value of ``x``."""
    series: defaultdict[str, dict[Any, KernelResult]] = defaultdict(dict)
    for r in cut:
        series[series_label(r, multi)][r.parameters[x]] = r
    return series


def _latency_line(ax, points: dict[Any, KernelResult], color: str, name: str) -> None:
    """One series' median latency (ms) against x, with half its IQR as error bars."""
    xs = sorted(points)
    ys = [points[v].latency_s * 1e3 for v in xs]
    err = [[points[v].latency_iqr_s * 5e2 for v in xs]] * 2
    ax.errorbar(xs, ys, yerr=err, marker="o", color=color, label=name, capsize=2)


def _speedup_line(
    ax, points: dict[Any, KernelResult], base: dict[Any, KernelResult], color: str, name: str
) -> None:
    """One series' speedup against the baseline series, at the x values both have."""
    xs = [v for v in sorted(points) if v in base]
    ax.plot(xs, [base[v].latency_s / points[v].latency_s for v in xs], marker="o", color=color, label=name)


def energy_latency(sweep: SweepResult, path: Path) -> Path | None:
    results = [r for r in sweep.results if r.measured and r.energy_j > 0]
    if not results:
        return None
    plt = _setup()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    _scatter_series(ax, results, multi_block(results))
    _pareto_fronts(ax, results)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("latency per launch (ms)")
    ax.set_ylabel("energy per launch (mJ)")
    ax.set_title("Energy vs latency, every configuration (medians)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    return _save(plt, fig, path)


def _scatter_series(ax, results: list[KernelResult], multi: set[str]) -> None:
    """Every configuration at (latency, energy) in ms and mJ, a colour per series."""
    names = list(dict.fromkeys(series_label(r, multi) for r in results))
    colors = dict(zip(names, PALETTE * 4))
    for name in names:
        mine = [r for r in results if series_label(r, multi) == name]
        ax.scatter(
            [r.latency_s * 1e3 for r in mine],
            [r.energy_j * 1e3 for r in mine],
            color=colors[name],
            label=name,
            s=22,
        )


def _pareto_fronts(ax, results: list[KernelResult]) -> None:
    """Each parameter point's Pareto front of (latency, energy), one legend entry for all."""
    by_point = defaultdict(list)
    for r in results:
        by_point[r.point_index].append(r)
    labelled = False
    for rows in by_point.values():
        coords = [(r.latency_s, r.energy_j) for r in rows]
        front = sorted(coords[i] for i in pareto(coords))
        ax.plot(
            [c[0] * 1e3 for c in front],
            [c[1] * 1e3 for c in front],
            color="k",
            lw=0.8,
            marker="o",
            mfc="none",
            ms=9,
            label=None if labelled else "Pareto front of a parameter point",
        )
        labelled = True


def draw_all(sweep: SweepResult, directory: Path | str, baseline: str | None = None) -> list[Path]:
    """Every plot the results allow, into ``directory``; returns the files written (none, with a
    warning that names the extra, without matplotlib)."""
    if extras.optional("matplotlib", "sweep plots (*.png)") is None:
        return []
    directory = Path(directory)
    results = [r for r in sweep.results if r.measured]
    axes = varied(results)
    drawn = []
    if len(axes) >= 2:
        drawn.append(heatmap(sweep, directory / "heatmap.png", axes[0], axes[1]))
    if axes:
        drawn.append(_lines(sweep, directory / safe_name(f"time_vs_{axes[0]}.png"), axes[0], None))
        if len({r.kernel for r in results}) > 1:
            speedup_baseline = _baseline(sweep, results, baseline)
            drawn.append(_lines(sweep, directory / "speedup.png", axes[0], speedup_baseline))
    drawn.append(energy_latency(sweep, directory / "energy_vs_latency.png"))
    return [p for p in drawn if p is not None]


def _baseline(sweep: SweepResult, results: list[KernelResult], baseline: str | None) -> str | None:
    """The series speedups are against: the one asked for, else the sweep's baseline kernel,
    else the first kernel measured."""
    return baseline or sweep.meta.get("baseline") or (results[0].kernel if results else None)
