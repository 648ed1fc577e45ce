"""The earlier tool's add + ReLU kernel with energyframe's GraphKernel.

On a GPU the two launches are captured 100 times into one CUDA graph and replayed; per-call time
and energy are the window's totals over the calls. Without CUDA it runs eagerly on the CPU.
"""

import torch

import energyframe as ef

M = N = 4096 if torch.cuda.is_available() else 512
DTYPE = torch.float16 if torch.cuda.is_available() else torch.float32


def setup(device):
    a = torch.randn(M, N, dtype=DTYPE, device=device)
    b = torch.randn(M, N, dtype=DTYPE, device=device)
    return a, b, torch.empty(M, N, dtype=DTYPE, device=device)


def capture(state):
    a, b, out = state
    torch.add(a, b, out=out)  # no allocation inside the graph
    out.relu_()


if __name__ == "__main__":
    kernel = ef.GraphKernel("add_relu", setup, capture, unroll=100)
    result = ef.run(kernel, power="auto", settings=ef.RunSettings(trials=3, warmup_s=0.1))
    print(f"add+relu: {result.summary('add_relu').time_per_iter_s.median * 1e6:.1f} us per call")
