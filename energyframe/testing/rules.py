"""The contract's rules by name, and the error that names the one a plugin broke.

Each rule is one promise of docs/writing-plugins.md (and docs/polling.md) that a run relies on;
the conformance checks raise ``ContractError`` with the rule's name first, so that a failing
test says which promise was broken and what to do, in one line.
"""

from __future__ import annotations

#: every rule the checks enforce: name -> the promise, as docs/writing-plugins.md states it
RULES: dict[str, str] = {
    # declaration
    "declaration": "a plugin subclasses its base, has a one-line DESCRIPTION and OPTIONS of Option()s",
    "option-name": "an option called 'name' needs a constructor that takes the plugin's own name positionally "
    "(def __init__(self, name=None, /, **options)), or the two collide",
    # power sources: what start() declares
    "start-errors": "start() raises PowerSourceError saying what to do, nothing else",
    "start-budget": "start() returns within the run's start budget",
    "channels": "start() returns a non-empty list of Channel with unique names, energy in J and power in W",
    "resolution": "an energy or power channel's resolution_s is how often its reading changes (its update "
    "period, > 0), not how often it is polled",
    "averaging": "a PERIOD_END or UNKNOWN channel declares the period it averages over (averaging_s > 0)",
    "poll-rate": "a reading the base stamps is polled faster than the channel updates (interval < resolution_s)",
    # power sources: what read() hands over
    "read-budget": "read() returns within READ_BUDGET_S, handing over what the source buffered",
    "read-errors": "read() raises PowerSourceError, nothing else",
    "samples": "read() returns a list of Sample of declared channels, finite times, oldest first",
    "clock-base": "a sample's time is on its channel's declared clock (time.monotonic() or Unix time)",
    "units": "values are SI: W and J, never mW, µW or µJ (no reading beyond MAX_POWER_W)",
    "counter": "a counter never goes down (wraparound undone in the plugin)",
    "delivers": "every energy and power channel delivers samples",
    "keep-alive": "a steady channel still delivers a sample at least every 3 update periods (the gap rule)",
    "stalled-counter": "a counter that stops changing is not repeated as fresh (the run must see it stall)",
    "repeats": "an unchanged value is not repeated just before the next update (it bends the line into "
    "a step): stamp changes (Dedup.AUTO/CHANGES/TICKS)",
    "stop": "stop() returns within the run's stop budget, and may be called twice",
    "info": "info() returns a JSON-serialisable mapping",
    "detect": "detect() returns a Detection",
    # workloads
    "phase-names": "phase names are unique within a run (two phases of one name would be merged)",
    "run-defaults": "run_defaults() names RunSettings fields with valid values",
    "completes": "the workload runs to the end through the real orchestrator",
    # reporters
    "report-variants": "report() presents every result a run can produce (interrupted, NaN and uncovered "
    "windows, timing only, dynamic energy), saved or not, without raising",
    "report-budget": "report() returns within the run's report budget",
    "report-cwd": "report() writes nothing into the current directory (write into run_dir, or a path given)",
    "report-mutates": "report() leaves the result as it found it (other reporters read it after)",
    # accuracy
    "accuracy": "every window's energy is within the tolerance the author claims, against a known profile",
}


class ContractError(AssertionError):
    """A plugin broke a promise of the plugin contract (docs/writing-plugins.md).

    ``rule`` is the promise's name in ``RULES`` (``None`` for an error raised by older code)."""

    def __init__(self, message: str, rule: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule


def broken(rule: str, message: str) -> ContractError:
    """The error for ``rule``, one line: ``rule <name>: <what happened>; <what to do>``."""
    assert rule in RULES, rule
    return ContractError(f"rule {rule}: " + " ".join(message.split()), rule)


def require(condition: bool, rule: str, message: str) -> None:
    if not condition:
        raise broken(rule, message)
