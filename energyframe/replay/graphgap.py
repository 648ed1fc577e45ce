"""The launch gap between kernels in a CUDA graph, measured from the graph itself.

A graph runs its kernels back to back, but not without a pause: each kernel starts a short time
after the one before ends (about 1.4 µs on an H200 between resnet50's short kernels). The
replayed ops, each a graph of copies of one op, leave that pause out of their sum. Here a few
replays of the full model's graph run under the profiler: CUPTI records each kernel of a replay,
so the kernels per replay and their busy time (overlaps merged) are known; with the graph's time
per replay from the measured windows, the gap per kernel is

    g = (T_graph - B_graph) / K

(``workloads.closure.gap_from_span``). T comes from the windows, not from the profiled replays,
because the profiler may slow the launches it watches but cannot change how long a kernel runs.
The clocks can: a replay that starts from an idle GPU runs its kernels slower, so the profiled replays follow
unprofiled ones (``WARMUP_REPLAYS``). Where the kernels' busy time still exceeds T (bloom-560m on an
H100: 1552.6 µs busy against a 1527.4-µs graph), the windows and the profile ran at different clocks
and T - B says nothing; the gap then comes from the profiled replays alone, their span less their
busy time (``workloads.closure.gap_from_span``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import kineto


@dataclass(frozen=True)
class GraphKernels:
    """The kernels of one replay of a captured graph (means over the profiled replays).

    Units: s; ``kernels`` is a count per replay.
    """

    kernels: float
    busy_s: float
    span_s: float
    replays: int


#: unprofiled replays before the profiled ones, so that the GPU's clocks are up (from idle, the
#: first replays' kernels run slower than the measured windows' do)
WARMUP_REPLAYS = 20


def kernels_per_step(trace: kineto.Trace) -> GraphKernels | None:
    """Kernel count, busy time and span per annotated step of a parsed trace; None when the
    trace holds no kernel inside a step."""
    rows = [r for r in kineto.gaps(trace)["steps"] if r["step"] is not None and r["kernels"]]
    if not rows:
        return None
    n = len(rows)
    return GraphKernels(
        kernels=sum(r["kernels"] for r in rows) / n,
        busy_s=sum(r["busy_us"] for r in rows) / n * 1e-6,
        span_s=sum(r["span_us"] for r in rows) / n * 1e-6,
        replays=n,
    )


def profile_replays(
    step: Callable[[], None], sync: Callable[[], None], replays: int = 3
) -> GraphKernels | None:
    """Run ``step`` (one graph replay) ``replays`` times under the profiler, each synchronised
    and annotated as a step, and count what ran."""
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(WARMUP_REPLAYS):
        step()
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            with record_function(kineto.STEP_ANNOTATION):
                step()
                sync()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "graph.json"
        prof.export_chrome_trace(str(path))
        trace = kineto.parse(path)
    return kernels_per_step(trace)
