"""The power trace of a run: every channel over time, the windows shaded, meter lags shown.

Energy counters are drawn as the power they imply between consecutive ticks; wall meters at the
times the alignment moved them to (the legend says by how much). matplotlib is imported when a
plot is drawn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import UsageError
from .results import RunResult

PALETTE = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C", "#CCB974"]


def power_trace(
    result: RunResult,
    path: Path | str,
    title: str | None = None,
    all_channels: bool = True,
    show_raw: bool = False,
) -> Path:
    """Draw ``result``'s power channels and windows into a PNG at ``path``; ``show_raw`` also
    draws moved (aligned) channels where they were recorded, dashed."""
    samples = result.samples
    channels = {c["name"]: c for s in result.meta.get("sources", []) for c in s.get("channels", [])}
    power = [n for n, c in channels.items() if c.get("quantity") in ("power", "energy")]
    run = f"the run of {result.meta.get('workload', {}).get('name') or 'a workload'} started {result.meta.get('started_at') or '(unknown)'}"
    if not power:
        raise UsageError(f"{run} has no power channels (it measured timing only): no power trace to draw")
    if len(samples) == 0 or not samples["channel"].isin(power).any():
        raise UsageError(
            f"{run} has no samples of its power channels ({', '.join(power)}): no power trace to draw"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    maps = result.meta.get("time_maps", {})
    windows = result.windows
    if windows.empty or not {"start_s", "end_s"} <= set(windows.columns):
        windows = windows.iloc[0:0]
    else:
        windows = windows.drop_duplicates(["phase", "trial"])
    t0 = float(samples["time_s"].min())
    if len(windows):
        t0 = min(t0, float(windows["start_s"].min()))
    fig, ax = plt.subplots(figsize=(12, 5))
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
    drawn = 0
    for name, info in channels.items():
        if info["quantity"] not in ("power", "energy") or (not all_channels and not info.get("primary")):
            continue
        rows = samples[samples["channel"] == name].sort_values("time_s")
        if len(rows) < 2:
            continue
        t = rows["time_s"].to_numpy(float)
        v = rows["value"].to_numpy(float)
        label = name
        shift = maps.get(name)
        if shift:  # a time map written as null (NaN) moves nothing
            shift = {k: shift.get(k) or 0.0 for k in ("lag_s", "drift", "reference_s")}
        if shift and (shift.get("lag_s") or shift.get("drift")) and show_raw:
            # a record reports the interval that ended when it arrived
            ax.plot(t - t0, v, lw=0.9, ls="--", drawstyle="steps-pre", label=f"{name} as recorded")
        if shift and (shift.get("lag_s") or shift.get("drift")):
            mono = t - result.meta["clock"]["anchor_wall_s"] + result.meta["clock"]["anchor_monotonic_s"]
            moved = mono - shift["lag_s"] - shift.get("drift", 0.0) * (mono - shift.get("reference_s", 0.0))
            t = moved + result.meta["clock"]["anchor_wall_s"] - result.meta["clock"]["anchor_monotonic_s"]
            label += (
                f" (moved {-shift['lag_s']:+.2f} s"
                + (f", drift {shift['drift'] * 100:+.3f} %" if shift.get("drift") else "")
                + ")"
            )
        if info["quantity"] == "energy":
            dt = np.diff(t)
            ok = dt > 0
            power = np.diff(v)[ok] / dt[ok]
            ax.step(t[1:][ok] - t0, power, where="pre", lw=1.2, label=f"{label} (counter, between ticks)")
        else:
            resolution = info.get("resolution_s", 0)
            # a moved meter sample sits in the middle of the interval it reports
            style = (
                "steps-mid"
                if shift and resolution >= 0.5
                else "steps-post"
                if resolution >= 0.05
                else "default"
            )
            ax.plot(t - t0, v, lw=1.0, drawstyle=style, label=label)
        drawn += 1
    ax.set_xlabel("time since the run started (s)")
    ax.set_ylabel("power (W)")
    workload = result.meta.get("workload", {}).get("name", "")
    ax.set_title(title or f"{workload} — {result.meta.get('started_at', '')} ({result.status})")
    if drawn or phases:
        ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
