"""The plugin kit's tests for plugin authors: conformance checks, results to report, an accuracy
harness.

    from energyframe.testing import check_power_source
    def test_my_source_keeps_the_contract(fake_device):
        check_power_source(MySource, {"url": fake_device.url}, run_s=2.0)

Each ``check_*`` runs a plugin the way a run does (start, read within ``READ_BUDGET_S``, stop
twice; set up, step, tear down; report every kind of result) and raises ``ContractError``
naming the first rule broken (``RULES``: ``rule clock-base: ...``), in one line with what to do.
``check_accuracy`` drives the author's fake device with a known power profile and measures it
through a real run, window by window. They use no GPU and no network of their own: the real code
runs, only the outside world is faked (pytest's ``pytester`` and llm's test plugins are the model).
"""

from __future__ import annotations

from ..offline.simulate import ProfilePowerSource as KnownProfileSource
from .accuracy import (
    AccuracyReport,
    Profile,
    Truth,
    WindowError,
    check_accuracy,
    constant,
    driving,
    monotonic_windows,
    sine,
    steps,
)
from .power import FakeContext, check_power_source
from .results import VARIANTS, check_reporter, check_workload, sample_result, sample_results
from .rules import RULES, ContractError

__all__ = [
    "RULES",
    "VARIANTS",
    "AccuracyReport",
    "ContractError",
    "FakeContext",
    "KnownProfileSource",
    "Profile",
    "Truth",
    "WindowError",
    "check_accuracy",
    "check_power_source",
    "check_reporter",
    "check_workload",
    "constant",
    "driving",
    "monotonic_windows",
    "sample_result",
    "sample_results",
    "sine",
    "steps",
]
