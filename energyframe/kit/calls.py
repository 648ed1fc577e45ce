"""A plugin's call with a time budget: run it on a thread of its own and wait a bounded time.

A plugin call that blocks (a ``read()`` waiting for its device, a ``stop()`` joining a thread
that never ends, a reporter writing to a hung network share) must cost the run a bounded wait
and a message naming the call, never a hang: the caller waits on an ``Event``, which Ctrl-C
interrupts, and gives up after the budget; the call's thread is a daemon and is left behind.
Whatever the call raises, ``SystemExit`` and ``KeyboardInterrupt`` included, comes back as a
``PluginCallError`` that names it: a plugin must not end the process from a thread of ours.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..errors import EnergyFrameError


class CallTimeout(EnergyFrameError):
    """The call did not return within its budget (it goes on in a thread of its own)."""


class PluginCallError(EnergyFrameError):
    """The call raised what a plugin must not (``SystemExit``, ``KeyboardInterrupt``): ``error``."""

    def __init__(self, message: str, error: BaseException) -> None:
        super().__init__(message)
        self.error = error


def describe(error: BaseException) -> str:
    """``KeyError: 'x'``; ``sys.exit(9)`` for a ``SystemExit``."""
    if isinstance(error, SystemExit):
        return f"sys.exit({error.code!r})"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class BoundedCall:
    """``fn()`` running on a daemon thread named ``name``; ``wait`` it for a bounded time.

    Args:
        fn: the call.
        what: how messages name it (``"power source 'x': read()"``).
        on_late_return: called with the value when the call returns after the caller gave up
            (a ``start()`` that returned too late is stopped at once).
    """

    def __init__(
        self, fn: Callable[[], Any], what: str, name: str = "energyframe-call",
        on_late_return: Callable[[Any], None] | None = None,
    ) -> None:
        self.what = what
        self._fn = fn
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._abandoned = False
        self._on_late_return = on_late_return
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as e:  # SystemExit too: handed to the caller, never ends the process
            self._error = e
        with self._lock:
            self._done.set()
            late = self._abandoned and self._error is None
        if late and self._on_late_return is not None:
            try:
                self._on_late_return(self._value)
            except Exception:  # nobody is left to tell: the run already failed on this call
                pass

    @property
    def running(self) -> bool:
        """The call has not returned yet."""
        return not self._done.is_set()

    def wait(self, budget_s: float) -> Any:
        """The call's value, or what it raised, within ``budget_s``.

        Raises:
            CallTimeout: the call has not returned; it is abandoned (``on_late_return`` runs if it
                returns later).
            PluginCallError: the call raised ``SystemExit`` or ``KeyboardInterrupt``.
            Exception: what the call raised.
        """
        if not self._done.wait(budget_s):
            with self._lock:
                if not self._done.is_set():
                    self._abandoned = True
                    raise CallTimeout(f"{self.what} did not return within {budget_s:g} s")
        error = self._error
        if error is None:
            return self._value
        if isinstance(error, Exception):
            raise error
        raise PluginCallError(
            f"{self.what} raised {describe(error)}; a plugin must raise an exception, never end or "
            "interrupt the process",
            error,
        )


def call_within(fn: Callable[[], Any], budget_s: float, what: str, **kw: Any) -> Any:
    """``fn()`` with a time budget (``BoundedCall``)."""
    return BoundedCall(fn, what, **kw).wait(budget_s)
