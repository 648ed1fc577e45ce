"""The ``energyframe`` command. Thin: parse, call the library, print.

The group and the three core commands (``run``, ``show``, ``list``) live here; every other
command registers itself through the ``energyframe.commands`` entry-point group, as a third
party's would (``register_commands(cli)``, simonw/llm's hook). Imports stay inside the commands
so that ``energyframe --help`` starts fast and never imports torch
(benchmarks/startup_time.py measures it).
"""

from __future__ import annotations

import errno
import logging
import sys
from typing import NoReturn

import click

from ..errors import EnergyFrameError

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("energyframe")
    except PackageNotFoundError:
        return "unknown"


#: the exit code of a command stopped by SIGINT or SIGTERM (128 + SIGINT's number, as a shell says)
INTERRUPTED_EXIT = 130


def interrupted(what: str = "") -> NoReturn:
    """A Ctrl-C that reached the command line itself (while it loads, or before a run started):
    one line and exit 130, never click's ``Aborted!`` and exit 1, never a traceback."""
    click.echo(f"Error: interrupted by SIGINT{what}", err=True)
    sys.exit(INTERRUPTED_EXIT)


class _Group(click.Group):
    """Turns library errors into ``Error: <message>`` and their exit code; with ``--debug`` the
    traceback is shown instead. A Ctrl-C is exit 130 with one line, wherever it comes."""

    def make_context(self, *args, **kwargs) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            interrupted()

    def invoke(self, ctx: click.Context):
        debug = bool(ctx.obj and ctx.obj.get("debug"))
        try:
            return super().invoke(ctx)
        except EnergyFrameError as e:
            if debug:
                raise
            click.echo(f"Error: {_printable(e)}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            if debug:
                raise
            interrupted()
        except OSError as e:
            if debug:
                raise
            _system_error(e)


def _printable(value: object, lines: bool = False) -> str:
    """``results.display.printable``, imported when there is something to print (``--help``
    stays fast)."""
    from ..results.display import printable

    return printable(value, lines)


class _PrintableFormatter(logging.Formatter):
    """Log lines (warnings that name a phase, a file, a value read from a run) with their
    control characters escaped: a terminal shows them, never acts on them."""

    def format(self, record: logging.LogRecord) -> str:
        return _printable(super().format(record), lines=True)


def _system_error(e: OSError) -> NoReturn:
    """An error of the system that no command turned into its own message, in one line."""
    name = _printable(e.filename or "")
    shown = name if len(name) <= 60 else f"{name[:40]}...{name[-12:]}"
    if e.errno == errno.ENAMETOOLONG:
        # a path the user gave that the system cannot hold, met by a command that does not
        # check its paths up front (the others refuse it as a bad option value)
        click.echo(f"Error: cannot use {shown!r}: {e.strerror} (a name over 255 bytes or a path over 4095)", err=True)
        sys.exit(2)
    reason = "no space left on the device" if e.errno == errno.ENOSPC else (e.strerror or str(e))
    click.echo(f"Error: {f'cannot use {shown}: ' if shown else ''}{reason}", err=True)
    sys.exit(1)


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(_version(), "--version", prog_name="energyframe")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug messages.")
@click.option(
    "-q", "--quiet", is_flag=True, help="Only warnings and errors on stderr; no progress, no table."
)
@click.pass_context
def main(ctx: click.Context, debug: bool, quiet: bool) -> None:
    """Measure the latency and the energy of GPU work, or of any command."""
    ctx.obj = {"debug": debug, "quiet": quiet}
    logger = logging.getLogger("energyframe")
    if not any(getattr(h, "_energyframe_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_PrintableFormatter("%(message)s"))
        handler._energyframe_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING if quiet else logging.INFO)
    logger.propagate = False


def _register_commands(group: click.Group) -> None:
    """Commands that features and third-party packages register (group ``energyframe.commands``).

    A hook that fails to load or to register is reported on stderr and skipped: one broken
    plugin must not take the whole command line down (``energyframe list`` shows it too)."""
    from ..kit.registry import command_hooks

    for name, hook, error in command_hooks():
        if error is None:
            try:
                hook(group)
                continue
            except Exception as e:  # a third party's bug, reported, never fatal
                error = f"{type(e).__name__}: {e}"
        click.echo(f"warning: command plugin {name!r} failed to load: {_printable(error)}", err=True)


from .listing import list_plugins  # noqa: E402
from .run import run  # noqa: E402
from .show import show  # noqa: E402

main.add_command(run)
main.add_command(show)
main.add_command(list_plugins)
_register_commands(main)
