"""An edge of a counter window: where it lies between the counter's ticks, which estimator reads
it, what it may be off by; one entry point, ``counter_window``, calls the stages in order
(``window.py`` says which)."""

from .estimators import EdgeReading
from .evidence import Evidence
from .window import CounterTicks, Span, counter_window

__all__ = ["CounterTicks", "EdgeReading", "Evidence", "Span", "counter_window"]
