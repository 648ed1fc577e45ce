"""A trace directory's files as replaying reads them, checked: trace_meta.json, ops.jsonl,
kernels.jsonl and collectives.jsonl (the last two absent from older traces), and which rank's
directory a process replays. A file that is not what ``energyframe trace`` writes is a
``UsageError`` that names the file, the record and the field."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..model import WorkloadContext
from ..workloads import distributed
from . import kineto

_DAMAGED = "the trace directory is damaged: write it again with energyframe trace (or trace import)"
_NUMBER = (int, float)
#: the fields of a trace directory's files that replaying reads, and their JSON types
META_FIELDS: dict[str, tuple[type, ...]] = {
    "workload": (str, type(None)),
    "iterations": (int,),
    "iterations_per_step": (int,),
    "gpu_time_us": _NUMBER,
    "gaps": (dict,),
}
OP_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "count": (int,),
    "count_per_iteration": _NUMBER,
    "gpu_time_us": _NUMBER,
    "gpu_time_by_tier_us": (dict, type(None)),
    "input_dims": (list, type(None)),
    "input_types": (list, type(None)),
    "input_strides": (list, type(None)),
    "concrete_inputs": (list, type(None)),
    "kernel_names": (list, type(None)),
}
KERNEL_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "tier": (str,),
    "count_per_iteration": _NUMBER,
    "total_us": _NUMBER,
}
#: fields an op record cannot do without
_REQUIRED_OP = ("name", "count", "count_per_iteration", "gpu_time_us")


def read_trace_meta(path: Path) -> dict:
    """trace_meta.json, checked (an empty description when the directory has none)."""
    if not path.exists():
        return {}
    meta = _read_json(path)
    if not isinstance(meta, dict):
        raise UsageError(f"{path} should hold a JSON object, not a {type(meta).__name__}; {_DAMAGED}")
    problem = _field_problem(meta, META_FIELDS)
    if problem:
        raise UsageError(f"{path}: {problem}; {_DAMAGED}")
    for key in ("iterations", "iterations_per_step"):
        if key in meta and meta[key] < 1:
            raise UsageError(f"{path}: {key} should be at least 1, not {meta[key]}; {_DAMAGED}")
    return meta


def _read_json(path: Path) -> Any:
    """The JSON a trace directory's file holds; each way it can fail to be JSON, said."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); {_DAMAGED}"
        ) from e
    except UnicodeDecodeError as e:
        raise UsageError(f"{path} is not UTF-8 text (binary data at byte {e.start}); {_DAMAGED}") from e
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from e


def _checked(path: Path, records: list[dict], fields: Mapping[str, tuple[type, ...]]) -> list[dict]:
    required = _REQUIRED_OP if fields is OP_FIELDS else tuple(fields)
    for number, record in enumerate(records, 1):
        missing = [k for k in required if k not in record]
        problem = f"lacks {missing}" if missing else _field_problem(record, fields)
        if problem:
            raise UsageError(f"{path} record {number}: {problem}; {_DAMAGED}")
    return records


def _field_problem(data: Mapping[str, Any], fields: Mapping[str, tuple[type, ...]]) -> str | None:
    for key, types in fields.items():
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, types):
                wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
                return f"{key} should be {wanted}, not {json.dumps(value)[:40]}"
    return None


def read_ops(trace: Path) -> list[dict]:
    """ops.jsonl: one record per unique leaf op, checked."""
    return _checked(trace / "ops.jsonl", kineto.read_jsonl(trace / "ops.jsonl"), OP_FIELDS)


def read_kernels(trace: Path) -> list[dict]:
    """kernels.jsonl, checked (none when the directory has none)."""
    kernels = trace / "kernels.jsonl"
    return _checked(kernels, _read_if_there(kernels), KERNEL_FIELDS)


def read_collectives(trace: Path) -> list[dict]:
    """collectives.jsonl (none when the directory has none)."""
    return _read_if_there(trace / "collectives.jsonl")


def _read_if_there(path: Path) -> list[dict]:
    """A trace directory's optional records file (older traces have none): empty when absent."""
    return kineto.read_jsonl(path) if path.exists() else []


def rank_trace(trace: Path, w: distributed.World | WorkloadContext) -> Path:
    """The trace directory this process replays: ``trace`` itself, or under torchrun the
    directory of its rank (``trace/rank<RANK>``, as ``energyframe trace`` writes them)."""
    if (trace / "ops.jsonl").exists():
        return trace
    ranks = sorted(trace.glob("rank*/ops.jsonl"))
    if not ranks:
        raise UsageError(f"{trace} is not a trace directory: no ops.jsonl (write one with energyframe trace)")
    n = len(ranks)
    if not w.distributed:
        raise UsageError(
            f"{trace} holds one trace per rank ({n} ranks): replay them under torchrun --nproc-per-node {n}, "
            f"one process per rank, or one rank's alone with trace={trace / distributed.rank_dir_name(0)}"
        )
    if w.world_size != n:
        raise UsageError(
            f"{trace} holds traces of {n} ranks, but WORLD_SIZE is {w.world_size}: "
            f"replay them under torchrun --nproc-per-node {n}"
        )
    mine = trace / distributed.rank_dir_name(w.rank)
    if not (mine / "ops.jsonl").exists():
        raise UsageError(f"{trace} has no trace of rank {w.rank} ({mine} has no ops.jsonl)")
    return mine
