"""``serve_bench``: load a server, measure this machine's power meanwhile, and give every request
its share of the energy. The steps, in order:

    check the server -> warm-up requests -> start measuring (idle baseline) -> the load
      -> the segments recorded as windows -> finish (integrate, derive, save) -> reporters

The load runs on asyncio in this thread; the power sources sample in the background as in every
run. The windows are recorded after the load (``Measurement.record_window``): the requests'
edges were seen by the client, on this host's monotonic clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EnergyFrameError, RunInterrupted, ServerError, UsageError
from ..kit import registry
from ..kit.extras import check
from ..kit.registry import PowerArg, resolve_power
from ..lifecycle.measurement import Measurement
from ..lifecycle.reporting import run_reporters
from ..plugin import Reporter
from ..results.meta import COMPLETE, INCOMPLETE
from ..results.provenance import plugin_record, workload_record
from ..results.result import RunResult
from .client import OK
from .load import LoadPlan, LoadResult, load_figures, load_warnings, plan_load
from .prompts import Prompt, load_prompts
from .segments import BUSY_PHASE, IDLE_PHASE, SPAN_PHASE
from .server import ServerSettings, check_server, send_load, warm_up
from .summary import CONSERVATION_TABLE, conservation_sentence, failure_counts
from .timeline import busy, output_tokens, request_spans, segment_edges
from .workload import ServeBenchWorkload

log = logging.getLogger("energyframe")

#: how often a long load says how far it is. Units: s.
PROGRESS_S = 10.0


def record_segments(m: Measurement, workload: ServeBenchWorkload, load: LoadResult) -> None:
    """Every segment of the load as a window (``serve.busy`` / ``serve.idle``), then the whole
    load as one (``serve``), in the order of their ends."""
    records = load.records
    if not records:
        return
    by_id = {p.request_id: p for p in workload.prompts}
    planned = [
        r.prompt_tokens if r.prompt_tokens is not None else by_id[r.request_id].prompt_tokens for r in records
    ]
    spans = request_spans(records, planned)
    edges = segment_edges(spans)
    now = time.monotonic()
    edges = np.minimum(edges, now)  # a time put on the microsecond grid never lies ahead of now
    starts, ends = edges[:-1], edges[1:]
    active = busy(spans, starts, ends)
    for a, b, is_busy in zip(starts, ends, active):
        m.record_window(BUSY_PHASE if is_busy else IDLE_PHASE, float(a), float(b))
    m.record_window(SPAN_PHASE, float(edges[0]), float(edges[-1]))
    m.set_work(SPAN_PHASE, {"output_tokens": float(sum(output_tokens(r) for r in records))})
    workload.records, workload.spans, workload.span_start_s = records, tuple(spans), float(edges[0])


def serve_bench(
    url: str,
    prompts: str | Sequence[Prompt],
    *,
    model: str | None = None,
    requests: int | None = None,
    rate: float | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    endpoint: str = "chat",
    power: str | Sequence[PowerArg] = "auto",
    out: Path | str | None = None,
    idle_s: float = 5.0,
    request_timeout_s: float = 300.0,
    prefill_weight: float = 1.0,
    warmup_requests: int = 0,
    stream_usage: bool = True,
    extra_body: Mapping[str, Any] | None = None,
    reporters: Sequence[str | Reporter] = ("console",),
) -> RunResult:
    """Send requests to an OpenAI-compatible server and measure each one's energy (docs/serving.md).

    Args:
        url: the server's base URL (``http://127.0.0.1:8000/v1``); it must run on this machine,
            whose GPUs are measured.
        prompts: ``synthetic:prompt_tokens=512,output_tokens=128``, a JSONL file, or ``Prompt``s.
        model: the model to ask for (``None``: the first the server lists).
        requests: how many to send (a synthetic spec needs it; a file's lines by default).
        rate: Poisson arrivals per second (``inf``: all at once). Units: 1/s.
        concurrency: most requests in flight; alone, a closed loop of that many.
        seed: the arrivals' seed.
        endpoint: ``chat`` or ``completions``.
        power: as for ``ef.measure``.
        out: the run directory (``None``: in memory only).
        idle_s: the idle baseline measured before the load, for dynamic energy. Units: s.
        request_timeout_s: the longest one request may take. Units: s.
        prefill_weight: a prompt token's weight against a generated token's in the work model.
        warmup_requests: requests sent one by one before measuring.
        stream_usage: ask for ``usage`` in the stream (``transformers serve`` refuses it).
        extra_body: fields added to every request (``{"ignore_eos": True}`` for vLLM).
        reporters: reporter specs or instances, called with the saved run.

    Raises:
        UsageError: bad arguments, before anything starts.
        ServerError: the server does not answer (nothing measured), or it answered no request
            (the run is saved).
        RunInterrupted: SIGINT or SIGTERM; the finished requests are kept, the run saved incomplete.
    """
    check("httpx", "energyframe serve-bench")
    server = ServerSettings(url, model, endpoint, request_timeout_s, stream_usage, extra_body).checked()
    prompt_list = _prompt_list(prompts, requests)
    plan = plan_load(prompt_list, rate, concurrency, seed)
    the_reporters = [
        r for r in registry.create_all(registry.REPORTERS, list(reporters)) if isinstance(r, Reporter)
    ]
    workload = ServeBenchWorkload(
        url=url,
        model=model or "",
        endpoint=endpoint,
        prompts=prompts if isinstance(prompts, str) else f"{len(prompt_list)} prompts given",
        requests=len(prompt_list),
        rate=None if rate is None else f"{rate:g}",
        concurrency=concurrency,
        seed=seed,
        request_timeout_s=request_timeout_s,
        prefill_weight=prefill_weight,
        warmup_requests=warmup_requests,
    )
    sources, notes = resolve_power(power)
    chosen = asyncio.run(check_server(server))
    workload.options["model"] = chosen
    warm_up(server, chosen, prompt_list, warmup_requests)
    workload.prompts = prompt_list
    m = Measurement(
        sources,
        out=out,
        sync=None,
        meta={
            "workload": workload_record(workload),
            "reporters": [plugin_record(r) for r in the_reporters],
            "config": {"idle_s": idle_s},
        },
        notes=notes,
        idle_s=idle_s,
        workload=workload,
    )
    workload.warn = m.warn
    return _measure(m, workload, server, prompt_list, plan, the_reporters, out)


def _prompt_list(prompts: str | Sequence[Prompt], requests: int | None) -> list[Prompt]:
    """The prompts to send, from a spec or given; at least one, each with its own id."""
    prompt_list = load_prompts(prompts, requests) if isinstance(prompts, str) else list(prompts)
    if not prompt_list:
        raise UsageError("no prompts to send")
    ids = [p.request_id for p in prompt_list]
    if len(set(ids)) != len(ids):
        raise UsageError(
            f"two prompts have the id {next(i for i in ids if ids.count(i) > 1)!r}; each request needs its own"
        )
    return prompt_list


def _measure(
    m: Measurement,
    workload: ServeBenchWorkload,
    server: ServerSettings,
    prompts: Sequence[Prompt],
    plan: LoadPlan,
    reporters: Sequence[Reporter],
    out: Path | str | None,
) -> RunResult:
    """Start measuring, run the load, record its segments, save; an error of ours on the way
    still saves the run, incomplete, and is raised."""
    try:
        m.start()
    except KeyboardInterrupt as e:
        raise RunInterrupted("interrupted by SIGINT while the power sources started") from e
    log.info("sending %d requests to %s (%s)", len(prompts), server.url, workload.options["model"])
    try:
        load = _load(m, workload, server, prompts, plan)
    except KeyboardInterrupt:  # while the windows were recorded: keep what was measured
        why = "interrupted by SIGINT while the load's windows were recorded"
        m.finish(INCOMPLETE, why)
        raise RunInterrupted(f"{why}{_saved(out)}") from None
    except BaseException as e:  # a bug of ours: the run is kept, and the error raised
        m.finish(INCOMPLETE, f"{type(e).__name__} after the load: {e}")
        raise
    status, reason = COMPLETE, None
    if load.interrupted:
        status, reason = (
            INCOMPLETE,
            f"{load.interrupted} after {len(load.records)} of {len(prompts)} requests were sent",
        )
    try:
        result = m.finish(status, reason)
    except KeyboardInterrupt:
        raise RunInterrupted("interrupted by SIGINT while saving") from None
    _say_conservation(result)
    run_reporters(reporters, result, Path(out) if out is not None else None)
    error = _outcome(result, load, out)
    if error is not None:
        error.result = result  # type: ignore[attr-defined]
        raise error
    return result


def _load(
    m: Measurement,
    workload: ServeBenchWorkload,
    server: ServerSettings,
    prompts: Sequence[Prompt],
    plan: LoadPlan,
) -> LoadResult:
    """The load, then its segments recorded as windows and what the run says about it."""
    try:
        load = asyncio.run(send_load(server, workload.options["model"], prompts, plan, PROGRESS_S))
    except KeyboardInterrupt:  # a Ctrl-C the load's own handler did not see (before it began)
        load = LoadResult((), len(prompts), "interrupted by SIGINT", time.monotonic())
    record_segments(m, workload, load)
    workload.load_figures = load_figures(plan, load)
    for warning in load_warnings(workload.load_figures, load):
        m.warn(warning)
    return load


def _saved(out: Path | str | None) -> str:
    return f"; the run is saved in {out}" if out is not None else ""


def _say_conservation(result: RunResult) -> None:
    try:
        row = result.derived_table(CONSERVATION_TABLE).rows[0]
    except KeyError:
        return
    log.info("%s", conservation_sentence(row))


def _outcome(result: RunResult, load: LoadResult, out: Path | str | None) -> EnergyFrameError | None:
    """The error the run ends with, if any (it is saved already)."""
    saved = _saved(out)
    if load.interrupted:
        return RunInterrupted(f"{result.reason}{saved}")
    if result.status != COMPLETE:
        return EnergyFrameError(f"run incomplete: {result.reason}{saved}")
    if load.records and not any(r.status == OK for r in load.records):
        hint = ""
        if any("stream_options" in r.error for r in load.records):
            hint = " (the server refuses stream_options: give --no-stream-usage)"
        first = load.records[0]
        return ServerError(
            f"every request failed ({failure_counts(load.records)}){hint}; first: {first.request_id}: {first.error}{saved}"
        )
    return None
