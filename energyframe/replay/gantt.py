"""The timeline of one traced iteration: every kernel as a bar, coloured by tier."""

from __future__ import annotations

from pathlib import Path

from ..report.plots import pyplot
from .kineto import TIER_COMM, TIER_GEMM, TIER_MEMORY, TIER_OTHER, Kernel, Trace

COLOURS = {TIER_GEMM: "#4C72B0", TIER_MEMORY: "#DD8452", TIER_OTHER: "#55A868", TIER_COMM: "#C44E52"}


def timeline(trace: Trace, path: Path, title: str = "") -> Path:
    """Draw the last traced iteration's kernels into a PNG at ``path`` (needs ``energyframe[plots]``)."""
    plt = pyplot("the trace timeline")
    from matplotlib.patches import Patch

    kernels = last_iteration(trace)
    t0 = min(k.start_us for k in kernels)
    streams = sorted({str(k.stream) for k in kernels})
    fig, ax = plt.subplots(figsize=(14, 1.2 + 0.5 * len(streams)))
    for lane, stream in enumerate(streams):
        for tier_name, colour in COLOURS.items():
            bars = _bars_ms(kernels, stream, tier_name, t0)
            if bars:
                ax.broken_barh(bars, (lane - 0.4, 0.8), facecolors=colour)
    ax.set_yticks(range(len(streams)), [f"stream {s}" for s in streams])
    ax.set_xlabel("time in the iteration (ms)")
    busy, span = busy_and_span_ms(kernels)
    ax.set_title(f"{title}: {len(kernels)} kernels, {busy:.2f} ms of kernels in a {span:.2f} ms span")
    ax.legend(handles=[Patch(color=c, label=t) for t, c in COLOURS.items()], loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def last_iteration(trace: Trace) -> list[Kernel]:
    """The kernels of the last traced step; every kernel of a trace without steps, or when that
    step has none."""
    step = trace.iterations - 1 if trace.steps else None
    return [k for k in trace.kernels if k.step == step] or trace.kernels


def busy_and_span_ms(kernels: list[Kernel]) -> tuple[float, float]:
    """The kernels' summed duration, and the time from the first start to the last end. Units: ms."""
    t0 = min(k.start_us for k in kernels)
    return sum(k.duration_us for k in kernels) / 1e3, (max(k.end_us for k in kernels) - t0) / 1e3


def _bars_ms(kernels: list[Kernel], stream: str, tier_name: str, t0: float) -> list[tuple[float, float]]:
    """(start, width) of the stream's kernels of one tier, from ``t0``; the shortest still drawn. Units: ms."""
    return [
        ((k.start_us - t0) / 1e3, max(k.duration_us / 1e3, 1e-4))
        for k in kernels
        if str(k.stream) == stream and k.tier == tier_name
    ]
