"""Profiling a workload: the first phase of any workload, run under the PyTorch profiler with
input shapes recorded, each iteration annotated, and the trace summarised.

Under ``torchrun`` every rank profiles its own process and writes its own trace directory,
``OUT/rank<RANK>/``: the ranks run the same fixed warm-up and steps, so their collectives
pair up, each step ending at a barrier of the ranks (on a host group: counted in the trace, not
replayed), and no rank writes for another."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import UsageError
from ..kit import extras, registry
from ..model import Phase
from ..options import parse_spec
from ..plugin import Workload
from ..workloads import distributed
from . import kineto
from .memory_inputs import MEMORY_INPUTS, record_memory_inputs, write_memory_inputs

log = logging.getLogger("energyframe")


def trace_dir(out_dir: Path | str) -> Path:
    """Where this process writes its trace: ``out_dir``, or ``out_dir/rank<RANK>`` under a
    launcher that started several ranks."""
    w = distributed.world()
    out_dir = Path(out_dir)
    return out_dir / distributed.rank_dir_name(w.rank) if w.distributed else out_dir


def capture(spec: str | Workload, out_dir: Path | str, steps: int = 3, warmup: int = 3) -> dict:
    """Profile ``steps`` iterations of the workload's first phase after ``warmup``; write the raw
    Kineto trace (trace.json.gz), kernels.jsonl, ops.jsonl, collectives.jsonl, trace_meta.json,
    memory_inputs.json (one more step, under a dispatch mode) and timeline.png; under torchrun into ``out_dir/rank<RANK>`` (``trace_dir``).

    ``spec`` is a workload spec or a workload made in Python (``ef.Model(module, inputs)``);
    the trace of one made in Python names no spec, so its replay measures the full model only
    when given it (``full=``)."""
    extras.check("torch", "energyframe trace")
    w = distributed.world()
    out_dir = trace_dir(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec, workload = _traced_workload(spec)
    raw = out_dir / "trace.json"
    workload.setup()
    try:
        phase = _first_phase(workload)
        sync = _step_sync(phase, w)
        for _ in range(warmup):
            phase.step()
        sync()
        # under torchrun a step that failed on one rank would leave its peers waiting in a
        # collective: the ranks' replays rotate every input instead
        memory, ran_ops = (
            (None, True)
            if w.distributed
            else _traceable(spec if isinstance(spec, str) else workload.name, phase)
        )
        sync()
        _profile(phase, steps, sync, raw)
        if phase.teardown is not None:
            phase.teardown()
        info = _trace_info(spec, workload, phase, w, out_dir, steps=steps, warmup=warmup)
    finally:
        workload.teardown()
    if memory is not None:
        write_memory_inputs(out_dir, memory)
    else:
        (out_dir / MEMORY_INPUTS).unlink(missing_ok=True)  # a trace written here before
    with open(raw, "rb") as src, gzip.open(out_dir / "trace.json.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return _summary(out_dir, info, ran_ops)


def _first_phase(workload: Workload) -> Phase:
    """The workload's first phase, set up. Only the first: a workload that prepares each phase
    as it is asked for (a generator) prepares no more than that."""
    phase = next(iter(workload.phases()), None)
    if phase is None:
        raise UsageError(f"workload {workload.name!r} has no phase to trace")
    if phase.setup is not None:
        phase.setup()
    return phase


def _step_sync(phase: Phase, w: distributed.World) -> Callable[[], None]:
    """What ends a traced step: the phase's sync and, on ranks that joined a process group, a
    wait for every rank, so that every rank's step starts together and their timelines line up."""
    if not (w.distributed and distributed.joined()):
        return phase.sync

    def sync() -> None:
        phase.sync()
        distributed.wait_for_ranks()

    return sync


def _profile(phase: Phase, steps: int, sync: Callable[[], None], raw: Path) -> None:
    """``steps`` steps under the profiler, with input shapes, each annotated as a step; the
    trace exported to ``raw``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            with record_function(kineto.STEP_ANNOTATION):
                phase.step()
                sync()
    prof.export_chrome_trace(str(raw))


def _trace_info(
    spec: str | Workload,
    workload: Workload,
    phase: Phase,
    w: distributed.World,
    out_dir: Path,
    *,
    steps: int,
    warmup: int,
) -> dict:
    """What trace_meta.json says of the capture: the workload and phase, the process among the
    ranks, the device and torch, when, and how many steps."""
    import torch

    return {
        "workload": spec if isinstance(spec, str) else None,
        "workload_name": workload.name,
        "phase": phase.name,
        "iterations_per_step": phase.iterations_per_step,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "rank": w.rank,
        "local_rank": w.local_rank,
        "world_size": w.world_size,
        "trace_dir": str(out_dir),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "steps": steps,
        "warmup": warmup,
    }


def _traced_workload(spec: str | Workload) -> tuple[str | Workload, Workload]:
    """The spec traced (``eager_spec`` of one that runs graphs) and its workload, made."""
    workload = registry.create_workload(parse_spec(spec) if isinstance(spec, str) else spec)
    if isinstance(spec, str) and runs_a_graph(workload):
        spec = eager_spec(spec)
        workload = registry.create_workload(parse_spec(spec))
    return spec, workload


def runs_a_graph(workload: Workload) -> bool:
    """Whether the workload would run its steps as CUDA graphs and can run them eagerly instead
    (``execution=graph``, asked for or its default, as ``vicuna-7b``'s and ``hf:...,tp=N``'s)."""
    execution = next((o for o in workload.OPTIONS if o.name == "execution"), None)
    choices = execution.choices or () if execution is not None else ()
    return workload.options.get("execution") == "graph" and "eager" in choices


def eager_spec(spec: str) -> str:
    """``spec`` with ``execution=eager``: what a trace profiles of a workload that runs graphs. A
    graph's replay shows the profiler its kernels but none of its ops, and replay measures the
    graph beside the eager ops anyway (a twin with ``execution=graph``)."""
    parsed = parse_spec(spec)
    log.info(
        "tracing %s with execution=eager: the profiler sees a CUDA graph's kernels but none of its ops", spec
    )
    return str(dataclasses.replace(parsed, options={**dict(parsed.options), "execution": "eager"}))


def _summary(out_dir: Path, info: dict, ran_ops: bool) -> dict:
    """``summarize_trace`` of a captured trace; an empty trace of a step that ran no aten op
    (with a GPU there, it might have replayed a CUDA graph) is refused with that reason."""
    try:
        return summarize_trace(out_dir / "trace.json.gz", out_dir, info)
    except UsageError as e:
        if ran_ops:
            raise
        raise UsageError(f"{_nothing_to_trace(str(info['workload']), str(info['phase']))} ({e})") from e


def _traceable(spec: str, phase) -> tuple[list | None, bool]:
    """``_memory_inputs`` of the phase's step; a step that ran no aten op, where no CUDA graph
    could run either, is refused before profiling: the profiler would record nothing."""
    import torch

    memory, ran_ops = _memory_inputs(phase.step)
    if not ran_ops and not torch.cuda.is_available():
        raise UsageError(_nothing_to_trace(spec, phase.name))
    return memory, ran_ops


def _nothing_to_trace(spec: str, phase: str) -> str:
    return (
        f"workload {spec!r} runs no PyTorch op in its phase {phase!r}: energyframe trace records "
        "PyTorch ops and the GPU kernels they launch, and work done outside PyTorch (NumPy, as "
        "cpu-matmul does) leaves nothing to trace; trace a PyTorch workload (energyframe list workloads)"
    )


def _memory_inputs(step) -> tuple[list | None, bool]:
    """The signatures of the inputs the step reads from memory (memory_inputs.py), or None
    with a logged reason: the replay then rotates every input under l2=rotate; and whether the
    step ran an aten op (False only when the dispatch mode saw none)."""
    try:
        signatures = record_memory_inputs(step)
    except Exception as e:  # an op the dispatch mode cannot run: the trace is still whole
        log.warning("could not record which inputs the model reads from memory (%s: %s)", type(e).__name__, e)
        return None, True
    if signatures is None:
        log.info(
            "the traced step ran no aten op in this process: which inputs it reads from memory is unknown"
        )
        return None, False
    return signatures, True


def summarize_trace(
    path: Path | str, out_dir: Path | str, info: dict | None = None, iterations: int | None = None
) -> dict:
    """Parse a Kineto trace and write the summaries (also ``energyframe trace import``, where
    ``iterations`` says how many forward passes a trace without step annotations holds)."""
    out_dir = Path(out_dir)
    trace = kineto.parse(path)
    if iterations and not trace.steps:
        trace.iterations = iterations
    meta = kineto.summarize(trace, out_dir, dict(info or {"workload": None, "imported_from": str(path)}))
    if trace.kernels and extras.optional("matplotlib", "timeline.png"):
        from .gantt import timeline

        timeline(trace, out_dir / "timeline.png", title=meta.get("workload") or Path(path).name)
    if info is None:
        _keep_imported(Path(path), out_dir)
    (out_dir / "trace_meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def _keep_imported(path: Path, out_dir: Path) -> None:
    """An imported trace copied beside its summaries, as trace.json.gz or trace.json (as
    compressed as it came), unless it is already there."""
    if path.resolve() == (out_dir / "trace.json.gz").resolve():
        return
    target = out_dir / ("trace.json.gz" if str(path).endswith(".gz") else "trace.json")
    if path.resolve() != target.resolve():
        shutil.copyfile(path, target)
