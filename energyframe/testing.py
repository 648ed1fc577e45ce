"""Test helpers for plugin authors: a fake context, a source of known power, conformance checks.

    from energyframe.testing import check_power_source
    def test_my_source_keeps_the_contract():
        check_power_source(MySource, {"url": "http://127.0.0.1:8000"}, run_s=0.5)

Each ``check_*`` exercises a plugin the way energyframe will (start, read, stop; set up, step,
tear down; report a finished and an interrupted run) and raises ``ContractError`` naming the
first broken promise. They use no GPU and no network of their own. pytest's ``pytester`` and
llm's test plugins are the model: the real code runs, only the outside world is faked.
"""

from __future__ import annotations

import json
import math
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import EnergyFrameError, PowerSourceError
from .lifecycle.config import RunSettings
from .model import Channel, Phase, Quantity, Sample, SourceContext, Timing
from .offline.simulate import ProfilePowerSource as KnownProfileSource
from .options import Option
from .plugin import PowerSource, Reporter, Workload
from .results.result import RunResult

__all__ = [
    "ContractError",
    "FakeContext",
    "KnownProfileSource",
    "check_power_source",
    "check_reporter",
    "check_workload",
    "sample_result",
]


class ContractError(AssertionError):
    """A plugin broke a promise of the plugin contract (docs/writing-plugins.md)."""


@dataclass
class FakeContext:
    """A ``SourceContext`` whose warnings are kept (``warnings``) and whose raw folder is a
    temporary directory (or ``None``)."""

    raw_dir: Path | None = None
    warnings: list[str] = field(default_factory=list)

    def context(self) -> SourceContext:
        return SourceContext(raw_dir=self.raw_dir, warn=self.warnings.append)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ContractError(message)


def _declared(cls: type[Any], base: type) -> None:
    _require(isinstance(cls, type) and issubclass(cls, base), f"{cls!r} is not a {base.__name__} subclass")
    _require(isinstance(cls.DESCRIPTION, str) and cls.DESCRIPTION.strip() != "",
             f"{cls.__name__}.DESCRIPTION must be one line for `energyframe list`")
    _require(all(isinstance(o, Option) for o in cls.OPTIONS), f"{cls.__name__}.OPTIONS must hold Option()s")


def _check_channels(name: str, channels: Any) -> dict[str, Channel]:
    _require(isinstance(channels, (list, tuple)) and len(channels) > 0,
             f"{name}.start() must return the channels it produces, got {channels!r}")
    out: dict[str, Channel] = {}
    for c in channels:
        _require(isinstance(c, Channel), f"{name}.start() returned {c!r}, not a Channel")
        _require(c.name not in out, f"{name} declares channel {c.name!r} twice")
        _require(c.resolution_s >= 0 and math.isfinite(c.resolution_s),
                 f"channel {c.name!r}: resolution_s must be a finite update period in seconds")
        if c.quantity == Quantity.ENERGY:
            _require(c.unit == "J", f"energy channel {c.name!r} must be in J, not {c.unit!r}")
        if c.quantity == Quantity.POWER:
            _require(c.unit == "W", f"power channel {c.name!r} must be in W, not {c.unit!r}")
        if c.timing != Timing.EXACT:
            _require(c.averaging_s > 0 or c.resolution_s > 0,
                     f"channel {c.name!r} averages readings ({c.timing.value}): declare averaging_s")
        out[c.name] = c
    return out


def _call(what: str, fn: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """Run ``fn`` in a thread; a call that never returns is a broken contract, not a hung test."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # reported below, with the type the contract allows
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    _require(not thread.is_alive(), f"{what} did not return within {timeout_s:g} s (it must not block)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def check_power_source(  # noqa: C901 (the contract's checks in a source's life order: detect, start, read, stop twice, info)
    cls: type[PowerSource], options: Mapping[str, Any] | None = None, run_s: float = 0.5
) -> dict[str, list[Sample]]:
    """Start ``cls`` with ``options``, read it for ``run_s`` seconds, stop it twice; check every
    promise of the contract. Returns the samples by channel, for the author's own assertions.

    Raises:
        ContractError: what was broken.
        PowerSourceError: the source could not run here (its own, documented error).
    """
    _declared(cls, PowerSource)
    source = cls(name=cls.__name__.lower(), **dict(options or {}))
    if cls.AUTO_PRIORITY is not None:
        found = cls.detect()
        _require(hasattr(found, "available") and hasattr(found, "reason"), "detect() must return a Detection")
    fake = FakeContext(Path(tempfile.mkdtemp(prefix="energyframe-check-")))
    channels = _check_channels(cls.__name__, _call(f"{cls.__name__}.start()", lambda: source.start(fake.context())))
    got: dict[str, list[Sample]] = {name: [] for name in channels}
    try:
        deadline = time.monotonic() + run_s
        while True:
            batch = _call(f"{cls.__name__}.read()", source.read)
            _check_batch(cls.__name__, channels, batch, got)
            if time.monotonic() >= deadline:
                break
            time.sleep(min(0.05, run_s / 10))
    except PowerSourceError:
        _call(f"{cls.__name__}.stop()", source.stop)
        raise
    except EnergyFrameError:
        raise
    except ContractError:
        _call(f"{cls.__name__}.stop()", source.stop)
        raise
    except Exception as e:
        _call(f"{cls.__name__}.stop()", source.stop)
        raise ContractError(f"{cls.__name__}.read() raised {type(e).__name__}: {e}; raise PowerSourceError") from e
    _call(f"{cls.__name__}.stop()", source.stop)
    _call(f"{cls.__name__}.stop() a second time", source.stop)  # stop is idempotent
    try:
        _check_batch(cls.__name__, channels, _call(f"{cls.__name__}.read() after stop()", source.read), got)
    except PowerSourceError:
        pass  # a failure latched before stop may be raised once, after the samples
    for name, channel in channels.items():
        if channel.integrable:
            _require(len(got[name]) > 0, f"channel {name!r} delivered no sample in {run_s:g} s")
    info = source.info()
    _require(isinstance(info, Mapping), f"{cls.__name__}.info() must return a mapping")
    try:
        json.dumps(dict(info), default=str)
    except (TypeError, ValueError) as e:
        raise ContractError(f"{cls.__name__}.info() must be JSON-serialisable: {e}") from e
    return got


def _check_batch(name: str, channels: Mapping[str, Channel], batch: Any, got: dict[str, list[Sample]]) -> None:
    _require(isinstance(batch, list), f"{name}.read() must return a list of Sample, got {type(batch).__name__}")
    for s in batch:
        _require(isinstance(s, Sample), f"{name}.read() returned {s!r}, not a Sample")
        _require(s.channel in channels, f"{name}.read() returned a sample of undeclared channel {s.channel!r}")
        _require(math.isfinite(s.time_s), f"a sample of {s.channel!r} has no finite time")
        previous = got[s.channel][-1] if got[s.channel] else None
        if previous is not None:
            _require(s.time_s >= previous.time_s,
                     f"samples of {s.channel!r} go back in time ({previous.time_s!r} then {s.time_s!r}): "
                     "hand them over oldest first, once")
            if channels[s.channel].quantity == Quantity.ENERGY:
                _require(s.value >= previous.value,
                         f"counter {s.channel!r} went down: undo wraparound in the plugin, or raise on a reset")
        got[s.channel].append(s)


def check_workload(cls: type[Workload], options: Mapping[str, Any] | None = None) -> RunResult:
    """Measure ``cls`` briefly with no power source (one short window per phase) through the real
    orchestrator, and check what the contract promises. Returns the result.

    Raises:
        ContractError: what was broken.
    """
    _declared(cls, Workload)
    workload = cls(name=cls.__name__.lower(), **dict(options or {}))
    try:
        RunSettings.from_mapping(workload.run_defaults())
    except EnergyFrameError as e:
        raise ContractError(f"{cls.__name__}.run_defaults(): {e}") from e
    from .lifecycle.orchestrator import run

    result = run(workload, power="none", reporters=[],
                 settings=RunSettings(trials=1, min_window_s=0.01, warmup=1, max_iterations=1000))
    _require(result.complete, f"{cls.__name__} did not run to the end: {result.reason}")
    phases = {str(p) for p in result.windows["phase"]}
    _require(len(phases) > 0, f"{cls.__name__}.phases() measured nothing")
    _require(isinstance(workload.info(), Mapping), f"{cls.__name__}.info() must return a mapping")
    return result


def sample_result(complete: bool = True) -> RunResult:
    """A small real result (known 100 W power, two phases), finished or interrupted: what a
    reporter must be able to present."""
    from .lifecycle.orchestrator import run

    def step() -> None:
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass

    class _Tiny(Workload):
        DESCRIPTION = "two tiny phases"

        def phases(self):
            return [Phase("first", step), Phase("second", step, work={"items": 4})]

    result = run(_Tiny(name="tiny"), power=[KnownProfileSource(lambda t: 100.0)], reporters=[],
                 settings=RunSettings(trials=2, min_window_s=0.05, warmup=1))
    if complete:
        return result
    meta = {**result.meta, "status": "incomplete", "reason": "interrupted by SIGINT"}
    return RunResult(meta, result.windows.iloc[:1], result.samples, result.summaries[:1])


def check_reporter(cls: type[Reporter], options: Mapping[str, Any] | None = None) -> None:
    """Report a finished and an interrupted run, saved and not saved; the reporter must not raise.

    Raises:
        ContractError: what was broken.
    """
    _declared(cls, Reporter)
    reporter = cls(name=cls.__name__.lower(), **dict(options or {}))
    with tempfile.TemporaryDirectory(prefix="energyframe-check-") as tmp:
        for complete in (True, False):
            result = sample_result(complete)
            run_dir = Path(tmp) / ("done" if complete else "stopped")
            result.save(run_dir)
            for where in (run_dir, None):
                try:
                    reporter.report(result, where)
                except Exception as e:
                    state = "a finished" if complete else "an interrupted"
                    raise ContractError(
                        f"{cls.__name__}.report() raised {type(e).__name__}: {e} on {state} run "
                        f"({'saved' if where else 'not saved'})"
                    ) from e
