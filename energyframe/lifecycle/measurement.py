"""``ef.measure()``: named windows around the user's own code, with energy from every source.

    with ef.measure(power=["nvml"]) as m:
        with m.window("train-step", iterations=100):
            ...
    print(m.result.table())

The orchestrator (``ef.run``) measures workloads through the same ``Measurement``. This module
owns the live part of a run: the run directory's claim and status, the sources (through the
``Recorder``), the windows and their journal. Turning what was recorded into a result is
``assemble``'s straight pipeline.

Under torchrun or srun every rank runs its own ``Measurement``; its ``coordinator``
(``energyframe.ranks.coordinator``) agrees every window edge with the other ranks, and at the end each
rank's part goes to rank 0, which merges and saves the run (``energyframe.ranks.merge``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.clock import ClockModel
from ..core.windows import WINDOW_COLUMNS, WindowRecord
from ..errors import (
    DistributedError,
    EnergyFrameError,
    PowerSourceError,
    RunInterrupted,
    StoreError,
    UsageError,
)
from ..kit.registry import PowerArg, resolve_power
from ..plugin import PowerSource, Workload
from ..ranks.coordinator import Coordinator, RankInfo, boot_id, connect, host_name, rank_devices
from ..results.result import COMPLETE, INCOMPLETE, RunResult
from ..results.store import (
    RUN_JSON,
    WINDOWS_PARTIAL,
    WindowJournal,
    claim_run_dir,
    write_json,
    write_status_json,
)
from .assemble import Recording, TimeAligner, assemble, extra_files, run_meta, save, save_files, utc_now
from .recorder import Recorder
from .sync import resolve_sync
from .timings import Timings

log = logging.getLogger("energyframe")

#: run.json's reason while the run is going; ``energyframe show`` recognises it
RUNNING = "running (pid {pid}); if this stays, the process died"


@dataclass
class WindowHandle:
    """An open window; set ``iterations`` before it closes if the count is known only then."""

    name: str
    iterations: int
    start_s: float


class Measurement:
    """Power sources running in the background and the windows measured against them.

    Args:
        sources: power sources, not started (see ``registry.resolve_power``).
        out: run directory to save into (claimed at start; samples and windows are journaled
            there while the run goes); ``None`` keeps everything in memory.
        sync: how to wait for the device at window edges: ``"auto"`` (torch CUDA when in
            use), ``None``, or a callable.
        aligner: per-channel time corrections computed after the run: ``"auto"`` aligns the
            channels of unknown timing (wall meters) against the finest GPU or CPU channel;
            ``None`` leaves every timestamp as recorded; or a callable.
        meta: extra run.json fields (workload, config, reporters).
        notes: what resolving the power sources found (kept in run.json).
        idle_s: measure every channel's idle power this long first, for dynamic energy. Units: s.
        workload: the workload whose phases are measured (its derived tables and extra files
            are produced when the run finishes).
        coordinator: how this process measures with others: ``"auto"`` joins the ranks a
            launcher (torchrun, srun) started, or the process group the caller initialised;
            ``None``: alone; or a ``Coordinator``. With several ranks every window edge is agreed
            (a device sync, then every rank), and rank 0 saves the whole run in ``out``.
        dist_timeout_s: with several ranks, how long any exchange waits for a peer before the
            others stop without it (``None``: 1800 s). Units: s.
    """

    def __init__(
        self,
        sources: Sequence[PowerSource] = (),
        *,
        out: Path | str | None = None,
        sync: str | Callable[[], None] | None = "auto",
        aligner: TimeAligner | str | None = "auto",
        meta: Mapping[str, Any] | None = None,
        notes: Sequence[str] = (),
        idle_s: float = 0.0,
        workload: Workload | None = None,
        coordinator: Coordinator | str | None = "auto",
        dist_timeout_s: float | None = None,
    ) -> None:
        self.sources = list(sources)
        self.out = Path(out) if out is not None else None
        self._coordinator_arg = coordinator
        self.dist_timeout_s = dist_timeout_s
        #: this process among the ranks (the identity until ``start`` joins them)
        self.coordinator: Coordinator = Coordinator()
        #: the error every rank raises when the run ended because of another rank
        self.rank_error: DistributedError | None = None
        self.sync = resolve_sync(sync)
        self.aligner = aligner
        self.meta: dict[str, Any] = dict(meta or {})
        self.warnings: list[str] = []
        self.notes = list(notes)
        self.idle_s = idle_s
        self.workload = workload
        self.clock: ClockModel | None = None
        self.recorder: Recorder | None = None
        self.records: list[WindowRecord] = []
        self.work: dict[str, dict[str, float]] = {}
        self._idle_window: WindowRecord | None = None
        self._open: dict[str, list[WindowHandle]] = {}
        self._trials: dict[str, int] = {}
        self._result: RunResult | None = None
        self._started_at: str | None = None
        self._journal: WindowJournal | None = None
        #: where the run's time goes (run.json's ``timings_s``)
        self.timings = Timings()

    # -- lifecycle -------------------------------------------------------------------------
    def warn(self, message: str) -> None:
        """Record a problem that does not stop the run (shown now, and kept in run.json; with
        several ranks, rank 0 shows every rank's)."""
        if message not in self.warnings:
            self.warnings.append(message)
            if self.coordinator.is_root:
                log.warning("warning: %s", message)

    def start(self) -> Measurement:
        """Claim the run directory, start the sources, wait until each channel has delivered.

        Any failure here is written to run.json (status ``incomplete`` and the reason) before
        it is raised, so a run directory never keeps saying "running" for a run that ended.
        With several ranks, rank 0 claims the directory; every rank starts its sources (the
        machine-wide ones in local rank 0 only), and the run starts once all have.
        """
        started = time.monotonic()
        coord = self.coordinator = connect(self._coordinator_arg, self.dist_timeout_s)
        if coord.distributed:
            self._given_out = self.out
            self.out = coord.decide_out(self.out, claim_run_dir)
            self.sources = self._sources_here(self.sources)
            self.timings.add("ranks_join", time.monotonic() - started)  # torch's import included
            if coord.is_root:
                self.meta["distributed"] = {"world_size": coord.world_size, "launcher": coord.world.launcher}
        elif self.out is not None:
            claim_run_dir(self.out)
        self.clock = ClockModel()
        self._started_at = utc_now()
        if self.out is not None:
            self._write_status(INCOMPLETE, RUNNING.format(pid=os.getpid()))
        try:
            with self.timings.span("sources_start"):
                self.recorder = Recorder(
                    self.sources,
                    self.clock,
                    self.out,
                    warn=self.warn,
                    devices=rank_devices(coord.world),
                    rank=coord.rank,
                    local_rank=coord.local_rank,
                )
                self.recorder.start()
                if self.out is not None:  # now with the channels, so that a dead run can be rebuilt
                    self._journal = WindowJournal(self.out / WINDOWS_PARTIAL)
                    self._write_status(INCOMPLETE, RUNNING.format(pid=os.getpid()))
                self._wait_for_first_samples()
            if coord.distributed:
                with self.timings.span("ranks_start"):
                    coord.edge("start measuring (every rank's sources have delivered)")
                    coord.after_start(self._rank_info())
                    if coord.is_root:
                        self._check_ranks()
            if self.idle_s > 0:
                self.measure_idle(self.idle_s)
        except BaseException as e:
            self._abort(e)
            raise
        return self

    # -- several ranks -----------------------------------------------------------------------
    def _sources_here(self, sources: Sequence[PowerSource]) -> list[PowerSource]:
        """The sources this rank runs: every per-process one; a machine-wide one (a wall meter,
        RAPL) only in local rank 0, so that no machine is measured twice."""
        if self.coordinator.local_rank == 0:
            return list(sources)
        kept = []
        for source in sources:
            if getattr(type(source), "PER_PROCESS", False):
                kept.append(source)
            else:
                self.notes.append(
                    f"power source {source.name!r} measures the whole machine: it runs in local rank 0 only"
                )
        return kept

    def _rank_info(self) -> RankInfo:
        """What rank 0 learns about this rank when the run starts."""
        coord = self.coordinator
        gpus: list[tuple[str, str]] = []
        for source in self.sources:
            try:
                described = dict(source.info())
            except Exception:  # a plugin's description must never stop the run
                continue
            for gpu in described.get("gpus") or []:
                ident = gpu.get("uuid") if isinstance(gpu, Mapping) else gpu
                if ident:
                    gpus.append((source.name, str(ident)))
        given = getattr(self, "_given_out", None)
        return RankInfo(
            rank=coord.rank,
            local_rank=coord.local_rank,
            host=host_name(),
            boot_id=boot_id(),
            pid=os.getpid(),
            devices=rank_devices(coord.world),
            gpus=gpus,
            out=str(given) if given is not None else None,
        )

    def _check_ranks(self) -> None:
        """Rank 0: refuse a GPU that two ranks measure (it would be counted twice); say when the
        ranks were given other run directories than rank 0's."""
        coord = self.coordinator
        ranks = getattr(coord, "ranks", {})
        seen: dict[str, tuple[int, str]] = {}
        for rank, info in sorted(ranks.items()):
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
        others = {r: i.out for r, i in ranks.items() if r and i.out is not None and i.out != str(self.out)}
        if others:
            named = ", ".join(f"rank {r}: {out}" for r, out in sorted(others.items()))
            self.warn(
                f"the ranks were given other run directories than rank 0's ({named}); the run is saved "
                f"once, by rank 0, in {self.out}"
            )

    def _wait_for_first_samples(self) -> None:
        assert self.recorder is not None
        recorder = self.recorder
        missing = recorder.wait_for_samples(None, recorder.coverage_timeout_s() + 2.0)
        if recorder.failure is not None:
            raise recorder.failure
        if missing:
            raise PowerSourceError(
                "no samples arrived from channel(s) " + ", ".join(missing) + " after the sources started"
            )

    def _abort(self, error: BaseException) -> None:
        """The run could not start: stop what started, and say why in run.json."""
        reason = describe_exception(error, self.recorder)
        if self.coordinator.distributed or (self.recorder is not None and self.recorder.running):
            try:
                self.finish(INCOMPLETE, reason)
                return
            except Exception as e:  # saving failed too: the status below is the last word
                reason = f"{reason}; saving failed: {e}"
        if self.out is not None:
            self._write_status(INCOMPLETE, reason, ended=True)

    def __enter__(self) -> Measurement:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._result is not None or self.recorder is None:
            return
        if exc is None:
            self.finish()
            if self.rank_error is not None:  # the block ended here, but another rank failed
                raise self.rank_error
        else:
            self.finish(INCOMPLETE, describe_exception(exc, self.recorder))

    # -- windows ---------------------------------------------------------------------------
    def measure_idle(self, duration_s: float) -> None:
        """Record a window of ``duration_s`` with nothing running; each channel's power in it
        becomes the idle baseline that dynamic energy subtracts. Units: s."""
        self.sync()
        self.coordinator.edge("measure the idle baseline")
        start = time.monotonic()
        time.sleep(duration_s)
        self.coordinator.edge("end the idle baseline")
        self._idle_window = WindowRecord("(idle)", 0, start, time.monotonic(), 1)
        self.timings.add("idle_baseline", self._idle_window.duration_s)

    def begin_window(
        self, name: str, iterations: int = 1, sync: Callable[[], None] | None = None
    ) -> WindowHandle:
        """Sync the device, then open a window named ``name`` (repeat names for trials).

        ``sync`` overrides the measurement's device sync for this window."""
        self._check_running()
        (sync or self.sync)()
        self.coordinator.edge(f"open window {name!r}")
        handle = WindowHandle(name, iterations, time.monotonic())
        self._open.setdefault(name, []).append(handle)
        return handle

    def end_window(
        self, name: str, iterations: int | None = None, sync: Callable[[], None] | None = None
    ) -> WindowRecord:
        """Sync the device, then close the innermost open window named ``name``."""
        (sync or self.sync)()
        stack = self._open.get(name)
        if not stack:
            raise UsageError(f"no open window named {name!r}")
        self.coordinator.edge(f"close window {name!r}")
        end = time.monotonic()
        handle = stack.pop()
        if iterations is not None:
            handle.iterations = iterations
        trial = self._trials.get(name, 0)
        self._trials[name] = trial + 1
        record = WindowRecord(name, trial, handle.start_s, end, handle.iterations)
        self.records.append(record)
        if self._journal is not None and self.clock is not None:
            self._journal.closed(
                name, trial, self.clock.to_unix(record.start_s), self.clock.to_unix(end), record.iterations
            )
        if self.recorder is not None and self.recorder.failure is not None:
            raise self.recorder.failure
        return record

    def discard_window(self, record: WindowRecord) -> None:
        """Forget the last closed window of its name (the orchestrator redoes one that came out
        too short); its trial number is given to the next window of that name."""
        if not self.records or self.records[-1] is not record:
            raise UsageError("only the last closed window can be discarded")
        self.records.pop()
        self._trials[record.phase] -= 1
        if self._journal is not None:
            self._journal.discarded(record.phase, record.trial)

    @contextmanager
    def window(self, name: str, iterations: int = 1):
        """``with m.window("step", iterations=100):`` - synced at both edges."""
        handle = self.begin_window(name, iterations)
        try:
            yield handle
        except BaseException:
            self._open[name].remove(handle)  # a window whose work failed measures nothing
            raise
        self.end_window(name)

    def set_work(self, name: str, work: Mapping[str, float]) -> None:
        """Work per iteration of window ``name`` (e.g. ``{"tokens": 128}``)."""
        self.work[name] = dict(work)

    def _check_running(self) -> None:
        if self.recorder is None:
            raise UsageError("the measurement has not started; use it as a context manager")
        if self._result is not None:
            raise UsageError("the measurement has finished")

    # -- results ---------------------------------------------------------------------------
    @property
    def result(self) -> RunResult:
        if self._result is None:
            raise UsageError("the measurement is still running; read .result after the with-block")
        return self._result

    def finish(self, status: str = COMPLETE, reason: str | None = None) -> RunResult:
        """Wait for samples past the last window, stop the sources, integrate, save.

        With several ranks every rank integrates its own part and sends it to rank 0, which
        merges and saves the run (``energyframe.ranks.merge``); rank 0 returns the whole run, the
        others their own part. A run that ended because of another rank sets ``rank_error``."""
        if self._result is not None:
            return self._result
        if self.coordinator.distributed:
            return self._finish_ranks(status, reason)
        assert self.recorder is not None and self.clock is not None
        with self.timings.span("stop_sources"):
            status, reason = self._stop_recording(status, reason)
        with self.timings.span("integrate"):
            recording = self._recording()
            meta = self._meta(status, reason, ended=True)
            self._result = assemble(recording, meta, self.workload, self.aligner, self.warnings)
        if self.out is None:
            self._result = replace(self._result, meta={**self._result.meta, "timings_s": self.timings.to_json()})
        if self.out is not None:
            try:
                with self.timings.span("save"):
                    save(self._result, self.out, self.workload, self.warn)
                self._result = replace(self._result, meta={**self._result.meta, "timings_s": self.timings.to_json()})
                write_json(self.out / RUN_JSON, self._result.to_json())
            except StoreError as e:
                # the journals stay: what was recorded is still on disk, and run.json says so
                if self._journal is not None:
                    self._journal.close()
                reason = f"{reason}; then " if reason else ""
                self._write_status(INCOMPLETE, f"{reason}the run could not be saved: {e}", ended=True)
                raise
            self.recorder.store.discard_partial()
            if self._journal is not None:
                self._journal.remove()
        return self._result

    def _stop_recording(self, status: str, reason: str | None) -> tuple[str, str | None]:
        """Wait until the last window is covered, stop the sources; the status that results."""
        assert self.recorder is not None and self.clock is not None
        recorder = self.recorder
        last_end = max((r.end_s for r in self.records), default=None)
        if last_end is not None:
            try:
                missing = recorder.wait_for_samples(last_end, recorder.coverage_timeout_s())
            except KeyboardInterrupt:
                missing = []
                status, reason = INCOMPLETE, reason or "interrupted by SIGINT while finishing"
            for name in missing:
                self.warn(f"channel {name!r} delivered no sample after the last window closed")
        recorder.stop()
        self.clock.finish()
        if recorder.failure is not None and status == COMPLETE:
            status, reason = INCOMPLETE, describe_exception(recorder.failure, recorder)
        drift = self.clock.wall_drift_s
        if drift is not None and abs(drift) > 0.01:
            self.warn(
                f"the wall clock moved {drift * 1e3:+.1f} ms against the monotonic clock during the "
                "run; wall-stamped samples (NVML, nvidia-smi) may be misplaced by up to that much"
            )
        return status, reason

    def _recording(self) -> Recording:
        assert self.recorder is not None and self.clock is not None
        store = self.recorder.store
        return Recording(
            clock=self.clock,
            channels=dict(store.channels),
            channel_source=dict(store.channel_source),
            series=store.all_series(),
            samples=store.to_frame(),
            rejected=store.rejected_times(),
            rejected_counts=store.rejected_json(),
            records=list(self.records),
            idle_window=self._idle_window,
            work=dict(self.work),
            sources=list(self.sources),
        )

    def _finish_ranks(self, status: str, reason: str | None) -> RunResult:
        from ..ranks.merge import RankPart

        coord = self.coordinator
        if self.recorder is not None and self.recorder.running:
            with self.timings.span("stop_sources"):
                status, reason = self._stop_recording(status, reason)
            with self.timings.span("integrate"):
                local = assemble(
                    self._recording(), self._meta(status, reason, ended=True), self.workload, self.aligner,
                    self.warnings,
                )
        else:  # it failed before measuring: its part says why
            if self.recorder is not None:
                self.recorder.stop()
            meta = self._meta(status, reason, ended=True)
            local = RunResult(meta, pd.DataFrame(columns=WINDOW_COLUMNS), pd.DataFrame(), ())
        files: dict[str, bytes] = {}
        if self.workload is not None and getattr(coord, "root_out", None) is not None:
            files = extra_files(local, self.workload, self.warn)
        part = RankPart(
            rank=coord.rank,
            local_rank=coord.local_rank,
            host=host_name(),
            status=status,
            reason=reason,
            result=local,
            extra_files=files,
            device_channels=self._device_channels(),
            work=dict(self.work),
            warnings=list(self.warnings),
        )
        with self.timings.span("gather"):
            answer = coord.finish(part, reason if status != COMPLETE else None)
        try:
            if coord.is_root:
                # every rank waits for this answer: it is sent even when saving failed
                told = {"status": INCOMPLETE, "reason": "rank 0 could not save the run", "out": None}
                try:
                    self._result = self._merge_and_save(answer)
                    final_status, final_reason = self._result.status, self._result.reason
                    told = {"status": final_status, "reason": final_reason, "out": str(self.out) if self.out else None}
                finally:
                    coord.acknowledge(told, sorted(answer))
            else:
                if answer is None:
                    final_status, final_reason = INCOMPLETE, coord.end_message or (
                        f"rank 0 did not answer: {coord.lost.get(0, 'no answer')}"
                    )
                    out = None
                else:
                    final_status, final_reason, out = answer["status"], answer["reason"], answer["out"]
                self._result = replace(
                    local,
                    meta={
                        **local.meta,
                        "status": final_status,
                        "reason": final_reason,
                        "distributed": {
                            "rank": coord.rank,
                            "world_size": coord.world_size,
                            "run_dir": out,
                            "part": "this rank's own channels and windows; rank 0 saved the whole run",
                        },
                    },
                )
        finally:
            coord.close()
        if final_status != COMPLETE and status == COMPLETE:
            self.rank_error = DistributedError(final_reason or "another rank did not complete the run")
        return self._result

    def _device_channels(self) -> list[str]:
        """This rank's own-device channels: the primary integrable channels of its first
        per-process source (nvml's ``gpuN``), which the run's ``total`` adds up."""
        if self.recorder is None:
            return []
        for source in self.sources:
            if getattr(type(source), "PER_PROCESS", False):
                channels = self.recorder.source_channels.get(source.name, [])
                return [c.name for c in channels if c.primary and c.integrable]
        return []

    def _merge_and_save(self, parts: Mapping[int, Any]) -> RunResult:
        """Rank 0: the whole run from every rank's part, saved into the run directory."""
        from ..ranks.merge import merge_parts, run_status

        coord = self.coordinator
        status, reason = run_status(parts, coord.world_size, coord.end_message)
        if status != COMPLETE and not coord.end_message and coord.lost:
            lost = "; ".join(f"rank {r}: {why}" for r, why in sorted(coord.lost.items()))
            reason = f"{reason} ({lost})"
        ranks = getattr(coord, "ranks", {})
        offsets = {r: info.clock_offset_s for r, info in ranks.items()}
        with self.timings.span("integrate"):
            result = merge_parts(
                parts,
                offsets,
                world_size=coord.world_size,
                status=status,
                reason=reason,
                distributed=self._distributed_meta(parts),
            )
        for warning in result.warnings:
            if warning not in self.warnings:
                self.warnings.append(warning)
                log.warning("warning: %s", warning)
        result = replace(result, meta={**result.meta, "timings_s": self.timings.to_json()})
        if self.out is None:
            return result
        try:
            with self.timings.span("save"):
                result.save(self.out)
                for rank, part in sorted(parts.items()):
                    save_files(self.out / f"rank{rank}", part.extra_files, self.warn, label=f"rank {rank}'s workload")
            result = replace(result, meta={**result.meta, "timings_s": self.timings.to_json()})
            write_json(self.out / RUN_JSON, result.to_json())
        except StoreError as e:
            if self._journal is not None:
                self._journal.close()
            self._write_status(INCOMPLETE, f"{reason + '; then ' if reason else ''}the run could not be saved: {e}", True)
            raise
        if self.recorder is not None:
            self.recorder.store.discard_partial()
        if self._journal is not None:
            self._journal.remove()
        return result

    def _distributed_meta(self, parts: Mapping[int, Any]) -> dict[str, Any]:
        """run.json's ``distributed`` section."""
        from ..ranks.merge import TOTAL, prefixed

        coord = self.coordinator
        ranks = getattr(coord, "ranks", {})
        rows = []
        for rank in range(coord.world_size):
            info = ranks.get(rank)
            part = parts.get(rank)
            meta = part.result.meta if part is not None and part.result is not None else {}
            rows.append(
                {
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
            )
        return {
            "world_size": coord.world_size,
            "backend": getattr(coord, "backend", None),
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

    def _meta(self, status: str, reason: str | None, ended: bool = False) -> dict[str, Any]:
        assert self.clock is not None
        return run_meta(
            status=status,
            reason=reason,
            started_at=self._started_at,
            ended=ended,
            clock=self.clock,
            sources=self.sources,
            source_channels=self.recorder.source_channels if self.recorder else {},
            extra=self.meta,
            notes=self.notes,
            warnings=self.warnings,
        )

    def _write_status(self, status: str, reason: str | None, ended: bool = False) -> None:
        assert self.out is not None
        write_status_json(self.out / RUN_JSON, self._meta(status, reason, ended))


def describe_exception(exc: BaseException, recorder: Recorder | None) -> str:
    """The ``reason`` of an incomplete run, said once."""
    if recorder is not None and recorder.failure is not None:
        return f"power source {recorder.failed_source!r} failed: {recorder.failure}"
    if isinstance(exc, (RunInterrupted, EnergyFrameError)):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted by SIGINT"
    return f"{type(exc).__name__}: {exc}"


def measure(
    power: str | Sequence[PowerArg] | None = "auto",
    *,
    out: Path | str | None = None,
    sync: str | Callable[[], None] | None = "auto",
    idle_s: float = 0.0,
    aligner: TimeAligner | str | None = "auto",
    coordinator: Coordinator | str | None = "auto",
    dist_timeout_s: float | None = None,
) -> Measurement:
    """Start measuring: ``with ef.measure(power=["nvml"]) as m: ...``.

    Args:
        power: ``"auto"`` (what this machine has), ``"none"``/``None``/``[]`` (timing only),
            or a list of specs (``"nvml:gpus=0"``) or ``PowerSource`` instances.
        out: save the run there when the block ends (samples are logged there while it runs).
        sync: device sync at window edges: ``"auto"``, ``None`` or a callable.
        idle_s: measure every channel's idle power for this long first, for dynamic energy.
        aligner: ``"auto"`` (align wall meters), ``None``, or a callable.
        coordinator: under torchrun or srun (``"auto"``), every rank measures its own GPU, the
            ranks agree every window edge, and rank 0 saves one run in ``out``; ``None``: alone.
        dist_timeout_s: with several ranks, how long to wait for a silent peer. Units: s.
    """
    sources, notes = resolve_power(power)
    return Measurement(
        sources,
        out=out,
        sync=sync,
        aligner=aligner,
        notes=notes,
        idle_s=idle_s,
        coordinator=coordinator,
        dist_timeout_s=dist_timeout_s,
    )



def _fresh(power: str | Sequence[PowerArg] | None) -> str | list[PowerArg] | None:
    """Power for one more measurement: a source instance (which starts only once) is rebuilt
    from its class and options; specs are used as they are."""
    if power is None or isinstance(power, str):
        return power
    fresh: list[PowerArg] = []
    for item in power:
        if isinstance(item, PowerSource):
            try:
                item = type(item)(name=item.name, **item.options)
            except TypeError as e:
                raise UsageError(
                    f"power source {item.name!r} cannot be rebuilt for another call ({e}); give "
                    "ef.measured a spec such as 'nvml' instead of an instance"
                ) from e
        fresh.append(item)
    return fresh


def measured(
    func: Callable[..., Any] | None = None,
    *,
    power: str | Sequence[PowerArg] | None = "auto",
    out: Path | str | None = None,
    name: str | None = None,
    iterations: int = 1,
    sync: str | Callable[[], None] | None = "auto",
) -> Any:
    """Measure every call of a function as one window (CodeCarbon's ``@track_emissions``).

        @ef.measured(power="auto", out="runs")
        def train_epoch(): ...

        train_epoch()                        # measured; its run saved under runs/
        print(train_epoch.last_result.table())

    Args:
        power: as for ``measure``; resolved at each call. Specs are best: a source instance runs
            once, so it is rebuilt from its options for each call.
        out: a folder; each call is saved in its own run directory inside it
            (``<UTC time>-<name>``). ``None`` keeps results in memory only.
        name: the window's name (the function's name by default).
        iterations: iterations one call runs, for per-iteration figures.
        sync: device sync at the window's edges.

    The function's return value and exceptions pass through; a call that raised is saved as
    ``incomplete``. The last call's ``RunResult`` is the wrapper's ``last_result``.
    """
    import functools

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        label = str(name or getattr(fn, "__name__", "call"))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from ..results.store import default_run_dir

            run_dir = default_run_dir(label, root=out) if out is not None else None
            m = measure(_fresh(power), out=run_dir, sync=sync)
            try:
                with m:
                    with m.window(label, iterations=iterations):
                        value = fn(*args, **kwargs)
            finally:
                if m._result is not None:
                    wrapper.last_result = m._result  # type: ignore[attr-defined]
            return value

        wrapper.last_result = None  # type: ignore[attr-defined]
        return wrapper

    return decorate(func) if func is not None else decorate


__all__ = ["Measurement", "WindowHandle", "describe_exception", "measure", "measured"]
