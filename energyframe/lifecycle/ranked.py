"""The part of a measurement that exists only with several ranks (torchrun, srun).

Every rank runs its own ``Measurement``; this module is what one of them does beyond a single
process, always through its ``Coordinator``: join the ranks and let rank 0 claim the run
directory, run only the per-process sources outside local rank 0, tell rank 0 what this rank
measures (rank 0 refuses a GPU that two ranks measure), and at the end send this rank's part to
rank 0, which merges the parts (``energyframe.ranks.merge``) and saves the one run directory.

It reaches the measurement through ``RankHost`` alone (the run's ``output.RunOutput``: its
claim, its timings, its warnings, its save); what else it needs is handed to it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from ..errors import DistributedError, UsageError
from ..plugin import PowerSource, Workload
from ..ranks.coordinator import Coordinator, RankInfo
from ..ranks.merge import TOTAL, RankPart, merge_parts, prefixed, run_status
from ..ranks.world import boot_id, host_name, rank_devices
from ..results.result import COMPLETE, INCOMPLETE, RunResult
from .assemble import extra_files


class RankHost(Protocol):
    """What a rank's share of the run asks of its measurement (``output.RunOutput``)."""

    def claim(self, out: Path) -> None: ...

    def span(self, what: str) -> AbstractContextManager[None]: ...

    def add_time(self, what: str, seconds: float) -> None: ...

    def describe(self, **fields: Any) -> None: ...

    def warn(self, message: str) -> None: ...

    def save(self, result: RunResult, files: Mapping[str, Mapping[str, bytes]] | None = None) -> RunResult: ...


@dataclass(frozen=True)
class OwnPart:
    """What this rank measured, integrated on its own clock, as it goes to rank 0.

    Args:
        result: this rank's own run (no windows when it failed before measuring).
        status, reason: how this rank's own run ended.
        device_channels: its own-device channels, summed into the run's ``total``.
        work: work per iteration by phase.
        warnings: its warnings.
    """

    result: RunResult
    status: str
    reason: str | None
    device_channels: list[str]
    work: dict[str, dict[str, float]]
    warnings: list[str]


class RankedRun:
    """One rank's share of a run of several ranks.

    Args:
        coordinator: this rank among the others.
        host: the measurement's run output.
        workload: the measured workload (each rank's extra files go to rank 0), if any.
    """

    def __init__(self, coordinator: Coordinator, host: RankHost, workload: Workload | None) -> None:
        self.coordinator = coordinator
        self.host = host
        self.workload = workload
        #: the run directory this rank was given (rank 0's is the one used)
        self.given_out: Path | None = None
        #: the error every rank raises when the run ended because of another rank
        self.rank_error: DistributedError | None = None

    def join(
        self, started: float, out: Path | None, sources: Sequence[PowerSource], notes: list[str]
    ) -> tuple[Path | None, list[PowerSource]]:
        """Rank 0 claims the run directory and tells every rank. Returns the run directory and
        the sources this rank runs (a machine-wide one runs in local rank 0 only: ``notes``
        says so)."""
        host, coord = self.host, self.coordinator
        self.given_out = out
        out = coord.decide_out(out, host.claim)
        here = sources_here(sources, coord.local_rank, notes)
        host.add_time("ranks_join", time.monotonic() - started)  # torch's import included
        if coord.is_root:
            host.describe(distributed={"world_size": coord.world_size, "launcher": coord.world.launcher})
        return out, here

    def started(self, sources: Sequence[PowerSource], out: Path | None) -> None:
        """Every rank's sources delivered: start measuring together."""
        host, coord = self.host, self.coordinator
        with host.span("ranks_start"):
            coord.edge("start measuring (every rank's sources have delivered)")
            coord.after_start(self.info(sources))
            if coord.is_root:
                check_ranks(coord, out, host.warn)

    def info(self, sources: Sequence[PowerSource]) -> RankInfo:
        """What rank 0 learns about this rank when the run starts."""
        coord = self.coordinator
        return RankInfo(
            rank=coord.rank,
            local_rank=coord.local_rank,
            host=host_name(),
            boot_id=boot_id(),
            pid=os.getpid(),
            devices=rank_devices(coord.world),
            gpus=source_gpus(sources),
            out=str(self.given_out) if self.given_out is not None else None,
        )

    # -- the end ------------------------------------------------------------------------------
    def finish(self, own: OwnPart, out: Path | None) -> RunResult:
        """Send this rank's part to rank 0; rank 0 merges and saves the run in ``out``. Rank 0
        returns the whole run, the others their own part with the run's final status. A run
        that ended because of another rank sets ``rank_error``."""
        host, coord = self.host, self.coordinator
        status, reason = own.status, own.reason
        files: dict[str, bytes] = {}
        if self.workload is not None and coord.root_out is not None:
            files = extra_files(own.result, self.workload, host.warn)
        part = RankPart(
            rank=coord.rank,
            local_rank=coord.local_rank,
            host=host_name(),
            status=status,
            reason=reason,
            result=own.result,
            extra_files=files,
            device_channels=own.device_channels,
            work=own.work,
            warnings=own.warnings,
        )
        with host.span("gather"):
            answer = coord.finish(part, reason if status != COMPLETE else None)
        try:
            result = self._as_root(answer, out) if coord.is_root else self._as_peer(own.result, answer)
        finally:
            coord.close()
        if result.status != COMPLETE and status == COMPLETE:
            self.rank_error = DistributedError(result.reason or "another rank did not complete the run")
        return result

    def _as_root(self, parts: Mapping[int, RankPart], out: Path | None) -> RunResult:
        """Rank 0: merge and save; every rank waits for the answer, sent even when saving failed."""
        coord = self.coordinator
        told = {"status": INCOMPLETE, "reason": "rank 0 could not save the run", "out": None}
        try:
            result = self._merge_and_save(parts)
            told = {"status": result.status, "reason": result.reason, "out": str(out) if out else None}
        finally:
            coord.acknowledge(told, sorted(parts))
        return result

    def _as_peer(self, local: RunResult, answer: Any) -> RunResult:
        coord = self.coordinator
        if answer is None:
            status, reason = INCOMPLETE, coord.end_message or (
                f"rank 0 did not answer: {coord.lost.get(0, 'no answer')}"
            )
            out = None
        else:
            status, reason, out = answer["status"], answer["reason"], answer["out"]
        distributed = {
            "rank": coord.rank,
            "world_size": coord.world_size,
            "run_dir": out,
            "part": "this rank's own channels and windows; rank 0 saved the whole run",
        }
        return replace(local, meta={**local.meta, "status": status, "reason": reason, "distributed": distributed})

    def _merge_and_save(self, parts: Mapping[int, RankPart]) -> RunResult:
        """Rank 0: the whole run from every rank's part, saved into the run directory."""
        host, coord = self.host, self.coordinator
        status, reason = run_status(parts, coord.world_size, coord.end_message)
        if status != COMPLETE and not coord.end_message and coord.lost:
            lost = "; ".join(f"rank {r}: {why}" for r, why in sorted(coord.lost.items()))
            reason = f"{reason} ({lost})"
        offsets = {r: info.clock_offset_s for r, info in coord.ranks.items()}
        with host.span("integrate"):
            result = merge_parts(
                parts,
                offsets,
                world_size=coord.world_size,
                status=status,
                reason=reason,
                distributed=distributed_meta(coord, parts),
            )
        for warning in result.warnings:
            host.warn(warning)
        extra = {f"rank{rank}": part.extra_files for rank, part in sorted(parts.items())}
        return host.save(result, extra)


def sources_here(sources: Sequence[PowerSource], local_rank: int, notes: list[str]) -> list[PowerSource]:
    """The sources a rank runs: every per-process one; a machine-wide one (a wall meter, RAPL)
    only in local rank 0, so that no machine is measured twice."""
    if local_rank == 0:
        return list(sources)
    kept = []
    for source in sources:
        if getattr(type(source), "PER_PROCESS", False):
            kept.append(source)
        else:
            notes.append(f"power source {source.name!r} measures the whole machine: it runs in local rank 0 only")
    return kept


def source_gpus(sources: Sequence[PowerSource]) -> list[tuple[str, str]]:
    """The GPUs the sources say they measure: ``(source, uuid or index)``."""
    gpus: list[tuple[str, str]] = []
    for source in sources:
        try:
            described = dict(source.info())
        except Exception:  # a plugin's description must never stop the run
            continue
        for gpu in described.get("gpus") or []:
            ident = gpu.get("uuid") if isinstance(gpu, Mapping) else gpu
            if ident:
                gpus.append((source.name, str(ident)))
    return gpus


def check_ranks(coord: Coordinator, out: Path | None, warn) -> None:
    """Rank 0: refuse a GPU that two ranks measure (it would be counted twice); say when the
    ranks were given other run directories than rank 0's."""
    seen: dict[str, tuple[int, str]] = {}
    for rank, info in sorted(coord.ranks.items()):
        for source, gpu in info.gpus:
            key = gpu if gpu.startswith(("GPU-", "MIG-")) else f"{info.boot_id}/{info.host}/{gpu}"
            if key in seen and seen[key][0] != rank:
                first, by = seen[key]
                raise UsageError(
                    f"GPU {gpu} is measured by rank {first} ({by}) and by rank {rank} ({source}): it "
                    "would be counted twice; let each rank measure its own GPU (nvml and nvidia-smi "
                    "without gpus= take the GPU of the rank's LOCAL_RANK)"
                )
            seen[key] = (rank, source)
    others = {r: i.out for r, i in coord.ranks.items() if r and i.out is not None and i.out != str(out)}
    if others:
        named = ", ".join(f"rank {r}: {o}" for r, o in sorted(others.items()))
        warn(
            f"the ranks were given other run directories than rank 0's ({named}); the run is saved "
            f"once, by rank 0, in {out}"
        )


def distributed_meta(coord: Coordinator, parts: Mapping[int, RankPart]) -> dict[str, Any]:
    """run.json's ``distributed`` section."""
    rows = [_rank_row(coord, rank, coord.ranks.get(rank), parts.get(rank)) for rank in range(coord.world_size)]
    return {
        "world_size": coord.world_size,
        "backend": coord.backend,
        "launcher": coord.world.launcher,
        "timeout_s": coord.timeout_s,
        "hosts": sorted({r["host"] for r in rows if r["host"]}),
        "ranks": rows,
        "missing_ranks": [r for r in range(coord.world_size) if r not in parts],
        "total": {
            "channel": TOTAL,
            "of": [prefixed(r, c) for r, p in sorted(parts.items()) for c in p.device_channels],
        },
    }


def _rank_row(coord: Coordinator, rank: int, info: RankInfo | None, part: RankPart | None) -> dict[str, Any]:
    meta = part.result.meta if part is not None and part.result is not None else {}
    return {
        "rank": rank,
        "local_rank": info.local_rank if info else (part.local_rank if part else None),
        "host": info.host if info else (part.host if part else None),
        "pid": info.pid if info else None,
        "devices": info.devices if info else None,
        "gpus": [gpu for _source, gpu in info.gpus] if info else [],
        "clock_offset_s": info.clock_offset_s if info else None,
        "clock_offset_uncertainty_s": info.clock_uncertainty_s if info else None,
        "measured_clock_offset_s": info.measured_offset_s if info else None,
        "shared_clock": info.shared_clock if info else None,
        "status": part.status if part else "missing",
        "reason": part.reason if part else coord.lost.get(rank, "its part did not arrive"),
        "channels": [prefixed(rank, c) for c in meta.get("primary_channels", [])],
        "out": info.out if info else None,
        "exit_code": meta.get("exit_code"),
        "workload_info": (meta.get("workload") or {}).get("info"),
    }
