"""The per-layer wrapper's ways of preparing and timing units, on the CPU with a tiny model:
windows counted from the capture timing, capture ahead of the first window, granularity=auto,
rotated inputs, the closure table and its causes, and the options that do not go together."""

import pytest

import energyframe as ef
from energyframe.errors import OptionError
from energyframe.kit import registry
from energyframe.lifecycle.measurement import Measurement
from energyframe.workloads import graph, perlayer, unitplan
from energyframe.workloads.graph import Captured
from energyframe.workloads.models import ModelWorkload
from energyframe.workloads.perlayer import WHOLE_MODEL, PerLayer

torch = pytest.importorskip("torch")
nn = torch.nn

RUN = ef.RunSettings(trials=2, min_window_s=0.005, idle_s=0.0)


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.conv(x)) + x  # the add runs between leaf modules


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.Sequential(Block(8), Block(8))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.pool(self.blocks(self.stem(x))).flatten(1))


class Tiny(ModelWorkload):
    """A model small enough to run per layer in a second on the CPU."""

    DESCRIPTION = "tiny test model"
    BLOCKS = ("Block",)

    def build(self, device, dtype):
        model = TinyNet().to(device=device, dtype=dtype).eval()
        return model, (torch.randn(self.options["batch"], 3, 8, 8, device=device, dtype=dtype),), {}


def tiny(whole_unroll=1, **options):
    return PerLayer(model=Tiny(name="tiny", whole_unroll=whole_unroll), unroll=2, **options)


def run(workload, settings=RUN):
    return ef.run(workload, power="none", reporters=[], settings=settings)


@pytest.mark.parametrize(
    "spec,message",
    [
        (
            "per-layer:model=resnet18,kernel_gaps=true",
            "per-layer:model=resnet18: kernel_gaps=true needs validate=true (the gap is measured on the "
            "whole model's graph)",
        ),
        (
            "per-layer:model=resnet18,lead_s=0.05",
            "per-layer:model=resnet18: lead_s needs window_s (without it the run's calibration replays each "
            "unit before its windows)",
        ),
        (
            "per-layer:model=resnet18,window_s=0",
            "option 'window_s' of workload 'per-layer' must be >= 0.001, got 0.0",
        ),
        (
            "per-layer:model=resnet18,granularity=blocks",
            "option 'granularity' of workload 'per-layer' expects one of leaf, block, auto, got 'blocks'",
        ),
        (
            "per-layer:model=resnet18,prepare=later",
            "option 'prepare' of workload 'per-layer' expects one of each, ahead, got 'later'",
        ),
        (
            "per-layer:model=resnet18,activations=cold",
            "option 'activations' of workload 'per-layer' expects one of reuse, rotate, got 'cold'",
        ),
    ],
)
def test_options_that_cannot_run_are_refused(spec, message):
    with pytest.raises(OptionError) as e:
        registry.create(registry.WORKLOADS, spec)
    assert str(e.value) == message


def test_window_s_counts_each_units_replays_at_capture_instead_of_calibrating(monkeypatch):
    calibrated = []
    from energyframe.lifecycle import planning

    real = planning.calibrate
    monkeypatch.setattr(
        planning, "calibrate", lambda *a, **k: calibrated.append(a[0].name) or real(*a, **k)
    )
    w = tiny(window_s=0.01, lead_s=0.002, validate=True)
    result = run(w)
    assert calibrated == []  # no phase went through the run's calibration loop
    layers = result.derived_table("layers").rows
    windows = result.windows
    for row in layers:
        plan = next(p for p in w._plans.values() if p.name == row["stage"])
        assert row["steps_per_window"] == plan.steps == unitplan.steps_for_window(plan.step_s, 0.01)
        assert plan.lead == unitplan.lead_steps(plan.step_s, 0.002)
        iterations = set(windows[windows["phase"] == row["stage"]]["iterations"])
        assert iterations == {plan.steps * 2}  # replays x unroll, the same in every trial
    assert set(windows["phase"]) == {r["stage"] for r in layers} | {WHOLE_MODEL}
    summary = result.derived_table("summary").rows[0]
    assert summary["window_s"] == 0.01
    timings = result.meta["workload"]["info"]["prepare_timings_s"]
    assert {"build_model", "decompose", "capture", "probe"} <= set(timings)


def test_without_window_s_the_run_calibrates_as_before(monkeypatch):
    calibrated = []
    from energyframe.lifecycle import planning

    real = planning.calibrate
    monkeypatch.setattr(
        planning, "calibrate", lambda *a, **k: calibrated.append(a[0].name) or real(*a, **k)
    )
    w = tiny()
    result = run(w)
    stages = [r["stage"] for r in result.derived_table("layers").rows]
    assert calibrated == stages
    assert "steps_per_window" not in result.derived_table("layers").rows[0]


def _record_order(monkeypatch):
    events = []
    build, begin = Captured.build, Measurement.begin_window

    def recording_build(self):
        events.append("capture")
        return build(self)

    def recording_begin(self, name, *a, **k):
        events.append(f"window {name}")
        return begin(self, name, *a, **k)

    monkeypatch.setattr(Captured, "build", recording_build)
    monkeypatch.setattr(Measurement, "begin_window", recording_begin)
    return events


def test_prepare_ahead_captures_every_unit_before_the_first_window(monkeypatch):
    events = _record_order(monkeypatch)
    w = tiny(prepare="ahead", validate=True)
    result = run(w)
    units = len(w.decomposition.units)
    first_window = next(i for i, e in enumerate(events) if e.startswith("window"))
    assert events[:first_window] == ["capture"] * (units + 1)  # the whole model too
    assert "capture" not in events[first_window:]
    assert result.meta["workload"]["info"]["units_captured_ahead"] == units
    assert not any(p.built for p in w._plans.values())  # each released after its windows


def test_prepare_each_captures_just_before_measuring(monkeypatch):
    events = _record_order(monkeypatch)
    w = tiny(granularity="leaf")  # auto would first capture the whole model, to time it
    run(w)
    assert events[:2] == ["capture", f"window {w.decomposition.units[0].path}"]


def test_prepare_ahead_stops_when_gpu_memory_runs_low(monkeypatch):
    checks = []

    def low_after_two(device):
        checks.append(device)
        return len(checks) > 2

    monkeypatch.setattr(perlayer, "_memory_low", low_after_two)
    w = tiny(prepare="ahead")
    result = run(w)
    assert result.complete
    assert result.meta["workload"]["info"]["units_captured_ahead"] == 2
    assert len(result.derived_table("layers").rows) == len(w.decomposition.units)


def test_auto_keeps_leaf_units_when_the_gaps_are_small_and_says_why(monkeypatch):
    monkeypatch.setattr(unitplan, "ASSUMED_GAP_S", 1e-9)  # launch gaps negligible against any forward
    result = run(tiny(granularity="auto"))
    summary = result.derived_table("summary").rows[0]
    assert summary["granularity"] == "leaf"
    assert summary["granularity_choice"].startswith("auto: leaf (")
    note = result.derived_table("layers").note
    assert note.startswith(f"granularity: {summary['granularity_choice']}")
    assert result.meta["workload"]["info"]["granularity_choice"] == summary["granularity_choice"]


def test_auto_takes_blocks_when_the_gaps_would_be_large(monkeypatch):
    monkeypatch.setattr(unitplan, "ASSUMED_GAP_S", 10.0)  # any forward is short against this gap
    w = tiny(granularity="auto", validate=True, window_s=0.01)
    result = run(w)
    summary = result.derived_table("summary").rows[0]
    assert summary["granularity"] == "block" and summary["granularity_choice"].startswith("auto: block (")
    assert {r["type"] for r in result.derived_table("layers").rows} >= {"Block"}
    # the whole model timed to decide is the one validated: captured once
    assert w._whole.steps is not None and WHOLE_MODEL in set(result.windows["phase"])


def test_asked_granularity_is_said_too():
    result = run(tiny(granularity="block"))
    assert result.derived_table("summary").rows[0]["granularity_choice"] == "block (asked for)"


def test_the_closure_table_gives_every_residual_a_cause():
    result = run(tiny(validate=True, kernel_gaps=True, whole_unroll=2))
    closure = result.derived_table("closure")
    terms = [r["term"] for r in closure.rows]
    assert terms == ["whole model", "sum of units", "residual"]  # no graph on the CPU: no gap term
    assert all(r["cause"] for r in closure.rows)
    summary = result.derived_table("summary").rows[0]
    assert closure.rows[-1]["cause"] == summary["residual_cause"]
    assert closure.rows[0]["cause"] == "the reference: the forward, 2 per replay, eagerly, on the CPU"
    assert closure.rows[1]["latency_pct"] == pytest.approx(summary["latency_diff_pct"])
    if not closure.rows[-1]["cause"].startswith("within the noise"):
        assert (
            "no CUDA graph on the CPU" in closure.rows[-1]["cause"]
            or "ran eagerly" in closure.rows[-1]["cause"]
        )


def test_rotated_inputs_are_counted_per_unit():
    w = tiny(activations="rotate")
    result = run(w)
    # on the CPU there is no L2 to exceed: one copy, and the table says so
    assert {r["input_copies"] for r in result.derived_table("layers").rows} == {1}


@pytest.mark.parametrize("data_bytes", [1 << 20, 30 << 20, 99 << 20, 200 << 20])
def test_copies_together_exceed_twice_the_l2(data_bytes):
    l2 = 50 << 20
    n = graph.copies_for(data_bytes, l2)
    if n < graph.MAX_COPIES:
        assert n * data_bytes >= 2 * l2 and (n == 1 or (n - 1) * data_bytes < 2 * l2)
    else:
        assert n * data_bytes < 2 * l2  # bounded: tiny tensors get MAX_COPIES
    assert graph.copies_for(0, l2) == 1 and graph.copies_for(data_bytes, 0) == 1


def _benchmark():
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "perlayer_speed.py"
    spec = importlib.util.spec_from_file_location("perlayer_speed", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_speed_benchmark_reads_a_saved_per_layer_run(tmp_path):
    """The GPU benchmark's table comes from run.json and windows.csv: read a real saved run."""
    bench = _benchmark()
    ef.run(
        tiny(granularity="leaf", validate=True, kernel_gaps=True, window_s=0.01),
        power="none",
        reporters=[],
        out=tmp_path / "run",
        settings=ef.RunSettings(trials=3, idle_s=0.0),
    )
    row = bench.summarize(tmp_path / "run")
    assert row["status"] == "complete" and row["process_s"] > 0
    assert {"setup", "phase_setup", "windows", "save"} <= set(row["timings_s"])
    assert {"capture", "probe"} <= set(row["prepare_timings_s"])
    assert row["units"] == 6 and row["granularity"] == "leaf"
    assert row["residual_cause"] and [r["term"] for r in row["closure"]][-1] == "residual"
    assert row["window_s_median"] > 0
    with pytest.raises(SystemExit, match="unknown config or group 'fast'"):
        bench.select("fast", smoke=False)
    assert [c.id for c in bench.select("closure", smoke=False)] == [
        c.id for c in bench.CONFIGS if c.group == "closure"
    ]
