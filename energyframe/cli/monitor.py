"""``energyframe monitor``: each channel's power, live in the terminal, and optionally served to
Prometheus; nothing is measured into a run directory."""

from __future__ import annotations

import math
import time

import click

from ..errors import PowerSourceError, UsageError
from .params import FiniteFloat

CONTEXT = {"help_option_names": ["-h", "--help"]}
#: the longest ``--duration``: a week (omit it to watch until Ctrl-C). Units: s.
MAX_DURATION_S = 7 * 86_400
#: the longest pause between two redraws. Units: s.
MAX_REFRESH_S = 3_600.0


def prometheus_address_option(command):
    """``--prometheus-address``, shared by ``monitor`` and ``run``."""
    return click.option(
        "--prometheus-address",
        default=None,
        metavar="ADDRESS",
        help="The interface the Prometheus exporter listens on. Default 127.0.0.1 (this machine "
        "only); 0.0.0.0 (or ::) serves every interface, for a Prometheus server on another machine.",
    )(command)


def readings_table(readings, elapsed_s: float):
    """The live view: one row per power or energy channel, primary channels first."""
    from rich.table import Table

    from ..results.display import cell_text

    table = Table(title=f"energyframe monitor: live power ({elapsed_s:.0f} s)", title_justify="left")
    for column, justify in (
        ("channel", "left"),
        ("source", "left"),
        ("scope", "left"),
        ("power", "right"),
        ("energy since start", "right"),
        ("readings", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for r in readings:
        power = f"{r.power_w:.1f} W" if math.isfinite(r.power_w) else "-"
        table.add_row(
            cell_text(r.channel) if r.primary else f"[dim]{cell_text(r.channel)}[/dim]",
            cell_text(r.source),
            cell_text(r.scope),
            power,
            f"{r.energy_j:.1f} J",
            str(r.samples),
        )
    return table


@click.command(context_settings=CONTEXT)
@click.option(
    "--power",
    "power",
    multiple=True,
    metavar="SPEC",
    help="Power source spec, repeatable (nvml, nvidia-smi, wattsup:ports=/dev/ttyUSB0). Omitted: auto-detect.",
)
@click.option(
    "--prometheus-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    metavar="PORT",
    help="Also serve the figures in the Prometheus format at http://ADDRESS:PORT/metrics "
    "(ADDRESS: --prometheus-address, this machine only by default).",
)
@prometheus_address_option
@click.option(
    "--duration",
    type=FiniteFloat(min=0, min_open=True, max=MAX_DURATION_S),
    default=None,
    metavar="SECONDS",
    help="Stop after this long (at most a week). Default: until Ctrl-C.",
)
@click.option(
    "--refresh",
    type=FiniteFloat(min=0.1, max=MAX_REFRESH_S),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="How often the table is redrawn.",
)
def monitor(
    power: tuple[str, ...],
    prometheus_port: int | None,
    prometheus_address: str | None,
    duration: float | None,
    refresh: float,
) -> None:
    """Show each channel's power live (the mean over its last second of readings) and its energy
    since the start; Ctrl-C stops.

    \b
    energyframe monitor --power nvml
    energyframe monitor --power nvml --prometheus-port 9464
    energyframe monitor --power nvml --prometheus-port 9464 --prometheus-address 0.0.0.0
    """
    from rich.console import Console
    from rich.live import Live

    from ..core.clock import ClockModel
    from ..kit.registry import auto_power_sources, power_from_cli, resolve_power
    from ..lifecycle.recorder import Recorder
    from ..live.prometheus import serving
    from ..live.tracker import PowerTracker
    from ..results.display import cell_text

    if prometheus_address is not None and prometheus_port is None:
        raise UsageError("--prometheus-address needs --prometheus-port (the port to serve on)")
    specs = power_from_cli(power)
    if specs == "none":
        raise UsageError("energyframe monitor needs a power source; 'none' measures nothing to show")
    if specs == "auto":  # not resolve_power's "measuring time only": a monitor has no time to measure
        sources, notes = auto_power_sources()
        if not sources:
            found = "; ".join(notes) or "none installed"
            raise UsageError(f"energyframe monitor found no power source here ({found}); name one with --power")
    else:
        sources, _ = resolve_power(specs)
    console = Console()
    with serving(prometheus_port, address=prometheus_address) as served:
        tracker = served[0] if served else PowerTracker()
        recorder = Recorder(sources, ClockModel(), None, warn=lambda m: console.print(f"warning: {cell_text(m)}"), listeners=[tracker])
        _watch(recorder, tracker, console, duration, refresh, Live)


def _watch(recorder, tracker, console, duration: float | None, refresh: float, live_cls) -> None:
    """Start the sources, redraw until the duration ends or Ctrl-C, stop the sources."""
    recorder.start()
    started = time.monotonic()
    try:
        with live_cls(readings_table(tracker.readings(), 0.0), console=console, auto_refresh=False) as live:
            while duration is None or time.monotonic() - started < duration:
                time.sleep(refresh if duration is None else min(refresh, max(0.0, started + duration - time.monotonic())))
                recorder.drain()
                if recorder.failure is not None:
                    raise PowerSourceError(str(recorder.failure))
                live.update(readings_table(tracker.readings(), time.monotonic() - started), refresh=True)
        if not console.is_terminal:  # the last table printed as is ends without a newline
            console.line()
    except KeyboardInterrupt:
        pass
    finally:
        recorder.stop()


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook."""
    cli.add_command(monitor)
