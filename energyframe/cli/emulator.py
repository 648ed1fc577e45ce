"""``energyframe wattsup-emulator``: WattsUp? meters on pseudo-terminals."""

from __future__ import annotations

import click

from ..errors import EnergyFrameError, UsageError
from .params import FiniteFloat

CONTEXT = {"help_option_names": ["-h", "--help"]}
#: more meters than anyone plugs into one host; each is a pseudo-terminal and a thread
MAX_METERS = 64


@click.command("wattsup-emulator", context_settings=CONTEXT)
@click.option(
    "--profile",
    default="constant:200",
    show_default=True,
    help="constant:W, square:LOW,HIGH,PERIOD, csv:FILE (time_s,power_w) or nvml:BASELINE[,gpu=N].",
)
@click.option(
    "--meters",
    type=click.IntRange(min=1, max=MAX_METERS),
    default=1,
    show_default=True,
    help=f"Emulated meters (at most {MAX_METERS}).",
)
@click.option("--lag", type=FiniteFloat(min=0), default=0.0, show_default=True, help="Seconds each record reports late.")
@click.option(
    "--drift",
    type=FiniteFloat(min=-0.5, max=0.5),
    default=0.0,
    show_default=True,
    help="Meter clock drift (0.003: 0.3 %).",
)
@click.option("--noise", type=FiniteFloat(min=0), default=0.0, show_default=True, help="Gaussian noise per record (W).")
@click.option(
    "--seconds",
    type=FiniteFloat(min=0, min_open=True),
    default=None,
    help="Stop after this long (default: until Ctrl-C).",
)
def wattsup_emulator(profile, meters, lag, drift, noise, seconds) -> None:
    """Emulate WattsUp? meters on pseudo-terminals (prints their ports)."""
    from ..power.wattsup_emulator import WattsUpEmulator, parse_profile

    try:
        shape = parse_profile(profile)
    except ValueError as e:
        raise UsageError(str(e)) from e
    emulators: list[WattsUpEmulator] = []
    try:
        for i in range(meters):
            emulators.append(WattsUpEmulator(shape, lag_s=lag, drift=drift, noise_w=noise, seed=i).start())
        ports = ",".join(e.port for e in emulators)
        click.echo(f"emulating {meters} WattsUp? meter(s) on {ports}")
        click.echo(f"measure with: energyframe run --power wattsup:ports={ports} ...", err=True)
        _serve_for(seconds)
    except KeyboardInterrupt:
        pass
    except OSError as e:  # the system ran out of pseudo-terminals
        raise EnergyFrameError(f"cannot open a pseudo-terminal for meter {len(emulators) + 1} of {meters}: {e}") from e
    finally:
        for emulator in emulators:
            emulator.stop()
        click.echo(f"sent {sum(em.records_sent for em in emulators)} records", err=True)


def _serve_for(seconds: float | None) -> None:
    """Let the meters' threads serve for ``seconds`` (``None``: until Ctrl-C)."""
    import time

    end = time.monotonic() + seconds if seconds is not None else None
    while end is None or time.monotonic() < end:
        time.sleep(0.2)


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook."""
    cli.add_command(wattsup_emulator)
