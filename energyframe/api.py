"""The Python API's measuring entry points: ``ef.measure`` (a block of your own code, in named
windows) and ``ef.measured`` (every call of a function, one window each)."""

from __future__ import annotations

import atexit
import functools
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .core.pipeline import TimeAligner
from .errors import UsageError
from .kit.registry import PowerArg, resolve_power
from .lifecycle.measurement import Measurement
from .plugin import PowerSource
from .ranks.coordinator import Coordinator
from .results.meta import COMPLETE, INCOMPLETE
from .results.result import RunResult


def measure(
    power: str | Sequence[PowerArg] = "auto",
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
        power: ``"auto"`` (what this machine has), ``"none"`` (timing only), or a list of
            specs (``"nvml:gpus=0"``) or ``PowerSource`` instances.
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


def _fresh(power: str | Sequence[PowerArg]) -> str | list[PowerArg]:
    """Power for one more measurement: a source instance (which starts only once) is rebuilt
    from its class and options; specs are used as they are."""
    if isinstance(power, str) or not isinstance(power, Sequence):  # resolve_power judges it
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
class _Session:
    """One measurement that every call of the functions measured with the same ``power``, ``out``
    and ``sync`` appends to: sources start at the first call and run until ``finish`` (or the
    interpreter's exit), each call is one window, each function one phase, and the run
    directory is one (``<out>/<UTC time>-measured``)."""

    def __init__(self, power: str | Sequence[PowerArg], out: Path | str | None, sync) -> None:
        self.power, self.out, self.sync = power, out, sync
        self.m: Measurement | None = None
        self.calls: dict[str, int] = {}

    def measurement(self) -> Measurement:
        if self.m is None or self.m.finished:  # none yet, or the last one ended
            from .results.store import default_run_dir

            run_dir = default_run_dir("measured", root=self.out) if self.out is not None else None
            self.m = measure(_fresh(self.power), out=run_dir, sync=self.sync).start()
            self.calls = {}
            atexit.register(self.finish)
        return self.m

    def call(self, fn: Callable[..., Any], label: str, iterations: int, args, kwargs) -> Any:
        m = self.measurement()
        n = self.calls[label] = self.calls.get(label, 0) + 1
        try:
            with m.window(label, iterations=iterations):
                returned = fn(*args, **kwargs)
        except Exception as e:
            m.warn(f"call {n} of {label} raised {type(e).__name__}: {e}; that call has no window")
            raise
        except BaseException as e:  # Ctrl-C, SIGTERM or sys.exit inside the call: the program stops
            self.finish(INCOMPLETE, f"{m.describe_failure(e)} in call {n} of {label}")
            raise
        if inspect.isgenerator(returned) or inspect.isawaitable(returned) or inspect.isasyncgen(returned):
            m.warn(
                f"{label} returned a {type(returned).__name__} that runs its work later: its windows hold the "
                "creation only, not the work (measure where it is iterated or awaited)"
            )
        return returned

    def result(self) -> RunResult | None:
        if self.m is None:
            return None
        return self.m.result if self.m.finished else self.m.snapshot()

    def finish(self, status: str = COMPLETE, reason: str | None = None) -> RunResult | None:
        """Stop the sources and save the run (once; later calls start a new one)."""
        if self.m is None:
            return None
        if not self.m.finished:
            atexit.unregister(self.finish)
            self.m.finish(status, reason)
        return self.m.result


_SESSIONS: dict[tuple[str, str, str], _Session] = {}


def _session(power, out, sync) -> _Session:
    key = (repr(power), str(out), repr(sync))
    if key not in _SESSIONS:
        _SESSIONS[key] = _Session(power, out, sync)
    return _SESSIONS[key]


def _refuse_deferred_bodies(fn: Callable[..., Any], label: str) -> None:
    """Refuse a function whose call does not run its body (see ``measured``)."""
    targets = (fn, type(fn).__call__)  # a callable object: its own __call__
    if any(inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in targets):
        kind, instead = "async function", "await it inside `with m.window(...)` of an ef.measure()"
    elif any(inspect.isgeneratorfunction(f) for f in targets):
        kind, instead = "generator function", "iterate it inside `with m.window(...)` of an ef.measure()"
    else:
        return
    raise UsageError(
        f"@ef.measured cannot measure the {kind} {label!r}: a call only creates its "
        f"{'coroutine' if kind == 'async function' else 'generator'}, and the body runs later, as it is "
        f"{'awaited' if kind == 'async function' else 'iterated'}, between other code; {instead}"
    )


class Measured:
    """A function measured at every call (what ``ef.measured`` returns): call it as the function.

    Attributes:
        last_result: the run so far (every call's window, integrated as the final run would
            be), or the saved run once ``finish`` was called.
    """

    def __init__(self, fn: Callable[..., Any], session: _Session, label: str, iterations: int) -> None:
        functools.update_wrapper(self, fn)
        self._fn, self._session, self._label, self._iterations = fn, session, label, iterations

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._session.call(self._fn, self._label, self._iterations, args, kwargs)

    @property
    def last_result(self) -> RunResult | None:
        return self._session.result()

    def finish(self) -> RunResult | None:
        """Stop measuring and save the run now (it is saved at the interpreter's exit anyway)."""
        return self._session.finish()


def measured(
    func: Callable[..., Any] | None = None,
    *,
    power: str | Sequence[PowerArg] = "auto",
    out: Path | str | None = None,
    name: str | None = None,
    iterations: int = 1,
    sync: str | Callable[[], None] | None = "auto",
) -> Any:
    """Measure every call of a function as one window (CodeCarbon's ``@track_emissions``).

        @ef.measured(power="auto", out="runs")
        def train_step(batch): ...

        for batch in loader:
            train_step(batch)                # each call one window of phase "train_step"
        print(train_step.last_result.table())
        train_step.finish()                  # saved in runs/<UTC time>-measured/ (else at exit)

    Every function measured with the same ``power``, ``out`` and ``sync`` shares one run: the
    sources start at the first call and sample until ``finish`` (or the interpreter's exit), a
    call is a window and a function a phase, and the run is saved once, in one directory, with
    the windows journaled as they close (a process that dies keeps them: ``energyframe show``
    rebuilds it). ``ef.load_runs`` reads many such runs into one table.

    Args:
        power: as for ``measure``. Specs are best: a source instance runs once, so it is rebuilt
            from its options when a new run starts.
        out: a folder; the run is saved in a new directory inside it. ``None`` keeps the run in
            memory only.
        name: the phase (the function's name by default).
        iterations: iterations one call runs, for per-iteration figures.
        sync: device sync at the window's edges.

    The function's return value and exceptions pass through; a call that raised has no window,
    and the run's warnings name it.

    Generator functions and ``async def`` functions are refused (``UsageError``, when they are
    decorated): calling one only creates the generator or the coroutine, in microseconds, and
    its body runs later, as it is iterated or awaited, between other code (the consumer's, other
    tasks'), which a window around the call would neither hold nor leave out. Measure the loop
    or the ``await`` inside ``with m.window(...)`` of an ``ef.measure()`` instead. A function
    that returns a generator or an awaitable without being one is measured as a call, and the
    run warns once that its window holds the creation only.

    Raises:
        UsageError: a generator, async generator or ``async def`` function.
    """

    def decorate(fn: Callable[..., Any]) -> Measured:
        label = str(name or getattr(fn, "__name__", "call"))
        _refuse_deferred_bodies(fn, label)
        return Measured(fn, _session(power, out, sync), label, iterations)

    return decorate(func) if func is not None else decorate
