"""``energyframe sweep`` and ``energyframe merge``: thin, as the rest of the CLI."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from ..errors import UsageError

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
    help="Threads per block, repeatable (swept). Default 16,16,1.",
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
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Result directory.")
@click.option(
    "--trials", type=click.IntRange(min=1), default=None, help="Windows per configuration. Default 5."
)
@click.option(
    "--min-window", type=click.FloatRange(min=0, min_open=True), default=None, help="Shortest window (s)."
)
@click.option(
    "--unroll",
    type=click.IntRange(min=1),
    default=None,
    help="Launches per CUDA graph. Default: ~2 ms of launches.",
)
def sweep(
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
    from ..orchestrator import RunConfig
    from ..registry import power_from_cli
    from .api import sweep as run_sweep
    from .kernel import load_kernel, parse_dim3
    from .space import evaluate, parse_values

    if not params:
        raise UsageError("give at least one swept parameter: -p N=512,1024")
    values = dict(parse_values(p) for p in params)
    fixed = {k: evaluate(v, {}) for k, v in _pairs(args, "--arg").items()}
    shape_specs = {k: tuple(d.strip() for d in v.split(",")) for k, v in _pairs(shapes, "--shape").items()}
    block_list = [parse_dim3(b) for b in blocks] or [(16, 16, 1)]
    kernels = []
    for name in kernel_names:  # a --shape or --output for an argument only some kernels have is fine
        kernel = load_kernel(
            source, name, block=block_list, grid=grid, shared_mem=shared_mem, args=fixed, options=options
        )
        pointers = {p.name for p in kernel.signature.pointers}
        kernels.append(
            replace(
                kernel,
                shapes={a: d for a, d in shape_specs.items() if a in pointers} or None,
                output_names=tuple(o for o in outputs if o in pointers),
            )
        )
    config = RunConfig(trials=trials, min_window_s=min_window)
    run_sweep(
        kernels,
        power=power_from_cli(power),
        reference=_reference(reference),
        where=where,
        check=not no_check,
        rtol=rtol,
        flop=flop,
        bytes_moved=bytes_moved,
        dry_run=dry_run,
        profile=ncu,
        shard=shard,
        out=out,
        config=config,
        unroll=unroll,
        echo=click.echo,
        **values,
    )


@click.command(context_settings=CONTEXT)
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Merged result directory."
)
def merge(results, out) -> None:
    """Join the shards of one sweep (their directories or benchmark_results.json files)."""
    from .results import SweepResult
    from .results import merge as merge_results

    merged = merge_results([SweepResult.load(r) for r in results])
    merged.save(out)
    missing = merged.meta.get("missing_shards")
    click.echo(f"merged {len(results)} shard(s), {len(merged.results)} configurations, into {out}")
    if missing:
        click.echo(f"warning: shards {missing} are missing", err=True)


def register_commands(cli: click.Group) -> None:
    """The ``energyframe.commands`` hook: ``energyframe sweep`` and ``energyframe merge``."""
    cli.add_command(sweep)
    cli.add_command(merge)
