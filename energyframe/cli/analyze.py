"""``energyframe analyze``: energy of windows from power logs recorded elsewhere."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import RunInterrupted, UsageError
from ..results.paths import click_out_path

CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.command(context_settings=CONTEXT)
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
    "--lag",
    type=float,
    default=None,
    help="Seconds the power logs' clocks are late, 0 included (skips alignment). At most one day either way.",
)
@click.option(
    "--out",
    type=click_out_path(file_okay=False),
    required=True,
    help="Directory for energy_report.json and windows.csv.",
)
def analyze(power_logs, run_dir, timing, windows, runs, tz, lag, out) -> None:
    """Energy of windows from power logs recorded elsewhere (offline)."""
    if sum(bool(x) for x in (run_dir, timing, windows)) != 1:
        raise UsageError("give the windows one way: --run DIR, --timing FILE or --window START,END")
    from ..offline.analyze import check_lag

    check_lag(lag)  # before any log is read
    try:
        report, count = _analyze(power_logs, run_dir, timing, windows, runs, tz, lag, out)
    except KeyboardInterrupt:  # a long log being read: nothing was written
        raise RunInterrupted(f"interrupted by SIGINT; nothing was written into {out}") from None
    first = report if "windows" not in report else report["windows"][0]
    click.echo(
        f"{count} window(s); first: {first['duration_seconds']:.3f} s, {first['energy_joules']['total']:.1f} J, "
        f"{first['power_watts']['average']:.1f} W average over {first['num_power_samples']} samples"
    )
    from ..results.display import printable

    for warning in report.get("warnings", []):
        click.echo(f"warning: {printable(warning)}", err=True)
    click.echo(f"wrote {out / 'energy_report.json'} and {out / 'windows.csv'}")


def _analyze(power_logs, run_dir, timing, windows, runs, tz, lag, out) -> tuple[dict, int]:
    import dataclasses

    from ..offline import analyze as offline

    logs = [offline.load_power_log(p, tz) for p in power_logs]
    if run_dir:
        chosen = offline.windows_from_run(run_dir)
    elif timing:
        chosen = offline.windows_from_timing(timing, tz)
    else:
        chosen = [dataclasses.replace(offline.window_from_text(w, tz), runs=runs) for w in windows]
    return offline.analyze(logs, chosen, out, lag_s=lag, align_with=run_dir), len(chosen)


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook."""
    cli.add_command(analyze)
