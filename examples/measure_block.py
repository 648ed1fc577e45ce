"""Measure your own code: named windows with ``ef.measure``.

Uses the GPU when torch sees one (NVML is auto-detected), else numpy on the CPU (timing only,
unless a power source such as RAPL is available).
"""

import energyframe as ef


def make_work():
    try:
        import torch

        if torch.cuda.is_available():
            a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
            return "gpu matmul", lambda: a @ a
    except ImportError:
        pass
    import numpy as np

    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    return "cpu matmul", lambda: a @ a


def main():
    label, step = make_work()
    with ef.measure(power="auto") as m:  # device synced at both edges of each window
        for _ in range(3):
            with m.window(label, iterations=200):
                for _ in range(200):
                    step()
    print(m.result.table())


if __name__ == "__main__":
    main()
