"""``ef.sweep``: measure ``.cu`` kernels over a parameter space (``energyframe sweep``)."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import EnergyFrameError, UsageError, WorkloadError
from .kernel import BASE_OPTIONS, DEFAULT_BLOCK_1D, DEFAULT_BLOCK_2D, CudaKernel, Launch
from .results import SweepResult
from .space import as_function, expand, parse_shard
from .workload import Config, SweepWorkload, plan

log = logging.getLogger("energyframe")


def _describe(spec: Any) -> str | None:
    if spec is None:
        return None
    return spec if isinstance(spec, str) else getattr(spec, "__qualname__", repr(spec))


def sweep_id(kernels: Sequence[CudaKernel], params: Mapping[str, Sequence[Any]], where: Any) -> str:
    """What identifies a sweep across its shards: sources, kernels, blocks, values, constraint."""
    text = json.dumps(
        {
            "kernels": [
                [
                    k.label,
                    k.name,
                    hashlib.sha256(k.source.encode()).hexdigest(),
                    [list(b) for b in k.blocks],
                    list(k.compile_options),
                ]
                for k in kernels
            ],
            "params": {k: list(v) for k, v in params.items()},
            "where": _describe(where),
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _dims(block) -> str:
    return "x".join(map(str, block))


def _blocks(kernel: CudaKernel) -> str:
    if kernel.blocks:
        return ", ".join(_dims(b) for b in kernel.blocks)
    return f"default ({_dims(DEFAULT_BLOCK_1D)} for a 1-D output, else {_dims(DEFAULT_BLOCK_2D)})"


def config_warnings(configs: Sequence[Config]) -> list[str]:
    """Every distinct warning of the configurations, in sweep order."""
    return list(dict.fromkeys(w for c in configs for w in c.warnings))


def dry_run_lines(kernels: Sequence[CudaKernel], configs: Sequence[Config], total_points: int) -> list[str]:
    lines = ["kernels:"]
    lines += [f"  {k.describe()}  blocks: {_blocks(k)}" for k in kernels]
    lines.append(
        f"{len(configs)} configurations ({total_points} parameter points x kernels x blocks, this shard):"
    )
    for c in configs:
        if c.launch is None:
            lines.append(f"  [{c.index}] {c.phase}  ERROR: {c.error}")
            continue
        shapes = " ".join(f"{k}{list(v)}" for k, v in c.launch.shapes.items())
        grid = "x".join(map(str, c.launch.grid))
        shared = f" smem={c.launch.shared_mem_bytes}" if c.launch.shared_mem_bytes else ""
        lines.append(f"  [{c.index}] {c.phase} grid={grid}{shared}  {shapes}")
    lines += [f"warning: {w}" for w in config_warnings(configs)]
    return lines


def require_cuda() -> None:
    """Refuse to start a sweep where it cannot launch a kernel (no GPU, no CuPy).

    Raises:
        WorkloadError: saying what is missing; nothing was started or written.
    """
    import torch

    from .runtime import _cupy

    if not torch.cuda.is_available():
        raise WorkloadError(
            "a kernel sweep needs a CUDA GPU (torch sees none): nothing was run; --dry-run shows the plan"
        )
    _cupy()


def _measured_clocks(run_result) -> dict[str, float]:
    """Median SM and memory clocks over the run's windows, where a power source recorded them."""
    frame = getattr(run_result, "windows", None)
    out = {}
    for column in ("sm_clock_mhz", "mem_clock_mhz"):
        if frame is not None and column in frame and frame[column].notna().any():
            out[column] = float(frame[column].median())
    return out


def sweep(
    kernels: CudaKernel | Sequence[CudaKernel],
    *,
    power: Any = "auto",
    reference: Callable[..., Any] | None = None,
    where: str | Callable[..., bool] | None = None,
    check: bool = True,
    rtol: float | None = None,
    flop: str | Callable[..., float] | None = None,
    bytes_moved: str | Callable[..., float] | None = None,
    dry_run: bool = False,
    profile: bool = False,
    shard: str | tuple[int, int] | None = None,
    out: Path | str | None = None,
    settings=None,
    config: None = None,
    unroll: int | None = None,
    reporters: Sequence[Any] = ("console",),
    seed: int = 0,
    echo: Callable[[str], None] = print,
    **params: Sequence[Any],
) -> SweepResult | list[Config]:
    """Measure every kernel at every combination of ``params`` (and of each kernel's blocks).

    Args:
        kernels: from ``load_kernel``.
        power: power sources as for ``ef.run`` (``"auto"``, ``None`` for timing only, specs).
        reference: a function of the inputs (float64) and scalars, by parameter name, returning
            the expected output(s); ``None``: the first kernel of each point is the reference.
        where: a constraint on a point (a function of the parameters, or ``"N == M"``).
        check: compare outputs with the reference before measuring (without a reference, the
            first configuration of each point is checked for determinism: two launches on
            fresh copies of its inputs must agree).
        rtol: relative error allowed (default by output dtype: 1e-4 for float32).
        flop, bytes_moved: work per launch (a function or an expression): GFLOP/s, GB/s, GFLOP/J.
        dry_run: print the signatures and configurations and return them; no GPU needed.
        profile: also collect Nsight Compute metrics (ncu) for every measured configuration.
        shard: ``"I/N"`` or (I, N): measure every N-th parameter point from the I-th.
        out: where to save (default ``runs/<UTC time>-sweep``).
        settings: ``RunSettings`` (trials, window length...).
        config: removed (the old name of ``settings``): giving it raises ``TypeError`` (it is
            no swept parameter).
        unroll: launches per CUDA graph (default: enough for ~2 ms per replay, at most 100).
        **params: the values of each swept parameter, e.g. ``N=[512, 1024]``.

    Returns:
        The ``SweepResult`` (saved in ``out``), or with ``dry_run`` the planned configurations.

    Raises:
        UsageError: bad input, before anything starts.
        WorkloadError: no CUDA GPU or no CuPy, before anything starts (nothing is written).
    """
    from ..results.store import default_run_dir
    from .outputs import describe, write

    # the sweep's ordered steps: check, plan, dry run, measure, save
    if config is not None:
        raise TypeError("ef.sweep() takes no config= since 0.x: say settings=ef.RunSettings(...)")
    kernels = _checked_request(kernels, params)
    shard_t = parse_shard(shard)
    configs, total_points = _plan(kernels, params, where, shard_t, flop=flop, bytes_moved=bytes_moved)
    if dry_run:
        return _dry_run(kernels, configs, total_points, echo)
    _check_launchable(configs)
    require_cuda()
    for warning in config_warnings(configs):
        log.warning("warning: %s", warning)

    meta = _sweep_meta(kernels, params, where, reference, check, shard_t, total_points)
    workload = SweepWorkload(
        "sweep", configs, reference=reference, check=check, rtol=rtol, unroll=unroll, seed=seed
    )
    out = Path(out) if out is not None else default_run_dir("sweep")
    run_result, error = _measure(workload, out, power=power, reporters=reporters, settings=settings)
    meta, label = _with_run(meta, run_result, out)
    stopped = f"{type(error).__name__}: {error}" if error is not None else ""
    result = SweepResult(tuple(workload.results(run_result, stopped=stopped, device=label)), meta)
    if profile and error is None:
        result = _with_ncu(result, configs)
    echo(describe(write(result, out), out, complete=error is None))
    if error is not None:
        raise error
    return result


def _checked_request(
    kernels: CudaKernel | Sequence[CudaKernel], params: Mapping[str, Sequence[Any]]
) -> list[CudaKernel]:
    """The kernels as a list, refused when there are none, two share a label or no parameter
    is swept.

    Raises:
        UsageError: saying which.
    """
    kernels = [kernels] if isinstance(kernels, CudaKernel) else list(kernels)
    if not kernels:
        raise UsageError("no kernels to sweep")
    labels = [k.label for k in kernels]
    if len(set(labels)) != len(labels):
        raise UsageError(f"two kernels share a label ({labels}): give each a distinct label=")
    if not params:
        raise UsageError("no parameters to sweep: give e.g. N=[512, 1024]")
    return kernels


def _plan(
    kernels: Sequence[CudaKernel],
    params: Mapping[str, Sequence[Any]],
    where: str | Callable[..., bool] | None,
    shard: tuple[int, int] | None,
    *,
    flop: str | Callable[..., float] | None,
    bytes_moved: str | Callable[..., float] | None,
) -> tuple[list[Config], int]:
    """This shard's configurations, each with its work per launch (NaN where not given), and
    the number of parameter points in the whole sweep.

    Raises:
        UsageError: the constraint keeps no parameter point.
    """
    where_fn = as_function(where)
    points = expand(params, where_fn)
    if not points:
        raise UsageError("the constraint leaves no parameter point to measure")
    configs = plan(kernels, points, shard)
    flop_fn, bytes_fn = as_function(flop), as_function(bytes_moved)
    for c in configs:
        values = {**c.kernel.args, **c.point}
        for unit, fn in (("flop", flop_fn), ("bytes", bytes_fn)):
            c.extra[unit] = float(fn(values)) if fn is not None else math.nan
    return configs, len(points)


def _dry_run(
    kernels: Sequence[CudaKernel], configs: list[Config], total_points: int, echo: Callable[[str], None]
) -> list[Config]:
    """Show the plan and return it, nothing measured (refused, after it is shown, when no
    configuration can be launched)."""
    for line in dry_run_lines(kernels, configs, total_points):
        echo(line)
    _check_launchable(configs)
    return configs


def _check_launchable(configs: Sequence[Config]) -> None:
    """Refuse a plan none of whose configurations can be launched, naming the first one's reason."""
    if configs and all(c.launch is None for c in configs):
        raise UsageError(f"no configuration can be launched: {configs[0].error}")


def _sweep_meta(
    kernels: Sequence[CudaKernel],
    params: Mapping[str, Sequence[Any]],
    where: Any,
    reference: Any,
    check: bool,
    shard: tuple[int, int] | None,
    total_points: int,
) -> dict[str, Any]:
    """What the sweep was asked to measure, before it starts."""
    labels = [k.label for k in kernels]
    return {
        "sweep_id": sweep_id(kernels, params, where),
        "sources": sorted({str(k.source_path) for k in kernels}),
        "kernels": [
            {"label": k.label, "signature": str(k.signature), "options": list(k.compile_options)}
            for k in kernels
        ],
        "parameters": {k: list(v) for k, v in params.items()},
        "where": _describe(where),
        "reference": _describe(reference) or (f"first kernel ({labels[0]})" if check else None),
        "shard": list(shard) if shard else None,
        "baseline": labels[0],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "configurations_in_sweep": total_points * sum(len(k.blocks) or 1 for k in kernels),
    }


def _measure(
    workload: SweepWorkload, out: Path, *, power: Any, reporters: Sequence[Any], settings: Any
) -> tuple[Any, EnergyFrameError | None]:
    """Run the sweep's workload: its run's result (``None`` when it stopped before one) and the
    error that stopped it, if any (raised again once what was measured is saved)."""
    from ..lifecycle import orchestrator

    try:
        run_result = orchestrator.run(
            workload, power=power, reporters=list(reporters), out=out, settings=settings
        )
    except EnergyFrameError as e:
        return getattr(e, "result", None), e
    return run_result, None


def _with_run(meta: Mapping[str, Any], run_result: Any, out: Path) -> tuple[dict[str, Any], str]:
    """The sweep's metadata with what its run saw (the GPU, the power channels, the run
    directory, the device), and the device's label ("" when it is not known)."""
    from .devices import base_label

    meta = dict(meta)
    device: dict[str, Any] = {}
    if run_result is not None:
        info = run_result.run_meta.workload_info
        meta["gpu"] = info.get("gpu")
        meta["power"] = list(run_result.run_meta.primary_channels)
        meta["runs"] = [str(out)]
        device = {**(info.get("device") or {}), **_measured_clocks(run_result)}
    label = base_label(device) if "error" not in device else None
    meta["device"] = device or None
    meta["devices"] = {label: device} if label is not None else {}
    return meta, label or ""


def _with_ncu(result: SweepResult, configs: Sequence[Config]) -> SweepResult:
    from . import ncu

    chosen = _to_profile(result, configs)
    if not chosen:
        return result
    try:
        rows = ncu.profile([_ncu_launch(c, launch) for c, launch in chosen])
    except ncu.NcuUnavailable as e:
        log.warning("ncu: %s", e)
        return result.with_ncu({}, note=f"not collected: {e}")
    mismatch = _ncu_mismatch([c for c, _ in chosen], rows)
    if mismatch is not None:
        log.warning("ncu: %s", mismatch)
        return result.with_ncu({}, note=mismatch)
    metrics = {c.index: _ncu_metrics(row) for (c, _), row in zip(chosen, rows)}
    return result.with_ncu(
        metrics, note="ncu --clock-control none --cache-control none, one launch of each configuration"
    )


def _to_profile(result: SweepResult, configs: Sequence[Config]) -> list[tuple[Config, Launch]]:
    """The configurations that were measured, with their launches, in sweep order."""
    measured = {r.index for r in result.results if r.measured}
    return [(c, c.launch) for c in configs if c.index in measured and c.launch is not None]


def _ncu_launch(config: Config, launch: Launch) -> dict[str, Any]:
    """What ncu's child process needs to compile and launch one configuration once."""
    return {
        "source": str(config.kernel.source_path.resolve()),
        "kernel": config.kernel.name,
        "options": list(config.kernel.compile_options[len(BASE_OPTIONS) :]),
        "outputs": list(config.kernel.output_names),
        "inouts": list(config.kernel.inout_names),
        **launch.to_json(),
    }


def _ncu_mismatch(configs: Sequence[Config], rows: Sequence[Mapping[str, Any]]) -> str | None:
    """Why ncu's rows cannot be matched to the configurations, one row to each in launch order:
    the first row whose kernel is not the configuration's (None when every one is)."""
    for config, row in zip(configs, rows):
        if row["kernel"].split("(")[0].strip() != config.kernel.name:
            return f"not collected: ncu's launch {row['id']} is {row['kernel']!r}, expected {config.kernel.name!r}"
    return None


def _ncu_metrics(row: Mapping[str, Any]) -> dict[str, Any]:
    """A configuration's metrics: ncu's row without its launch id."""
    return {k: v for k, v in row.items() if k != "id"}
