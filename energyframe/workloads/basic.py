"""Small built-in workloads: ``sleep`` (an idle reference) and ``cpu-matmul`` (CPU work)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..model import Phase
from ..options import Option
from ..plugin import Workload


def _matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Callable[[], None]:
    """One step: ``c = a @ b`` in place."""

    def step() -> None:
        np.matmul(a, b, out=c)

    return step


class SleepWorkload(Workload):
    """Nothing runs for a while: the idle reference every comparison needs."""

    DESCRIPTION = "sleep (an idle reference window)"
    OPTIONS = (Option("seconds", "float", 1.0, "length of each window. Units: s", minimum=0.0),)

    def phases(self) -> Sequence[Phase]:
        seconds = self.options["seconds"]
        return [Phase(name="sleep", step=lambda: time.sleep(seconds), iterations=1, warmup=0)]

    def info(self) -> Mapping[str, Any]:
        return {"device": "none"}


class CPUMatmulWorkload(Workload):
    """Dense matrix products on the CPU (numpy), one phase per size."""

    DESCRIPTION = "square matrix products on the CPU with numpy, one phase per size"
    OPTIONS = (
        Option("sizes", "int_list", (256,), "matrix sizes, one phase each", minimum=1, min_items=1),
        Option("dtype", "choice", "float32", "element type", choices=("float32", "float64")),
        Option("seed", "int", 0, "random seed of the inputs"),
    )

    def setup(self) -> None:
        rng = np.random.default_rng(self.options["seed"])
        dtype = np.dtype(self.options["dtype"])
        self._buffers = {
            n: (
                rng.standard_normal((n, n)).astype(dtype),
                rng.standard_normal((n, n)).astype(dtype),
                np.empty((n, n), dtype=dtype),
            )
            for n in self.options["sizes"]
        }

    def phases(self) -> Sequence[Phase]:
        out = []
        for n, (a, b, c) in self._buffers.items():
            out.append(
                Phase(
                    name=f"matmul-{n}",
                    step=_matmul(a, b, c),
                    work={"flop": 2.0 * n**3},
                )
            )
        return out

    def teardown(self) -> None:
        self._buffers = {}

    def info(self) -> Mapping[str, Any]:
        return {"device": "cpu", "dtype": self.options["dtype"], "sizes": list(self.options["sizes"])}
