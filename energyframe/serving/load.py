"""The load: when each request is due (Poisson arrivals, a file's times, or a closed loop), at
most ``concurrency`` in flight, and Ctrl-C or SIGTERM ending it with every request kept.

A request is due at its arrival time; it is *ready* once a ``--concurrency`` slot is free too,
and *sent* when the client hands it over. Ready minus due is the server's doing (a full batch of
slots); sent minus ready is the client's (a busy event loop), and a load whose sends come late is
said to be limited by the client, not by the server (``LoadResult.client_lag_s``).
"""

from __future__ import annotations

import asyncio
import math
import random
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..errors import UsageError
from .client import RequestRecord
from .prompts import Prompt

Send = Callable[[Prompt, float, float], Awaitable[RequestRecord]]


@dataclass(frozen=True)
class LoadPlan:
    """When each prompt is due, from the load's start, and how many may be in flight.

    Args:
        offsets_s: per prompt, in the prompts' order. Units: s.
        concurrency: most requests in flight (``None``: no limit).
        rate: the Poisson rate asked for (``None``: a file's times, or a closed loop). Units: 1/s.
    """

    offsets_s: tuple[float, ...]
    concurrency: int | None = None
    rate: float | None = None

    @property
    def asked_rate(self) -> float:
        """The arrival rate the plan holds (requests over the span of their due times). Units: 1/s."""
        span = max(self.offsets_s, default=0.0) - min(self.offsets_s, default=0.0)
        return (len(self.offsets_s) - 1) / span if span > 0 else math.inf


def plan_load(
    prompts: Sequence[Prompt], rate: float | None, concurrency: int | None, seed: int = 0
) -> LoadPlan:
    """Poisson arrivals at ``rate`` (``inf``: all at once), the prompts' own ``arrival_s``, or,
    with ``concurrency`` alone, a closed loop (each request sent as one ends).

    Raises:
        UsageError: neither a rate, nor times, nor a concurrency; or a rate beside the file's times.
    """
    timed = [p.arrival_s for p in prompts if p.arrival_s is not None]
    if concurrency is not None and concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {concurrency}")
    if timed:
        if rate is not None:
            raise UsageError("the prompts give their own arrival_s: leave out --rate")
        return LoadPlan(tuple(float(t) for t in timed), concurrency)
    if rate is None:
        if concurrency is None:
            raise UsageError("give --rate R (Poisson arrivals, R per second), --concurrency N, or both")
        return LoadPlan((0.0,) * len(prompts), concurrency)
    if not rate > 0:
        raise UsageError(f"--rate must be above 0 (requests per second; inf sends all at once), got {rate:g}")
    if math.isinf(rate):
        return LoadPlan((0.0,) * len(prompts), concurrency, rate)
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for i in range(len(prompts)):
        offsets.append(t)
        t += rng.expovariate(rate) if i + 1 < len(prompts) else 0.0
    return LoadPlan(tuple(offsets), concurrency, rate)


@dataclass(frozen=True)
class LoadResult:
    """What the load did.

    Args:
        records: every request sent, in the prompts' order.
        unsent: requests never sent (the load was interrupted first).
        interrupted: why the load ended early (``None``: it did not).
        started_s: the load's start on ``time.monotonic()``. Units: s.
    """

    records: tuple[RequestRecord, ...]
    unsent: int = 0
    interrupted: str | None = None
    started_s: float = 0.0

    @property
    def client_lag_s(self) -> list[float]:
        """Per request, sent minus ready: what this client added. Units: s."""
        return [max(0.0, r.sent_s - r.ready_s) for r in self.records]

    @property
    def slot_wait_s(self) -> list[float]:
        """Per request, ready minus due: the wait for a ``--concurrency`` slot. Units: s."""
        return [max(0.0, r.ready_s - r.scheduled_s) for r in self.records]


class _Stopper:
    """SIGINT and SIGTERM cancel the load's tasks (every request then ends ``cancelled``, and
    the run is saved); the process's own handlers come back afterwards."""

    SIGNALS = {signal.SIGINT: "interrupted by SIGINT", signal.SIGTERM: "terminated by SIGTERM"}

    def __init__(self, loop: asyncio.AbstractEventLoop, tasks: Sequence[asyncio.Future]) -> None:
        self.loop, self.tasks = loop, tasks
        self.reason: str | None = None
        self.previous: dict[int, object] = {}

    def __enter__(self) -> _Stopper:
        for sig in self.SIGNALS:
            try:
                previous = signal.getsignal(sig)
                self.loop.add_signal_handler(sig, self.stop, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread: no signals here
                continue
            self.previous[sig] = previous
        return self

    def stop(self, sig: int) -> None:
        self.reason = self.reason or self.SIGNALS[signal.Signals(sig)]
        for task in self.tasks:
            task.cancel()

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self.previous.items():
            self.loop.remove_signal_handler(sig)
            if previous is not None:
                signal.signal(sig, previous)  # type: ignore[arg-type]


async def run_load(prompts: Sequence[Prompt], plan: LoadPlan, send: Send) -> LoadResult:
    """Send every prompt when it is due, with at most ``plan.concurrency`` in flight."""
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(plan.concurrency) if plan.concurrency else None
    start = time.monotonic()

    async def one(prompt: Prompt, offset_s: float) -> RequestRecord:
        due = start + offset_s
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if slots is None:
            return await send(prompt, due, time.monotonic())
        async with slots:
            return await send(prompt, due, time.monotonic())

    tasks = [asyncio.ensure_future(one(p, t)) for p, t in zip(prompts, plan.offsets_s)]
    with _Stopper(loop, tasks) as stopper:
        done = await asyncio.gather(*tasks, return_exceptions=True)
    records = tuple(r for r in done if isinstance(r, RequestRecord))
    failed = [r for r in done if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)]
    if failed:  # a bug of ours, not the server's: said, not hidden
        raise failed[0]
    return LoadResult(records, len(prompts) - len(records), stopper.reason, start)
