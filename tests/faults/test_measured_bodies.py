"""``@ef.measured`` on a function whose call does not run its body: a generator function or an
``async def`` (whose window once held the 15 µs of creating the generator or the coroutine, for
a body of 0.6 s). Refused when decorated, naming the function and what to do; a plain function
that returns such an object is measured as a call, and the run says what its windows hold."""

from __future__ import annotations

import asyncio
import functools

import pytest

import energyframe as ef


def test_a_generator_function_is_refused_when_decorated():
    def batches(n):
        yield from range(n)

    with pytest.raises(ef.UsageError) as raised:
        ef.measured(power="none")(batches)
    assert str(raised.value) == (
        "@ef.measured cannot measure the generator function 'batches': a call only creates its generator, and "
        "the body runs later, as it is iterated, between other code; iterate it inside `with m.window(...)` of "
        "an ef.measure()"
    )


def test_an_async_function_is_refused_when_decorated():
    async def fetch():
        await asyncio.sleep(0.6)

    with pytest.raises(ef.UsageError) as raised:
        ef.measured(power="none", name="request")(fetch)
    assert str(raised.value) == (
        "@ef.measured cannot measure the async function 'request': a call only creates its coroutine, and the "
        "body runs later, as it is awaited, between other code; await it inside `with m.window(...)` of an "
        "ef.measure()"
    )


def test_async_generators_partials_and_callable_objects_are_refused_too():
    async def stream():
        yield 1

    async def fetch(x):
        return x

    class Handler:
        async def __call__(self):
            return 1

    for fn in (stream, functools.partial(fetch, 1), Handler()):
        with pytest.raises(ef.UsageError, match="^@ef.measured cannot measure the async function "):
            ef.measured(power="none", name="f")(fn)


def test_a_plain_function_returning_a_coroutine_is_measured_and_said(tmp_path):
    async def body():
        return 42

    def schedules():  # not a coroutine function itself: the decorator cannot tell beforehand
        return body()

    step = ef.measured(power="none", out=tmp_path)(schedules)
    coroutines = [step(), step()]
    assert [asyncio.run(c) for c in coroutines] == [42, 42]
    result = step.finish()
    assert len(result.windows) == 2
    (warning,) = [w for w in result.warnings if "schedules returned" in w]
    assert warning == (
        "schedules returned a coroutine that runs its work later: its windows hold the creation only, not the "
        "work (measure where it is iterated or awaited)"
    )


def test_an_ordinary_function_still_measures_its_body(tmp_path):
    step = ef.measured(power="none", out=tmp_path)(lambda: sum(range(1000)))
    assert step() == 499500
    result = step.finish()
    assert len(result.windows) == 1 and not [w for w in result.warnings if "returned" in w]
