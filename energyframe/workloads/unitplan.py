"""How each per-layer unit is measured: its steps per window from its own replay time, its
lead-in, and which granularity a model is decomposed at (``granularity=auto``).

Pure arithmetic and a timing loop over ``step``/``sync`` callables (no torch), so every choice is
tested on the CPU with an injected clock.

Why a unit can be timed at capture instead of calibrated by the run: the orchestrator's
calibration times growing batches until one lasts half a window, which costs about half a window
per phase (0.11 s of a per-layer unit's ~0.8 s with 0.2-s windows). A unit's CUDA graph replays in
a fixed time, so a few milliseconds of replays right after its capture say how many replays fill
a window just as well.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..lifecycle.config import CALIBRATION_MARGIN

#: a unit's replays are timed until one timed batch lasts this long. Units: s.
PROBE_S = 0.005

#: the launch gap a CUDA graph leaves between two different kernels, as measured on an H200
#: (resnet50 at batch 1 as one graph: 0.860 ms against ~0.75 ms of kernels, ~1.4 µs per
#: kernel; docs/replay.md). Used only to *predict* whether leaf units can close. Units: s.
ASSUMED_GAP_S = 1.4e-6
#: ``granularity=auto`` takes leaf units only when the launch gaps they leave out are at most this share of the forward.
#: Set from an H100 (2026-11-23, docs/validation.md): vit_b_16 at batch 64, predicted 2.2 %, was
#: +67 % off the whole model with leaf units, while its blocks and every other model's blocks
#: closed within 3 % on latency; so leaf units are kept only for models of few, long kernels.
#: Units: %.
AUTO_TOLERANCE_PCT = 1.0


def probe_step_s(
    step: Callable[[], object],
    sync: Callable[[], None],
    probe_s: float = PROBE_S,
    clock: Callable[[], float] = time.monotonic,
    max_steps: int = 1_000_000,
) -> tuple[float, int]:
    """Time per step of a phase that is built already.

    One untimed step first (a CUDA graph's first replay uploads it), then growing batches, each
    between two syncs, until one that is not the first lasts ``probe_s`` (the first timed batch
    may still hold a warm-up: allocators, kernel selection, clocks ramping up). Returns the time
    per step of the last batch and the steps run (they warmed the phase up). Units: s.
    """
    step()
    sync()
    ran, n, batches = 1, 1, 0
    while True:
        t0 = clock()
        for _ in range(n):
            step()
        sync()
        dt = clock() - t0
        ran += n
        batches += 1
        if (dt >= probe_s and batches >= 2) or n >= max_steps:
            return dt / n, ran
        if dt >= probe_s:  # long enough, but the first: time as many again
            continue
        wanted = math.ceil(1.2 * probe_s * n / dt) if dt > 0 else 10 * n
        n = min(max_steps, max(2 * n, wanted))


def steps_for_window(
    per_step_s: float, window_s: float, margin: float = CALIBRATION_MARGIN, max_steps: int = 1_000_000_000
) -> int:
    """Steps that fill ``window_s`` (times ``margin``: by default the run's calibration margin, as
    replays later in a run are often a little faster than when probed) at ``per_step_s`` each;
    at least one."""
    if not (per_step_s > 0 and math.isfinite(per_step_s)):
        return 1
    return max(1, min(max_steps, math.ceil(margin * window_s / per_step_s)))


def lead_steps(per_step_s: float, lead_s: float) -> int:
    """Unmeasured steps that last ``lead_s`` before a unit's first window (none for 0)."""
    if lead_s <= 0:
        return 0
    if not (per_step_s > 0 and math.isfinite(per_step_s)):
        return 1
    return max(1, math.ceil(lead_s / per_step_s))


@dataclass(frozen=True)
class GranularityChoice:
    """What ``granularity=auto`` decided, and why (shown in the run's tables).

    ``predicted_gap_pct``: the share of the forward that leaf units are predicted to leave out
    (their single-kernel calls times the assumed launch gap); NaN when it could not be predicted.
    """

    granularity: str
    reason: str
    predicted_gap_pct: float = math.nan


def choose_granularity(
    single_kernel_calls: int,
    whole_latency_s: float,
    has_blocks: bool,
    gap_s: float | None = None,
    tolerance_pct: float = AUTO_TOLERANCE_PCT,
) -> GranularityChoice:
    """Leaf units, or the model's blocks, for ``granularity=auto``.

    A unit measured in its own CUDA graph repeats itself back to back. A unit of one kernel then
    runs without the gap that a graph leaves between two *different* kernels, which it has in the
    model; a block's graph is made of different kernels and keeps them. So leaf units fall short
    of the whole model by about ``single_kernel_calls * gap`` per forward: negligible when the
    kernels are long (large batches, large layers), most of the error when they are a few µs
    (resnet50 at batch 1). Leaf when that is at most ``tolerance_pct`` of the forward.

    Args:
        single_kernel_calls: calls per forward of leaf units that launch one kernel.
        whole_latency_s: the whole model's forward, timed (NaN if it could not be).
        has_blocks: whether the model has blocks to fall back on.
        gap_s: the launch gap per kernel (default ``ASSUMED_GAP_S``).
    """
    gap_s = ASSUMED_GAP_S if gap_s is None else gap_s
    if not has_blocks:
        return GranularityChoice("leaf", "auto: leaf (the model has no blocks)")
    if not (whole_latency_s > 0 and math.isfinite(whole_latency_s)):
        return GranularityChoice("block", "auto: block (the whole forward could not be timed)")
    predicted = 100.0 * single_kernel_calls * gap_s / whole_latency_s
    detail = (
        f"{single_kernel_calls} single-kernel leaf calls x ~{gap_s * 1e6:.3g} us launch gap = "
        f"{predicted:.3g} % of the {whole_latency_s * 1e3:.4g}-ms forward (leaf when <= {tolerance_pct:g} %)"
    )
    if predicted <= tolerance_pct:
        return GranularityChoice("leaf", f"auto: leaf ({detail})", predicted)
    return GranularityChoice("block", f"auto: block ({detail})", predicted)
