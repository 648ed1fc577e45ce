"""Built-in kernels and GraphKernel: shapes, work, and the eager CPU fallback (CI has no GPU)."""

import pytest

import energyframe as ef
from energyframe.errors import OptionError
from energyframe.workloads.graph import CPU_NOTE, Captured, torch_device
from energyframe.workloads.kernels import ConvKernel, DepthwiseConvKernel, MatmulKernel, conv_input_size

torch = pytest.importorskip("torch")
QUICK = ef.RunSettings(trials=2, min_window_s=0.02, warmup_s=0.0)

SMALL = [
    "matmul:M=64,K=32,N=16,dtype=fp32,unroll=3",
    "conv:N=1,C=8,M=16,P=8,Q=8,R=3,S=3,HS=2,WS=2,dtype=fp32,unroll=3",
    "dwconv:N=1,C=8,P=8,Q=8,R=7,S=7,dtype=fp32,unroll=3",
    "elementwise:op=add_relu,M=32,N=32,dtype=fp32,unroll=3",
    "elementwise:op=gelu,M=32,N=32,dtype=fp32,unroll=3",
    "layernorm:M=16,N=64,dtype=fp32,unroll=3",
    "softmax:M=16,N=64,dtype=fp32,unroll=3",
    "sdpa:B=1,H=2,L=16,D=8,causal=true,dtype=fp32,unroll=3",
    "embedding:V=100,D=16,T=8,dtype=fp32,unroll=3",
]


@pytest.mark.parametrize("spec", SMALL, ids=lambda s: s.split(":")[0])
def test_every_builtin_kernel_runs_eagerly_on_the_cpu(spec):
    result = ef.run(spec, power="none", reporters=[], settings=QUICK)
    name = spec.split(":")[0]
    summary = result.summary(name)
    assert summary.trials == 2 and summary.time_per_iter_s.median > 0
    # a step is one replay of the unrolled calls: iterations count calls
    assert all(n % 3 == 0 for n in result.windows["iterations"])
    assert result.meta["workload"]["info"]["execution"] == CPU_NOTE


def test_work_per_call():
    assert MatmulKernel(M=2, K=3, N=4).work() == {"flop": 48.0}
    conv = ConvKernel(N=2, C=8, M=16, G=2, P=4, Q=5, R=3, S=3)
    assert conv.work() == {"flop": 2.0 * 2 * 16 * 4 * 5 * 4 * 3 * 3}


def test_conv_shapes_follow_the_earlier_tools_names():
    assert conv_input_size(56, 1, 3) == 56
    assert conv_input_size(28, 2, 3) == 55
    assert conv_input_size(56, 1, 1) == 56
    x_shape, w_shape = ConvKernel(N=2, C=64, M=128, G=2, P=28, Q=28, R=3, S=3, HS=2, WS=2)._shapes()
    assert x_shape == (2, 64, 55, 55) and w_shape == (128, 32, 3, 3)
    state = ConvKernel(N=1, C=4, M=8, P=6, Q=6, R=3, S=3, dtype="fp32").make_state(torch.device("cpu"))
    out = torch.nn.functional.conv2d(state[0], state[1], padding=1)
    assert out.shape == (1, 8, 6, 6)
    assert state[0].is_contiguous(memory_format=torch.channels_last)


def test_depthwise_uses_one_filter_per_channel():
    k = DepthwiseConvKernel(C=32, P=8, Q=8, R=31, S=31)
    assert k.options["G"] == k.options["M"] == 32
    assert k._shapes()[1] == (32, 1, 31, 31)


def test_bad_groups_are_refused():
    with pytest.raises(OptionError, match=r"C \(6\) and M \(8\) must be multiples of G \(4\)"):
        ConvKernel(C=6, M=8, G=4)


def test_graphkernel_python_api_counts_calls():
    calls = []

    def setup(device):
        return torch.zeros(4, device=device)

    def capture(x):
        calls.append(1)
        x.add_(1)

    kernel = ef.GraphKernel("inc", setup, capture, unroll=7)
    result = ef.run(
        kernel, power="none", reporters=[], settings=ef.RunSettings(trials=2, min_window_s=0.01, warmup=1)
    )
    window_calls = int(result.windows["iterations"].sum())
    assert window_calls % 7 == 0
    assert len(calls) >= window_calls + 7  # the warm-up step ran the 7 calls too


def test_graphkernel_needs_both_functions():
    with pytest.raises(OptionError, match="GraphKernel needs setup"):
        ef.GraphKernel("x", setup=lambda d: None)


def test_captured_frees_its_state_between_phases():
    made = []
    captured = Captured(
        lambda d: made.append(torch.ones(3)) or made[-1], lambda s: s.mul_(2), 2, torch_device("cpu")
    )
    phase = captured.phase("p")
    phase.setup()
    phase.step()
    assert made[0].tolist() == [4.0, 4.0, 4.0]
    phase.teardown()
    assert captured._keep == []


def test_explicit_cuda_without_a_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; the error is for machines without one")
    with pytest.raises(
        ef.WorkloadError, match="device 'cuda' was asked for, but torch sees no CUDA GPU here"
    ):
        ef.run("matmul:M=8,K=8,N=8,device=cuda", power="none", reporters=[], settings=QUICK)


def test_matmul_on_the_cpu_defaults_to_fp32_and_one_call_per_step():
    # fp16 with 100 calls per step took 88 s per step for 512^3 on a CPU
    result = ef.run("matmul:M=32,K=16,N=8", power="none", reporters=[], settings=QUICK)
    options = result.meta["workload"]["options"]
    assert (options["dtype"], options["unroll"]) == ("fp32", 1)
    assert result.meta["workload"]["info"]["unroll"] == 1
    kernel = MatmulKernel(M=4, K=4, N=4)
    assert kernel.make_state(torch.device("cpu"))[0].dtype == torch.float32
    gpu = MatmulKernel(M=4, K=4, N=4)
    gpu._defaults(torch.device("cuda", 0))
    assert (gpu.options["dtype"], gpu.options["unroll"]) == ("fp16", 100)
    chosen = MatmulKernel(M=4, K=4, N=4, dtype="bf16", unroll=7)
    chosen._defaults(torch.device("cpu"))
    assert (chosen.options["dtype"], chosen.options["unroll"]) == ("bf16", 7)


def test_matmul_in_half_precision_on_the_cpu_says_why_it_is_slow():
    import logging

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("energyframe")
    logger.addHandler(handler)
    try:
        MatmulKernel("matmul", M=4, K=4, N=4, dtype="fp16")._defaults(torch.device("cpu"))
    finally:
        logger.removeHandler(handler)
    assert seen == [
        "matmul: fp16 matrix products on a CPU are emulated and far slower than fp32 (~50x for 512^3); "
        "dtype=fp32 measures what a CPU does well"
    ]
