"""``energyframe run``: measure a workload or a command. Its run settings are generated from
``energyframe.lifecycle.config`` (one source for names, defaults, ranges and help)."""

from __future__ import annotations

import errno
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import RunInterrupted, StoreError, UsageError
from ..lifecycle.config import SETTINGS, RunSettings, check_setting, default_of
from ..results.paths import click_out_path
from .monitor import prometheus_address_option
from .params import FiniteFloat, checked_path
from .show import grid_intensity_option

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _checked(name: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that refuses a value the run could only fail on later (exit 2)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            check_setting(name, value)
        except UsageError as e:
            raise click.BadParameter(str(e).replace(f"{name} must", "must")) from e
        return value

    return callback


class _Percent(click.ParamType):
    """A number of percent, with or without its ``%`` (``1%``, ``0.5``)."""

    name = "percent"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        text = str(value).strip().removesuffix("%").strip()
        try:
            return float(text)
        except ValueError:
            self.fail(f"{value!r} is not a percentage (e.g. 1% or 0.5)", param, ctx)


PERCENT = _Percent()


def settings_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add one click option per run setting that has a flag (``RunConfig``'s metadata)."""
    for f in reversed(SETTINGS):
        meta = f.metadata
        flag = meta["flag"]
        if flag is None:
            continue
        default = default_of(f.name)
        unit = " s" if meta["seconds"] else ""
        help_text = meta["help"] + (
            "" if default is None or "Default" in meta["help"] else f" Default {default:g}{unit}."
        )
        if meta["kind"] is bool:
            option = click.option(flag, f.name, is_flag=True, default=None, help=meta["help"])
        else:
            option = click.option(
                flag,
                f.name,
                type=PERCENT if meta.get("percent") else meta["kind"],
                default=None,
                callback=_checked(f.name),
                help=help_text,
            )
        command = option(command)
    return command


def reporter_specs(given: tuple[str, ...], quiet: bool, grid_g_per_kwh: float | None = None) -> list[str]:
    """The console summary always, unless ``-q`` or ``--reporter none``; then the ones asked for."""
    if any(r.strip().lower() == "none" for r in given):
        if len(given) > 1:
            raise UsageError("--reporter none cannot be combined with other reporters")
        return []
    specs = list(given)
    has_console = any(r.split(":", 1)[0].strip() == "console" for r in specs)
    if not quiet and not has_console:
        specs.insert(0, "console")
    if grid_g_per_kwh is not None:
        specs = [_with_grid(s, grid_g_per_kwh) for s in specs]
    return specs


def _with_grid(spec: str, grid_g_per_kwh: float) -> str:
    """A console reporter's spec with the grid's carbon intensity as its option; any other
    reporter's as it is. Units: g/kWh."""
    if spec.startswith("console:"):
        return f"{spec},grid_g_per_kwh={grid_g_per_kwh:g}"
    if spec == "console":
        return f"console:grid_g_per_kwh={grid_g_per_kwh:g}"
    return spec


@click.command(context_settings={**CONTEXT, "ignore_unknown_options": False})
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
    help="Reporter spec, repeatable (console, csv, json, plot, ...). The console summary is always "
    "printed unless -q or --reporter none.",
)
@click.option(
    "--reporter-errors",
    type=click.Choice(["fail", "warn"]),
    default="fail",
    show_default=True,
    help="A reporter that fails or hangs: fail the run (exit 1, after it was saved), or only warn.",
)
@click.option(
    "--out",
    type=click_out_path(file_okay=False),
    callback=checked_path,
    help="Run directory. Default: runs/<UTC time>-<workload>.",
)
@settings_options
@click.option("--no-align", is_flag=True, help="Keep wall meters' timestamps as recorded (no lag estimate).")
@click.option("--per-layer", is_flag=True, help="Measure a model layer by layer (a per-layer pipeline).")
@click.option("--validate", is_flag=True, help="With --per-layer: also measure the whole model and compare.")
@click.option(
    "--dist-timeout",
    type=FiniteFloat(min=0, min_open=True, max=86_400),
    default=None,
    metavar="SECONDS",
    help="Under torchrun or srun: how long a rank waits for a silent peer before the others stop "
    "without it and rank 0 saves what was measured. Default 1800 s.",
)
@grid_intensity_option
@click.option(
    "--prometheus-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    metavar="PORT",
    help="While the run goes, serve live power and energy in the Prometheus format at "
    "http://ADDRESS:PORT/metrics (under torchrun: PORT + LOCAL_RANK; ADDRESS: "
    "--prometheus-address, this machine only by default). docs/live.md.",
)
@prometheus_address_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx: click.Context,
    power: tuple[str, ...],
    workload: str | None,
    reporters: tuple[str, ...],
    reporter_errors: str,
    out: Path | None,
    no_align: bool,
    per_layer: bool,
    validate: bool,
    grid_intensity: float | None,
    dist_timeout: float | None,
    prometheus_port: int | None,
    prometheus_address: str | None,
    command: tuple[str, ...],
    **settings: Any,
) -> None:
    """Measure a workload, or a command given after --.

    \b
    energyframe run --power nvml --workload cpu-matmul:sizes=1024
    energyframe run --power nvml -- python train.py --epochs 1
    torchrun --nproc-per-node 8 -m energyframe run --workload vicuna-7b:tp=8

    Under torchrun (or srun) every rank measures its own GPU, and rank 0 writes one run
    directory with every rank's windows and their total.
    """
    from ..kit.registry import power_from_cli
    from ..lifecycle import orchestrator
    from ..live.prometheus import serving
    from ..ranks.world import export_launcher_env
    from ..results.store import default_run_dir

    world = export_launcher_env()
    rank = world.rank
    if rank != 0:  # every rank runs this command; only rank 0 speaks, other ranks only fail
        logging.getLogger("energyframe").setLevel(logging.ERROR)

    _check_what_to_measure(command, workload, per_layer, validate)
    _check_settings(settings)
    the_workload, name = _what_to_measure(command, workload, per_layer, validate)
    # rank 0 names the run directory and tells the other ranks
    run_dir = out or (default_run_dir(name) if rank == 0 else None)
    with serving(prometheus_port, world.rank, world.local_rank, prometheus_address) as listeners:
        result = _said_in_one_line(
            run_dir,
            lambda: orchestrator.run(
                the_workload,
                power=power_from_cli(power),
                reporters=reporter_specs(reporters, bool(ctx.obj and ctx.obj.get("quiet")), grid_intensity),
                out=run_dir,
                settings=RunSettings(**{k: v for k, v in settings.items() if v is not None}),
                align=not no_align,
                dist_timeout_s=dist_timeout,
                reporter_errors=reporter_errors,
                listeners=listeners,
            ),
        )
    code = result.run_meta.exit_code
    if code:
        sys.exit(code)


def _check_what_to_measure(command: tuple[str, ...], workload: str | None, per_layer: bool, validate: bool) -> None:
    """Refuse a workload and a command together, neither, or ``--validate`` without
    ``--per-layer`` (exit 2, before anything starts)."""
    if command and workload:
        raise UsageError("give either --workload or a command after --, not both")
    if not command and not workload:
        raise UsageError("nothing to measure: give --workload SPEC or a command after --")
    if validate and not per_layer:
        raise UsageError("--validate compares a per-layer run with the whole model: add --per-layer")


def _what_to_measure(
    command: tuple[str, ...], workload: str | None, per_layer: bool, validate: bool
) -> tuple[Any, str]:
    """The workload (its spec, its per-layer spec, or the command after ``--``) and what the
    run directory is named after."""
    from ..workloads.command import CommandWorkload

    if per_layer:  # a command has no layers: per_layer_spec refuses it
        from ..workloads.perlayer import per_layer_spec

        workload = per_layer_spec(workload, validate)
    if command:
        return CommandWorkload(name="command", argv=list(command)), "command"
    return str(workload), run_name(str(workload))


def _check_settings(settings: dict[str, Any]) -> None:
    """Refuse a setting that would be silently ignored (exit 2, before anything starts)."""
    if settings.get("max_time_s") is not None and settings.get("precision_pct") is None:
        raise UsageError(
            "--max-time bounds a --precision run (the most seconds of windows per phase); without --precision "
            "each phase measures --trials windows: add --precision P, or leave --max-time out"
        )


def _said_in_one_line(run_dir: Path | None, run: Callable[[], Any]) -> Any:
    """``run()``, with what it lets through as a named error: a Ctrl-C before the run started
    (the run turns every later one into ``RunInterrupted``), a file the system would not let
    it write."""
    try:
        return run()
    except OSError as e:
        unwritable = _unwritable(run_dir, e)
        if unwritable is None:
            raise
        raise unwritable from e
    except KeyboardInterrupt as e:
        from ..results.store import RUN_JSON

        if run_dir is None or not (run_dir / RUN_JSON).exists():
            raise RunInterrupted(
                "interrupted by SIGINT before the run started (loading the plugins): nothing was measured"
            ) from e
        raise RunInterrupted("interrupted by SIGINT") from e


def _unwritable(run_dir: Path | None, error: OSError) -> StoreError | None:
    """A file of the run directory that the system would not let the run write, as the one line
    the store says for it (a full disk met while the samples' journal is opened, before the
    store's own checks); ``None`` for any other system error (raised as it is)."""
    from ..results.store import write_error

    if error.errno not in _WRITE_ERRNOS or run_dir is None:
        return None
    return StoreError(write_error(error.filename or run_dir, error))


#: the system's answers that mean "this cannot be written here"
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG)


def run_name(spec: str) -> str:
    """What the default run directory is named after: the workload, or the wrapped model."""
    from ..options import parse_spec

    parsed = parse_spec(spec)
    model = parsed.options.get("model")
    return f"{parsed.name}-{model}" if parsed.name == "per-layer" and model else parsed.name
