"""The part of a measurement that exists only with several ranks (torchrun, srun).

Every rank runs its own ``Measurement``; this module is what one of them does beyond a single
process, always through its ``Coordinator``: join the ranks and let rank 0 claim the run
directory, run only the per-process sources outside local rank 0, tell rank 0 what this rank
measures (rank 0 refuses a GPU that two ranks measure), and at the end send this rank's part to
rank 0, which merges the parts (``energyframe.ranks.merge``) and saves the one run directory.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.windows import WINDOW_COLUMNS
from ..errors import DistributedError, UsageError
from ..plugin import PowerSource
from ..ranks.coordinator import Coordinator, RankInfo
from ..ranks.world import boot_id, host_name, rank_devices
from ..results.result import COMPLETE, INCOMPLETE, RunResult
from .assemble import assemble, extra_files


class RankedRun:
    """One rank's share of a run of several ranks."""

    def __init__(self, m: Any) -> None:
        """``m``: this rank's ``Measurement`` (whose start and finish call this)."""
        self.m = m
        self.coordinator: Coordinator = m.coordinator
        #: the run directory this rank was given (rank 0's is the one used)
        self.given_out: Path | None = m.out

    def join(self, started: float) -> None:
        """Rank 0 claims the run directory and tells every rank; keep this rank's sources."""
        m, coord = self.m, self.coordinator
        m.out = coord.decide_out(m.out, m._claim)
        m.sources = sources_here(m.sources, coord.local_rank, m.notes)
        m.add_time("ranks_join", time.monotonic() - started)  # torch's import included
        if coord.is_root:
            m.describe(distributed={"world_size": coord.world_size, "launcher": coord.world.launcher})

    def started(self) -> None:
        """Every rank's sources delivered: start measuring together."""
        m, coord = self.m, self.coordinator
        with m.span("ranks_start"):
            coord.edge("start measuring (every rank's sources have delivered)")
            coord.after_start(self.info())
            if coord.is_root:
                check_ranks(coord, m.out, m.warn)

    def info(self) -> RankInfo:
        """What rank 0 learns about this rank when the run starts."""
        coord = self.coordinator
        return RankInfo(
            rank=coord.rank,
            local_rank=coord.local_rank,
            host=host_name(),
            boot_id=boot_id(),
            pid=os.getpid(),
            devices=rank_devices(coord.world),
            gpus=source_gpus(self.m.sources),
            out=str(self.given_out) if self.given_out is not None else None,
        )

    # -- the end ------------------------------------------------------------------------------
    def finish(self, status: str, reason: str | None) -> RunResult:
        """Send this rank's part to rank 0; rank 0 merges and saves the run. Rank 0 returns the
        whole run, the others their own part with the run's final status."""
        from ..ranks.merge import RankPart

        m, coord = self.m, self.coordinator
        local, status, reason = self._local(status, reason)
        files: dict[str, bytes] = {}
        if m.workload is not None and coord.root_out is not None:
            files = extra_files(local, m.workload, m.warn)
        part = RankPart(
            rank=coord.rank,
            local_rank=coord.local_rank,
            host=host_name(),
            status=status,
            reason=reason,
            result=local,
            extra_files=files,
            device_channels=self._device_channels(),
            work=dict(m.work),
            warnings=list(m.warnings),
        )
        with m.span("gather"):
            answer = coord.finish(part, reason if status != COMPLETE else None)
        try:
            result = self._as_root(answer) if coord.is_root else self._as_peer(local, answer)
        finally:
            coord.close()
        if result.status != COMPLETE and status == COMPLETE:
            m.rank_error = DistributedError(result.reason or "another rank did not complete the run")
        return result

    def _local(self, status: str, reason: str | None) -> tuple[RunResult, str, str | None]:
        m = self.m
        if m.recorder is not None and m.recorder.running:
            with m.span("stop_sources"):
                status, reason = m.stop_recording(status, reason)
            with m.span("integrate"):
                meta = m._meta(status, reason, ended=True)
                return assemble(m.recording(), meta, m.workload, m.aligner, m.warnings), status, reason
        if m.recorder is not None:  # it failed before measuring: its part says why
            m.recorder.stop()
        meta = m._meta(status, reason, ended=True)
        return RunResult(meta, pd.DataFrame(columns=WINDOW_COLUMNS), pd.DataFrame(), ()), status, reason

    def _as_root(self, parts: Mapping[int, Any]) -> RunResult:
        """Rank 0: merge and save; every rank waits for the answer, sent even when saving failed."""
        m, coord = self.m, self.coordinator
        told = {"status": INCOMPLETE, "reason": "rank 0 could not save the run", "out": None}
        try:
            result = self._merge_and_save(parts)
            told = {"status": result.status, "reason": result.reason, "out": str(m.out) if m.out else None}
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

    def _device_channels(self) -> list[str]:
        """This rank's own-device channels: the primary integrable channels of its first
        per-process source (nvml's ``gpuN``), which the run's ``total`` adds up."""
        m = self.m
        if m.recorder is None:
            return []
        for source in m.sources:
            if getattr(type(source), "PER_PROCESS", False):
                channels = m.recorder.source_channels.get(source.name, [])
                return [c.name for c in channels if c.primary and c.integrable]
        return []

    def _merge_and_save(self, parts: Mapping[int, Any]) -> RunResult:
        """Rank 0: the whole run from every rank's part, saved into the run directory."""
        from ..ranks.merge import merge_parts, run_status

        m, coord = self.m, self.coordinator
        status, reason = run_status(parts, coord.world_size, coord.end_message)
        if status != COMPLETE and not coord.end_message and coord.lost:
            lost = "; ".join(f"rank {r}: {why}" for r, why in sorted(coord.lost.items()))
            reason = f"{reason} ({lost})"
        offsets = {r: info.clock_offset_s for r, info in coord.ranks.items()}
        with m.span("integrate"):
            result = merge_parts(
                parts,
                offsets,
                world_size=coord.world_size,
                status=status,
                reason=reason,
                distributed=distributed_meta(coord, parts),
            )
        for warning in result.warnings:
            m.warn(warning)
        extra = {f"rank{rank}": part.extra_files for rank, part in sorted(parts.items())}
        return m.save(result, extra, own_files=False)


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


def distributed_meta(coord: Coordinator, parts: Mapping[int, Any]) -> dict[str, Any]:
    """run.json's ``distributed`` section."""
    from ..ranks.merge import TOTAL, prefixed

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


def _rank_row(coord: Coordinator, rank: int, info: RankInfo | None, part: Any) -> dict[str, Any]:
    from ..ranks.merge import prefixed

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
