"""A pipeline of two layers, as in the earlier tool's ``pipeline_benchmark``: per-layer latency
and energy, the pipeline totals, and the energy under full pipeline parallelism."""

import torch

import energyframe as ef
from energyframe.workloads.kernels import ConvKernel, MatmulKernel

GPU = torch.cuda.is_available()
DTYPE = "fp16" if GPU else "fp32"


def my_pipeline(n: int) -> ef.Pipeline:
    return ef.Pipeline(
        f"MyPipeline_N{n}",
        [
            (
                "conv3x3",
                ConvKernel(
                    C=64,
                    G=1,
                    M=64,
                    N=n,
                    P=56 if GPU else 14,
                    Q=56 if GPU else 14,
                    R=3,
                    S=3,
                    HS=1,
                    WS=1,
                    dtype=DTYPE,
                    unroll=100 if GPU else 5,
                ),
            ),
            ("fc", MatmulKernel(M=1000, K=2048, N=n, dtype=DTYPE, unroll=100 if GPU else 5)),
        ],
    )


if __name__ == "__main__":
    result = ef.run(my_pipeline(1), power="auto", settings=ef.RunSettings(idle_s=0.5 if GPU else 0.0))
    totals = result.derived_table("summary").rows[0]
    print(f"pipeline: {totals['sum_latency_s'] * 1e6:.1f} us per item over {totals['stages']} stages")
