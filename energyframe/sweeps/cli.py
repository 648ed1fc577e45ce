"""``energyframe sweep`` and ``energyframe merge``: thin, as the rest of the CLI."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import UsageError
from ..options import FiniteFloat
from ..results.paths import click_out_path

if TYPE_CHECKING:
    from .kernel import CudaKernel
    from .workload import Config

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise UsageError(f"{what} {item!r}: expected NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def _reference(spec: str | None):
    """``path/to/file.py:function`` -> the function."""
    if not spec:
        return None
    import importlib.util

    path, sep, name = spec.rpartition(":")
    if not sep or not path.endswith(".py"):
        raise UsageError(f"--reference {spec!r}: expected FILE.py:FUNCTION")
    loader = importlib.util.spec_from_file_location("energyframe_reference", path)
    if loader is None or not Path(path).is_file():
        raise UsageError(f"--reference: cannot read {path!r}")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)  # type: ignore[union-attr]
    if not callable(getattr(module, name, None)):
        raise UsageError(f"--reference: {path} has no function {name!r}")
    return getattr(module, name)


@click.command(context_settings=CONTEXT)
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-k", "--kernel", "kernel_names", multiple=True, required=True, help="A __global__ kernel, repeatable."
)
@click.option(
    "-p",
    "--param",
    "params",
    multiple=True,
    metavar="NAME=V1,V2",
    help="Swept values (NAME=LO..HI: powers of two).",
)
@click.option("--where", metavar="EXPR", help="Constraint on a point, e.g. 'N == M and K >= 512'.")
@click.option(
    "--block",
    "blocks",
    multiple=True,
    metavar="X,Y,Z",
    help="Threads per block, repeatable (swept). Default: 256 for a 1-D output, else 16,16,1.",
)
@click.option(
    "--grid",
    metavar="EXPR",
    help="Blocks per grid, e.g. 'cdiv(M, bx), cdiv(N, by)'. Default: one thread per output element.",
)
@click.option(
    "--shape", "shapes", multiple=True, metavar="ARG=DIMS", help="A pointer's shape, e.g. a=N,K. Repeatable."
)
@click.option("--shared-mem", metavar="EXPR", default="0", help="Dynamic shared memory per block in bytes.")
@click.option(
    "--arg", "args", multiple=True, metavar="NAME=VALUE", help="A fixed scalar argument. Repeatable."
)
@click.option(
    "--output",
    "outputs",
    multiple=True,
    metavar="ARG",
    help="A pointer the kernel writes (default: non-const ones).",
)
@click.option(
    "--inout",
    "inouts",
    multiple=True,
    metavar="ARG",
    help="An output the kernel also reads (y = a*x + y): random, not poisoned. Repeatable.",
)
@click.option(
    "-X", "--nvrtc-option", "options", multiple=True, metavar="OPT", help="Compiler option, e.g. -DTILE=32."
)
@click.option("--flop", metavar="EXPR", help="FLOP per launch, e.g. '2*N*M*K' (GFLOP/s, GFLOP/J).")
@click.option("--bytes", "bytes_moved", metavar="EXPR", help="Bytes moved per launch (GB/s).")
@click.option("--reference", metavar="FILE.py:FUNC", help="Python reference; default: the first kernel.")
@click.option("--no-check", is_flag=True, help="Do not compare outputs with a reference.")
@click.option(
    "--rtol", type=float, default=None, help="Relative error allowed. Default by dtype (float32: 1e-4)."
)
@click.option(
    "--power", multiple=True, metavar="SPEC", help="Power source spec, repeatable; 'none': timing only."
)
@click.option(
    "--ncu", is_flag=True, help="Also collect Nsight Compute metrics (needs ncu and counter access)."
)
@click.option("--dry-run", is_flag=True, help="Print signatures and configurations; run nothing.")
@click.option("--shard", metavar="I/N", help="Measure every N-th parameter point from the I-th (0-based).")
@click.option(
    "--devices",
    metavar="0,1,...",
    help="Run one shard per GPU in parallel (one process each) and merge them into --out.",
)
@click.option("--out", type=click_out_path(file_okay=False), help="Result directory.")
@click.option(
    "--trials", type=click.IntRange(min=1), default=None, help="Windows per configuration. Default 5."
)
@click.option(
    "--min-window", type=FiniteFloat(min=0, min_open=True), default=None, help="Shortest window (s)."
)
@click.option(
    "--unroll",
    type=click.IntRange(min=1),
    default=None,
    help="Launches per CUDA graph. Default: ~2 ms of launches.",
)
@click.pass_context
def sweep(
    ctx: click.Context,
    source,
    kernel_names,
    params,
    where,
    blocks,
    grid,
    shapes,
    shared_mem,
    args,
    outputs,
    inouts,
    options,
    flop,
    bytes_moved,
    reference,
    no_check,
    rtol,
    power,
    ncu,
    dry_run,
    shard,
    devices,
    out,
    trials,
    min_window,
    unroll,
) -> None:
    """Measure CUDA kernels of a .cu file over a parameter sweep.

    \b
    energyframe sweep examples/matmul_kernels.cu -k matmul_naive -k matmul_tiled \\
        -p N=512..4096 -p M=512..4096 -p K=1024 --shape a=N,K --shape b=K,M --shape res=N,M \\
        --flop '2*N*M*K' --power nvml --ncu
    """
    from ..kit.registry import power_from_cli
    from ..lifecycle.config import RunSettings
    from .api import sweep as run_sweep
    from .space import parse_values

    if not params:
        raise UsageError("give at least one swept parameter: -p N=512,1024")
    values = dict(parse_values(p) for p in params)
    given = _KernelOptions.parse(
        blocks=blocks,
        grid=grid,
        shapes=shapes,
        shared_mem=shared_mem,
        args=args,
        outputs=outputs,
        inouts=inouts,
        options=options,
    )
    kernels = [given.load(source, name) for name in kernel_names]
    settings = dict(
        power=power_from_cli(power),
        reference=_reference(reference),
        where=where,
        check=not no_check,
        rtol=rtol,
        flop=flop,
        bytes_moved=bytes_moved,
        profile=ncu,
        settings=RunSettings(trials=trials, min_window_s=min_window),
        unroll=unroll,
        **values,
    )
    if devices is not None:
        _on_devices(ctx, kernels, settings, devices, shard, dry_run, out)
        return
    run_sweep(kernels, dry_run=dry_run, shard=shard, out=out, echo=click.echo, **settings)


@dataclass(frozen=True)
class _KernelOptions:
    """What the command line says of the kernels, parsed; each kernel takes the shapes, outputs
    and in-outs of the arguments it has (one given for an argument only some kernels have is
    fine)."""

    blocks: list[tuple[int, int, int]] | None
    grid: str | None
    shapes: dict[str, tuple[str, ...]]
    shared_mem: str | None
    args: dict[str, Any]
    outputs: tuple[str, ...]
    inouts: tuple[str, ...]
    options: tuple[str, ...]

    @classmethod
    def parse(
        cls,
        *,
        blocks: tuple[str, ...],
        grid: str | None,
        shapes: tuple[str, ...],
        shared_mem: str | None,
        args: tuple[str, ...],
        outputs: tuple[str, ...],
        inouts: tuple[str, ...],
        options: tuple[str, ...],
    ) -> _KernelOptions:
        """Raises ``UsageError`` naming the option that does not parse."""
        from .kernel import parse_dim3
        from .space import constant

        fixed = {k: constant(v, f"--arg {k}={v}") for k, v in _pairs(args, "--arg").items()}
        shape_specs = {
            k: tuple(d.strip() for d in v.split(",")) for k, v in _pairs(shapes, "--shape").items()
        }
        block_list = [parse_dim3(b) for b in blocks] or None
        return cls(block_list, grid, shape_specs, shared_mem, fixed, outputs, inouts, options)

    def load(self, source: Path, name: str) -> CudaKernel:
        """The kernel ``name`` of ``source`` with the options that apply to its arguments."""
        from .kernel import load_kernel

        pointers = {p.name for p in load_kernel(source, name).signature.pointers}
        return load_kernel(
            source,
            name,
            block=self.blocks,
            grid=self.grid,
            shapes={a: d for a, d in self.shapes.items() if a in pointers} or None,
            shared_mem=self.shared_mem,
            args=self.args,
            outputs=[o for o in self.outputs if o in pointers],
            options=self.options,
            inouts=[a for a in self.inouts if a in pointers],
        )


def _child_argv(ctx: click.Context) -> list[str]:
    """This command's own arguments, as given, without --devices, --shard and --out (a child
    of ``--devices`` gets its own), preceded by the group's --debug / -q."""
    argv = []
    group = ctx.parent.params if ctx.parent is not None else {}
    if group.get("debug"):
        argv.append("--debug")
    if group.get("quiet"):
        argv.append("--quiet")
    argv.append(ctx.info_name or "sweep")
    for param in ctx.command.params:
        if param.name not in ("devices", "shard", "out", "dry_run"):
            argv += _as_given(param, ctx.params.get(param.name or ""))
    return argv


def _as_given(param: click.Parameter, value: Any) -> list[str]:
    """One parameter's value as command-line words (none for a flag that is off or an option
    left out)."""
    if isinstance(param, click.Argument):
        return [str(value)]
    option = max(param.opts, key=len)
    if getattr(param, "is_flag", False):
        return [option] if value else []
    if param.multiple:
        return [f"{option}={v}" for v in value or ()]
    return [f"{option}={value}"] if value is not None else []


def _on_devices(ctx, kernels, settings, devices, shard, dry_run, out) -> None:
    """``--devices``: a child process per GPU, each measuring one shard, merged into --out."""
    from ..results.store import default_run_dir
    from .api import sweep as run_sweep
    from .parallel import parse_devices, sweep_on_devices

    if shard is not None:
        raise UsageError("--devices splits the sweep into shards itself: drop --shard")
    chosen = parse_devices(devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
    _refuse_chosen_gpus(settings["power"])
    count = len(chosen)
    # the whole plan, checked here before any child starts; each shard's part of it
    configs = run_sweep(
        kernels, dry_run=True, echo=click.echo if dry_run else (lambda line: None), **settings
    )
    assert isinstance(configs, list)  # a dry run returns the plan
    plans = _shard_plans(configs, count)
    if dry_run:
        for i, (label, _visible) in enumerate(chosen):
            indices = ", ".join(str(c.index) for c in plans[i]) or "none"
            click.echo(f"GPU {label} (shard {i}/{count}): {len(plans[i])} configurations: {indices}")
        return
    out = Path(out) if out is not None else default_run_dir("sweep")
    sweep_on_devices(_child_argv(ctx), chosen, out, plans, echo=lambda line: click.echo(line, err=True))


def _refuse_chosen_gpus(power: Any) -> None:
    """Refuse a power source spec that picks GPUs: with --devices each child sees one GPU."""
    for spec in power if isinstance(power, list) else []:
        if "gpus=" in spec.replace(" ", ""):
            raise UsageError(
                f"--power {spec!r}: with --devices each child measures the one GPU it sees; drop gpus="
            )


def _shard_plans(configs: list[Config], count: int) -> dict[int, list[Config]]:
    """Per shard of ``count``, the configurations of its parameter points."""
    from .space import in_shard

    return {i: [c for c in configs if in_shard(c.point_index, (i, count))] for i in range(count)}


@click.command(context_settings=CONTEXT)
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--out", type=click_out_path(file_okay=False), required=True, help="Merged result directory.")
def merge(results, out) -> None:
    """Join the shards of one sweep (their directories or benchmark_results.json files)."""
    from .outputs import write
    from .results import SweepResult
    from .results import merge as merge_results

    merged = merge_results([SweepResult.load(r) for r in results])
    files = write(merged, out)
    missing = merged.meta.get("missing_shards")
    click.echo(
        f"merged {len(results)} shard(s), {len(merged.results)} configurations, into {out}: "
        f"{', '.join(f.name for f in files)}"
    )
    if missing:
        shown = ", ".join(map(str, missing[:20])) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
        click.echo(f"warning: {len(missing)} shard(s) missing: {shown}", err=True)
    for warning in merged.meta.get("warnings") or []:
        click.echo(f"warning: {warning}", err=True)


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook: ``energyframe sweep`` and ``energyframe merge``."""
    cli.add_command(sweep)
    cli.add_command(merge)
