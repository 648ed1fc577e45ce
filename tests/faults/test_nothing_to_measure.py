"""Work that cannot be measured is refused with its reason, never run into an empty "complete"
result: a trace of a workload that runs no PyTorch op, a replay in which no op could be rebuilt
(and ops left out of a replay are said). An idle baseline above the loaded power is flagged and
explained, never printed as a plain negative number.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import energyframe as ef
from energyframe.cli import main
from energyframe.core.vocabulary import IDLE_ABOVE_LOAD
from energyframe.kit.polling import PollingSource
from energyframe.plugin import Channel, ClockBase, Phase, Quantity, Sample, Scope
from tests.fakes import ListWorkload, spin

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def error_line(result) -> str:
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.slow  # imports torch
def test_a_trace_of_a_workload_without_pytorch_ops_is_refused_before_profiling(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "trace"
    result = CliRunner().invoke(main, ["trace", "--workload", "cpu-matmul:sizes=16", "--out", str(out)])
    assert result.exit_code == 2
    assert error_line(result) == (
        "Error: workload 'cpu-matmul:sizes=16' runs no PyTorch op in its phase 'matmul-16': energyframe trace "
        "records PyTorch ops and the GPU kernels they launch, and work done outside PyTorch (NumPy, as "
        "cpu-matmul does) leaves nothing to trace; trace a PyTorch workload (energyframe list workloads)"
    )
    assert not (out / "trace.json.gz").exists() and not (out / "trace_meta.json").exists()


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory) -> Path:
    """The tiny BLOOM trace of an H200, imported (ops.jsonl, kernels.jsonl, trace_meta.json)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("trace") / "bloom"
    result = CliRunner().invoke(
        main, ["trace", "import", str(FIXTURES / "kineto-h200" / "bloom-tiny.json.gz"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    return out


def replay(trace_dir: Path, out: Path) -> object:
    return CliRunner().invoke(
        main,
        ["run", "--power", "none", "--workload", f"replay:trace={trace_dir},full=none,device=cpu,limit=3",
         "--trials", "2", "--min-window", "0.01", "--warmup-s", "0", "--out", str(out)],
    )


@pytest.mark.slow  # imports torch
def test_a_replay_in_which_no_op_rebuilds_is_refused_with_the_first_reason(trace_dir, tmp_path, monkeypatch):
    import energyframe.replay.workload as replay_workload

    def recursion(record, hint):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(replay_workload, "rebuild", recursion)
    out = tmp_path / "run"
    result = replay(trace_dir, out)
    message = (
        f"none of the 3 ops of {trace_dir} could be rebuilt, so there is nothing to replay (the first, "
        "aten::native_layer_norm: RecursionError: maximum recursion depth exceeded)"
    )
    assert error_line(result) == f"Error: {message}"
    assert result.exit_code == 1
    meta = json.loads((out / "run.json").read_text())
    assert (meta["status"], meta["reason"]) == ("incomplete", message)


@pytest.mark.slow  # imports torch, measures two ops
def test_ops_left_out_of_a_replay_are_said(trace_dir, tmp_path, monkeypatch, caplog):
    import energyframe.replay.workload as replay_workload

    real = replay_workload.rebuild

    def first_fails(record, hint):
        if record["name"] == "aten::native_layer_norm":
            raise RecursionError("maximum recursion depth exceeded")
        return real(record, hint)

    monkeypatch.setattr(replay_workload, "rebuild", first_fails)
    result = replay(trace_dir, tmp_path / "run")
    assert result.exit_code == 0, result.output
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "rebuilt" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("1 of the trace's ops could not be rebuilt and are not replayed (")
    assert warnings[0].endswith(
        "the first, aten::native_layer_norm: RecursionError: maximum recursion depth exceeded); the not_rebuilt "
        "table lists them"
    )


#: whether the workload's phase has started (its set-up sets it)
STATE = {"loaded": False}


def load() -> None:
    STATE["loaded"] = True
    time.sleep(0.1)  # a few samples at the new power before the first window


class SteppedPower(PollingSource):
    """A counter at ``IDLE_W`` until the workload's phase starts, then at ``LOAD_W``: the idle
    baseline is measured above the loaded power (a GPU still boosted from set-up)."""

    DESCRIPTION = "test source"
    IDLE_W, LOAD_W = 300.0, 100.0

    def open(self):
        self._last = time.monotonic()
        self._energy = 0.0
        return [Channel("gpu", Quantity.ENERGY, Scope.GPU, 0.01, ClockBase.MONOTONIC)]

    def poll_interval_s(self):
        return 0.01

    def poll(self):
        now = time.monotonic()
        self._energy += (self.LOAD_W if STATE["loaded"] else self.IDLE_W) * (now - self._last)
        self._last = now
        return [Sample("gpu", now, self._energy)]


def measure_idle_then_load(source: PollingSource, out: Path | None = None):
    STATE["loaded"] = False
    phase = Phase(name="busy", step=lambda: spin(0.001), setup=load)
    return ef.run(
        ListWorkload([phase]),
        power=[source],
        reporters=[],
        out=out,
        settings=ef.RunSettings(trials=3, min_window_s=0.1, warmup_s=0.0, idle_s=0.3),
    )


def test_an_idle_baseline_above_the_loaded_power_is_flagged_and_explained(tmp_path):
    result = measure_idle_then_load(SteppedPower(name="stepped"), tmp_path / "run")
    windows = result.windows
    assert (windows["dynamic_energy_j"] < 0).all()
    assert all(IDLE_ABOVE_LOAD in str(f).split(";") for f in windows["flags"])
    (summary,) = result.summaries
    assert IDLE_ABOVE_LOAD in summary.flags
    (warning,) = [w for w in result.warnings if IDLE_ABOVE_LOAD in w]
    idle_w = result.meta["idle_baseline"]["gpu"]["power_w"]
    assert idle_w == pytest.approx(300.0, rel=0.05)
    assert warning.startswith(f"gpu: the idle baseline ({idle_w:.4g} W) is above the power of 3 window(s) of phase 'busy' (")
    assert warning.endswith(
        "their dynamic energy is negative (flag idle_above_load); the baseline was not idle (another process, "
        "clocks still high after set-up) or the work draws less than idle"
    )
    saved = json.loads((tmp_path / "run" / "run.json").read_text())
    assert warning in saved["warnings"]


class RisingPower(SteppedPower):
    IDLE_W, LOAD_W = 100.0, 300.0


def test_a_load_above_the_idle_baseline_is_not_flagged():
    result = measure_idle_then_load(RisingPower(name="rising"))
    assert all(math.isfinite(v) and v > 0 for v in result.windows["dynamic_energy_j"])
    assert not any(IDLE_ABOVE_LOAD in str(f) for f in result.windows["flags"])
    assert not any(IDLE_ABOVE_LOAD in w for w in result.warnings)
