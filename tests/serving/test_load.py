"""When requests are due, how many fly at once, and Ctrl-C (energyframe/serving/load.py)."""

import asyncio
import math
import os
import signal
import time

import pytest

from energyframe.errors import UsageError
from energyframe.serving.client import CANCELLED, OK, RequestRecord
from energyframe.serving.load import LoadPlan, plan_load, run_load
from energyframe.serving.prompts import Prompt

PROMPTS = [Prompt(f"r{i}", text="x") for i in range(200)]


def test_poisson_arrivals_have_the_rate_and_a_seed():
    plan = plan_load(PROMPTS, 4.0, None, seed=1)
    gaps = [b - a for a, b in zip(plan.offsets_s, plan.offsets_s[1:])]
    assert plan.offsets_s[0] == 0.0 and all(g >= 0 for g in gaps)
    assert sum(gaps) / len(gaps) == pytest.approx(0.25, rel=0.2)  # 199 exponential gaps of mean 1/4 s
    assert plan_load(PROMPTS, 4.0, None, seed=1) == plan != plan_load(PROMPTS, 4.0, None, seed=2)
    assert plan.asked_rate == pytest.approx(199 / plan.offsets_s[-1])
    assert plan_load(PROMPTS[:3], math.inf, 2).offsets_s == (0.0, 0.0, 0.0)


def test_a_closed_loop_and_a_files_own_times():
    assert plan_load(PROMPTS[:3], None, 2) == LoadPlan((0.0, 0.0, 0.0), 2)
    timed = [Prompt("a", text="x", arrival_s=0.5), Prompt("b", text="x", arrival_s=0.1)]
    assert plan_load(timed, None, None).offsets_s == (0.5, 0.1)
    with pytest.raises(UsageError, match="give their own arrival_s: leave out --rate"):
        plan_load(timed, 2.0, None)


@pytest.mark.parametrize(
    "rate, concurrency, message",
    [
        (None, None, "give --rate R (Poisson arrivals, R per second), --concurrency N, or both"),
        (0.0, None, "--rate must be above 0 (requests per second; inf sends all at once), got 0"),
        (None, 0, "--concurrency must be at least 1, got 0"),
    ],
)
def test_plans_that_cannot_run(rate, concurrency, message):
    with pytest.raises(UsageError) as e:
        plan_load(PROMPTS[:2], rate, concurrency)
    assert str(e.value) == message


def fake_send(hold_s, in_flight):
    """A send that takes ``hold_s`` and counts the requests in flight."""

    async def send(prompt, due, ready):
        in_flight["now"] += 1
        in_flight["most"] = max(in_flight["most"], in_flight["now"])
        sent = time.monotonic()
        try:
            await asyncio.sleep(hold_s)
        except asyncio.CancelledError:
            return RequestRecord(prompt.request_id, CANCELLED, due, ready, sent, math.nan, time.monotonic())
        finally:
            in_flight["now"] -= 1
        return RequestRecord(prompt.request_id, OK, due, ready, sent, sent, time.monotonic())

    return send


def test_concurrency_caps_the_requests_in_flight_and_each_waits_for_a_slot():
    counts = {"now": 0, "most": 0}
    result = asyncio.run(
        run_load(PROMPTS[:12], LoadPlan((0.0,) * 12, concurrency=3), fake_send(0.01, counts))
    )
    assert counts["most"] == 3
    assert [r.request_id for r in result.records] == [p.request_id for p in PROMPTS[:12]]
    assert result.unsent == 0 and result.interrupted is None
    assert sum(w > 0 for w in result.slot_wait_s) >= 9  # all but the first three waited for a slot


def test_sigint_cancels_the_load_keeping_every_request_sent():
    counts = {"now": 0, "most": 0}
    plan = LoadPlan((0.0, 0.0, 0.0, 60.0), None)

    async def load():
        asyncio.get_running_loop().call_later(0.2, os.kill, os.getpid(), signal.SIGINT)
        return await run_load(PROMPTS[:4], plan, fake_send(60.0, counts))

    before = signal.getsignal(signal.SIGINT)
    result = asyncio.run(load())
    assert result.interrupted == "interrupted by SIGINT"
    assert [r.status for r in result.records] == [CANCELLED] * 3
    assert result.unsent == 1
    assert signal.getsignal(signal.SIGINT) is before  # the process's own handler is back


def records_at(sends, ready=None, due=None):
    ready = ready or sends
    due = due or ready
    return tuple(
        RequestRecord(f"r{i}", OK, d, r, s, s + 0.1, s + 0.2, (s + 0.1,), output_tokens=1)
        for i, (s, r, d) in enumerate(zip(sends, ready, due))
    )


def test_a_rate_that_falls_short_says_whether_the_client_or_the_server_held_it_back():
    from energyframe.serving.load import LoadResult, load_figures, load_warnings

    plan = LoadPlan(tuple(0.1 * i for i in range(11)), None, 10.0)  # 10 per second, scheduled
    on_time = LoadResult(records_at([0.1 * i for i in range(11)]))
    figures = load_figures(plan, on_time)
    assert figures["request_rate_per_s"] == pytest.approx(10.0) and load_warnings(figures, on_time) == []
    # the client sent each 50 ms after it could: half the rate, and its own doing
    late = LoadResult(records_at([0.2 * i for i in range(11)], ready=[0.2 * i - 0.05 for i in range(11)]))
    said = load_warnings(load_figures(plan, late), late)
    assert said == [
        "the requests went out at 5/s, not the 10/s scheduled: this client sent them late: the client, not the "
        "server, limited the rate",
        "11 of 11 requests left this client more than 20 ms after they could (the worst 50 ms): a busy client "
        "delays sends and what they measure",
    ]
    # the --concurrency slots held them: the server's pace, said as such
    held = LoadResult(records_at([0.2 * i for i in range(11)], due=[0.1 * i for i in range(11)]))
    assert load_warnings(load_figures(plan, held), held) == [
        "the requests went out at 5/s, not the 10/s scheduled: the --concurrency limit held requests back until "
        "others ended (the server's pace)"
    ]
