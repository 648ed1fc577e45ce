"""Shared by the GPU benchmarks: a steady bf16 GEMM load and a tiny-kernel launch loop."""

from __future__ import annotations

import time


def gemm_step(size: int = 8192):
    """One back-to-back bf16 GEMM per call (~1.7 ms and ~700 W on an H200); returns (step, sync)."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)

    def step():
        torch.matmul(a, b, out=c)

    return step, torch.cuda.synchronize


def time_per_step(step, sync, n: int = 100) -> float:
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    sync()
    return (time.perf_counter() - t0) / n


def run_for(step, sync, seconds: float, batch: int = 8) -> int:
    """Keep the GPU busy for about ``seconds`` of host time; returns the steps issued."""
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(batch):
            step()
        n += batch
        sync()
    return n
