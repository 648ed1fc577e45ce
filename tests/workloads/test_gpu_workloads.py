"""Graph-captured kernels, pipelines and per-layer models on a real GPU (``pytest -m gpu``)."""

import math

import pytest

import energyframe as ef
from energyframe.workloads.kernels import ElementwiseKernel, MatmulKernel

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

KERNELS = [
    "matmul:M=4096,K=4096,N=4096",
    "conv:N=32,C=64,M=64,P=56,Q=56,R=3,S=3",
    "dwconv:N=8,C=128,P=56,Q=56,R=31,S=31",
    "elementwise:op=add_relu,M=4096,N=4096",
    "layernorm:M=8192,N=4096",
    "softmax:M=8192,N=4096",
    "sdpa:B=4,H=16,L=2048,D=128,causal=true",
    "embedding:V=50272,D=4096,T=8192",
]
FAST = ef.RunSettings(trials=3, min_window_periods=2.5, warmup_s=0.1)


@pytest.fixture(scope="module", autouse=True)
def gpu():
    assert torch.cuda.is_available(), "these tests need a CUDA GPU"


@pytest.mark.parametrize("spec", KERNELS, ids=lambda s: s.split(":")[0])
def test_builtin_kernel_is_graph_captured_and_measured(spec):
    result = ef.run(spec, power=["nvml:gpus=0"], reporters=[], settings=FAST)
    name = spec.split(":")[0]
    s = result.summary(name, "gpu0")
    assert result.meta["workload"]["info"]["execution"] == "cuda graph"
    assert s.energy_per_iter_j.median > 0 and 50 < s.mean_power_w.median < 1200
    assert all(n % 100 == 0 for n in result.windows["iterations"])  # 100 calls per replay
    # energy per call is the window's energy over its calls
    assert s.energy_per_iter_j.median == pytest.approx(
        s.mean_power_w.median * s.time_per_iter_s.median, rel=0.1
    )


def test_pipeline_with_energy_and_idle_baseline():
    pipe = ef.Pipeline(
        "gemm_then_add",
        [
            ("gemm", MatmulKernel(M=8192, K=8192, N=8192)),
            ("add", ElementwiseKernel(op="add", M=8192, N=8192)),
        ],
    )
    result = ef.run(pipe, power=["nvml:gpus=0"], reporters=[], settings=ef.RunSettings(idle_s=1.0))
    totals = result.derived_table("summary").rows[0]
    assert 40 < totals["idle_power_w"] < 250
    assert totals["sum_energy_j"] > totals["dynamic_energy_j"] > 0
    # the add waits for the GEMM in a pipeline: idle energy is added, never removed
    assert totals["parallel_energy_j"] > totals["sum_energy_j"]


def test_resnet18_per_layer_closure():
    result = ef.run("per-layer:model=resnet18,batch=8,validate=true", power=["nvml:gpus=0"], reporters=[])
    summary = result.derived_table("summary").rows[0]
    layers = result.derived_table("layers").rows
    assert all(r["execution"] == "cuda graph" for r in layers)
    assert all(r["energy_j"] > 0 for r in layers)
    assert math.isfinite(summary["latency_diff_pct"]) and math.isfinite(summary["energy_diff_pct"])
    # a decomposition that lost a kind of layer would be off by tens of percent
    assert abs(summary["latency_diff_pct"]) < 20 and abs(summary["energy_diff_pct"]) < 20


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.nonzero(x),  # synchronises with the host: never captured
        lambda x: (x.mul_(1.0), torch.cuda.synchronize()),  # fails inside the capture
    ],
    ids=["host-sync", "capture-error"],
)
def test_uncapturable_call_runs_eagerly_and_random_numbers_still_work(call):
    from energyframe.workloads.graph import Captured

    device = torch.device("cuda")
    captured = Captured(lambda d: torch.ones(1024, device=d), call, 4, device)
    captured.build()
    assert captured.fallback is not None and captured.fallback.startswith("eager: ")
    captured.step()
    captured.sync()
    assert torch.randn(16, device=device).isfinite().all()  # the generator survived
    print(captured.fallback)
    captured.release()


def test_a_call_that_branches_on_a_device_value_is_captured_with_the_eager_decision():
    """BART's fp16 layers clamp only if something overflowed, decided by a host read: the capture
    fixes the read as the eager calls made it (workloads/host_reads.py)."""
    from energyframe.workloads.graph import Captured

    def call(state):
        h = state["x"] * 2.0
        if not torch.isfinite(h).all():
            h = torch.clamp(h, min=-1e4, max=1e4)
        state["out"].copy_(h)

    device = torch.device("cuda")
    captured = Captured(
        lambda d: {
            "x": torch.ones(1024, device=d, dtype=torch.float16),
            "out": torch.zeros(1024, device=d, dtype=torch.float16),
        },
        call,
        4,
        device,
        check_sync=False,
    )
    captured.build()
    assert captured.fallback is None and captured.fixed_reads == 1
    state = captured._keep[0]
    state["x"].fill_(3.0)
    captured.step()
    captured.sync()
    assert torch.equal(state["out"], torch.full_like(state["out"], 6.0))  # the graph's own work
    captured.release()


def test_per_layer_timed_at_capture_ahead_with_auto_granularity_and_kernel_gaps():
    """The candidate fast path: windows counted from each unit's replay time, every unit captured
    before the first window, granularity chosen from the model, the launch gap measured."""
    spec = (
        "per-layer:model=resnet18,batch=8,validate=true,kernel_gaps=true,granularity=auto,"
        "window_s=0.1,lead_s=0.05,prepare=ahead"
    )
    result = ef.run(spec, power=["nvml:gpus=0"], reporters=[], settings=ef.RunSettings(idle_s=1.0))
    assert result.complete
    info = result.meta["workload"]["info"]
    summary = result.derived_table("summary").rows[0]
    layers = result.derived_table("layers").rows
    assert summary["granularity_choice"].startswith(f"auto: {summary['granularity']} (")
    assert info["units_captured_ahead"] == len(layers)
    assert all(r["execution"] == "cuda graph" for r in layers)
    for row in layers:  # a fixed count of replays per window, the same in each trial
        windows = result.windows[result.windows["phase"] == row["stage"]]
        assert set(windows["iterations"]) == {row["steps_per_window"] * 100}
    closure = result.derived_table("closure")
    gaps = next(r for r in closure.rows if r["term"] == "launch gaps (measured)")
    assert math.isfinite(summary["kernel_gap_s"]) and gaps["cause"]
    assert all(r["cause"] for r in closure.rows)
    print(summary["granularity_choice"], summary["kernel_gap_s"], summary["residual_cause"])


def test_per_layer_rotated_inputs_at_batch_1():
    result = ef.run(
        "per-layer:model=resnet18,batch=1,activations=rotate,window_s=0.1",
        power=["nvml:gpus=0"],
        reporters=[],
    )
    layers = result.derived_table("layers").rows
    assert all(r["execution"] == "cuda graph" for r in layers)
    assert max(r["input_copies"] for r in layers) > 1  # batch-1 activations are far smaller than the L2
