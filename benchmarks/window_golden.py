"""A regression corpus for the window maths: many recordings, every window's full row, kept
bit for bit, so that a change meant to keep behaviour can show that it did.

Three steps, each into one folder (kept outside the repository: it holds data, not code):

- ``record DIR``: the inputs. Recordings of the simulated step family (``step_sim.py``: square
  and steady loads at the cap, memory-bound and partial, three readings of the 20-ms buffer,
  windows of 50 ms to 2 s, synced and unsynced starts, back-to-back windows), the same with a
  starved poller's late ticks, irregular ticks, missing samples, a counter reset, a stuck
  counter, rejected readings, an idle baseline, windows still open; the H200's recorded ticks
  (``tests/fixtures/nvml-ticks.json``); a wall meter that needs aligning; runs made through
  ``ef.measure`` with the fake NVML of ``tests/fake_nvml`` (steady and stepped loads, a starved
  poller, the recorded ticks), whose recordings are caught as the run assembles them; and saved
  runs of a small step family (fake NVML) for ``step_family.py --analyse --recompute``.
- ``build DIR``: the outputs as this checkout computes them: per recording the run's steps
  (placement, fused power, windows, idle baselines, flags, warnings, phase summaries, as
  ``lifecycle/assemble.py`` calls them), the held-out-tick windows (``held_out_ticks.py``) on
  some, and the step family's table recomputed from its saved runs.
- ``check DIR``: the same outputs again, compared with the built ones exactly: every float bit
  for bit (NaN equal to NaN), every text equal. Any difference is printed; exit 1.
- ``same A.json B.json``: two JSON outputs compared the same way (e.g. ``step_family.py
  --analyse --recompute`` of one set of recorded runs, by two checkouts).

The check also prints how many windows, and which estimators and flags, the corpus holds::

    python benchmarks/window_golden.py record /tmp/golden   # about 2 minutes (real-time fake runs)
    python benchmarks/window_golden.py build /tmp/golden
    python benchmarks/window_golden.py check /tmp/golden
    python benchmarks/window_golden.py same again-main.json again-edge.json
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from energyframe.core.clock import ClockModel, ClockPair  # noqa: E402
from energyframe.model import Channel, ClockBase, Quantity, Scope, Timing, WindowAnnotation  # noqa: E402

# -- recordings as plain data ---------------------------------------------------------------------


def record_of(w) -> dict:
    return {
        "phase": w.phase,
        "trial": int(w.trial),
        "start_s": float(w.start_s),
        "end_s": float(w.end_s),
        "iterations": int(w.iterations),
        "synced": bool(w.synced),
    }


def recording_data(rec) -> dict:
    """A ``core.pipeline.Recording`` as plain data (no class of energyframe's in it)."""
    return {
        "clock": rec.clock.to_json(),
        "channels": [c.to_json() for c in rec.channels.values()],
        "channel_source": dict(rec.channel_source),
        "series": {n: (np.array(s.times_s, dtype=float), np.array(s.values, dtype=float)) for n, s in rec.series.items()},
        "rejected": {c: {r: np.array(t, dtype=float) for r, t in d.items()} for c, d in rec.rejected.items()},
        "rejected_counts": {c: dict(d) for c, d in rec.rejected_counts.items()},
        "records": [record_of(w) for w in rec.records],
        "idle_window": record_of(rec.idle_window) if rec.idle_window is not None else None,
        "idle_baselines": {
            n: {"channel": b.channel, "power_w": b.power_w, "duration_s": b.duration_s, "flags": list(b.flags), "bound_w": b.bound_w}
            for n, b in rec.idle_baselines.items()
        },
        "work": {p: dict(w) for p, w in rec.work.items()},
        "interrupted": sorted(rec.interrupted),
        "opened_s": [float(t) for t in rec.opened_s],
    }


def channels_of(data: dict) -> dict[str, Channel]:
    """The recording's channels; where they were recorded before channels declared what shapes
    them, the declaration a run of before gets when read (``results.meta.with_declared_shapes``)."""
    try:
        from energyframe.results.meta import with_declared_shapes
    except ImportError:  # before channels declared it: the names alone

        def with_declared_shapes(channels):
            return channels

    return {c["name"]: Channel.from_json(c) for c in with_declared_shapes(list(data["channels"]))}


def recording_from(data: dict):
    from energyframe.core.pipeline import Recording
    from energyframe.core.samples import SampleSeries
    from energyframe.core.windows import WindowRecord

    try:
        from energyframe.core.idle import IdleBaseline
    except ImportError:  # before core/idle.py
        from energyframe.core.windows import IdleBaseline  # type: ignore[attr-defined,no-redef]

    def window(d):
        return WindowRecord(d["phase"], d["trial"], d["start_s"], d["end_s"], d["iterations"], d["synced"])

    return Recording(
        clock=ClockModel.from_json(data["clock"]),
        channels=channels_of(data),
        channel_source=dict(data["channel_source"]),
        series={n: SampleSeries(t.copy(), v.copy()) for n, (t, v) in data["series"].items()},
        samples=pd.DataFrame(),
        rejected={c: {r: t.copy() for r, t in d.items()} for c, d in data["rejected"].items()},
        rejected_counts=data["rejected_counts"],
        records=tuple(window(d) for d in data["records"]),
        idle_window=window(data["idle_window"]) if data["idle_window"] else None,
        idle_baselines={
            n: IdleBaseline(b["channel"], b["power_w"], b["duration_s"], tuple(b["flags"]), b["bound_w"])
            for n, b in data["idle_baselines"].items()
        },
        work=data["work"],
        interrupted=frozenset(tuple(x) for x in data["interrupted"]),
        opened_s=tuple(data["opened_s"]),
    )


def note(channel, start_s: float, end_s: float) -> WindowAnnotation:
    """A source's annotation, deterministic: a column on the instant-power channel, and a flag
    on its windows under 0.1 s."""
    if not channel.name.endswith("power_instant"):
        return WindowAnnotation()
    flags = ("annotated_short",) if end_s - start_s < 0.1 else ()
    return WindowAnnotation(columns={"note_duration_ms": 1e3 * (end_s - start_s)}, flags=flags)


# -- the inputs: simulated ------------------------------------------------------------------------


def random_windows(rng, t0: float, t1: float, lengths, per_length: int, phase: str, synced_share: float):
    out = []
    k = 0
    for length in lengths:
        for _ in range(per_length):
            a = rng.uniform(t0, t1 - length)
            out.append(dict(phase=phase, trial=k, start_s=a, end_s=a + length, iterations=1 + k % 3, synced=bool(rng.uniform() < synced_share)))
            k += 1
    return out


def sim_recording(channels, series, records, *, opened=(), rejected=None, idle_window=None, interrupted=(), work=None) -> dict:
    mono = ClockModel(ClockPair(1.7e9, 0.0, 0.0))
    return {
        "clock": mono.to_json(),
        "channels": [c.to_json() for c in channels.values()],
        "channel_source": {n: "nvml" for n in channels},
        "series": {n: (np.array(s.times_s, dtype=float), np.array(s.values, dtype=float)) for n, s in series.items()},
        "rejected": rejected or {},
        "rejected_counts": {c: {r: int(len(t)) for r, t in d.items()} for c, d in (rejected or {}).items()},
        "records": list(records),
        "idle_window": idle_window,
        "idle_baselines": {},
        "work": work or {},
        "interrupted": sorted(interrupted),
        "opened_s": list(opened),
    }


def as_dicts(records, synced: bool | None = None) -> list[dict]:
    out = []
    for w in records:
        d = record_of(w)
        if synced is not None:
            d["synced"] = synced
        out.append(d)
    return out


def perturbed(series: dict, rng, kind: str) -> dict:
    """The sensors' series with one fault."""
    from energyframe.core.samples import SampleSeries

    s = dict(series)
    ticks = s["gpu0"]
    t, v = ticks.times_s.copy(), ticks.values.copy()
    if kind == "late ticks":  # a starved poller: every 7th tick stamped 18-40 ms late
        late = np.arange(3, t.size - 3, 7)
        t[late] += rng.uniform(0.018, 0.04, late.size)
    elif kind == "irregular ticks":
        t = t + rng.uniform(-0.009, 0.009, t.size)
        t = np.sort(t)
    elif kind == "missing samples":
        u = s["gpu0.power_samples"]
        keep = ~((u.times_s > 3.0) & (u.times_s < 3.5)) & ~((u.times_s > 6.1) & (u.times_s < 6.2))
        s["gpu0.power_samples"] = SampleSeries(u.times_s[keep], u.values[keep])
        keep_t = ~((t > 4.2) & (t < 4.8))
        t, v = t[keep_t], v[keep_t]
    elif kind == "counter reset":
        v = np.where(t > 5.05, v - v[np.searchsorted(t, 5.05)] + 10.0, v)
    elif kind == "stuck counter":
        stuck = (t > 3.0) & (t < 3.8)
        v = np.where(stuck, v[np.searchsorted(t, 3.0)], v)
        v = np.where(t >= 3.8, v, v)
    s["gpu0"] = SampleSeries(t, v)
    return s


def simulated_inputs(seeds: int) -> dict[str, dict]:
    import step_sim
    from step_family import FAMILY

    out: dict[str, dict] = {}
    lengths = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)
    for cfg in FAMILY:
        for seed in range(seeds):
            for reading, mean_s in step_sim.READINGS.items():
                rng = np.random.default_rng(1000 * seed + len(out))
                load = step_sim.square_load(rng, cfg.on_s, cfg.off_s, cfg.work, periods=30)
                model = step_sim.SensorModel(mean_s=mean_s)
                channels, series = step_sim.read(load.trace, rng, model)
                end = float(load.trace.end_s) - 0.2
                # period windows back to back (synced), the bursts inside them, random windows
                records = as_dicts(load.records, synced=True) + as_dicts(load.bursts, synced=True)
                records += random_windows(rng, 0.5, end, lengths, 4, "random", 0.5)
                name = f"sim {cfg.name} seed {seed} {reading}"
                out[name] = sim_recording(channels, series, records, opened=[float(load.records[-1].end_s)])
                if reading == "mean":
                    # the same windows unsynced, and a live window's view (the last periods open)
                    unsynced = as_dicts(load.records, synced=False) + as_dicts(load.bursts, synced=False)
                    out[name + " unsynced"] = sim_recording(channels, series, unsynced)
                    live = as_dicts(load.records[:-5], synced=True)
                    opened = [float(w.start_s) for w in load.records[-5:]]
                    out[name + " live"] = sim_recording(channels, series, live, opened=opened)
    for window_s in (0.05, 0.2, 0.5, 1.0, 2.0):
        for work in ("cap", "memory", "partial"):
            for seed in range(seeds):
                rng = np.random.default_rng(7000 + 100 * seed + len(out))
                count = max(8, int(16 / max(window_s, 0.2)))
                load = step_sim.steady_load(rng, window_s, work, windows=min(count, 40))
                channels, series = step_sim.read(load.trace, rng)
                records = as_dicts(load.records, synced=bool(seed % 2))
                out[f"sim steady {window_s * 1e3:.0f} ms {work} seed {seed}"] = sim_recording(channels, series, records)
    # faults, on a stepped load of each kind
    for kind in ("late ticks", "irregular ticks", "missing samples", "counter reset", "stuck counter"):
        for k, cfg in enumerate(FAMILY[1:4]):
            rng = np.random.default_rng(9000 + 10 * k + len(out))
            load = step_sim.square_load(rng, cfg.on_s, cfg.off_s, cfg.work, periods=30)
            channels, series = step_sim.read(load.trace, rng)
            series = perturbed(series, rng, kind)
            end = float(load.trace.end_s) - 0.2
            records = as_dicts(load.records, synced=True) + random_windows(rng, 0.3, end, lengths, 4, "random", 0.5)
            records.append(dict(phase="outside", trial=0, start_s=end - 0.5, end_s=end + 5.0, iterations=1, synced=True))
            records.append(dict(phase="outside", trial=1, start_s=-1.0, end_s=0.5, iterations=1, synced=False))
            out[f"sim fault {kind} {cfg.name}"] = sim_recording(channels, series, records)
    # rejected readings, an idle window, interrupted windows, work per phase
    rng = np.random.default_rng(424242)
    load = step_sim.square_load(rng, 0.2, 0.3, "partial", periods=30)
    channels, series = step_sim.read(load.trace, rng)
    records = as_dicts(load.records, synced=True) + random_windows(rng, 0.5, float(load.trace.end_s) - 0.2, lengths, 3, "random", 0.5)
    rejected = {
        "gpu0.power_samples": {"negative": np.sort(rng.uniform(2, 10, 5)), "duplicate": np.sort(rng.uniform(2, 10, 4))},
        "gpu0.power_instant": {"not_finite": np.sort(rng.uniform(2, 10, 3)), "missing": np.array([4.0]), "implausible": np.array([7.5])},
        "gpu0": {"clock_step": np.array([8.05])},
    }
    idle = dict(phase="idle", trial=0, start_s=0.1, end_s=0.95, iterations=1, synced=True)
    out["sim rejected, idle, interrupted"] = sim_recording(
        channels, series, records, rejected=rejected, idle_window=idle,
        interrupted=[("period", 3), ("random", 5)], work={"period": {"tokens": 128.0}},
    )
    # an idle window at the load's power: the windows read below it
    idle_hot = dict(phase="idle", trial=0, start_s=1.0, end_s=1.2, iterations=1, synced=False)
    out["sim idle above load"] = sim_recording(channels, series, records[:40], idle_window=idle_hot)
    return out


def recorded_ticks_input() -> dict:
    """The H200's recorded ticks as a counter alone, and with a flat buffer beside it."""
    from energyframe.core.samples import SampleSeries

    recorded = json.loads((ROOT / "tests" / "fixtures" / "nvml-ticks.json").read_text())
    ticks = np.array(recorded["ticks"], dtype=float)
    t, e = ticks[:, 0] + 10.0, ticks[:, 1] / 1e3
    mono = ClockBase.MONOTONIC
    channels = {"gpu0": Channel("gpu0", Quantity.ENERGY, Scope.GPU, 0.1, mono)}
    series = {"gpu0": SampleSeries(t, e)}
    rng = np.random.default_rng(5)
    records = random_windows(rng, t[0] + 0.01, t[-1] - 0.01, (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 4.0), 10, "w", 0.5)
    return sim_recording(channels, series, records)


def meter_input() -> dict:
    """A wall meter stamped late, aligned against a 20-ms reference (``core/align.py``), and a
    period-end channel."""
    from energyframe.core.samples import SampleSeries
    from energyframe.offline.simulate import pulses, synthesize

    profile = pulses(5.0, count=4, on_s=3.0, off_s=3.0)
    run = synthesize(profile, 0.0, 40.0, lag_s=1.3, drift=1e-4, interval_s=1.0, noise_w=1.0, seed=3)
    mono = ClockBase.MONOTONIC
    channels = {
        "gpu0": Channel("gpu0", Quantity.POWER, Scope.GPU, 0.02, mono),
        "meter": Channel("meter", Quantity.POWER, Scope.SYSTEM_WALL, 1.0, mono, timing=Timing.UNKNOWN, averaging_s=1.0, accuracy_pct=1.5),
        "avg": Channel("avg", Quantity.POWER, Scope.GPU, 0.1, mono, timing=Timing.PERIOD_END, averaging_s=1.0, accuracy_w=5.0),
    }
    avg_t = np.arange(1.0, 40.0, 0.1)
    avg_w = np.array([np.mean([profile(x) for x in np.linspace(a - 1.0, a, 20)]) for a in avg_t])
    series = {
        "gpu0": SampleSeries(run.reference_t, run.reference_w),
        "meter": SampleSeries(run.meter_t, run.meter_w),
        "avg": SampleSeries(avg_t, avg_w),
    }
    records = [dict(phase="on" if (k % 2 == 0) else "off", trial=k // 2, start_s=5.0 + 3.0 * k + 0.2, end_s=5.0 + 3.0 * k + 2.8, iterations=1, synced=True) for k in range(8)]
    return sim_recording(channels, series, records)


# -- the inputs: runs with the fake NVML ----------------------------------------------------------


class Caught:
    """The recordings that runs assemble, caught as ``lifecycle/assemble.py`` places them."""

    def __init__(self) -> None:
        self.items: list = []

    def __enter__(self):
        import energyframe.lifecycle.assemble as assemble

        self.module = assemble
        self.real = assemble.place_samples

        def catching(recording, aligner, warn):
            self.items.append((recording_data(recording), aligner if isinstance(aligner, str) or aligner is None else "auto"))
            return self.real(recording, aligner, warn)

        assemble.place_samples = catching
        return self

    def __exit__(self, *exc):
        self.module.place_samples = self.real


def fake_nvml(folder: Path, gpus: list[dict]) -> dict:
    """Point ``import pynvml`` (here and in a sampler process) at the fake, with ``gpus``."""
    fake = ROOT / "tests" / "fake_nvml"
    path = folder / "nvml-scenario.json"
    scenario = {"t0_wall": time.time(), "gpus": gpus}
    path.write_text(json.dumps(scenario))
    os.environ["FAKE_NVML_SCENARIO"] = str(path)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])
    if str(fake) not in sys.path:
        sys.path.insert(0, str(fake))
    sys.modules.pop("pynvml", None)
    return scenario


def gpu(**kw) -> dict:
    return {"uuid": "GPU-52dfc441-e9da-23f3-17f9-2b876aae0d10", "name": "NVIDIA H200", "power_w": 700.0, **kw}


def sleep_until(t_wall: float) -> None:
    time.sleep(max(0.0, t_wall - time.time()))


def square_profile(lead_s: float, on_s: float, off_s: float, periods: int, high_w: float = 690.0, low_w: float = 120.0) -> list:
    """A fake GPU's power: bursts of ``on_s`` starting ``lead_s + k (on_s + off_s)`` (+3 ms)."""
    profile = [[0.0, low_w]]
    for k in range(periods + 1):
        start = lead_s + k * (on_s + off_s) + 0.003
        profile += [[start, high_w], [start + on_s, low_w]]
    return profile


def fake_runs(folder: Path, run_root: Path) -> tuple[dict[str, tuple[dict, object]], dict]:
    """Recordings of runs through ``ef.measure`` with the fake NVML, and the saved runs of a
    small step family (``step_family.py``'s layout) with its JSON."""
    import energyframe as ef
    from energyframe.power.nvml.source import NVMLPowerSource

    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[dict, object]] = {}

    def nvml(**options):
        return [NVMLPowerSource(name="nvml", mode="thread", **options)]

    def keep(name: str, caught: Caught) -> None:
        for k, item in enumerate(caught.items):
            out[f"{name} {k}" if k else name] = item

    # steady power, synced and unsynced windows of 50 ms to 0.5 s, an idle baseline
    fake_nvml(folder, [gpu()])
    with Caught() as caught:
        with ef.measure(power=nvml(), sync=lambda: None, idle_s=0.5) as m:
            for k, length in enumerate((0.05, 0.1, 0.15, 0.25, 0.5) * 2):
                with m.window("steady", iterations=k + 1):
                    time.sleep(length)
    keep("fake steady synced", caught)
    with Caught() as caught:
        with ef.measure(power=nvml(channels="samples"), sync=None) as m:
            for length in (0.05, 0.12, 0.3):
                with m.window("unsynced"):
                    time.sleep(length)
    keep("fake steady unsynced", caught)
    # a stepped load, the windows back to back and synced (anchored starts), an idle baseline
    # taken at the load's top (dynamic energy below zero)
    lead, on, off, periods = 1.0, 0.1, 0.2, 16
    scenario = fake_nvml(folder, [gpu(profile=square_profile(lead, on, off, periods))])
    with Caught() as caught:
        with ef.measure(power=nvml(), sync=lambda: None) as m:
            t0 = scenario["t0_wall"]
            for k in range(periods):
                sleep_until(t0 + lead + k * (on + off))
                with m.window("period"):
                    with m.window("on"):
                        sleep_until(t0 + lead + k * (on + off) + on)
                    sleep_until(t0 + lead + (k + 1) * (on + off) - 0.002)
    keep("fake stepped", caught)
    # a starved poller: late ticks beside some edges
    fake_nvml(folder, [gpu(starve={"every": 4, "stall_s": 0.06})])
    with Caught() as caught:
        with ef.measure(power=nvml(channels="samples"), sync=lambda: None) as m:
            for _ in range(8):
                with m.window("starved"):
                    time.sleep(0.35)
    keep("fake starved", caught)
    # the H200's recorded ticks, replayed
    recorded = json.loads((ROOT / "tests" / "fixtures" / "nvml-ticks.json").read_text())
    scenario = fake_nvml(folder, [gpu(recorded_ticks=recorded["ticks"])])
    with Caught() as caught:
        with ef.measure(power=nvml(channels="state"), sync=None) as m:
            for start, end in [(0.4, 1.7), (1.8, 2.2), (2.3, 4.6)]:
                sleep_until(scenario["t0_wall"] + start)
                with m.window("idle" if start < 2 else "load"):
                    sleep_until(scenario["t0_wall"] + end)
    keep("fake recorded ticks", caught)
    # the step family, small: saved runs that step_family.py --analyse --recompute reads
    recorded_runs: dict = {}
    with Caught() as caught:
        for name, on, off, periods in (("100/200 ms partial", 0.1, 0.2, 24), ("50/100 ms cap", 0.05, 0.1, 30)):
            lead = 1.0
            high = 300.0 if "partial" in name else 690.0
            scenario = fake_nvml(folder, [gpu(profile=square_profile(lead, on, off, periods, high_w=high))])
            run_dir = run_root / name.replace("/", "-").replace(" ", "_")
            with ef.measure(power=nvml(), sync=lambda: None, out=run_dir) as m:
                t0 = scenario["t0_wall"]
                for k in range(periods):
                    sleep_until(t0 + lead + k * (on + off))
                    with m.window("period"):
                        with m.window("on"):
                            sleep_until(t0 + lead + k * (on + off) + on)
                        sleep_until(t0 + lead + (k + 1) * (on + off) - 0.002 - 0.01 * (k % 3))
                time.sleep(0.3)
            recorded_runs[name] = {"run_dir": str(run_dir), "zeus": [], "steps_per_burst": 1}
        fake_nvml(folder, [gpu(power_w=680.0)])
        rng = np.random.default_rng(11)
        run_dir = run_root / "steady_200_ms_cap"
        with ef.measure(power=nvml(), sync=lambda: None, out=run_dir) as m:
            with m.window("reference", iterations=100):
                time.sleep(1.0)
            for _ in range(14):
                time.sleep(rng.uniform(0.0, 0.1))
                with m.window("steady", iterations=10):
                    time.sleep(0.2 * rng.uniform(0.9, 1.1))
        recorded_runs["steady 200 ms cap"] = {"run_dir": str(run_dir), "zeus": []}
    keep("fake step family", caught)
    return out, {"title": "step family (fake NVML)", "rows": [], "recorded": recorded_runs}


# -- the outputs ------------------------------------------------------------------------------------


def run_steps(data: dict, aligner, annotate: bool) -> dict:
    """A recording through the run's steps, as ``lifecycle/assemble.py`` calls them."""
    from energyframe.core.pipeline import add_fused_power, flag_windows, integrate, place_samples
    from energyframe.core.windows import off_grid_warnings

    try:
        from energyframe.core.idle import idle_warnings
        from energyframe.core.summary import summarize
    except ImportError:  # before core/idle.py and core/summary.py
        from energyframe.core.windows import idle_warnings, summarize  # type: ignore[attr-defined,no-redef]

    try:
        from energyframe.core.vocabulary import INTERRUPTED
    except ImportError:  # before the vocabulary module
        from energyframe.core.pipeline import INTERRUPTED  # type: ignore[attr-defined,no-redef]

    warnings: list[str] = []

    def warn(message: str) -> None:
        if message not in warnings:
            warnings.append(message)

    recording = recording_from(data)
    placement = place_samples(recording, aligner, warn)
    recording, placement, fusion = add_fused_power(recording, placement, warn)
    windows, idle = integrate(recording, placement, note if annotate else None)
    windows = flag_windows(windows, recording.interrupted, INTERRUPTED)
    try:  # the channels say which are derived from a counter
        off_grid = off_grid_warnings(windows, recording.channels)
    except TypeError:  # before they did: the names said it
        off_grid = off_grid_warnings(windows)
    for message in [*idle_warnings(windows, idle), *off_grid]:
        warn(message)
    return {
        "windows": windows.reset_index(drop=True),
        "summaries": [s.to_json() for s in summarize(windows, recording.work)],
        "idle": {n: [b.channel, b.power_w, b.duration_s, list(b.flags), b.bound_w] for n, b in idle.items()},
        "fusion": fusion,
        "warnings": warnings,
        "channels": sorted(recording.channels),
        "time_maps": {n: [m.lag_s, m.drift, m.reference_s] for n, m in placement.time_maps.items()},
        "alignment": placement.alignment,
    }


def held_out_output(data: dict) -> dict:
    """``held_out_ticks.held_out`` on a recording's placed series."""
    from held_out_ticks import held_out

    from energyframe.core.pipeline import place_samples

    recording = recording_from(data)
    placement = place_samples(recording, None, lambda m: None)
    return {name: rows for name, rows in held_out(recording.channels, placement.series).items()}


def step_family_output(folder: Path) -> dict:
    """``step_family.py --analyse --recompute`` on the saved runs: its rows, and the recomputed
    gpu0 windows of each run."""
    import step_family

    from energyframe.results.result import RunResult

    out_json = folder / "step-family-again.json"
    step_family.main(["--analyse", str(folder / "step-family.json"), "--run-root", str(folder / "runs"), "--recompute", "--out", str(out_json)])
    rows = json.loads(out_json.read_text())["rows"]
    step_family.RECOMPUTE = True
    recomputed = {}
    for name in sorted(p.name for p in (folder / "runs").iterdir()):
        result = RunResult.load(folder / "runs" / name)
        w = result.windows
        for phase in sorted(set(w["phase"])):
            recomputed[f"{name} {phase}"] = step_family.channel_rows(result, phase, "gpu0").reset_index(drop=True)
    step_family.RECOMPUTE = False
    return {"rows": rows, "recomputed": recomputed}


def outputs(folder: Path) -> dict:
    inputs = pickle.loads((folder / "inputs.pkl").read_bytes())
    out: dict = {}
    started = time.monotonic()
    for name, case in inputs["cases"].items():
        out[name] = run_steps(case["data"], case["aligner"], case["annotate"])
    for name in inputs["held_out"]:
        out[f"held out: {name}"] = held_out_output(inputs["cases"][name]["data"])
    out["step family --analyse --recompute"] = step_family_output(folder)
    print(f"{len(out)} outputs in {time.monotonic() - started:.0f} s")
    return out


# -- comparing ---------------------------------------------------------------------------------------


def same_floats(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element: bit for bit the same float (any NaN equal to any NaN)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    both_nan = np.isnan(a) & np.isnan(b)
    return both_nan | (a.view(np.uint64) == b.view(np.uint64))


def differences(old, new, where: str, out: list[str], limit: int = 20) -> None:
    """Every difference between ``old`` and ``new`` (nested dicts, lists, frames, arrays,
    floats), described, appended to ``out``."""
    if len(out) >= limit:
        return
    if isinstance(old, pd.DataFrame) or isinstance(new, pd.DataFrame):
        if not (isinstance(old, pd.DataFrame) and isinstance(new, pd.DataFrame)):
            out.append(f"{where}: a frame against {type(new).__name__}")
            return
        if list(old.columns) != list(new.columns):
            out.append(f"{where}: columns {list(old.columns)} -> {list(new.columns)}")
            return
        if len(old) != len(new):
            out.append(f"{where}: {len(old)} rows -> {len(new)}")
            return
        for column in old.columns:
            a, b = old[column], new[column]
            if a.dtype.kind == "f" or b.dtype.kind == "f":
                try:
                    ok = same_floats(a.to_numpy(float), b.to_numpy(float))
                except (TypeError, ValueError):
                    ok = np.array([x == y for x, y in zip(a, b)])
            else:
                ok = np.array([(x == y) or (x is y) or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)) for x, y in zip(a, b)])
            if not ok.all():
                i = int(np.flatnonzero(~ok)[0])
                out.append(f"{where}[{column}]: {int((~ok).sum())} of {len(ok)} rows differ; row {i}: {a.iloc[i]!r} -> {b.iloc[i]!r}")
        return
    if isinstance(old, dict):
        if not isinstance(new, dict) or set(old) != set(new):
            out.append(f"{where}: keys {sorted(map(str, old))[:8]} -> {sorted(map(str, new))[:8] if isinstance(new, dict) else type(new).__name__}")
            return
        for key in old:
            differences(old[key], new[key], f"{where}.{key}", out, limit)
        return
    if isinstance(old, (list, tuple)):
        if not isinstance(new, (list, tuple)) or len(old) != len(new):
            out.append(f"{where}: {old!r:.80} -> {new!r:.80}")
            return
        for k, (a, b) in enumerate(zip(old, new)):
            differences(a, b, f"{where}[{k}]", out, limit)
        return
    if isinstance(old, np.ndarray):
        if not isinstance(new, np.ndarray) or old.shape != new.shape:
            out.append(f"{where}: array {getattr(old, 'shape', None)} -> {getattr(new, 'shape', None)}")
            return
        ok = same_floats(old, new)
        if not ok.all():
            out.append(f"{where}: {int((~ok).sum())} of {ok.size} values differ")
        return
    if isinstance(old, float) and isinstance(new, float):
        if not same_floats(np.array([old]), np.array([new]))[0]:
            out.append(f"{where}: {old!r} -> {new!r}")
        return
    if old != new:
        out.append(f"{where}: {old!r:.120} -> {new!r:.120}")


def census(built: dict) -> tuple[int, collections.Counter, collections.Counter]:
    """How many windows rows the corpus holds, and per estimator and flag how many."""
    rows = 0
    estimators: collections.Counter = collections.Counter()
    flags: collections.Counter = collections.Counter()
    for out in built.values():
        frame = out.get("windows") if isinstance(out, dict) else None
        if not isinstance(frame, pd.DataFrame):
            continue
        rows += len(frame)
        estimators.update(str(e) for e in frame["estimator"].fillna("") if e)
        for text in frame["flags"].fillna(""):
            flags.update(f for f in str(text).split(";") if f)
        for summary in out["summaries"]:
            flags.update(f"phase:{f}" for f in summary["flags"])
    return rows, estimators, flags


# -- the command line -------------------------------------------------------------------------------


def record(folder: Path, seeds: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    cases: dict[str, dict] = {}
    for name, data in simulated_inputs(seeds).items():
        cases[name] = {"data": data, "aligner": None, "annotate": name.startswith("sim rejected")}
    cases["recorded ticks (counter alone)"] = {"data": recorded_ticks_input(), "aligner": None, "annotate": False}
    cases["wall meter aligned"] = {"data": meter_input(), "aligner": "auto", "annotate": False}
    runs, family = fake_runs(folder / "fake", folder / "runs")
    for name, (data, aligner) in runs.items():
        cases[name] = {"data": data, "aligner": aligner, "annotate": True}
    (folder / "step-family.json").write_text(json.dumps(family, indent=1))
    held = [n for n in cases if n.startswith("sim steady 200 ms cap") or n.startswith("sim 100/200 ms partial seed 0 mean") or n.startswith("sim 500/500 ms cap seed 0 mean")]
    (folder / "inputs.pkl").write_bytes(pickle.dumps({"cases": cases, "held_out": held}))
    print(f"{len(cases)} recordings ({len(runs)} from runs with the fake NVML), held out on {len(held)}: {folder / 'inputs.pkl'}")


def build(folder: Path) -> None:
    built = outputs(folder)
    (folder / "outputs.pkl").write_bytes(pickle.dumps(built))
    report(built)


def report(built: dict) -> None:
    rows, estimators, flags = census(built)
    print(f"{rows} window rows over {sum(1 for o in built.values() if 'windows' in o)} recordings")
    print("estimators: " + ", ".join(f"{k} {v}" for k, v in sorted(estimators.items())))
    print("flags: " + ", ".join(f"{k} {v}" for k, v in sorted(flags.items())))


def check(folder: Path, against: str = "outputs.pkl") -> int:
    golden = pickle.loads((folder / against).read_bytes())
    now = outputs(folder)
    report(golden)
    found: list[str] = []
    if set(golden) != set(now):
        found.append(f"outputs {sorted(set(golden) ^ set(now))[:10]} are in only one of the two")
    for name in golden:
        if name in now:
            per: list[str] = []
            differences(golden[name], now[name], name, per)
            found += per
    if found:
        print(f"DIFFERENT: {len(found)} difference(s)")
        for line in found[:200]:
            print("  " + line)
        return 1
    print(f"IDENTICAL: {len(golden)} outputs, every float bit for bit")
    return 0


def same(a: Path, b: Path) -> int:
    """Two JSON files compared exactly (JSON keeps every float's digits)."""
    found: list[str] = []
    differences(json.loads(a.read_text()), json.loads(b.read_text()), a.name, found, limit=200)
    for line in found:
        print("  " + line)
    print(f"DIFFERENT: {len(found)} difference(s)" if found else f"IDENTICAL: {a} and {b}, every float bit for bit")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=("record", "build", "check", "same"))
    ap.add_argument("folder", type=Path, help="the corpus's folder (same: the first JSON file)")
    ap.add_argument("other", type=Path, nargs="?", help="same: the second JSON file")
    ap.add_argument("--seeds", type=int, default=2, help="simulated runs per configuration and reading")
    ap.add_argument("--against", default="outputs.pkl", help="check: the built outputs to compare with (a file in the folder)")
    args = ap.parse_args(argv)
    if args.step == "record":
        record(args.folder, args.seeds)
        return 0
    if args.step == "build":
        build(args.folder)
        return 0
    if args.step == "same":
        if args.other is None:
            ap.error("same needs two JSON files")
        return same(args.folder, args.other)
    return check(args.folder, args.against)


if __name__ == "__main__":
    sys.exit(main())
