"""The part every training-loop callback shares: a window per optimizer step and per evaluation,
their energy as it becomes known, summed over the ranks, as figures a tracker logs.

A callback calls ``begin``/``end`` at its framework's step and evaluation hooks and ``collect`` where
it logs. A window's energy is known about one counter period after it closes (``live.py``), so
``collect(wait=False)`` takes the closed windows whose energy is known by then, in the order they
closed, and leaves the others for the next call: the training loop never waits for a number.
With several ranks every rank measures its own GPU; ``collect`` first agrees how many windows
every rank knows, then sums those windows over the ranks, so the figures are the whole job's.
"""

from __future__ import annotations

import atexit
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..api import measure
from ..kit.registry import PowerArg
from ..lifecycle.live import LiveEnergy
from ..lifecycle.measurement import Measurement
from ..lifecycle.windowbook import WindowHandle
from ..results.result import COMPLETE, INCOMPLETE, RunResult

log = logging.getLogger("energyframe")

#: the phase of the optimizer steps' windows
STEP = "train-step"
#: the phase of the evaluations' windows
EVAL = "evaluation"
PHASES = (STEP, EVAL)
#: the prefix of every key a callback adds to the logs
PREFIX = "energy/"
#: at the end of training, how long to wait for the energy of the last windows, all together. Units: s.
FINAL_WAIT_S = 60.0


@dataclass(frozen=True)
class Figures:
    """The energy of some closed windows of one phase, on the channels measured, over every rank.

    Args:
        windows: how many windows (optimizer steps or evaluations).
        energy_j: their energy, summed. Units: J.
        random_j: the random part of its 95 % bound (the windows' in quadrature). Units: J.
        systematic_j: the systematic part (the windows', added: one sensor). Units: J.
        duration_s: their length, summed (each window's length once, not per rank). Units: s.
        samples: the samples they processed, over every rank.
        ranks_power_w: with several ranks, each rank's mean power over the windows, summed (the
            ranks' edges lie a little apart, so one rank's length would misstate the others').
            Units: W.
    """

    windows: int = 0
    energy_j: float = 0.0
    random_j: float = 0.0
    systematic_j: float = 0.0
    duration_s: float = 0.0
    samples: float = 0.0
    ranks_power_w: float | None = None

    @property
    def bound_j(self) -> float:
        """The 95 % bound of ``energy_j``. Units: J."""
        return math.hypot(self.random_j, self.systematic_j)

    @property
    def power_w(self) -> float:
        """The mean power over the windows. Units: W."""
        if self.ranks_power_w is not None:
            return self.ranks_power_w
        return self.energy_j / self.duration_s if self.duration_s > 0 else math.nan

    def plus(self, other: Figures) -> Figures:
        return Figures(
            self.windows + other.windows,
            self.energy_j + other.energy_j,
            math.hypot(self.random_j, other.random_j),
            self.systematic_j + other.systematic_j,
            self.duration_s + other.duration_s,
            self.samples + other.samples,
        )

    def keys(self, name: str) -> dict[str, float]:
        """The log keys of these figures: per window (``name``), per sample and power, each with
        its bound, and how many windows they cover."""
        n = self.windows
        out = {
            f"{PREFIX}{name}s": float(n),
            f"{PREFIX}{name}_j": self.energy_j / n,
            f"{PREFIX}{name}_bound_j": self.bound_j / n,
        }
        if self.samples > 0:
            out[f"{PREFIX}{name}_sample_j"] = self.energy_j / self.samples
            out[f"{PREFIX}{name}_sample_bound_j"] = self.bound_j / self.samples
        if self.duration_s > 0:
            out[f"{PREFIX}{name}_power_w"] = self.power_w
            out[f"{PREFIX}{name}_power_bound_w"] = self.bound_j / self.duration_s
        return out


#: the word each phase's keys use (``energy/step_j``, ``energy/eval_j``)
KEY_NAMES = {STEP: "step", EVAL: "eval"}


@dataclass
class _Closed:
    phase: str
    handle: WindowHandle
    samples: float


class TrainingMeter:
    """A measurement of a training loop: windows of optimizer steps and evaluations, their energy
    while the loop runs, and the run directory at its end.

    Args:
        power: as ``ef.measure`` takes it (``"auto"``: what the machine has).
        out: the run directory (``None``: ``default_out`` when the measurement starts).
        sync: device sync at window edges, as ``ef.measure`` takes it.
        channel: the channel whose energy is logged; default: the first primary channel and the
            other primary channels of its scope (every GPU this process measures).
        coordinator: as ``ef.measure`` takes it (``"auto"``: the ranks of torchrun, Lightning's
            DDP or srun, each measuring its own GPU, one run saved by rank 0).
    """

    def __init__(
        self,
        power: str | Sequence[PowerArg] = "auto",
        out: Path | str | None = None,
        sync: str | Callable[[], None] | None = "auto",
        channel: str | None = None,
        coordinator: Any = "auto",
    ) -> None:
        self.power, self.out, self.sync, self.channel = power, out, sync, channel
        self.coordinator = coordinator
        self.m: Measurement | None = None
        self.result: RunResult | None = None
        self._open: dict[str, WindowHandle] = {}
        self._closed: deque[_Closed] = deque()
        self._channels: list[str] | None = None
        self._total = Figures()
        self._unknown = 0

    # -- the measurement ---------------------------------------------------------------------
    def fresh(self) -> TrainingMeter:
        """A meter with the same settings, for another training run (each run its own directory;
        a given ``out`` is used once)."""
        return TrainingMeter(self.power, None, self.sync, self.channel, self.coordinator)

    @property
    def running(self) -> bool:
        return self.m is not None and self.result is None

    def start(self, default_out: Path | None) -> Measurement:
        """Start the sources (every rank at once, under a launcher) and claim the run directory."""
        out = self.out if self.out is not None else default_out
        self.m = measure(self.power, out=out, sync=self.sync, coordinator=self.coordinator).start()
        atexit.register(self._at_exit)
        return self.m

    @property
    def distributed(self) -> bool:
        return self.m is not None and self.m.coordinator.distributed

    @property
    def is_root(self) -> bool:
        return self.m is None or self.m.coordinator.is_root

    @property
    def run_dir(self) -> Path | None:
        """Where the run is saved (rank 0's directory, as every rank learns it)."""
        if self.m is None:
            return None
        return self.m.coordinator.root_out if self.distributed else self.m.out

    def finish(self, status: str = COMPLETE, reason: str | None = None) -> RunResult | None:
        """Close what is open, wait for the samples past the last window, save the run (rank 0
        saves the ranks' merged run). Returns it (``None`` if nothing was measured)."""
        if self.m is None or self.result is not None:
            return self.result
        atexit.unregister(self._at_exit)
        for phase in list(self._open):  # a step cut short by the end of training: not a step
            self._open.pop(phase)
        self.result = self.m.finish(status, reason)
        return self.result

    def _at_exit(self) -> None:
        if self.running:
            self.finish(INCOMPLETE, "the training loop ended without reaching its end hook")

    # -- windows -----------------------------------------------------------------------------
    def begin(self, phase: str) -> None:
        """Open a window of ``phase`` (synced); one of a phase at a time."""
        if not self.running or phase in self._open:
            return
        assert self.m is not None
        self._open[phase] = self.m.begin_window(phase)

    def is_open(self, phase: str) -> bool:
        return phase in self._open

    def end(self, phase: str, samples: float = 0.0, iterations: int = 1) -> None:
        """Close the open window of ``phase``, which processed ``samples`` samples here."""
        handle = self._open.pop(phase, None)
        if handle is None or not self.running:
            return
        assert self.m is not None
        self.m.end_window(phase, iterations=iterations)
        self._closed.append(_Closed(phase, handle, float(samples)))

    # -- figures -----------------------------------------------------------------------------
    def collect(self, wait: bool = False) -> dict[str, Figures]:
        """The closed windows' figures not collected yet whose energy every rank knows (``wait``:
        all of them, waiting up to ``FINAL_WAIT_S``), by phase; with several ranks, summed over
        them. Every rank must call it at the same point (it exchanges with the others)."""
        if self.m is None:
            return {}
        known = self._known(wait)
        if self.distributed:
            known = int(self.m.coordinator.agree(float(known), "windows with a known energy", "min"))
        mine = {phase: Figures() for phase in PHASES}
        for _ in range(known):
            item = self._closed.popleft()
            mine[item.phase] = mine[item.phase].plus(self._figures(item))
        out = {}
        for phase in PHASES:  # the same exchanges on every rank, whatever each has
            figures = self._over_ranks(phase, mine[phase])
            if figures.windows:
                out[phase] = figures
        if STEP in out:
            self._total = self._total.plus(out[STEP])
        return out

    def log_keys(self, figures: Mapping[str, Figures]) -> dict[str, float]:
        """What a tracker logs of ``figures``: per step and per evaluation, and the steps' total
        so far (``energy/total_j``). Nothing without a power channel."""
        if not self._channels:
            return {}
        out: dict[str, float] = {}
        for phase, f in figures.items():
            out.update(f.keys(KEY_NAMES[phase]))
        if STEP in figures:
            out[f"{PREFIX}total_j"] = self._total.energy_j
            out[f"{PREFIX}total_bound_j"] = self._total.bound_j
        return out

    @property
    def channels(self) -> list[str]:
        """The channels whose energy the figures add up (known once a window's energy is)."""
        return list(self._channels or [])

    def _known(self, wait: bool) -> int:
        """How many closed windows, from the oldest, have their energy known here."""
        known = 0
        deadline = time.monotonic() + FINAL_WAIT_S
        for item in self._closed:
            left = max(0.0, deadline - time.monotonic())
            try:
                live = item.handle.energy(wait=wait, timeout_s=left if wait else None)
            except Exception:  # its live number failed: known, without a figure (below)
                live = None
                known += 1
                continue
            if live is None:
                break
            known += 1
        return known

    def _figures(self, item: _Closed) -> Figures:
        try:
            live = item.handle.energy(wait=False)
        except Exception as e:  # the saved run still integrates the window; the logs leave it out
            self._unknown += 1
            assert self.m is not None
            self.m.warn(
                "the live energy of some windows could not be computed; the logged figures leave them out "
                f"(the first: {type(e).__name__}: {e}), the saved run has them"
            )
            return Figures()
        assert live is not None and item.handle.record is not None
        energy_j, random_j, systematic_j = self._energy(live)
        return Figures(1, energy_j, random_j, systematic_j, item.handle.record.duration_s, item.samples)

    def _energy(self, live: LiveEnergy) -> tuple[float, float, float]:
        """The window's energy on the channels measured, and the random and systematic parts of
        its bound."""
        if self._channels is None:
            self._channels = self._choose(live)
        rows = live.rows[live.rows["channel"].isin(self._channels)]
        if rows.empty:
            return math.nan, math.nan, math.nan
        random = math.sqrt(float((rows["energy_random_j"].astype(float) ** 2).sum()))
        return float(rows["energy_j"].sum()), random, float(rows["energy_systematic_j"].astype(float).sum())

    def _choose(self, live: LiveEnergy) -> list[str]:
        if self.channel is not None:
            return [self.channel]
        if not live.channel:
            return []  # timing only
        assert self.m is not None
        channels = self.m.channels()
        scope = channels[live.channel].scope if live.channel in channels else None
        return [n for n, c in channels.items() if c.primary and c.integrable and c.scope == scope] or [live.channel]

    def _over_ranks(self, phase: str, f: Figures) -> Figures:
        """``f`` summed over the ranks (the same windows on every rank; their length once)."""
        if not self.distributed:
            return f
        assert self.m is not None
        agree = self.m.coordinator.agree
        random_sq = agree(f.random_j**2, f"{phase}: random part", "sum")
        return Figures(
            f.windows,
            agree(f.energy_j, f"{phase}: energy", "sum"),
            math.sqrt(random_sq),
            agree(f.systematic_j, f"{phase}: systematic part", "sum"),
            agree(f.duration_s, f"{phase}: length", "root"),
            agree(f.samples, f"{phase}: samples", "sum"),
            agree(f.power_w if f.windows else 0.0, f"{phase}: power", "sum"),
        )
