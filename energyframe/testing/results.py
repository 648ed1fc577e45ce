"""Small real results of every kind a run produces, and the workload and reporter checks.

``sample_result`` runs a tiny workload through the real orchestrator against a known 100 W
source; its variants are what a reporter meets in the field: an interrupted run, windows the
samples did not cover (NaN energy, ``uncovered``, a ``partial`` phase), a timing-only run, and a
run with an idle baseline (dynamic energy). ``check_reporter`` presents each, saved and not.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from ..core.summary import summarize
from ..core.vocabulary import UNCOVERED
from ..errors import EnergyFrameError
from ..kit.calls import BoundedCall, CallTimeout, PluginCallError, describe
from ..lifecycle import reporting
from ..lifecycle.config import RunSettings
from ..model import Phase
from ..offline.simulate import ProfilePowerSource as KnownProfileSource
from ..plugin import Reporter, Workload
from ..results.result import RunResult
from .power import declared
from .rules import broken, require

#: the kinds of result ``sample_result`` makes
VARIANTS = ("power", "uncovered", "timing-only", "dynamic")


def _step() -> None:
    end = time.perf_counter() + 0.001
    while time.perf_counter() < end:
        pass


class _Tiny(Workload):
    DESCRIPTION = "two tiny phases"

    def phases(self):
        return [Phase("first", _step), Phase("second", _step, work={"items": 4})]


@cache
def _measured(variant: str) -> RunResult:
    from ..lifecycle.orchestrator import run

    power: Any = "none" if variant == "timing-only" else [KnownProfileSource(profile=lambda t: 100.0)]
    idle = 0.1 if variant == "dynamic" else 0.0
    return run(_Tiny(name="tiny"), power=power, reporters=[],
               settings=RunSettings(trials=2, min_window_s=0.05, warmup=1, idle_s=idle))


def _uncovered(result: RunResult) -> RunResult:
    """The run as it would be had the samples not reached the first trial of ``second``."""
    windows = result.windows.copy()
    lost = (windows["phase"] == "second") & (windows["trial"] == 0)
    for column in ("energy_j", "mean_power_w", "energy_per_iter_j", "dynamic_energy_j", "dynamic_energy_per_iter_j"):
        windows.loc[lost, column] = math.nan
    windows.loc[lost, "flags"] = UNCOVERED
    work = {s.phase: dict(s.work) for s in result.summaries}
    return RunResult(result.meta, windows, result.samples, tuple(summarize(windows, work)))


def _copy(result: RunResult) -> RunResult:
    return RunResult(copy.deepcopy(dict(result.meta)), result.windows.copy(deep=True),
                     result.samples.copy(deep=True), tuple(result.summaries))


def sample_result(complete: bool = True, variant: str = "power") -> RunResult:
    """A small real result (known 100 W power, two phases, two trials each), finished or
    interrupted: what a reporter must be able to present. ``variant``:

    - ``"power"``: every window has its energy;
    - ``"uncovered"``: the samples did not reach one window: its energy is NaN, flagged
      ``uncovered``, and its phase's summary covers 1 of 2 trials (``partial``);
    - ``"timing-only"``: no power source: no channel, no energy;
    - ``"dynamic"``: an idle baseline, so windows and summaries have dynamic energy.

    Each call returns a fresh copy: a reporter may be checked for changing it.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(VARIANTS)}")
    result = _measured("power" if variant == "uncovered" else variant)
    if variant == "uncovered":
        result = _uncovered(result)
    result = _copy(result)
    if complete:
        return result
    meta = {**result.meta, "status": "incomplete", "reason": "interrupted by SIGINT"}
    return RunResult(meta, result.windows.iloc[:1], result.samples, tuple(result.summaries[:1]))


def sample_results() -> Iterator[tuple[str, RunResult]]:
    """Every kind of result a reporter must present, with a label: ``sample_result`` of each
    variant, and the interrupted run."""
    yield "a finished run", sample_result()
    yield "an interrupted run", sample_result(complete=False)
    yield "a run with an uncovered window (NaN energy)", sample_result(variant="uncovered")
    yield "a timing-only run", sample_result(variant="timing-only")
    yield "a run with dynamic energy", sample_result(variant="dynamic")


def check_workload(cls: type[Workload], options: Mapping[str, Any] | None = None) -> RunResult:
    """Measure ``cls`` briefly with no power source (one short window per phase) through the real
    orchestrator, and check what the contract promises. Returns the result.

    Raises:
        ContractError: the first promise broken, named (``.rule``).
    """
    declared(cls, Workload)
    workload = cls(cls.__name__.lower(), **dict(options or {}))  # the name positionally, as the registry passes it
    try:
        RunSettings.from_mapping(workload.run_defaults())
    except EnergyFrameError as e:
        raise broken("run-defaults", f"{cls.__name__}.run_defaults(): {e}") from e
    from ..lifecycle.orchestrator import run

    names: list[str] = []
    phases = workload.phases

    def recorded():  # the orchestrator asks the instance; each phase is seen as it is measured
        for phase in phases():
            require(phase.name not in names, "phase-names",
                    f"{cls.__name__}.phases() has two phases named {phase.name!r}: their windows would be summarised "
                    "as one phase (one median of both); give each phase its own name")
            names.append(phase.name)
            yield phase

    workload.phases = recorded  # type: ignore[method-assign]
    try:
        result = run(workload, power="none", reporters=[],
                     settings=RunSettings(trials=1, min_window_s=0.01, warmup=1, max_iterations=1000))
    except EnergyFrameError as e:
        cause = e.__cause__ or e.__context__
        if isinstance(cause, AssertionError):
            raise cause from None
        raise broken("completes", f"{cls.__name__} failed: {e}") from e
    require(result.complete, "completes", f"{cls.__name__} did not run to the end: {result.reason}")
    require(len(names) > 0, "completes", f"{cls.__name__}.phases() measured nothing")
    require(isinstance(workload.info(), Mapping), "completes", f"{cls.__name__}.info() must return a mapping")
    return result


def _fingerprint(result: RunResult) -> tuple[str, Any, Any]:
    summaries = [s.to_json() for s in result.summaries]
    text = json.dumps({"meta": result.meta, "summaries": summaries}, sort_keys=True, default=repr)
    return text, result.windows.copy(deep=True), result.samples.copy(deep=True)


def _unchanged(before: tuple[str, Any, Any], result: RunResult) -> str | None:
    text, windows, samples = before
    after = _fingerprint(result)
    if after[0] != text:
        return "its metadata or summaries"
    if not (windows.equals(result.windows) and list(windows.columns) == list(result.windows.columns)):
        return "its windows"
    if not samples.equals(result.samples):
        return "its samples"
    return None


@contextlib.contextmanager
def _inside(folder: Path):
    previous = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def _report_once(cls: type[Reporter], reporter: Reporter, label: str, result: RunResult, where: Path | None) -> None:
    state = f"{label} ({'saved' if where else 'not saved'})"
    before = _fingerprint(result)
    with tempfile.TemporaryDirectory(prefix="energyframe-cwd-") as cwd, _inside(Path(cwd)):
        call = BoundedCall(lambda: reporter.report(result, where), f"{cls.__name__}.report()")
        try:
            call.wait(reporting.REPORT_BUDGET_S)
        except CallTimeout as e:
            raise broken("report-budget", f"{cls.__name__}.report() did not return within "
                         f"{reporting.REPORT_BUDGET_S:g} s on {state}") from e
        except (Exception, PluginCallError) as e:
            error = e.error if isinstance(e, PluginCallError) else e
            raise broken("report-variants", f"{cls.__name__}.report() raised {describe(error)} on {state}: present "
                         "whatever a run gives (check result.status, NaN energy, channel '' for timing only)") from e
        left = sorted(p.name for p in Path(cwd).iterdir())
    require(not left, "report-cwd", f"{cls.__name__}.report() wrote {', '.join(left)} into the current directory on "
            f"{state}: write into run_dir (None: the run was not saved) or a path the user gave")
    changed = _unchanged(before, result)
    require(changed is None, "report-mutates", f"{cls.__name__}.report() changed {changed} on {state}: other "
            "reporters and the caller read the same result; work on a copy")


def check_reporter(cls: type[Reporter], options: Mapping[str, Any] | None = None) -> None:
    """Present every kind of result a run produces (``sample_results``), saved and not saved, from
    an empty current directory; the reporter must not raise, block, write into the current
    directory or change the result.

    Raises:
        ContractError: the first promise broken, named (``.rule``).
    """
    declared(cls, Reporter)
    reporter = cls(cls.__name__.lower(), **dict(options or {}))  # the name positionally, as the registry passes it
    with tempfile.TemporaryDirectory(prefix="energyframe-check-") as tmp:
        for i, (label, result) in enumerate(sample_results()):
            run_dir = Path(tmp) / f"run-{i}"
            result.save(run_dir)
            for where in (run_dir, None):
                _report_once(cls, reporter, label, result, where)

