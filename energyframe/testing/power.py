"""``check_power_source``: a power source started, read and stopped the way a run does it, with
every promise of the contract checked, and each broken one named (``rules.RULES``).

Three kinds of check, in a source's life order:

- what ``start()`` declares: the channels, their update period and averaging, the poll rate;
- what each ``read()`` hands over, as it comes: its type, the clock of the times, the units, the
  counters going up, and the time it takes (``READ_BUDGET_S``, the budget a run gives it);
- what the samples show once the source stopped: every channel delivered, a steady channel kept
  alive, a counter that stalls not repeated as fresh, no repeat right before an update, and
  value changes at the declared update period.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import plugin
from ..core.energy import STUCK_PERIODS
from ..core.samples import MAX_POWER_W
from ..errors import PowerSourceError
from ..kit.calls import BoundedCall, CallTimeout, PluginCallError, describe
from ..kit.polling import PollingSource
from ..kit.registry import name_option_problem
from ..lifecycle import recorder
from ..model import Channel, ClockBase, Quantity, Sample, SourceContext, Timing
from ..options import Option
from ..plugin import PowerSource
from .rules import broken, require

#: how far before the check started a sample may lie (a device's buffer of recent readings), and
#: after the read that handed it over, on its declared clock, before its time is on another. Units: s.
CLOCK_PAST_S = 60.0
CLOCK_FUTURE_S = 5.0
#: a share of sample intervals beyond 3 update periods that means the channel is not kept alive
GAP_SHARE = 0.2


@dataclass(frozen=True)
class FakeContext(SourceContext):
    """A ``SourceContext`` (give it to ``start()`` as it is) whose warnings are kept in
    ``warnings`` and whose raw folder is the one given (``None``: the run is not saved).

        context = FakeContext(tmp_path / "raw")
        channels = source.start(context)
        assert context.warnings == []

    Every ``SourceContext`` field can be set (``devices``, ``rank``, ``local_rank``); ``warn``,
    when not given, appends to ``warnings``.
    """

    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.warn is print:  # SourceContext's default: keep them instead
            object.__setattr__(self, "warn", self.warnings.append)

    def context(self) -> SourceContext:
        """Itself: a ``FakeContext`` is a ``SourceContext`` (kept for tests written when it was not)."""
        return self


def declared(cls: Any, base: type) -> None:
    """The ``declaration`` and ``option-name`` rules."""
    require(isinstance(cls, type) and issubclass(cls, base), "declaration", f"{cls!r} is not a {base.__name__} subclass")
    require(isinstance(cls.DESCRIPTION, str) and cls.DESCRIPTION.strip() != "", "declaration",
            f"{cls.__name__}.DESCRIPTION must be one line for `energyframe list`")
    require(all(isinstance(o, Option) for o in cls.OPTIONS), "declaration", f"{cls.__name__}.OPTIONS must hold Option()s")
    problem = name_option_problem(cls, cls.__name__)
    require(problem is None, "option-name", problem or "")


def _channels(name: str, returned: Any) -> dict[str, Channel]:
    require(isinstance(returned, (list, tuple)) and len(returned) > 0, "channels",
            f"{name}.start() must return the channels it produces, got {returned!r:.80}")
    out: dict[str, Channel] = {}
    for c in returned:
        require(isinstance(c, Channel), "channels", f"{name}.start() returned {c!r:.80}, not a Channel")
        require(c.name not in out, "channels", f"{name} declares channel {c.name!r} twice")
        if c.quantity == Quantity.ENERGY:
            require(c.unit == "J", "channels", f"energy channel {c.name!r} must be in J, not {c.unit!r}")
        if c.quantity == Quantity.POWER:
            require(c.unit == "W", "channels", f"power channel {c.name!r} must be in W, not {c.unit!r}")
        require(math.isfinite(c.resolution_s) and c.resolution_s >= 0, "resolution",
                f"channel {c.name!r}: resolution_s must be a finite update period in seconds, got {c.resolution_s!r}")
        require(c.resolution_s > 0 or not c.integrable, "resolution",
                f"channel {c.name!r} declares resolution_s=0: declare how often its reading changes (its update "
                "period); a run sizes its windows and flags short ones and gaps by it")
        require(c.timing == Timing.EXACT or c.averaging_s > 0, "averaging",
                f"channel {c.name!r} is {c.timing.name} but declares averaging_s={c.averaging_s:g}: declare the "
                "period each reading averages over (the run places the reading at its middle)")
        out[c.name] = c
    return out


@dataclass
class _Clocks:
    """The check's start and the latest read, on both clocks a channel may use."""

    start: dict[ClockBase, float] = field(default_factory=lambda: _now())
    last: dict[ClockBase, float] = field(default_factory=lambda: _now())


def _now() -> dict[ClockBase, float]:
    return {ClockBase.MONOTONIC: time.monotonic(), ClockBase.WALL: time.time()}


def _clock_base(channel: Channel, sample: Sample, clocks: _Clocks) -> None:
    lo = clocks.start[channel.clock] - CLOCK_PAST_S - channel.averaging_s
    hi = clocks.last[channel.clock] + CLOCK_FUTURE_S
    if lo <= sample.time_s <= hi:
        return
    now = clocks.last[channel.clock]
    other = ClockBase.WALL if channel.clock == ClockBase.MONOTONIC else ClockBase.MONOTONIC
    source = {ClockBase.MONOTONIC: "time.monotonic()", ClockBase.WALL: "time.time() (Unix seconds)"}
    hint = (
        f"; it looks like {source[other]}: declare clock=ClockBase.{other.name}"
        if abs(sample.time_s - clocks.last[other]) < CLOCK_PAST_S else ""
    )
    raise broken("clock-base", f"a sample of {channel.name!r} is stamped {sample.time_s:.6f} s, but its declared "
                 f"clock ({source[channel.clock]}) reads {now:.6f} s{hint}; stamp it on the clock the channel declares")


def _check_sample(channels: Mapping[str, Channel], s: Any, got: dict[str, list[Sample]], clocks: _Clocks) -> None:
    require(isinstance(s, Sample), "samples", f"read() returned {s!r:.80}, not a Sample")
    require(s.channel in channels, "samples", f"read() returned a sample of undeclared channel {s.channel!r}")
    require(math.isfinite(s.time_s), "samples", f"a sample of {s.channel!r} has no finite time ({s.time_s!r})")
    channel = channels[s.channel]
    _clock_base(channel, s, clocks)
    previous = got[s.channel][-1] if got[s.channel] else None
    if channel.quantity == Quantity.POWER:
        require(not s.value > MAX_POWER_W, "units", f"channel {s.channel!r} reported {s.value:.4g} W, more than any "
                f"device draws ({MAX_POWER_W:g} W): convert mW or µW to W in the plugin")
    if previous is None:
        return
    require(s.time_s >= previous.time_s, "samples", f"samples of {s.channel!r} go back in time ({previous.time_s!r} "
            f"then {s.time_s!r}): hand them over oldest first, once")
    if channel.quantity == Quantity.ENERGY:
        require(s.value >= previous.value, "counter", f"counter {s.channel!r} went down ({previous.value!r} then "
                f"{s.value!r}): undo wraparound in the plugin, and warn or raise on a reset")
        dt = s.time_s - previous.time_s
        if dt > 0:
            watts = (s.value - previous.value) / dt
            require(watts <= MAX_POWER_W, "units", f"counter {s.channel!r} rose {s.value - previous.value:.4g} J in "
                    f"{dt:.3g} s ({watts:.3g} W, more than any device draws): convert mJ or µJ to J in the plugin")


def _check_batch(channels: Mapping[str, Channel], batch: Any, got: dict[str, list[Sample]], clocks: _Clocks) -> None:
    require(isinstance(batch, list), "samples", f"read() must return a list of Sample, got {type(batch).__name__}")
    for s in batch:
        _check_sample(channels, s, got, clocks)
        got[s.channel].append(s)


def _start(source: PowerSource, context: SourceContext) -> Any:
    call = BoundedCall(lambda: source.start(context), f"{source.name}.start()", on_late_return=lambda _: source.stop())
    try:
        return call.wait(recorder.START_BUDGET_S)
    except CallTimeout as e:
        raise broken("start-budget", f"start() did not return within {recorder.START_BUDGET_S:g} s") from e
    except PluginCallError as e:
        raise broken("start-errors", f"start() raised {describe(e.error)}: raise PowerSourceError saying what to do") from e
    except PowerSourceError:
        raise  # the source cannot run here: its own, documented error
    except Exception as e:
        raise broken("start-errors", f"start() raised {describe(e)}: catch it and raise PowerSourceError saying "
                     "what to do (which device or file is missing, and how to fix it)") from e


def _read(source: PowerSource) -> Any:
    call = BoundedCall(source.read, f"{source.name}.read()")
    try:
        return call.wait(plugin.READ_BUDGET_S)
    except CallTimeout as e:
        raise broken("read-budget", f"read() did not return within {plugin.READ_BUDGET_S:g} s (READ_BUDGET_S, what a "
                     "run allows before it fails the source): hand over what the source buffered; wait for the device "
                     "in the source's own thread (the polling base does)") from e
    except PluginCallError as e:
        raise broken("read-errors", f"read() raised {describe(e.error)}: raise PowerSourceError") from e
    except PowerSourceError:
        raise
    except Exception as e:
        raise broken("read-errors", f"read() raised {describe(e)}: raise PowerSourceError saying what went wrong") from e


def _stop(source: PowerSource, second: bool = False) -> None:
    what = "stop() called a second time" if second else "stop()"
    call = BoundedCall(source.stop, f"{source.name}.stop()")
    try:
        call.wait(recorder.STOP_BUDGET_S)
    except CallTimeout as e:
        raise broken("stop", f"{what} did not return within {recorder.STOP_BUDGET_S:g} s") from e
    except PluginCallError as e:
        raise broken("stop", f"{what} raised {describe(e.error)}") from e
    except Exception as e:
        again = ": stop() must be idempotent (a run may stop a source twice)" if second else ""
        raise broken("stop", f"{what} raised {describe(e)}{again}") from e


def _stop_quietly(source: PowerSource) -> None:
    try:
        _stop(source)
    except AssertionError:
        pass  # the first broken promise is the one to report


def _check_poll_rate(source: PowerSource, channels: Mapping[str, Channel]) -> None:
    """A reading stamped by the polling base is true at the poll, so the poll must come round
    faster than the reading changes, or its stamps alias the updates."""
    if not isinstance(source, PollingSource):
        return
    for name, interval in _poll_stamped(source, channels).items():
        c = channels.get(name)
        if c is None or interval is None or not c.integrable or c.timing != Timing.EXACT:
            continue
        require(interval < c.resolution_s, "poll-rate",
                f"channel {name!r} updates every {c.resolution_s:g} s and is polled every {interval:g} s: its stamps "
                "are the polls', up to an update late, and its ticks alias; poll faster than it updates (ideally "
                "4 polls per update: the base then stamps each change between two polls)")


def _poll_stamped(source: PollingSource, channels: Mapping[str, Channel]) -> dict[str, float | None]:
    """The poll interval of each channel whose readings the polling base stamps at the poll."""
    stamped = dict(source._poll_stamped)
    if not stamped and source.sampler_process is not None and type(source).tasks is PollingSource.tasks:
        stamped = {name: source.poll_interval_s() for name in channels}  # the one default poller, in a child
    return stamped


def _delivers(name: str, channel: Channel, t: np.ndarray, run_s: float) -> None:
    require(t.size > 0 or not channel.integrable, "delivers", f"channel {name!r} delivered no sample in {run_s:g} s")


def _keep_alive(name: str, channel: Channel, t: np.ndarray, end_s: float) -> None:
    res = channel.resolution_s
    if not channel.integrable or channel.timing == Timing.UNKNOWN or t.size == 0:
        return
    if end_s - t[0] < 6 * res:
        return  # too short a look to judge
    gaps = np.diff(np.append(t, end_s - channel.averaging_s))
    long = gaps > 3 * res
    if long.mean() > GAP_SHARE or gaps[-1] > 5 * res:
        raise broken("keep-alive", f"channel {name!r} went up to {gaps.max():.3g} s without a sample ({int(long.sum())} "
                     f"of {gaps.size} intervals longer than 3 update periods, {3 * res:g} s): a run flags those "
                     "windows 'gap', and stops as stalled after max(5 periods, 3 s); repeat a steady value at least "
                     "every 2 update periods (Dedup.CHANGES does), or declare the true update period")


def _stalled_counter(name: str, channel: Channel, t: np.ndarray, v: np.ndarray) -> None:
    if channel.quantity != Quantity.ENERGY or t.size < 3:
        return
    ends = np.flatnonzero(np.diff(v) != 0)
    firsts, lasts = np.concatenate(([0], ends + 1)), np.concatenate((ends, [t.size - 1]))
    for first, last in zip(firsts[1:], lasts[1:]):  # after it moved at least once
        held = t[last] - t[first]
        if last - first >= 2 and held > STUCK_PERIODS * channel.resolution_s:
            raise broken("stalled-counter", f"counter {name!r} stopped at {v[first]:.6g} J and was repeated "
                         f"{last - first} times over {held:.3g} s with fresh times: a counter that stops changing has "
                         "stalled; hand over its ticks only (Dedup.TICKS, the default for a counter polled faster than "
                         "it updates), so that the run stops instead of reading 0 J")


def _repeats(name: str, channel: Channel, t: np.ndarray, v: np.ndarray) -> None:
    if not channel.integrable or t.size < 10:
        return
    same_before = v[1:-1] == v[:-2]
    changes_after = v[2:] != v[1:-1]
    soon = (t[2:] - t[1:-1]) < 0.5 * channel.resolution_s
    late = int(np.sum(same_before & changes_after & soon))
    changes = int(np.sum(v[1:] != v[:-1]))
    if late >= 3 and late >= 0.1 * changes:
        raise broken("repeats", f"channel {name!r} repeated an unchanged value just before the next update {late} "
                     f"times in {changes} changes: a sensor a little late then reads as a step, which biases every "
                     "window; stamp changes only (Dedup.AUTO or CHANGES) and repeat a steady value only to keep it alive")


def _observed_period(name: str, channel: Channel, t: np.ndarray, v: np.ndarray) -> None:
    changed = t[1:][v[1:] != v[:-1]]
    if not channel.integrable or changed.size < 6:
        return
    period = float(np.median(np.diff(changed)))
    res = channel.resolution_s
    too_fast = period < res / 1.5
    too_slow = channel.quantity == Quantity.ENERGY and period > 1.5 * res  # a counter changes at every update
    if too_fast or too_slow:
        raise broken("resolution", f"channel {name!r} declares resolution_s={res:g} s, but its value changes every "
                     f"{period:.3g} s (median of {changed.size - 1}): declare the update period, not the polling period")


def _check_samples(channels: Mapping[str, Channel], got: Mapping[str, list[Sample]], run_s: float,
                   clocks: _Clocks) -> None:
    for name, channel in channels.items():
        t = np.array([s.time_s for s in got[name]], dtype=float)
        v = np.array([s.value for s in got[name]], dtype=float)
        _delivers(name, channel, t, run_s)
        _observed_period(name, channel, t, v)
        _keep_alive(name, channel, t, clocks.last[channel.clock])
        _stalled_counter(name, channel, t, v)
        _repeats(name, channel, t, v)


def _read_for(source: PowerSource, channels: Mapping[str, Channel], run_s: float,
              got: dict[str, list[Sample]], clocks: _Clocks) -> None:
    deadline = time.monotonic() + run_s
    while True:
        batch = _read(source)
        clocks.last = _now()
        _check_batch(channels, batch, got, clocks)
        if time.monotonic() >= deadline:
            return
        time.sleep(min(0.05, run_s / 10))


def check_power_source(
    cls: type[PowerSource], options: Mapping[str, Any] | None = None, run_s: float = 0.5
) -> dict[str, list[Sample]]:
    """Start ``cls`` with ``options``, read it for ``run_s`` seconds, stop it twice, and check
    every promise of the contract (``RULES``). Returns the samples by channel, for the author's
    own assertions. The checks of what the samples show need the source's device to change
    (a fake driven by a known profile): give ``run_s`` of at least ten update periods.

    Raises:
        ContractError: the first promise broken, named (``.rule``).
        PowerSourceError: the source could not run here (its own, documented error).
    """
    declared(cls, PowerSource)
    source = cls(cls.__name__.lower(), **dict(options or {}))  # the name positionally, as the registry passes it
    if cls.AUTO_PRIORITY is not None:
        found = cls.detect()
        require(hasattr(found, "available") and hasattr(found, "reason"), "detect", "detect() must return a Detection")
    fake = FakeContext(Path(tempfile.mkdtemp(prefix="energyframe-check-")))
    clocks = _Clocks()
    channels = _channels(cls.__name__, _start(source, fake.context()))
    got: dict[str, list[Sample]] = {name: [] for name in channels}
    try:
        _read_for(source, channels, run_s, got, clocks)
        _check_poll_rate(source, channels)
    except BaseException:
        _stop_quietly(source)
        raise
    _stop(source)
    _stop(source, second=True)
    try:
        _check_batch(channels, _read(source), got, clocks)
    except PowerSourceError:
        pass  # a failure latched before stop may be raised once, after the samples
    _check_samples(channels, got, run_s, clocks)
    _check_info(cls.__name__, source)
    return got


def _check_info(name: str, source: PowerSource) -> None:
    info = source.info()
    require(isinstance(info, Mapping), "info", f"{name}.info() must return a mapping")
    try:
        json.dumps(dict(info), default=str)
    except (TypeError, ValueError) as e:
        raise broken("info", f"{name}.info() must be JSON-serialisable: {e}") from e

