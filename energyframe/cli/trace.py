"""``energyframe trace``: profile a workload, or import a profiler trace."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UsageError
from ..results.paths import click_out_path
from .params import checked_path

CONTEXT = {"help_option_names": ["-h", "--help"]}


@click.group(invoke_without_command=True, context_settings=CONTEXT)
@click.option("--workload", metavar="SPEC", help="The workload to profile (its first phase).")
@click.option(
    "--out",
    type=click_out_path(file_okay=False),
    callback=checked_path,
    help="The trace directory to write.",
)
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
    from ..replay.capture import capture

    _print_trace(capture(workload, out, steps=steps, warmup=warmup), out)


@trace.command("import", context_settings=CONTEXT)
@click.argument("trace_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click_out_path(file_okay=False),
    required=True,
    callback=checked_path,
    help="Trace directory to write.",
)
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=None,
    help="Forward passes in a trace without energyframe's step annotations. Default 1.",
)
def trace_import(trace_file: Path, out: Path, iterations: int | None) -> None:
    """Summarise an existing PyTorch profiler (Kineto) trace file (.json or .json.gz)."""
    from ..replay.capture import summarize_trace

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
        + (", memory_inputs.json" if (out / "memory_inputs.json").exists() else "")
        + (", timeline.png" if (out / "timeline.png").exists() else "")
    )


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook."""
    cli.add_command(trace)
