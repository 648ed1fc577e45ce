"""The run lifecycle behind ``energyframe run`` and ``ef.run``: what starts and ends a run, and
which error it ends with.

validate every plugin and option -> start sources -> measure the workload's phases
(``phases.py``, planned by ``planning.py``, with ``--precision`` by ``precision.py``) -> stop
sources -> integrate every channel over every window -> save -> report. A SIGTERM is turned into
an interruption; whatever ended the run is raised once the run is saved, carrying the result.

Nothing here knows about a vendor: sources, workloads and reporters are plugins. With several
ranks (torchrun, srun) every decision that sets how many steps run is agreed through the
measurement's coordinator, so that every rank runs the same steps.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import EnergyFrameError, PowerSourceError, RunInterrupted, WorkloadError
from ..kit import registry
from ..kit.registry import PowerArg, resolve_power
from ..live.listener import LiveListener
from ..options import Spec
from ..plugin import Reporter, Workload
from ..ranks.coordinator import Coordinator
from ..ranks.world import export_launcher_env
from ..results.provenance import plugin_record, workload_record
from ..results.result import COMPLETE, INCOMPLETE, RunResult
from .config import RunConfig, RunSettings
from .measurement import Measurement
from .phases import measure_workload
from .progress import RunProgress
from .reporting import check_reporter_errors, run_reporters

log = logging.getLogger("energyframe")


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised as a KeyboardInterrupt so that no ``except Exception`` swallows it (logging's
    ``emit`` does, and a signal can arrive while a progress line is written)."""


class _Signals:
    """Turn SIGTERM into ``RunInterrupted`` while a run is going (main thread only). Once
    ``holding`` (a run of several ranks being saved and reported), a SIGTERM is only noted:
    ``held`` says whether one came."""

    def __enter__(self) -> _Signals:
        self.previous = None
        self.holding = False
        self.held = False
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def _on_term(self, signum, frame) -> None:
        if self.holding:
            self.held = True
            return
        raise _Terminated("terminated by SIGTERM")

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def resolve_config(
    workload: Workload, settings: RunSettings | RunConfig | None, warn: Callable[[str], None]
) -> RunConfig:
    """The config that runs: the user's settings over the workload's preferences over defaults.

    A ``RunConfig`` is already decided and runs as it is; when the workload would have preferred
    other values, say so, since older code passed ``RunConfig`` where ``RunSettings`` is meant.
    """
    preferred = workload.run_defaults()
    if isinstance(settings, RunConfig):
        ignored = {k: v for k, v in preferred.items() if getattr(settings, k) != v}
        if ignored:
            warn(
                f"a resolved RunConfig was given, so workload {workload.name!r}'s preferred settings "
                f"{ignored} were not applied; pass settings=ef.RunSettings(...) to let them apply"
            )
        return settings
    return (settings or RunSettings()).resolve(preferred)


def run(
    workload: str | Spec | Workload,
    power: str | Sequence[PowerArg] = "auto",
    reporters: Sequence[str | Spec | Reporter] = (),
    out: Path | str | None = None,
    config: None = None,
    align: bool = True,
    *,
    settings: RunSettings | RunConfig | None = None,
    progress: bool | None = None,
    dist_timeout_s: float | None = None,
    coordinator: Coordinator | str | None = "auto",
    reporter_errors: str = "fail",
    listeners: Sequence[LiveListener] = (),
) -> RunResult:
    """Measure a workload: what ``energyframe run`` does.

    Args:
        workload: a spec (``"cpu-matmul:sizes=256"``) or a ``Workload`` instance.
        power: ``"auto"``, ``"none"`` (timing only), or specs / ``PowerSource`` instances.
        reporters: reporter specs or instances, called with the finished result (none by default:
            from Python, ``print(result.table())`` shows the table; ``["console"]`` prints it as
            the command line does).
        out: run directory (``None``: keep the result in memory only).
        config: removed (the old name of ``settings``): giving it raises ``TypeError``.
        align: estimate wall meters' lag against the run's GPU or CPU power and correct it.
        settings: ``RunSettings`` (trials, window length, warm-up, cool-down, idle baseline,
            guard bands, pulses), resolved against the workload's preferences; or a ``RunConfig``
            that runs exactly as given.
        progress: progress bars on stderr; ``None``: when stderr is a terminal and logging is
            not quieter than INFO.
        dist_timeout_s: under torchrun or srun, how long a rank waits for a silent peer before
            the others stop without it (default 1800 s). Units: s.
        coordinator: ``"auto"`` (the ranks a launcher started, else one process), ``None`` (one
            process), or a ``Coordinator``.
        reporter_errors: ``"fail"``: a reporter that raises or hangs fails the run
            (``ReporterError``, after the run was saved); ``"warn"``: it is only warned about.
        listeners: live subscribers (``energyframe.live``: the Prometheus exporter's tracker),
            given every reading while the run goes.

    Under torchrun or srun every rank calls ``run`` with the same arguments: each measures its
    own GPU, the ranks agree every window edge, and rank 0 saves one run directory (its
    ``out``) and runs the reporters; rank 0 returns the whole run, the others their own part.

    Raises:
        UsageError: a bad plugin name or option, before anything starts.
        RunInterrupted: SIGINT or SIGTERM; the run was saved with status ``incomplete``.
        EnergyFrameError: a source or the workload failed; the run was saved as incomplete.
        ReporterError: a reporter failed (``reporter_errors="fail"``); the run was saved.
        Each raised error carries the saved ``RunResult`` as ``error.result``.

    Example::

        result = ef.run("cpu-matmul:sizes=256", power="none", reporters=[], settings=ef.RunSettings(trials=3))
    """
    if config is not None:  # in its old place, so that settings given there are never taken for align
        raise TypeError("ef.run() takes no config= since 0.x: say settings=ef.RunSettings(...)")
    export_launcher_env()  # under srun, the RANK/WORLD_SIZE environment torch and workloads read
    # validate every plugin and option before anything starts
    the_workload = registry.create(registry.WORKLOADS, workload)
    assert isinstance(the_workload, Workload)
    the_reporters = [r for r in registry.create_all(registry.REPORTERS, list(reporters)) if isinstance(r, Reporter)]
    check_reporter_errors(reporter_errors)
    sources, notes = resolve_power(power)
    early_warnings: list[str] = []
    resolved = resolve_config(the_workload, settings, early_warnings.append)
    meta = {
        "workload": plugin_record(the_workload),
        "reporters": [plugin_record(r) for r in the_reporters],
        "config": resolved.to_json(),
    }
    m = Measurement(
        sources,
        out=out,
        sync=None,
        meta=meta,
        notes=notes,
        aligner="auto" if align else None,
        workload=the_workload,
        coordinator=coordinator,
        dist_timeout_s=dist_timeout_s,
        listeners=listeners,
    )
    for warning in early_warnings:
        m.warn(warning)
    error: BaseException | None = None
    status, reason = COMPLETE, None
    with _Signals() as signals:
        _start(m)
        root = m.coordinator.is_root
        try:
            with RunProgress(progress if root else False) as bars:
                measure_workload(m, the_workload, resolved, bars)
        except (Exception, KeyboardInterrupt, SystemExit) as e:
            # several ranks: a launcher stops every rank once one exits; rank 0 saves regardless
            signals.holding = m.coordinator.distributed
            error = _stopped_by(e)
            status, reason = INCOMPLETE, m.describe_failure(error)
        signals.holding = m.coordinator.distributed
        m.describe(workload=workload_record(the_workload), exit_code=the_workload.exit_code)
        try:
            result = m.finish(status, reason)
        except KeyboardInterrupt:  # a second Ctrl-C while saving: stop trying to be neat
            raise RunInterrupted("interrupted by SIGINT while saving") from None
        reporter_error: EnergyFrameError | None = None
        try:
            run_reporters(the_reporters if root else (), result, m.out, reporter_errors)
        except EnergyFrameError as e:  # the run is saved; the run's own error comes first
            reporter_error = e
    error = error or _late_error(m, signals.held, result)
    if error is not None and reporter_error is not None:
        log.warning("warning: %s", reporter_error)
    error = error or reporter_error
    if error is not None:
        raise _as_run_error(error, result, m.source_failure) from error
    return result


def _late_error(m: Measurement, sigterm_held: bool, result: RunResult) -> EnergyFrameError | None:
    """What ended the run after the phases: another rank, a SIGTERM held while saving, or a
    source that stalled or failed after the last window. An incomplete run never exits 0."""
    if m.rank_error is not None:
        return m.rank_error
    if sigterm_held:
        return RunInterrupted("terminated by SIGTERM (after the run was saved)")
    if result.status != COMPLETE:
        return EnergyFrameError(f"run incomplete: {result.reason or 'no reason recorded'}")
    return None


def _start(m: Measurement) -> None:
    """Start the measurement; a Ctrl-C while the sources start is an interruption (exit 130),
    like one later (the measurement has written why into run.json)."""
    try:
        m.start()
    except KeyboardInterrupt as e:
        which = "terminated by SIGTERM" if isinstance(e, _Terminated) else "interrupted by SIGINT"
        raise RunInterrupted(f"{which} while the run started (joining the ranks, starting the sources)") from e


def _stopped_by(error: BaseException) -> BaseException:
    """What ended the phases, as the run reports it."""
    if isinstance(error, _Terminated):
        return RunInterrupted("terminated by SIGTERM")
    if isinstance(error, SystemExit):  # the workload's own code called sys.exit
        return WorkloadError(f"the workload called sys.exit({error.code!r})")
    return error


def _as_run_error(
    error: BaseException, result: RunResult, source_failure: PowerSourceError | None
) -> EnergyFrameError:
    """The error ``run`` raises, carrying the saved result as ``.result``."""
    if source_failure is not None:
        # a failing source interrupts the main thread; report the source, not the interrupt
        wrapped: EnergyFrameError = PowerSourceError(result.reason or str(source_failure))
    elif isinstance(error, EnergyFrameError):
        wrapped = error
    elif isinstance(error, KeyboardInterrupt):
        wrapped = RunInterrupted(result.reason or "interrupted by SIGINT")
    else:
        wrapped = WorkloadError(f"the workload failed: {type(error).__name__}: {error}")
    wrapped.result = result  # type: ignore[attr-defined]
    return wrapped
