"""A known load pattern for aligning clocks: short bursts of full load with pauses between.

``--sync-pulse`` runs a few pulses before the first phase and after the last, so that a wall
meter's lag and drift can be estimated even when the workload itself is flat. The load is bf16
GEMMs on the GPU when torch sees one, else matrix products on every CPU core.
"""

from __future__ import annotations

import time

PULSES = 3
ON_S = 2.0
OFF_S = 2.0


class PulseLoad:
    """Runs a heavy load for a given time and waits for it to finish: on ``device`` (a rank's
    ``cuda:LOCAL_RANK`` under a launcher; the current GPU by default), when torch sees a GPU."""

    def __init__(self, device: str = "cuda") -> None:
        self.kind = "cpu"
        try:
            import torch

            if torch.cuda.is_available():
                a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
                self._gpu = (torch, a, torch.empty_like(a))
                self.kind = "gpu"
        except ImportError:
            pass
        if self.kind == "cpu":
            import numpy as np

            self._cpu = np.random.default_rng(0).standard_normal((1024, 1024))

    def sync(self) -> None:
        if self.kind == "gpu":
            self._gpu[0].cuda.synchronize(self._gpu[1].device)

    def run(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.kind == "gpu":
                torch, a, out = self._gpu
                for _ in range(4):
                    torch.matmul(a, a, out=out)
                torch.cuda.synchronize(a.device)
            else:
                self._cpu @ self._cpu
