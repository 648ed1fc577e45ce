"""What the meter costs the program it measures: time per iteration, its spread, CPU, wall time.

Two host-bound workloads, each timed in one process under every configuration in turn, the
configurations shuffled anew in each round so that none always follows another (drift cancels):

- ``resnet50``: the README's main job (``energyframe run --workload resnet50``: eager, batch 1,
  bound by the host issuing kernels), its step taken from the workload plugin itself;
- ``launch``: a launch-bound loop, ``--kernels`` tiny kernels (``x.add_(1)``) per iteration.

Configurations: ``none`` (``ef.measure`` without a source: the same timing windows), ``nvml``
(the default: a sampler process following the counter's grid), ``nvml-dense`` (``sampler=dense``:
polling every 1 ms throughout, as before), ``zeus`` (Zeus's ``ZeusMonitor`` windows, if ``zeus``
imports). One round runs each configuration once: a measurement started, ``--windows`` windows of
about ``--window-s`` each, stopped. Each window's time per iteration is timed here, with one clock
around its iterations for every configuration, so the meter's window edges are not in it; what
an edge costs (sync, reads) is reported apart.

Each configuration's run first runs the workload for ``--warmup-s`` (0.5 s) untimed, the meter
already on: on an H200 (2026-11-29, 6 rounds) the rounds' ratios to ``none`` spread by ±20-37 %
where the windows' own spread (CV 4-14 %) allows a few per cent, as if each run started slower
after the idle between runs. The warm-up did not remove it: on the launch loop (2026-11-29, 8
rounds) the meter-off run's own medians ranged 13.5-21.9 ms from round to round, and each
configuration's 95 % interval was still ±10-12 %. The host's drift between runs is the noise:
resolving 1 % needs the configurations interleaved more finely than a run each per round.

``--paired PAIRS`` adds that design: one measurement with the nvml sampler, its windows (about
``--paired-window-s``, 1 s) alternating between the sampler process running and stopped
(SIGSTOP: no CPU, no driver call), each after 0.3 s of the workload untimed in the state it is
timed in, the order within each pair drawn at random (between two stopped windows in a row the
sampler runs 0.25 s, so that no stop outlasts the driver's power buffer). Each pair's ratio holds the host's drift
of a few seconds only; the table prints the geometric mean with its 95 % interval, how many pairs
±1 % would need, the windows' CV with the sampler running and stopped, and the sampler's CPU share
while it ran. ``--rounds 0 --cli-runs 0 --paired 60`` runs it alone (about 3 minutes a workload).
``--paired-sampler dense`` runs the dense sampler instead (does the cost grow with the driver
calls?), ``--paired-pin`` binds the sampler's threads to one CPU and the workload's to the others
(do the sampler's wake-ups cost, landing on the workload's CPU?); ``--paired-states
on,pinned,off`` times both in one measurement, each group of three windows in a random order,
the pinned ones bound for their window only, so that both are paired with the same stopped
windows. A paired run writes its times after each group (``OUT/paired-WORKLOAD.partial.json``),
so a run cut short keeps its pairs; ``--pool FILE...`` prints the table of several runs (their
``sampler_overhead.json`` or partial files) pooled, each pair still its own run's ratio: the
pairs ±1 % needs can be gathered over several calls. ``--paired-seconds S`` begins no group
that would end after about S seconds (each workload an even share of what is left) and writes
the table: for a time box, where a killed run would print nothing.

How many pairs ±1 % takes depends on how the host's noise drifts. On an H200 (2026-11-29) the
windows' time per iteration varied by 10-16 % and consecutive windows (~1.15 s apart) were
correlated (lag 1: 0.67 for the launch loop, falling by a quarter or a third a window further): most of the noise
drifts over ~4 s, so each pair's ratio spread by ~11 % and ±1 % took ~600 pairs (~25 minutes of
device time a workload). Shorter windows, closer together, cancel more of that drift: from those
correlations, ``--paired-window-s 0.4 --paired-settle-s 0.1`` should give pairs as tight in less
than half the time (an estimate, not yet measured).

Repetitions: the defaults (8 rounds x 12 windows of 0.2 s, per workload and configuration) give
96 windows per configuration; simulated with a window CV of 1 / 2 / 2.5 % and rounds drifting by
±5 % (tests/benchmarks/test_sampler_overhead.py), the 95 % interval of a configuration's ratio to none is
±0.27 / 0.55 / 0.68 % (median of 20), enough to tell 1 %. The table prints the interval got; a
noisier host needs more ``--rounds`` (the interval shrinks as their square root).

Per workload and configuration it prints: median time per iteration and its ratio to ``none``
(target <= 1.01: the geometric mean of each round's ratio of medians, so that drift between
rounds cancels) with a 95 % bootstrap interval over rounds; the within-run CV
of time per iteration (median over rounds) and its ratio to ``none``'s (target <= 1.2); the
sampler's CPU share while it sampled (run.json's ``sources[].info.acquisition.cpu_share``; target
<= 0.10) and its polls per counter tick; the CPU share of the whole process tree; and the edge
cost per window. ``--cli-runs N`` adds N alternating runs each of ``energyframe run --workload
resnet50 --power none`` and ``--power nvml`` as a user runs them: wall time, process-tree CPU,
``show``'s time lines (what the run cost beyond the work). Raw data: ``OUT/sampler_overhead.json``.

Run on a GPU (about 5 minutes with the defaults; ``--workloads resnet50`` or ``--workloads launch
--cli-runs 0`` for half each): ``python benchmarks/sampler_overhead.py --out $OUT`` (``--quick``
for a 1-minute smoke run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import energyframe as ef
from energyframe.power.nvml import NVMLPowerSource

CONFIGS = ("none", "nvml", "nvml-dense", "zeus")


def tree_cpu_s() -> float:
    """CPU seconds of this process, its reaped children and its live descendants (Linux)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    me = os.getpid()
    for pid in cpu:
        p, seen = parents.get(pid), 0
        while p and p != me and seen < 64:
            p, seen = parents.get(p), seen + 1
        if p == me and pid != me:
            total += cpu[pid]
    return total


def workloads(kernels: int, device: str):
    """``{name: (step, sync)}``: the README's resnet50 step and the launch-bound loop."""
    import torch

    from energyframe.kit.registry import create_workload

    model = create_workload("resnet50" if device == "cuda" else f"resnet50:device={device}")
    model.setup()
    phase = next(iter(model.phases()))
    x = torch.zeros(256, device=device)

    def launch():
        for _ in range(kernels):
            x.add_(1.0)

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    return {"resnet50": (phase.step, phase.sync), "launch": (launch, sync)}, model


def device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(0) if device == "cuda" else device


def per_iteration_s(step, sync, n: int = 20) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    sync()
    return (time.perf_counter() - t0) / n


class Zeus:
    """Zeus's monitor as its users call it: a window opened and closed around the work."""

    def __init__(self) -> None:
        from zeus.monitor import ZeusMonitor

        try:
            self.monitor = ZeusMonitor(gpu_indices=[0], cpu_indices=[])
        except TypeError:
            self.monitor = ZeusMonitor(gpu_indices=[0])

    def window(self, name: str):
        monitor = self.monitor

        class _Window:
            def __enter__(self):
                monitor.begin_window(name)

            def __exit__(self, *exc):
                monitor.end_window(name)

        return _Window()


def warm(step, sync, seconds: float) -> None:
    """The workload run untimed for ``seconds``: after the idle between two configurations'
    runs, clocks (the GPU's, the host's) ramp back up before the timed windows begin."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        step()
    sync()


def one_run(config: str, step, sync, iterations: int, windows: int, warmup_s: float = 0.5) -> dict:
    """One measurement of ``windows`` windows under ``config``, after ``warmup_s`` of the
    workload untimed with the meter already running: each window's time per iteration (timed
    here), its edges' cost, the process tree's CPU and the sampler's report."""
    times, edges = [], []
    cpu0, wall0 = tree_cpu_s(), time.monotonic()
    info: dict = {}

    def timed(window) -> None:
        opened = time.perf_counter()
        with window:
            sync()
            t0 = time.perf_counter()
            for _ in range(iterations):
                step()
            sync()
            t1 = time.perf_counter()
        closed = time.perf_counter()
        times.append((t1 - t0) / iterations)
        edges.append((closed - opened) - (t1 - t0))

    if config == "zeus":
        zeus = Zeus()
        warm(step, sync, warmup_s)
        for _ in range(windows):
            timed(zeus.window("w"))
    else:
        power: str | list = "none"
        if config == "nvml":
            power = [NVMLPowerSource(name="nvml", gpus="0")]
        elif config == "nvml-dense":
            power = [NVMLPowerSource(name="nvml", gpus="0", sampler="dense")]
        with ef.measure(power=power, sync=sync) as m:
            warm(step, sync, warmup_s)
            for _ in range(windows):
                timed(m.window("w", iterations=iterations))
        sources = m.result.meta.get("sources") or []
        info = dict(sources[0]["info"]) if sources else {}
    wall = time.monotonic() - wall0
    cost = info.get("acquisition") or {}
    loop = (cost.get("loops") or {}).get("nvml-gpu0", {})
    return {
        "config": config,
        "time_per_iter_s": times,
        "edge_s": edges,
        "wall_s": wall,
        "tree_cpu_s": tree_cpu_s() - cpu0,
        "sampler_cpu_share": cost.get("cpu_share"),
        "sampler_polls": loop.get("polls"),
        "ticks": (cost.get("tick_brackets_s") or {}).get("gpu0", {}).get("n"),
        "tick_bracket_median_s": (cost.get("tick_brackets_s") or {}).get("gpu0", {}).get("median"),
        "polls_per_tick_on_grid": loop.get("polls_per_tick_on_grid"),
        "acquisition": cost,
    }


#: between two stopped windows in a row, the sampler runs this long (the workload untimed) before
#: it is stopped again: two stops back to back (2-3.6 s) outlast the driver's power buffer
#: (2.36 s), and samples were lost (H200, 2026-11-29). Its buffer is read every 0.1 s. Units: s.
RESUME_S = 0.25


def pin_tasks(pid: int, cpus: set[int]) -> list[set[int]]:
    """Bind every thread of process ``pid`` to ``cpus`` (affinity is a thread's, not a
    process's); returns each thread's affinity as read back."""
    got = []
    for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
        try:
            os.sched_setaffinity(int(task.name), cpus)
            got.append(os.sched_getaffinity(int(task.name)))
        except (ProcessLookupError, FileNotFoundError):  # a thread that ended meanwhile
            continue
    return got


def paired_run(
    step,
    sync,
    iterations: int,
    pairs: int,
    settle_s: float = 0.3,
    seed: int = 0,
    sampler: str = "grid",
    pin: bool = False,
    states: tuple[str, ...] = ("on", "off"),
    on_group=None,
    until_s: float | None = None,
) -> dict:
    """The meter on and off in alternate windows of one measurement: the nvml sampler process
    runs (on) or is stopped (SIGSTOP: off: no CPU, no driver call), each window after ``settle_s``
    of the workload untimed in the state it is timed in, the order within each pair drawn at
    random. A drift of the host between pairs cancels in each pair's ratio. A stop of ~1 s costs
    the sampler the ticks it hid, seen at once and stamped across it (``held``); the grid schedule
    keeps its grid across it (kit/schedule.py). Before that rule (the H200 runs of 2026-11-29) each
    stop lost the grid 1 time in 3, and the on windows held its dense polling until it was found
    again. ``sampler="dense"`` polls every 1 ms throughout: whether the cost grows with the reads.
    ``pin``: the sampler's threads bound to the last CPU this process may use and this process's
    threads to the others, so that the sampler's wake-ups never land on the workload's CPU.
    ``states`` may add ``"pinned"``: the sampler running, bound that way for that window only
    (both given every CPU again after it), so that pinned and unpinned are paired against the
    same stopped windows of one measurement. ``on_group``, if given, is called after each group
    with the times so far (``{state: [s per iteration, ...]}``): a run cut short keeps them.
    ``until_s``: no group starts that would end after this monotonic time (judged by the
    longest group so far): fewer than ``pairs`` groups, each whole."""
    source = NVMLPowerSource(name="nvml", gpus="0", sampler=sampler)
    rng = random.Random(seed)
    times: dict[str, list[float]] = {state: [] for state in states}
    spans: dict[str, list[tuple[float, float]]] = {state: [] for state in states}
    stopped_s = 0.0
    allowed = sorted(os.sched_getaffinity(0))
    pinned: dict = {}
    with ef.measure(power=[source], sync=sync) as m:
        pid = source.sampler_process.pid
        if pin and len(allowed) >= 2:
            pinned = {
                "sampler": [sorted(c) for c in pin_tasks(pid, {allowed[-1]})],
                "workload": [sorted(c) for c in pin_tasks(os.getpid(), set(allowed[:-1]))],
            }
        warm(step, sync, 1.0)  # the sampler finds the counter's grid
        longest_s = 0.0
        last = None
        for _ in range(pairs):
            begun = time.monotonic()
            if until_s is not None and begun + longest_s > until_s:
                break
            for state in rng.sample(list(states), len(states)):
                if state == "off" and last == "off":
                    warm(step, sync, RESUME_S)  # the sampler reads what its stop left in the buffer
                last = state
                if state == "off":
                    os.kill(pid, signal.SIGSTOP)
                    paused = time.monotonic()
                if state == "pinned" and len(allowed) >= 2:
                    pin_tasks(pid, {allowed[-1]})
                    pin_tasks(os.getpid(), set(allowed[:-1]))
                try:
                    warm(step, sync, settle_s)
                    sync()
                    t0 = time.perf_counter()
                    w0 = time.monotonic()
                    for _ in range(iterations):
                        step()
                    sync()
                    times[state].append((time.perf_counter() - t0) / iterations)
                    spans[state].append((w0, time.monotonic()))
                finally:
                    if state == "off":
                        os.kill(pid, signal.SIGCONT)
                        stopped_s += time.monotonic() - paused
                    if state == "pinned" and not pinned:
                        pin_tasks(pid, set(allowed))
                        pin_tasks(os.getpid(), set(allowed))
            longest_s = max(longest_s, time.monotonic() - begun)
            if on_group is not None:
                on_group(times)
    if pinned:  # this process's threads may use every CPU again
        pin_tasks(os.getpid(), set(allowed))
    sources = m.result.meta.get("sources") or []
    cost = (dict(sources[0]["info"]) if sources else {}).get("acquisition") or {}
    loop = (cost.get("loops") or {}).get("nvml-gpu0", {})
    running_s = (cost.get("wall_s") or 0.0) - stopped_s
    return {
        **times,
        "states": list(states),
        "spans": spans,
        "sampler_cpu_share_running": cost["cpu_s"] / running_s if cost.get("cpu_s") and running_s > 0 else None,
        "polls_per_tick_on_grid": loop.get("polls_per_tick_on_grid"),
        "grid_lost": loop.get("grid_lost"),
        "bound": pinned,  # the affinities set for the whole measurement (--paired-pin)
        "result": m.result,
    }


def paired_ratio(on: list[float], off: list[float], draws: int = 4000) -> dict:
    """On over off, pair by pair: the geometric mean of the ratios, its 95 % interval from
    resampling pairs, and how many pairs would give an interval of ±1 % (it shrinks as their
    square root)."""
    logs = [math.log(a / b) for a, b in zip(on, off)]
    if len(logs) < 2:
        return {"ratio": float("nan"), "lo": float("nan"), "hi": float("nan"), "pairs": len(logs), "pairs_for_1pct": None}
    ratio, lo, hi = geomean_interval(logs, draws)
    half = (math.log(hi) - math.log(lo)) / 2
    return {
        "ratio": ratio,
        "lo": lo,
        "hi": hi,
        "pairs": len(logs),
        "pairs_for_1pct": math.ceil(len(logs) * (half / math.log(1.01)) ** 2),
    }


def geomean_interval(logs: list[float], draws: int = 4000) -> tuple[float, float, float]:
    """The geometric mean of ratios given as their logs, and its 95 % interval from resampling
    them (``draws`` times, seeded: the same logs give the same interval)."""
    rng = random.Random(0)
    boot = sorted(statistics.fmean(rng.choice(logs) for _ in logs) for _ in range(draws))
    return math.exp(statistics.fmean(logs)), math.exp(boot[int(0.025 * draws)]), math.exp(boot[int(0.975 * draws) - 1])


def paired_table(rows: list[dict]) -> list[str]:
    """One line per workload of the paired design."""
    lines = [
        "| workload | pairs | window | on / off [95 % interval] | pairs for ±1 % | CV across windows on / off | CV ratio | sampler CPU while running | polls/tick on grid | grid lost |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for state in [s for s in r.get("states", ("on", "off")) if s != "off"]:
            lines.append(_paired_line(r, state))
    return lines


def _paired_line(r: dict, state: str) -> str:
    """The table's line of one running state (``on``, or ``pinned`` for that window) against the
    stopped windows of the same measurement."""
    off = r[f"off:{state}"] if f"off:{state}" in r else r["off"]  # pooled: those of its own runs
    q = paired_ratio(r[state], off)
    cv_on, cv_off = cv(r[state]), cv(off)
    share = r.get("sampler_cpu_share_running")
    ppt = r.get("polls_per_tick_on_grid")
    label = r["workload"] + (" (dense)" if r.get("sampler") == "dense" else "")
    label += " (pinned)" if r.get("bound") or state == "pinned" else ""
    if r.get("iterations"):
        window = f"{r['iterations']} it ({statistics.median(r['off']) * r['iterations']:.2f} s)"
    else:
        window = f"{r['runs'][state]} run{'s' if r['runs'][state] > 1 else ''} pooled"
    return (
        f"| {label} | {q['pairs']} | {window} | "
        f"{q['ratio']:.4f} [{q['lo']:.4f}, {q['hi']:.4f}] | {q['pairs_for_1pct']} | "
        f"{100 * cv_on:.2f} / {100 * cv_off:.2f} % | {cv_on / cv_off:.2f} | "
        f"{f'{100 * share:.1f} %' if share is not None else '-'} | {f'{ppt:.2f}' if ppt is not None else '-'} | {r.get('grid_lost', '-')} |"
    )


def cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values) if len(values) > 1 else float("nan")


def paired_interval(runs: list[dict], config: str, draws: int = 4000) -> tuple[float, float, float]:
    """``config``'s time per iteration over ``none``'s: each round's ratio of medians (the two ran
    back to back, so a drift between rounds cancels), their geometric mean, and its 95 % interval
    from resampling rounds."""
    by = {(r["round"], r["config"]): r["time_per_iter_s"] for r in runs}
    logs = [
        math.log(statistics.median(by[(k, config)]) / statistics.median(by[(k, "none")]))
        for k in sorted({r["round"] for r in runs})
        if (k, config) in by and (k, "none") in by
    ]
    if not logs:
        return float("nan"), float("nan"), float("nan")
    return geomean_interval(logs, draws)


def table(runs: list[dict], configs: list[str]) -> list[str]:
    lines = [
        "| workload | configuration | median time/iter | ratio to none [95 % interval] | within-run CV (median) | CV ratio |"
        " sampler CPU (of a core) | polls/tick on grid | tree CPU (of a core) | edge per window |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for workload in sorted({r["workload"] for r in runs}):
        mine = [r for r in runs if r["workload"] == workload]
        base_cv = statistics.median(cv(r["time_per_iter_s"]) for r in mine if r["config"] == "none")
        for config in configs:
            rs = [r for r in mine if r["config"] == config]
            if not rs:
                continue
            median = statistics.median(v for r in rs for v in r["time_per_iter_s"])
            ratio, lo, hi = paired_interval(mine, config)
            run_cv = statistics.median(cv(r["time_per_iter_s"]) for r in rs)
            shares = [r["sampler_cpu_share"] for r in rs if r["sampler_cpu_share"] is not None]
            share = f"{100 * statistics.median(shares):.1f} %" if shares else "-"
            ppt = [r["polls_per_tick_on_grid"] for r in rs if r["polls_per_tick_on_grid"] is not None]
            tree = statistics.median(r["tree_cpu_s"] / r["wall_s"] for r in rs)
            edge = statistics.median(v for r in rs for v in r["edge_s"])
            lines.append(
                f"| {workload} | {config} | {median * 1e3:.3f} ms | {ratio:.4f} [{lo:.4f}, {hi:.4f}] | "
                f"{100 * run_cv:.2f} % | {run_cv / base_cv:.2f} | {share} | "
                f"{f'{statistics.median(ppt):.2f}' if ppt else '-'} | {tree:.2f} | {edge * 1e3:.2f} ms |"
            )
    return lines


def cli_runs(out: Path, n: int) -> list[dict]:
    """``energyframe run --workload resnet50`` with and without nvml, as a user runs it."""
    from energyframe.reporters.console import time_lines

    rows = []
    for i in range(n):
        for power in ("none", "nvml"):
            run_dir = out / "cli" / f"{power}-{i}"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "energyframe", "run", "--workload", "resnet50", "--power", power,
                 "--out", str(run_dir)],
                capture_output=True, text=True,
            )
            wall = time.monotonic() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            row = {"power": power, "run": i, "exit_code": done.returncode, "wall_s": wall, "tree_cpu_s": cpu}
            meta_path = run_dir / "run.json"
            if meta_path.exists():
                meta = json.loads(meta_path.read_text())
                row["timings_s"] = meta.get("timings_s")
                row["show"] = time_lines(meta.get("timings_s") or {})
                sources = meta.get("sources") or []
                cost = (sources[0].get("info") or {}).get("acquisition") if sources else None
                row["sampler_cpu_share"] = (cost or {}).get("cpu_share")
            rows.append(row)
            print(f"cli {power} #{i}: exit {done.returncode}, wall {wall:.1f} s, tree CPU {cpu:.1f} s, "
                  f"sampler {row.get('sampler_cpu_share')}", flush=True)
            for line in row.get("show", []):
                print("   ", line, flush=True)
    return rows


class Checkpoint:
    """Writes a paired run's times so far after each group (``paired_run``'s ``on_group``), and
    says how far it is every 10 groups: a run cut short (a time box, a fault) keeps its pairs,
    which ``--pool`` reads."""

    def __init__(self, path: Path, label: dict) -> None:
        self.path, self.label, self.groups = path, label, 0

    def __call__(self, times: dict[str, list[float]]) -> None:
        self.groups += 1
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**self.label, "states": list(times), **times}))
        tmp.replace(self.path)
        if self.groups % 10 == 0:
            q = paired_ratio(times[next(s for s in times if s != "off")], times["off"])
            print(f"    {self.label['workload']}: {self.groups} groups, on / off {q['ratio']:.4f} "
                  f"[{q['lo']:.4f}, {q['hi']:.4f}]", flush=True)


def pool(paths: list[Path]) -> int:
    """The paired table of several runs pooled: each workload's (and sampler's) pairs together,
    each pair still its own run's ratio."""
    rows: dict[tuple, dict] = {}
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(f"--pool: cannot read {path}: {e}") from None
        for r in data.get("paired", [data] if "off" in data else []):
            key = (r["workload"], r.get("sampler", "grid"), bool(r.get("bound")))
            _pool_into(rows.setdefault(key, {"workload": key[0], "sampler": key[1], "bound": r.get("bound"),
                                             "iterations": None, "runs": {}, "states": ["off"]}), r)
    if not rows:
        raise SystemExit("--pool: no paired runs in " + ", ".join(map(str, paths)))
    print("\n".join(paired_table(list(rows.values()))))
    return 0


def _pool_into(into: dict, r: dict) -> None:
    """Add run ``r``'s whole groups to the pooled row ``into``: each running state with the
    stopped windows of its own run (``off:STATE``), so that every pair stays a pair of one run."""
    states = [s for s in r.get("states", ["on", "off"]) if s != "off"]
    n = min(len(r[s]) for s in [*states, "off"])
    for state in states:
        if state not in into:
            into["states"].append(state)
            into[state], into[f"off:{state}"] = [], []
        into[state] += r[state][:n]
        into[f"off:{state}"] += r["off"][:n]
        into["runs"][state] = into["runs"].get(state, 0) + 1


def paired_states(text: str) -> tuple[str, ...]:
    """``--paired-states``: ``off`` and at least one running state, each once."""
    states = tuple(s.strip() for s in text.split(",") if s.strip())
    unknown = set(states) - {"on", "off", "pinned"}
    if unknown or "off" not in states or len(states) < 2 or len(set(states)) != len(states):
        raise SystemExit(f"--paired-states {text!r}: give off and on and/or pinned, each once")
    return states


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("sampler-overhead"))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--windows", type=int, default=12, help="windows per measurement")
    ap.add_argument("--window-s", type=float, default=0.2, help="about this long each. Units: s")
    ap.add_argument("--kernels", type=int, default=2000, help="tiny kernels per launch-loop iteration")
    ap.add_argument("--warmup-s", type=float, default=0.5, help="the workload untimed before each run's windows. Units: s")
    ap.add_argument("--cli-runs", type=int, default=1, help="runs each of the CLI with and without nvml")
    ap.add_argument("--quick", action="store_true", help="2 rounds x 6 windows, no CLI runs: a smoke test")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script without a GPU")
    ap.add_argument("--workloads", default="resnet50,launch", help="which of resnet50, launch (one per command: half the time)")
    ap.add_argument("--paired", type=int, default=0, metavar="PAIRS",
                    help="also the paired design: PAIRS windows each with the sampler running and stopped, alternated")
    ap.add_argument("--paired-sampler", choices=("grid", "dense"), default="grid",
                    help="the nvml sampler's schedule in the paired design (dense: every 1 ms, to see whether the cost scales with reads)")
    ap.add_argument("--paired-pin", action="store_true",
                    help="bind the sampler to one CPU and this process to the others (whether its wake-ups cost)")
    ap.add_argument("--paired-states", default="on,off",
                    help="the windows of each group, in a random order: on, off, and pinned (the sampler running, bound as by --paired-pin for that window only)")
    ap.add_argument("--pool", nargs="+", type=Path, metavar="JSON",
                    help="print the paired table of earlier runs pooled (their sampler_overhead.json, or the "
                    "paired-WORKLOAD.partial.json of a run cut short), and run nothing")
    ap.add_argument("--paired-seconds", type=float, default=None, metavar="S",
                    help="stop the paired design's groups after about S seconds in all (each workload an even share of "
                    "what is left), each group whole, and write the table: for a time box")
    ap.add_argument("--paired-settle-s", type=float, default=0.3,
                    help="the workload untimed before each paired window, in that window's state. Units: s")
    ap.add_argument("--paired-window-s", type=float, default=1.0, help="each paired window about this long. Units: s")
    args = ap.parse_args(argv)
    if args.pool:
        return pool(args.pool)
    states = paired_states(args.paired_states)  # bad input stops here, before any run
    if args.quick:
        args.rounds, args.windows, args.cli_runs = 2, 6, 0
    args.out.mkdir(parents=True, exist_ok=True)

    configs = list(CONFIGS)
    try:
        Zeus()
    except Exception as e:  # not installed here, or it cannot start: say so, go on without it
        print(f"zeus left out: {type(e).__name__}: {e}", flush=True)
        configs.remove("zeus")
    loads, _model = workloads(args.kernels, args.device)
    runs: list[dict] = []
    started = time.monotonic()
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for workload, (step, sync) in ((w, loads[w]) for w in chosen):
        for _ in range(3):
            per_iteration_s(step, sync)  # warm: clocks, caches, allocator
        iterations = max(1, round(args.window_s / per_iteration_s(step, sync)))
        if args.rounds:
            print(f"{workload}: {iterations} iterations per window", flush=True)
        for k in range(args.rounds):
            order = list(configs)
            random.Random(k).shuffle(order)
            for config in order:
                run = one_run(config, step, sync, iterations, args.windows, args.warmup_s)
                run.update(workload=workload, round=k, iterations=iterations)
                runs.append(run)
                print(f"  round {k} {config}: median {1e3 * statistics.median(run['time_per_iter_s']):.3f} ms, "
                      f"sampler {run['sampler_cpu_share']}", flush=True)
    paired: list[dict] = []
    deadline = time.monotonic() + args.paired_seconds if args.paired_seconds else None
    todo = [w for w in chosen if args.paired]
    for k, workload in enumerate(todo):
        step, sync = loads[workload]
        until = None if deadline is None else time.monotonic() + (deadline - time.monotonic()) / (len(todo) - k)
        iterations = max(1, round(args.paired_window_s / per_iteration_s(step, sync)))
        label = {"workload": workload, "iterations": iterations, "sampler": args.paired_sampler}
        print(f"{workload}: {iterations} iterations per paired window", flush=True)
        partial = Checkpoint(args.out / f"paired-{workload}.partial.json", label)
        row = paired_run(step, sync, iterations, args.paired, sampler=args.paired_sampler, pin=args.paired_pin,
                         states=states, on_group=partial, until_s=until,
                         settle_s=args.paired_settle_s)
        row.pop("result")
        row.update(label)
        paired.append(row)
        print(f"  paired {workload}: {len(row['off'])} groups", flush=True)
    cli = cli_runs(args.out, args.cli_runs) if args.cli_runs else []
    lines = table(runs, configs) if runs else []
    if paired:
        lines += ["", *paired_table(paired)]
    header = (
        f"sampler overhead on {device_name(args.device)}, {time.strftime('%Y-%m-%d')}: "
        f"{args.rounds} rounds x {args.windows} windows of ~{args.window_s} s per workload and configuration "
        f"({time.monotonic() - started:.0f} s)"
    )
    print("\n" + header)
    print("\n".join(lines))
    (args.out / "sampler_overhead.json").write_text(
        json.dumps(
            {
                "device": device_name(args.device),
                "date": time.strftime("%Y-%m-%d"),
                "args": {k: str(v) for k, v in vars(args).items()},
                "configs": configs,
                "runs": runs,
                "paired": paired,
                "cli": cli,
                "table": lines,
            },
            indent=1,
        )
    )
    (args.out / "sampler_overhead.md").write_text(header + "\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
