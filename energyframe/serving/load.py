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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from .client import OK, RequestRecord
from .prompts import Prompt
from .summary import failure_counts

Send = Callable[[Prompt, float, float], Awaitable[RequestRecord]]
#: a send later than this after it could go is the client's lag. Units: s.
CLIENT_LAG_S = 0.02
#: an achieved rate under this share of the scheduled one is said to fall short
RATE_SHORTFALL = 0.95


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
    return _poisson_plan(len(prompts), rate, concurrency, seed)


def _poisson_plan(requests: int, rate: float, concurrency: int | None, seed: int) -> LoadPlan:
    """``requests`` arrivals of a Poisson process at ``rate`` (``inf``: all at once), the first at
    0, drawn from ``seed``. Units: 1/s."""
    if not rate > 0:
        raise UsageError(f"--rate must be above 0 (requests per second; inf sends all at once), got {rate:g}")
    if math.isinf(rate):
        return LoadPlan((0.0,) * requests, concurrency, rate)
    rng = random.Random(seed)
    offsets, t = [], 0.0
    for i in range(requests):
        offsets.append(t)
        t += rng.expovariate(rate) if i + 1 < requests else 0.0
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


def load_figures(plan: LoadPlan, load: LoadResult) -> dict[str, Any]:
    """The load's own figures for the summary: rates, unsent requests, the client's lag."""
    sent = sorted(r.sent_s for r in load.records)
    achieved = (len(sent) - 1) / (sent[-1] - sent[0]) if len(sent) > 1 and sent[-1] > sent[0] else math.nan
    lag = np.asarray(load.client_lag_s or [math.nan])
    wait = np.asarray(load.slot_wait_s or [math.nan])
    scheduled = plan.asked_rate if len(plan.offsets_s) > 1 and max(plan.offsets_s) > 0 else math.nan
    return {
        "unsent": load.unsent,
        "scheduled_rate_per_s": scheduled,
        "request_rate_per_s": achieved,
        "client_lag_p99_s": float(np.quantile(lag, 0.99)),
        "client_lag_max_s": float(np.max(lag)),
        "slot_wait_median_s": float(np.median(wait)),
    }


def load_warnings(figures: Mapping[str, Any], load: LoadResult) -> list[str]:
    """What the run says about the load: failures, missing usage, a rate that fell short, sends
    the client made late."""
    warnings = (
        _failures(load.records),
        _missing_usage(load.records),
        _rate_shortfall(figures),
        _client_lag(load.client_lag_s),
    )
    return [w for w in warnings if w is not None]


def _failures(records: Sequence[RequestRecord]) -> str | None:
    failed = [r for r in records if r.status != OK]
    if not failed:
        return None
    return (
        f"{len(failed)} of {len(records)} requests failed ({failure_counts(records)}); first: "
        f"{failed[0].request_id}: {failed[0].error}"
    )


def _missing_usage(records: Sequence[RequestRecord]) -> str | None:
    counted = [r for r in records if r.status == OK and r.output_tokens is None]
    if not counted:
        return None
    return (
        f"the server reported no usage for {len(counted)} request(s): their output tokens are the chunks "
        "of text counted (one token each) and their prompt tokens the prompts' own count"
    )


def _rate_shortfall(figures: Mapping[str, Any]) -> str | None:
    """A rate achieved under ``RATE_SHORTFALL`` of the scheduled one, and whose doing it was:
    the concurrency limit's (requests waited for a slot longer than the client lagged) or the
    client's."""
    scheduled, achieved = figures["scheduled_rate_per_s"], figures["request_rate_per_s"]
    if not (math.isfinite(scheduled) and math.isfinite(achieved) and achieved < RATE_SHORTFALL * scheduled):
        return None
    if figures["slot_wait_median_s"] > figures["client_lag_p99_s"]:
        cause = "the --concurrency limit held requests back until others ended (the server's pace)"
    else:
        cause = "this client sent them late: the client, not the server, limited the rate"
    return f"the requests went out at {achieved:.3g}/s, not the {scheduled:.3g}/s scheduled: {cause}"


def _client_lag(lag: list[float]) -> str | None:
    """Sends that left more than ``CLIENT_LAG_S`` after they could. Units: s."""
    late = sum(1 for x in lag if x > CLIENT_LAG_S)
    if not late:
        return None
    return (
        f"{late} of {len(lag)} requests left this client more than {CLIENT_LAG_S * 1e3:.0f} ms after they "
        f"could (the worst {max(lag) * 1e3:.0f} ms): a busy client delays sends and what they measure"
    )
