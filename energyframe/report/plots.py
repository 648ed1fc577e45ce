"""The power trace of a run: every channel over time, the windows shaded, meter lags shown.

Energy counters are drawn as the power they imply between consecutive ticks; wall meters at the
times the alignment moved them to (the legend says by how much). matplotlib (``energyframe[plots]``)
is imported when a plot is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..kit.extras import require
from ..model import Quantity
from ..results.result import RunResult

PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974"]


def pyplot(feature: str):
    """``matplotlib.pyplot`` on the file-only Agg backend, or a ``UsageError`` saying that
    ``feature`` needs the ``plots`` extra."""
    matplotlib = require("matplotlib", feature)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@dataclass(frozen=True)
class TraceLine:
    """One channel of the power trace, ready to draw (the PNG and the HTML report share it).

    Args:
        name: the channel.
        label: the legend text (says how far alignment moved a wall meter).
        times_s: seconds since the run's first sample or window.
        power_w: power; for an energy counter, the power it implies between consecutive ticks.
        style: ``line``, ``steps-pre`` (a counter: the power over the interval that ends at a
            tick), ``steps-post`` (a reading held until the next) or ``steps-mid`` (a moved meter
            reading, in the middle of the interval it reports).
        dashed: a moved channel drawn where it was recorded.
    """

    name: str
    label: str
    times_s: np.ndarray
    power_w: np.ndarray
    style: str
    dashed: bool = False


def origin_s(result: RunResult) -> float:
    """The time axis' zero: the first sample or window (Unix seconds)."""
    samples, windows = result.samples, result.windows
    t0 = float(samples["time_s"].min()) if len(samples) else 0.0
    if len(windows) and "start_s" in windows.columns:
        t0 = min(t0, float(windows["start_s"].min())) if len(samples) else float(windows["start_s"].min())
    return t0


def trace_lines(result: RunResult, all_channels: bool = True, show_raw: bool = False) -> list[TraceLine]:
    """Every power or energy channel of ``result`` as power over time since ``origin_s``."""
    meta = result.run_meta
    t0 = origin_s(result)
    lines = []
    for name, info in meta.channels.items():
        if not info.integrable or (not all_channels and not info.primary):
            continue
        readings = _readings(result.samples, name)
        if readings is None:
            continue
        t, v = readings
        label = name
        shift = _TimeShift.of(meta.time_maps.get(name))
        if shift.moves and show_raw:
            # a record reports the interval that ended when it arrived
            lines.append(TraceLine(name, f"{name} as recorded", t - t0, v, "steps-pre", dashed=True))
        if shift.moves and meta.clock is not None:
            t = shift.moved(t, meta.clock.to_json())
            label += shift.label()
        lines.append(_power_line(name, label, info, t, v, t0, shift.moves))
    return lines


def _readings(samples, channel: str) -> tuple[np.ndarray, np.ndarray] | None:
    """A channel's sample times (Unix s) and values in time order; ``None`` with fewer than two,
    too few to draw."""
    rows = samples[samples["channel"] == channel].sort_values("time_s")
    if len(rows) < 2:
        return None
    return rows["time_s"].to_numpy(float), rows["value"].to_numpy(float)


@dataclass(frozen=True)
class _TimeShift:
    """Where alignment moved a channel on the monotonic clock: by ``lag_s``, and by ``drift``
    times the time since ``reference_s``. Units: s."""

    lag_s: float = 0.0
    drift: float = 0.0
    reference_s: float = 0.0

    @classmethod
    def of(cls, record) -> _TimeShift:
        """The shift of a channel's time map; none (or a field written as null) moves nothing."""
        if record is None:
            return cls()
        return cls(record.lag_s or 0.0, record.drift or 0.0, record.reference_s or 0.0)

    @property
    def moves(self) -> bool:
        return bool(self.lag_s or self.drift)

    def moved(self, times_s: np.ndarray, clock: dict) -> np.ndarray:
        """Wall times ``times_s`` where the shift puts them, through the run's clock anchor."""
        mono = times_s - clock["anchor_wall_s"] + clock["anchor_monotonic_s"]
        mono = mono - self.lag_s - self.drift * (mono - self.reference_s)
        return mono + clock["anchor_wall_s"] - clock["anchor_monotonic_s"]

    def label(self) -> str:
        """What the legend adds to the channel's name: how far it was moved."""
        drift = f", drift {self.drift * 100:+.3f} %" if self.drift else ""
        return f" (moved {-self.lag_s:+.2f} s{drift})"


def _power_line(
    name: str, label: str, info, times_s: np.ndarray, values: np.ndarray, t0: float, moved: bool
) -> TraceLine:
    """One channel's line on the axis that starts at ``t0``: an energy counter as the power
    between its ticks, a power channel as its readings, stepped as its resolution says."""
    if info.quantity == Quantity.ENERGY:
        dt = np.diff(times_s)
        ok = dt > 0
        power = np.diff(values)[ok] / dt[ok]
        return TraceLine(name, f"{label} (counter, between ticks)", times_s[1:][ok] - t0, power, "steps-pre")
    resolution = info.resolution_s
    # a moved meter sample sits in the middle of the interval it reports
    style = "steps-mid" if moved and resolution >= 0.5 else "steps-post" if resolution >= 0.05 else "line"
    return TraceLine(name, label, times_s - t0, values, style)


def missing_power(result: RunResult) -> str | None:
    """Why ``result`` has no power to draw (None when it has some): a timing-only run, or
    power channels without a sample."""
    power = [n for n, c in result.run_meta.channels.items() if c.integrable]
    if not power:
        return "no power channels: this run measured timing only"
    samples = result.samples
    if len(samples) == 0 or "channel" not in samples.columns or not samples["channel"].isin(power).any():
        return f"no power samples: the run's power channels ({', '.join(power)}) recorded none"
    return None


def _check_format(path: Path) -> None:
    """Refuse a file name whose extension matplotlib cannot write, before anything is drawn."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lstrip(".").lower()
    if suffix and suffix not in formats:
        raise UsageError(
            f"cannot draw the plot as {path.name}: {path.suffix!r} is not an image format; "
            f"use one of {', '.join('.' + f for f in sorted(formats))}"
        )


def power_trace(
    result: RunResult,
    path: Path | str,
    title: str | None = None,
    all_channels: bool = True,
    show_raw: bool = False,
) -> Path:
    """Draw ``result``'s power channels and windows into a PNG at ``path``; ``show_raw`` also
    draws moved (aligned) channels where they were recorded, dashed. A run with no power (timing
    only) gets its windows on the time axis and says so where the power would be.

    Raises:
        UsageError: matplotlib is not installed (the message names the extra), or ``path``
            names a format it cannot write.
    """
    plt = pyplot("the power-trace plot")
    _check_format(Path(path))

    t0 = origin_s(result)
    fig, ax = plt.subplots(figsize=(12, 5))
    phases = _shade_windows(ax, _window_spans(result), t0)
    lines = trace_lines(result, all_channels=all_channels, show_raw=show_raw)
    for line in lines:
        _draw_line(ax, line)
    drawn = len(lines)
    ax.set_xlabel("time since the run started (s)")
    note = missing_power(result) if not drawn else None
    if note is None:
        ax.set_ylabel("power (W)")
    else:  # no empty power axis pretending to be a measurement
        ax.set_yticks([])
        ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=12)
    meta = result.run_meta
    workload = meta.workload.name if meta.workload else ""
    ax.set_title(title or f"{workload} — {meta.started_at or ''} ({result.status})")
    if drawn or phases:
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _window_spans(result: RunResult):
    """One row per window (phase and trial, whatever its channel), none when the run recorded no
    window edges."""
    windows = result.windows
    if windows.empty or not {"start_s", "end_s"} <= set(windows.columns):
        return windows.iloc[0:0]
    return windows.drop_duplicates(["phase", "trial"])


def _shade_windows(ax, windows, t0: float) -> list[str]:
    """Shade each window in its phase's colour, one legend entry per phase; returns the phases."""
    phases = list(dict.fromkeys(windows["phase"])) if len(windows) else []
    for i, phase in enumerate(phases):
        colour = PALETTE[i % len(PALETTE)]
        for j, row in enumerate(windows[windows["phase"] == phase].itertuples()):
            ax.axvspan(
                row.start_s - t0,
                row.end_s - t0,
                color=colour,
                alpha=0.12,
                lw=0,
                label=phase if j == 0 else None,
            )
    return phases


def _draw_line(ax, line: TraceLine) -> None:
    """One channel in its style: a moved channel where it was recorded dashed, a counter's
    power as steps that end at each tick."""
    if line.dashed:
        ax.plot(line.times_s, line.power_w, lw=0.9, ls="--", drawstyle="steps-pre", label=line.label)
    elif line.style == "steps-pre":
        ax.step(line.times_s, line.power_w, where="pre", lw=1.2, label=line.label)
    else:
        style = "default" if line.style == "line" else line.style
        ax.plot(line.times_s, line.power_w, lw=1.0, drawstyle=style, label=line.label)
