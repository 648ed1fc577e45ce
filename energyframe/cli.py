"""The ``energyframe`` command. Thin: parse, call the library, print.

Imports stay inside the commands so that ``energyframe --help`` starts fast and never imports
torch (benchmarks/startup_time.py measures it).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from .errors import EnergyFrameError, UsageError

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("energyframe")
    except PackageNotFoundError:
        return "unknown"


class _Group(click.Group):
    """Turns library errors into ``Error: <message>`` and their exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EnergyFrameError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"Error: {e}", err=True)
            sys.exit(e.exit_code)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(_version(), "--version", prog_name="energyframe")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug messages.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr.")
@click.pass_context
def main(ctx: click.Context, debug: bool, quiet: bool) -> None:
    """Measure the latency and the energy of GPU work, or of any command."""
    ctx.obj = {"debug": debug}
    logger = logging.getLogger("energyframe")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO)
    logger.propagate = False


@main.command("list", context_settings=CONTEXT)
@click.argument("kind", required=False, type=click.Choice(["power", "workloads", "reporters"]))
def list_plugins(kind: str | None) -> None:
    """List installed plugins by kind, with version, options and load errors."""
    from . import registry

    kinds = [kind] if kind else list(registry.GROUPS)
    for k in kinds:
        click.secho(f"{registry.LABELS[k]}s ({registry.GROUPS[k]}):", bold=True)
        entries = registry.entries(k)
        if not entries:
            click.echo("  (none installed)")
        for entry in entries:
            where = f"{entry.distribution} {entry.version}" if entry.distribution else entry.target
            if entry.error:
                click.echo(f"  {entry.name}  [{where}]  ", nl=False)
                click.secho(f"FAILED TO LOAD: {entry.error}", fg="red")
                continue
            click.echo(f"  {entry.name}  [{where}]  {entry.cls.DESCRIPTION}")
            for option in entry.cls.OPTIONS:
                default = "required" if option.required else f"default {option.default!r}"
                click.echo(f"      {option.name} ({option.describe_type()}, {default}): {option.help}")


@main.command(context_settings={**CONTEXT, "ignore_unknown_options": False})
@click.option(
    "--power",
    "power",
    multiple=True,
    metavar="SPEC",
    help="Power source spec, repeatable (nvml, nvml:gpus=0,1, replay:file=x.csv). "
    "Omitted: auto-detect. 'none': timing only.",
)
@click.option("--workload", "workload", metavar="SPEC", help="Workload spec, e.g. cpu-matmul:sizes=512.")
@click.option(
    "--reporter",
    "reporters",
    multiple=True,
    metavar="SPEC",
    help="Reporter spec, repeatable (console, csv, json). Default: console.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Run directory. Default: runs/<UTC time>-<workload>.",
)
@click.option("--trials", type=click.IntRange(min=1), default=None, help="Windows per phase. Default 5.")
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=None,
    help="At least this many timed iterations per phase over its trials (longer windows if needed).",
)
@click.option(
    "--min-window",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Shortest window in seconds. Default: from the sources' resolution (1 s for NVML).",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=None,
    help="Warm-up iterations per phase. Default: warm up for --warmup-s.",
)
@click.option(
    "--warmup-s",
    type=click.FloatRange(min=0),
    default=None,
    help="Warm-up time per phase when --warmup is not given. Default 1 s.",
)
@click.option(
    "--cooldown",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds of pause between windows. Default 0.",
)
@click.option(
    "--idle",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds of idle-power baseline after set-up (enables dynamic energy). Default 0.",
)
@click.option(
    "--guard",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds each phase keeps running, unmeasured, before its first and after its last window.",
)
@click.option(
    "--sync-pulse",
    is_flag=True,
    help="Bursts of full load before and after the phases, to align wall meters.",
)
@click.option("--no-align", is_flag=True, help="Keep wall meters' timestamps as recorded (no lag estimate).")
@click.option("--per-layer", is_flag=True, help="Measure a model layer by layer (a per-layer pipeline).")
@click.option("--validate", is_flag=True, help="With --per-layer: also measure the whole model and compare.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(
    power,
    workload,
    reporters,
    out,
    trials,
    runs,
    min_window,
    warmup,
    warmup_s,
    cooldown,
    idle,
    guard,
    sync_pulse,
    no_align,
    per_layer,
    validate,
    command,
) -> None:
    """Measure a workload, or a command given after --.

    \b
    energyframe run --power nvml --workload cpu-matmul:sizes=1024
    energyframe run --power nvml -- python train.py --epochs 1
    """
    from . import orchestrator
    from .store import default_run_dir
    from .workloads.command import CommandWorkload

    if command and workload:
        raise UsageError("give either --workload or a command after --, not both")
    if not command and not workload:
        raise UsageError("nothing to measure: give --workload SPEC or a command after --")
    if validate and not per_layer:
        raise UsageError("--validate compares a per-layer run with the whole model: add --per-layer")
    if per_layer:
        workload = _with_per_layer(workload, validate)
    the_workload = CommandWorkload(name="command", argv=list(command)) if command else workload
    config = orchestrator.RunConfig(
        trials=trials,
        runs=runs,
        min_window_s=min_window,
        warmup=warmup,
        warmup_s=warmup_s,
        cooldown_s=cooldown,
        idle_s=idle,
        guard_s=guard,
        sync_pulse=sync_pulse or None,
    )
    from .registry import power_from_cli

    power_arg = power_from_cli(power)
    name = "command" if command else str(workload).partition(":")[0]
    out = out or default_run_dir(name)
    result = orchestrator.run(
        the_workload,
        power=power_arg,
        reporters=list(reporters) or ["console"],
        out=out,
        config=config,
        align=not no_align,
    )
    code = result.meta.get("exit_code")
    if code:
        sys.exit(code)


def _with_per_layer(workload: str | None, validate: bool):
    """The workload spec with per_layer (and validate) switched on, if the workload has them."""
    from . import registry
    from .options import parse_spec

    if not workload:
        raise UsageError("--per-layer needs --workload MODEL")
    spec = parse_spec(workload)
    cls = registry.load(registry.WORKLOADS, spec.name)
    if "per_layer" not in {o.name for o in cls.OPTIONS}:
        raise UsageError(f"workload {spec.name!r} has no per-layer mode (models such as resnet50 have)")
    options = {**spec.options, "per_layer": "true"}
    if validate:
        options["validate"] = "true"
    return type(spec)(spec.name, options)


@main.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--all-channels", is_flag=True, help="Also show secondary channels.")
@click.option("--windows", "show_windows", is_flag=True, help="Also print every window.")
def show(run_dir: Path, all_channels: bool, show_windows: bool) -> None:
    """Print a saved run."""
    from .display import derived_table, render, summary_table
    from .results import RunResult

    result = RunResult.load(run_dir)
    meta = result.meta
    click.echo(f"run:      {run_dir}")
    status = result.status + (f" ({result.reason})" if result.reason else "")
    click.echo(f"status:   {status}")
    workload = meta.get("workload", {})
    if workload:
        click.echo(f"workload: {workload.get('name')} {workload.get('options', {})}")
    sources = ", ".join(s["name"] for s in meta.get("sources", [])) or "none (timing only)"
    click.echo(f"power:    {sources}")
    click.echo(f"started:  {meta.get('started_at')}   ended: {meta.get('ended_at') or '-'}")
    if meta.get("exit_code") is not None:
        click.echo(f"exit code of the measured command: {meta['exit_code']}")
    if result.meta.get("samples_origin") == "samples.partial.csv":
        click.echo(
            f"samples:  {len(result.samples)} recovered from samples.partial.csv (the run did not finish)"
        )
    rows = list(result.summaries) if all_channels else result.primary_summaries()
    if rows:
        click.echo(render(summary_table(rows)), nl=False)
    else:
        click.echo("no phase summaries (no window finished)")
    for table in result.derived:
        click.echo(render(derived_table(table)), nl=False)
    if show_windows and not result.windows.empty:
        click.echo(result.windows.to_string(index=False))
    for warning in result.warnings:
        click.echo(f"warning: {warning}")


@main.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="PNG to write. Default: RUN_DIR/power-trace.png.",
)
@click.option("--primary-only", is_flag=True, help="Only the primary channels.")
def plot(run_dir: Path, out: Path | None, primary_only: bool) -> None:
    """Draw a saved run's power trace: every channel, windows shaded, meter lags shown."""
    from .plots import power_trace
    from .results import RunResult

    result = RunResult.load(run_dir)
    path = power_trace(result, out or run_dir / "power-trace.png", all_channels=not primary_only)
    click.echo(f"wrote {path}")


@main.command(context_settings=CONTEXT)
@click.option(
    "--power-log",
    "power_logs",
    multiple=True,
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The earlier tool's time,id,pm1,pm2,sum CSV, an nvidia-smi CSV log, or samples.parquet. Repeatable.",
)
@click.option(
    "--run",
    "run_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Take the windows from this run directory (and align wall-meter logs with its GPU power).",
)
@click.option(
    "--timing",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Take the window from the earlier tool's timing JSON (start_timestamp, end_timestamp, num_runs).",
)
@click.option(
    "--window",
    "windows",
    multiple=True,
    metavar="START,END",
    help="A window: Unix seconds or date-times. Repeatable.",
)
@click.option(
    "--runs", type=click.IntRange(min=1), help="Runs (iterations) in a --window, for per-run figures."
)
@click.option(
    "--tz", default="local", show_default=True, help="Time zone of times without one: local, UTC, +01:00."
)
@click.option(
    "--lag", type=float, default=0.0, help="Seconds the power logs' clocks are late (skips alignment)."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for energy_report.json and windows.csv.",
)
def analyze(power_logs, run_dir, timing, windows, runs, tz, lag, out) -> None:
    """Energy of windows from power logs recorded elsewhere (offline)."""
    import dataclasses

    from . import analyze as offline

    if sum(bool(x) for x in (run_dir, timing, windows)) != 1:
        raise UsageError("give the windows one way: --run DIR, --timing FILE or --window START,END")
    logs = [offline.load_power_log(p, tz) for p in power_logs]
    if run_dir:
        chosen = offline.windows_from_run(run_dir)
    elif timing:
        chosen = offline.windows_from_timing(timing, tz)
    else:
        chosen = [dataclasses.replace(offline.window_from_text(w, tz), runs=runs) for w in windows]
    report = offline.analyze(logs, chosen, out, lag_s=lag, align_with=run_dir)
    first = report if "windows" not in report else report["windows"][0]
    click.echo(
        f"{len(chosen)} window(s); first: {first['duration_seconds']:.3f} s, {first['energy_joules']['total']:.1f} J, "
        f"{first['power_watts']['average']:.1f} W average over {first['num_power_samples']} samples"
    )
    for warning in report.get("warnings", []):
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"wrote {out / 'energy_report.json'} and {out / 'windows.csv'}")


@main.command("wattsup-emulator", context_settings=CONTEXT)
@click.option(
    "--profile",
    default="constant:200",
    show_default=True,
    help="constant:W, square:LOW,HIGH,PERIOD, csv:FILE (time_s,power_w) or nvml:BASELINE[,gpu=N].",
)
@click.option("--meters", type=click.IntRange(min=1), default=1, show_default=True, help="Emulated meters.")
@click.option("--lag", type=float, default=0.0, show_default=True, help="Seconds each record reports late.")
@click.option("--drift", type=float, default=0.0, show_default=True, help="Meter clock drift (0.003: 0.3 %).")
@click.option("--noise", type=float, default=0.0, show_default=True, help="Gaussian noise per record (W).")
@click.option("--seconds", type=float, default=None, help="Stop after this long (default: until Ctrl-C).")
def wattsup_emulator(profile, meters, lag, drift, noise, seconds) -> None:
    """Emulate WattsUp? meters on pseudo-terminals (prints their ports)."""
    import time

    from .power.wattsup_emulator import WattsUpEmulator, parse_profile

    try:
        shape = parse_profile(profile)
    except ValueError as e:
        raise UsageError(str(e)) from e
    emulators = [
        WattsUpEmulator(shape, lag_s=lag, drift=drift, noise_w=noise, seed=i).start() for i in range(meters)
    ]
    ports = ",".join(e.port for e in emulators)
    click.echo(f"emulating {meters} WattsUp? meter(s) on {ports}")
    click.echo(f"measure with: energyframe run --power wattsup:ports={ports} ...", err=True)
    try:
        end = time.monotonic() + seconds if seconds else None
        while end is None or time.monotonic() < end:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        for e in emulators:
            e.stop()
        click.echo(f"sent {sum(e.records_sent for e in emulators)} records", err=True)


@main.group(invoke_without_command=True, context_settings=CONTEXT)
@click.option("--workload", metavar="SPEC", help="The workload to profile (its first phase).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="The trace directory to write.")
@click.option(
    "--steps", type=click.IntRange(min=1), default=3, show_default=True, help="Iterations profiled."
)
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True, help="Iterations before.")
@click.pass_context
def trace(ctx, workload, out, steps, warmup) -> None:
    """Profile a workload: unique kernels and leaf ops, tiers, timeline (see also: trace import)."""
    if ctx.invoked_subcommand:
        return
    if not workload or not out:
        raise UsageError(
            "energyframe trace needs --workload SPEC and --out DIR (or: energyframe trace import FILE)"
        )
    from .replay.capture import capture

    _print_trace(capture(workload, out, steps=steps, warmup=warmup), out)


@trace.command("import", context_settings=CONTEXT)
@click.argument("trace_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Trace directory to write."
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=None,
    help="Forward passes in a trace without energyframe's step annotations. Default 1.",
)
def trace_import(trace_file: Path, out: Path, iterations: int | None) -> None:
    """Summarise an existing PyTorch profiler (Kineto) trace file (.json or .json.gz)."""
    from .replay.capture import summarize_trace

    _print_trace(summarize_trace(trace_file, out, iterations=iterations), out)


def _print_trace(meta: dict, out: Path) -> None:
    click.echo(
        f"{meta['unique_kernels']} unique kernels ({meta['kernel_launches']} launches), "
        f"{meta['unique_leaf_ops']} unique leaf ops over {meta['iterations']} iteration(s)"
    )
    for tier_name, us in sorted(meta.get("gpu_time_by_tier_us", {}).items()):
        click.echo(f"  {tier_name}: {us / meta['iterations'] / 1e3:.3f} ms of GPU time per iteration")
    gaps = meta.get("gaps") or {}
    if gaps.get("span_us"):
        click.echo(
            f"  GPU idle between kernels: {gaps['idle_us'] / 1e3:.3f} ms of a {gaps['span_us'] / 1e3:.3f} ms span"
        )
    click.echo(
        f"wrote {out}/kernels.jsonl, ops.jsonl, trace_meta.json"
        + (", timeline.png" if meta["unique_kernels"] else "")
    )


def _register_commands(group: click.Group) -> None:
    """Commands that features and third-party packages register (group ``energyframe.commands``).

    A hook that fails to load or to register is reported on stderr and skipped: one broken
    plugin must not take the whole command line down (``energyframe list`` shows it too)."""
    from .registry import command_hooks

    for name, hook, error in command_hooks():
        if error is None:
            try:
                hook(group)
                continue
            except Exception as e:  # a third party's bug, reported, never fatal
                error = f"{type(e).__name__}: {e}"
        click.echo(f"warning: command plugin {name!r} failed to load: {error}", err=True)


_register_commands(main)
