"""The Python API's measuring entry points: ``ef.measure`` (a block of your own code, in named
windows) and ``ef.measured`` (every call of a function, one window each)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import UsageError
from .kit.registry import PowerArg, resolve_power
from .lifecycle.assemble import TimeAligner
from .lifecycle.measurement import Measurement
from .plugin import PowerSource
from .ranks.coordinator import Coordinator


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

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        label = str(name or getattr(fn, "__name__", "call"))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from .results.store import default_run_dir

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

