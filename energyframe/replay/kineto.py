"""Reading a PyTorch profiler (Kineto) trace: GPU kernels, the aten ops that launched them, tiers.

Pure Python (json, no torch), so an existing trace can be imported anywhere. What is extracted:

- every GPU kernel, memcpy and memset, linked to the innermost aten op that launched it (through
  the ``External id`` the profiler records on both, else through the runtime call's correlation
  id and time nesting);
- the *leaf* aten ops: ops with no child op other than views and metadata ops (so ``addmm`` is
  a leaf, ``linear`` around it is not, and nothing is counted twice), with their input shapes,
  dtypes, strides and scalar arguments; a composite op that launches a kernel itself, outside
  its children, is replayed whole in place of its children;
- tiers, as the earlier tool had them: memcpy/memset, GEMM (cuBLAS, cuBLASLt, CUTLASS and
  nvjet kernels), other; and communication (NCCL's kernels) for traces of several ranks;
- the collectives (``comm``): c10d ops with their sizes, counts and NCCL kernel time, written
  to collectives.jsonl; ops inside a collective are the backend's, not leaf ops;
- the steps (``energyframe.step`` annotations) and, per step, how long the GPU sat idle between
  kernels.

The parsed data (``Op``, ``Kernel``, ``Trace``) and the tiers live in ``tracedata``, which
``comm`` reads too; they are importable from here as well.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..workloads.torchops import is_free
from .comm import inside_collective, unique_collectives
from .tracedata import (  # noqa: F401 (tier, boolean_masks and the tiers are read from here too)
    TIER_COMM,
    TIER_GEMM,
    TIER_MEMORY,
    TIER_OTHER,
    Kernel,
    Op,
    Trace,
    boolean_masks,
    tier,
)

STEP_ANNOTATION = "energyframe.step"


def load_events(path: Path | str) -> list[dict]:
    """The trace's events; a clear error for anything that is not a readable trace."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"trace file {path} does not exist")
    data = _read_json(path)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise UsageError(f"{path} has no traceEvents list: not a PyTorch profiler (Kineto) trace")
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise UsageError(
                f"{path}: event {index} is {type(event).__name__} {json.dumps(event)[:40]}, not an object: "
                "not a PyTorch profiler (Kineto) trace"
            )
    return events


def _read_json(path: Path) -> Any:
    """The JSON a trace file (gzipped or not) holds; each way it can fail to be one, said."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{path} is not UTF-8 text (byte {e.object[e.start : e.start + 1]!r} at offset {e.start}): "
            "not a PyTorch profiler trace"
        ) from e
    except (OSError, EOFError) as e:
        raise UsageError(f"{path} cannot be read as a trace ({e}); is it truncated?") from e
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{path} is not complete JSON (line {e.lineno}, column {e.colno}): truncated or not a "
            "PyTorch profiler trace"
        ) from e
    except (ValueError, RecursionError) as e:  # numbers json cannot hold, nesting too deep
        raise UsageError(
            f"{path} is not a PyTorch profiler trace ({type(e).__name__}: {str(e)[:120]})"
        ) from e


def _number(path: Path, index: int, event: dict, key: str, default: float | None = None) -> float:
    """An event's time field as a number; a clear error for text or nonsense."""
    value = event.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UsageError(
            f"{path}: event {index} ({str(event.get('name'))[:60]!r}) has {key} {value!r}, not a number"
        )
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if number != number or number in (float("inf"), float("-inf")):
        raise UsageError(
            f"{path}: event {index} ({str(event.get('name'))[:60]!r}) has {key} {str(value)[:40]!r}, not a number"
        )
    return number


def parse(path: Path | str) -> Trace:
    """The ops, kernels and steps of a trace file, linked.

    Raises:
        UsageError: the file is missing, not JSON, not UTF-8, or not a profiler trace.
    """
    events = load_events(path)
    try:
        return _parse(Path(path), events)
    except (TypeError, AttributeError, KeyError) as e:  # a field of a type the profiler never writes
        raise UsageError(
            f"{path} is not a PyTorch profiler trace: a field has an unexpected type ({type(e).__name__}: "
            f"{str(e)[:120]})"
        ) from e


#: the profiler's categories of GPU work: kernels, and the copies and fills it times as kernels
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: the categories of the host's calls into CUDA, whose correlation id a kernel records
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")


@dataclass
class _Events:
    """The complete events of a trace that linking reads, by kind, in the trace's order."""

    ops: list[Op] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    runtime_by_corr: dict[int, dict] = field(default_factory=dict)
    steps: list[tuple[float, float]] = field(default_factory=list)

    def add(self, e: dict, args: dict, start: float, end: float) -> None:
        """One event, by its category (others are not read). Units: µs."""
        cat = e.get("cat", "")
        if cat == "cpu_op":
            self.ops.append(
                Op(
                    e.get("name", "?"),
                    start,
                    end,
                    (e.get("pid"), e.get("tid")),
                    args,
                    args.get("External id"),
                )
            )
        elif cat in GPU_CATEGORIES:
            self.kernels.append(
                Kernel(
                    e.get("name", "?"),
                    cat,
                    start,
                    end,
                    args.get("grid"),
                    args.get("block"),
                    args.get("stream"),
                    args.get("External id"),
                    args.get("correlation"),
                )
            )
        elif cat in RUNTIME_CATEGORIES and args.get("correlation") is not None:
            # its start checked as a number: linking reads it as one
            self.runtime_by_corr[args["correlation"]] = {**e, "ts": start}
        elif cat == "user_annotation" and e.get("name") == STEP_ANNOTATION:
            self.steps.append((start, end))


def _span(path: Path, index: int, e: dict) -> tuple[dict, float, float]:
    """A complete event's args, start and end, checked. Units: µs."""
    args = e.get("args") or {}
    if not isinstance(args, dict):
        raise UsageError(f"{path}: event {index} has args {str(args)[:40]!r}, not an object")
    start = _number(path, index, e, "ts")
    duration = _number(path, index, e, "dur", 0.0)
    if duration < 0:  # every time summed from it (busy, idle, per op) would be wrong
        raise UsageError(
            f"{path}: event {index} ({str(e.get('name'))[:60]!r}) has dur {duration:g}, a negative "
            "duration (the profiler records none below 0 µs): not a profiler trace"
        )
    return args, start, start + duration


def _parse(path: Path, events: list[dict]) -> Trace:
    found = _Events()
    for index, e in enumerate(events):
        if e.get("ph") == "X" and "ts" in e:  # complete events: the others have no duration
            found.add(e, *_span(path, index, e))
    if not found.ops and not found.kernels:
        raise UsageError(
            f"{path} holds no aten ops and no GPU kernels: was it recorded with the PyTorch profiler?"
        )
    _nest(found.ops)
    _link(found.ops, found.kernels, found.runtime_by_corr)
    found.steps.sort()
    _assign_steps(found.ops, found.kernels, found.steps)
    return Trace(Path(path), found.ops, found.kernels, found.steps, max(1, len(found.steps)))


def _assign_steps(ops: list[Op], kernels: list[Kernel], steps: list[tuple[float, float]]) -> None:
    """Each op's step by its start; each kernel's that of the op that launched it, else by its start."""
    for op in ops:
        op.step = _step_of(op.start_us, steps)
    for k in kernels:
        k.step = k.op.step if k.op is not None else _step_of(k.start_us, steps)


def _nest(ops: list[Op]) -> None:
    """Children by time nesting on the same thread."""
    for thread_ops in _by_thread(ops).values():
        thread_ops.sort(key=lambda o: (o.start_us, -o.end_us))
        stack: list[Op] = []
        for op in thread_ops:
            while stack and stack[-1].end_us < op.start_us + 1e-9 and not _contains(stack[-1], op):
                stack.pop()
            while stack and not _contains(stack[-1], op):
                stack.pop()
            if stack:
                stack[-1].children.append(op)
                op.parent = stack[-1]
            stack.append(op)


def _by_thread(ops: list[Op]) -> dict[object, list[Op]]:
    by_thread: dict[object, list[Op]] = defaultdict(list)
    for op in ops:
        by_thread[op.tid].append(op)
    return by_thread


def _contains(outer: Op, inner: Op) -> bool:
    return outer.start_us <= inner.start_us and inner.end_us <= outer.end_us


def _link(ops: list[Op], kernels: list[Kernel], runtime_by_corr: dict[int, dict]) -> None:
    by_external: dict[int, list[Op]] = defaultdict(list)
    for each in ops:
        if each.external_id is not None:
            by_external[each.external_id].append(each)
    by_thread = _by_thread(ops)
    for k in kernels:
        k.op = _launching_op(k, by_external, by_thread, runtime_by_corr)
    for k in kernels:
        if k.op is not None and k.op.children:
            k.op.launches_directly = True
    for k in kernels:  # a kernel counts for the op whose replay will run it
        if k.op is not None:
            k.op = k.op.unit()
            k.op.kernels.append(k)


def _launching_op(
    k: Kernel,
    by_external: dict[int, list[Op]],
    by_thread: dict[object, list[Op]],
    runtime_by_corr: dict[int, dict],
) -> Op | None:
    """The innermost op on the launching thread's stack when the kernel was launched: by the
    External id both record, else by the time of the runtime call with the kernel's correlation id."""
    op = _innermost(by_external.get(k.external_id, [])) if k.external_id is not None else None
    if op is None and k.correlation in runtime_by_corr:
        call = runtime_by_corr[k.correlation]
        t = float(call["ts"])
        thread_ops = by_thread.get((call.get("pid"), call.get("tid")), [])
        op = _innermost(o for o in thread_ops if o.start_us <= t <= o.end_us)
    return op


def _innermost(ops: Iterable[Op]) -> Op | None:
    """The shortest of the ops (the first of the shortest), None for none."""
    return min(ops, key=lambda o: o.end_us - o.start_us, default=None)


def _step_of(t: float, steps: list[tuple[float, float]]) -> int | None:
    for i, (a, b) in enumerate(steps):
        if a <= t <= b:
            return i
    return None


def leaf_ops(trace: Trace) -> list[Op]:
    """Leaf aten ops inside the profiled steps (all ops when the trace has no steps)."""
    inside = [op for op in trace.ops if trace.steps == [] or op.step is not None]
    return [
        op
        for op in inside
        if op.is_unit and op.name.startswith("aten::") and not is_free(op.name) and not inside_collective(op)
    ]


def unique_kernels(trace: Trace) -> list[dict]:
    """One record per unique kernel: name, grid, block, launching op, count, durations, tier."""
    groups: dict[str, list[Kernel]] = defaultdict(list)
    for k in trace.kernels:
        if trace.steps and k.step is None:
            continue
        op_key = k.op.key() if k.op is not None else ""
        groups[json.dumps([k.name, k.grid, k.block, op_key])].append(k)
    out = []
    for members in groups.values():
        k = members[0]
        total = sum(m.duration_us for m in members)
        out.append(
            {
                "name": k.name,
                "tier": k.tier,
                "grid": k.grid,
                "block": k.block,
                "count": len(members),
                "count_per_iteration": len(members) / trace.iterations,
                "total_us": total,
                "mean_us": total / len(members),
                "op": k.op.record() if k.op is not None else None,
            }
        )
    return sorted(out, key=lambda r: -r["total_us"])


def unique_ops(trace: Trace) -> list[dict]:
    """One record per unique leaf op: its schema name and inputs, count, the GPU time of its
    kernels, and those kernels' names and tiers."""
    groups: dict[str, list[Op]] = defaultdict(list)
    for op in leaf_ops(trace):
        groups[op.key()].append(op)
    out = []
    for key, members in groups.items():
        kernels = [k for m in members for k in m.kernels]
        gpu_us = sum(k.duration_us for k in kernels)
        tiers: dict[str, float] = defaultdict(float)
        for k in kernels:
            tiers[k.tier] += k.duration_us
        out.append(
            {
                **members[0].record(),
                "key": key,
                "count": len(members),
                "count_per_iteration": len(members) / trace.iterations,
                "gpu_time_us": gpu_us,
                "kernels_per_call": len(kernels) / len(members),
                "kernel_names": sorted({k.name for k in kernels}),
                "gpu_time_by_tier_us": dict(tiers),
            }
        )
    return sorted(out, key=lambda r: -r["gpu_time_us"])


def gaps(trace: Trace) -> dict:
    """Per iteration: GPU span (first kernel start to last kernel end), busy time (kernels,
    overlaps merged), idle time between kernels. Units: µs."""
    per_step: dict[int | None, list[Kernel]] = defaultdict(list)
    for k in trace.kernels:
        per_step[k.step].append(k)
    rows = [
        _step_gaps(step, members) for step, members in per_step.items() if not (trace.steps and step is None)
    ]
    if not rows:
        return {"steps": [], "span_us": 0.0, "busy_us": 0.0, "idle_us": 0.0}
    n = len(rows)
    return {
        "steps": rows,
        "span_us": sum(r["span_us"] for r in rows) / n,
        "busy_us": sum(r["busy_us"] for r in rows) / n,
        "idle_us": sum(r["idle_us"] for r in rows) / n,
    }


def _step_gaps(step: int | None, members: list[Kernel]) -> dict[str, Any]:
    """One step's row of ``gaps``: its kernels' span, busy and idle time. Units: µs."""
    start, end, busy = _busy_span(sorted((k.start_us, k.end_us) for k in members))
    return {
        "step": step,
        "span_us": end - start,
        "busy_us": busy,
        "idle_us": end - start - busy,
        "kernels": len(members),
    }


def _busy_span(intervals: list[tuple[float, float]]) -> tuple[float, float, float]:
    """The first start, the last end and the time covered by sorted intervals, overlaps merged."""
    start, end = intervals[0]
    busy = end - start
    for a, b in intervals[1:]:
        if a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    return start, end, busy


def write_jsonl(path: Path, records: Iterable[dict]) -> None:
    with open(path, "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    """One JSON object per line; a ``UsageError`` naming the line for anything else."""
    if not path.exists():
        raise UsageError(
            f"{path} does not exist: is {path.parent} a trace directory (energyframe trace --out)?"
        )
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise UsageError(f"{path} line {number} is not JSON ({e.msg}): truncated?") from e
                if not isinstance(record, dict):
                    raise UsageError(f"{path} line {number} is {type(record).__name__}, not a JSON object")
                out.append(record)
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{path} is not UTF-8 text (binary data at byte {e.start}): the file is damaged"
        ) from e
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from e
    return out


def summarize(trace: Trace, out_dir: Path, meta: dict) -> dict:
    """Write kernels.jsonl, ops.jsonl and trace_meta.json for a parsed trace."""
    out_dir.mkdir(parents=True, exist_ok=True)
    from .rebuild import float_dtype_hint

    kernels = unique_kernels(trace)
    ops = unique_ops(trace)
    collectives = unique_collectives(trace, float_dtype_hint(ops), int(meta.get("world_size") or 1))
    write_jsonl(out_dir / "kernels.jsonl", kernels)
    write_jsonl(out_dir / "ops.jsonl", ops)
    write_jsonl(out_dir / "collectives.jsonl", collectives)
    total_us = sum(k["total_us"] for k in kernels)
    info = {
        **meta,
        "trace": str(trace.path.name),
        "iterations": trace.iterations,
        "unique_kernels": len(kernels),
        "kernel_launches": sum(k["count"] for k in kernels),
        "unique_leaf_ops": len(ops),
        "gpu_time_us": total_us,
        "gpu_time_by_tier_us": _by_tier(kernels),
        "gaps": gaps(trace) if trace.kernels else {},
        "collectives": _collectives_summary(collectives, trace.iterations),
    }
    (out_dir / "trace_meta.json").write_text(json.dumps(info, indent=1))
    return info


def _collectives_summary(collectives: list[dict], iterations: int) -> dict:
    replayed = [c for c in collectives if c["replayed"]]
    return {
        "unique": len(replayed),
        "calls_per_iteration": sum(c["count_per_iteration"] for c in replayed),
        "gpu_time_us": sum(c["gpu_time_us"] for c in replayed),
        "by_kind": _calls_by_kind(replayed),
        "barriers_per_iteration": sum(c["count_per_iteration"] for c in collectives if not c["replayed"]),
    }


def _calls_by_kind(collectives: list[dict]) -> dict[str, float]:
    """Calls per iteration of each kind of collective, by kind's name."""
    return {
        kind: sum(c["count_per_iteration"] for c in collectives if c["kind"] == kind)
        for kind in sorted({c["kind"] for c in collectives})
    }


def _by_tier(kernels: list[dict]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for k in kernels:
        out[k["tier"]] += k["total_us"]
    return dict(out)
