"""Built-in kernels with their shapes as options, each CUDA-graph-captured (``graph.py``).

``energyframe run --power nvml --workload matmul:M=4096,K=4096,N=4096,dtype=fp16``. Convolution
shapes use the earlier tool's names: N batch, C input channels, M output channels, G groups,
P x Q output size, R x S filter, HS x WS strides; padding is R//2 x S//2, so the input is
((P-1)*HS + R - 2*(R//2)) x ((Q-1)*WS + S - 2*(S//2)).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ..errors import OptionError
from ..options import Option
from .graph import GRAPH_OPTIONS, GraphKernelWorkload, torch_device, torch_dtype

log = logging.getLogger("energyframe")

DTYPE = Option("dtype", "choice", "fp16", "element type", choices=("fp16", "bf16", "fp32"))
#: matmul's defaults by device: on a CPU, fp16 and bf16 products are far slower than fp32 (a
#: 512^3 fp16 product takes ~50x an fp32 one), and the calls run eagerly, so unrolling only
#: lengthens each step
MATMUL_DEFAULTS = {"cuda": {"dtype": "fp16", "unroll": 100}, "cpu": {"dtype": "fp32", "unroll": 1}}


def _randn(shape, dtype, device):
    import torch

    return torch.randn(shape, dtype=dtype, device=device)


class MatmulKernel(GraphKernelWorkload):
    """out[M, N] = A[M, K] @ B[K, N]. Defaults by device: fp16 and 100 calls per CUDA graph on a
    GPU; fp32 and one call per step on the CPU (``MATMUL_DEFAULTS``)."""

    DESCRIPTION = "matrix product out[M,N] = A[M,K] @ B[K,N]"
    OPTIONS = (
        Option("M", "int", 4096, "rows of A and out", minimum=1),
        Option("K", "int", 4096, "columns of A, rows of B", minimum=1),
        Option("N", "int", 4096, "columns of B and out", minimum=1),
        Option(
            "dtype",
            "choice",
            None,
            "element type (default: fp16 on a GPU, fp32 on the CPU)",
            choices=DTYPE.choices,
        ),
        *(
            Option(
                "unroll",
                "int",
                None,
                "calls captured per CUDA graph, one replay per step (default: 100 on a GPU, 1 on the CPU)",
                minimum=1,
            )
            if o.name == "unroll"
            else o
            for o in GRAPH_OPTIONS
        ),
    )

    def setup(self) -> None:
        super().setup()
        self._defaults(self.device)

    def _defaults(self, device) -> None:
        """Fill ``dtype`` and ``unroll`` left unset with the defaults of ``device``'s kind."""
        kind = "cuda" if device.type == "cuda" else "cpu"
        given = {k for k in ("dtype", "unroll") if self.options[k] is not None}
        for key, value in MATMUL_DEFAULTS[kind].items():
            if self.options[key] is None:
                self.options[key] = value
        if kind == "cpu" and "dtype" in given and self.options["dtype"] != "fp32":
            log.warning(
                "%s: %s matrix products on a CPU are emulated and far slower than fp32 (~50x for "
                "512^3); dtype=fp32 measures what a CPU does well",
                self.name,
                self.options["dtype"],
            )

    def make_state(self, device):
        import torch

        if self.options["dtype"] is None or self.options["unroll"] is None:
            self._defaults(torch_device(str(device)))
        o, dtype = self.options, torch_dtype(self.options["dtype"])
        a, b = _randn((o["M"], o["K"]), dtype, device), _randn((o["K"], o["N"]), dtype, device)
        return a, b, torch.empty((o["M"], o["N"]), dtype=dtype, device=device)

    def launch(self, state):
        import torch

        a, b, out = state
        torch.matmul(a, b, out=out)

    def work(self) -> Mapping[str, float]:
        o = self.options
        return {"flop": 2.0 * o["M"] * o["N"] * o["K"]}


def conv_input_size(out: int, stride: int, kernel: int) -> int:
    return (out - 1) * stride + kernel - 2 * (kernel // 2)


class ConvKernel(GraphKernelWorkload):
    """2-D convolution in the earlier tool's notation (C, G, M, N, P, Q, R, S, HS, WS)."""

    DESCRIPTION = "2-D convolution: N x C x H x W -> N x M x P x Q, filter R x S, groups G, strides HS x WS"
    OPTIONS: ClassVar[Sequence[Option]] = (
        Option("N", "int", 1, "batch", minimum=1),
        Option("C", "int", 64, "input channels", minimum=1),
        Option("M", "int", 64, "output channels", minimum=1),
        Option("G", "int", 1, "groups", minimum=1),
        Option("P", "int", 56, "output height", minimum=1),
        Option("Q", "int", 56, "output width", minimum=1),
        Option("R", "int", 3, "filter height", minimum=1),
        Option("S", "int", 3, "filter width", minimum=1),
        Option("HS", "int", 1, "vertical stride", minimum=1),
        Option("WS", "int", 1, "horizontal stride", minimum=1),
        Option("channels_last", "bool", True, "NHWC memory format (what cuDNN prefers for fp16)"),
        DTYPE,
        *GRAPH_OPTIONS,
    )

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        o = self.options
        if o["C"] % o["G"] or o["M"] % o["G"]:
            raise OptionError(f"{self.name}: C ({o['C']}) and M ({o['M']}) must be multiples of G ({o['G']})")

    def _shapes(self):
        o = self.options
        h, w = conv_input_size(o["P"], o["HS"], o["R"]), conv_input_size(o["Q"], o["WS"], o["S"])
        return (o["N"], o["C"], h, w), (o["M"], o["C"] // o["G"], o["R"], o["S"])

    def make_state(self, device):
        import torch

        x_shape, w_shape = self._shapes()
        dtype = torch_dtype(self.options["dtype"])
        fmt = torch.channels_last if self.options["channels_last"] else torch.contiguous_format
        x = _randn(x_shape, dtype, device).contiguous(memory_format=fmt)
        w = _randn(w_shape, dtype, device).contiguous(memory_format=fmt)
        return x, w

    def launch(self, state):
        import torch.nn.functional as F

        x, w = state
        o = self.options
        F.conv2d(x, w, stride=(o["HS"], o["WS"]), padding=(o["R"] // 2, o["S"] // 2), groups=o["G"])

    def work(self) -> Mapping[str, float]:
        o = self.options
        return {"flop": 2.0 * o["N"] * o["M"] * o["P"] * o["Q"] * (o["C"] // o["G"]) * o["R"] * o["S"]}


class DepthwiseConvKernel(ConvKernel):
    """Depthwise convolution: one R x S filter per channel (G = M = C)."""

    DESCRIPTION = "depthwise convolution (groups = channels), e.g. RepLKNet's 31x31 kernels"
    OPTIONS = tuple(o for o in ConvKernel.OPTIONS if o.name not in ("M", "G"))

    def __init__(self, name: str | None = None, **options: Any) -> None:
        GraphKernelWorkload.__init__(self, name, **options)
        self.options["M"] = self.options["G"] = self.options["C"]


class ElementwiseKernel(GraphKernelWorkload):
    """An elementwise op over M x N elements (memory-bound)."""

    OPS = ("add", "mul", "relu", "gelu", "silu", "add_relu")
    DESCRIPTION = "elementwise op over M x N elements: " + ", ".join(OPS)
    OPTIONS = (
        Option("op", "choice", "add", "the operation", choices=OPS),
        Option("M", "int", 4096, "rows", minimum=1),
        Option("N", "int", 4096, "columns", minimum=1),
        DTYPE,
        *GRAPH_OPTIONS,
    )

    def make_state(self, device):
        import torch

        o, dtype = self.options, torch_dtype(self.options["dtype"])
        shape = (o["M"], o["N"])
        return (
            _randn(shape, dtype, device),
            _randn(shape, dtype, device),
            torch.empty(shape, dtype=dtype, device=device),
        )

    def launch(self, state):
        import torch
        import torch.nn.functional as F

        a, b, out = state
        op = self.options["op"]
        if op == "add":
            torch.add(a, b, out=out)
        elif op == "mul":
            torch.mul(a, b, out=out)
        elif op == "relu":
            torch.clamp_min(a, 0, out=out)
        elif op == "gelu":
            out.copy_(F.gelu(a))
        elif op == "silu":
            out.copy_(F.silu(a))
        else:  # add_relu: the earlier tool's example
            torch.add(a, b, out=out)
            out.relu_()

    def work(self) -> Mapping[str, float]:
        o = self.options
        elements = o["M"] * o["N"]
        size = torch_dtype_size(o["dtype"])
        operands = {"add": 3, "mul": 3, "add_relu": 5}.get(o["op"], 2)
        return {"bytes": float(elements * size * operands)}


def torch_dtype_size(name: str) -> int:
    return {"fp16": 2, "bf16": 2, "fp32": 4, "fp64": 8}[name]


class LayerNormKernel(GraphKernelWorkload):
    DESCRIPTION = "layer normalisation of M rows of N features"
    OPTIONS = (
        Option("M", "int", 4096, "rows (tokens)", minimum=1),
        Option("N", "int", 4096, "features normalised together", minimum=1),
        DTYPE,
        *GRAPH_OPTIONS,
    )

    def make_state(self, device):
        import torch

        o, dtype = self.options, torch_dtype(self.options["dtype"])
        x = _randn((o["M"], o["N"]), dtype, device)
        return (
            x,
            torch.ones(o["N"], dtype=dtype, device=device),
            torch.zeros(o["N"], dtype=dtype, device=device),
        )

    def launch(self, state):
        import torch.nn.functional as F

        x, w, b = state
        F.layer_norm(x, (x.shape[-1],), w, b)


class SoftmaxKernel(GraphKernelWorkload):
    DESCRIPTION = "softmax over the last dimension of an M x N matrix"
    OPTIONS = (
        Option("M", "int", 4096, "rows", minimum=1),
        Option("N", "int", 4096, "softmax length", minimum=1),
        DTYPE,
        *GRAPH_OPTIONS,
    )

    def make_state(self, device):
        o = self.options
        return _randn((o["M"], o["N"]), torch_dtype(o["dtype"]), device)

    def launch(self, state):
        import torch

        torch.softmax(state, dim=-1)


class AttentionKernel(GraphKernelWorkload):
    DESCRIPTION = "scaled dot-product attention: B x H heads, L queries, S keys, head size D"
    OPTIONS = (
        Option("B", "int", 1, "batch", minimum=1),
        Option("H", "int", 16, "heads", minimum=1),
        Option("L", "int", 1024, "query length", minimum=1),
        Option("S", "int", None, "key/value length (default L)", minimum=1),
        Option("D", "int", 128, "head size", minimum=1),
        Option("causal", "bool", False, "causal mask (needs L == S)"),
        DTYPE,
        *GRAPH_OPTIONS,
    )

    def _s(self) -> int:
        return self.options["S"] or self.options["L"]

    def make_state(self, device):
        o, dtype = self.options, torch_dtype(self.options["dtype"])
        q = _randn((o["B"], o["H"], o["L"], o["D"]), dtype, device)
        k = _randn((o["B"], o["H"], self._s(), o["D"]), dtype, device)
        v = _randn((o["B"], o["H"], self._s(), o["D"]), dtype, device)
        return q, k, v

    def launch(self, state):
        import torch.nn.functional as F

        q, k, v = state
        F.scaled_dot_product_attention(q, k, v, is_causal=self.options["causal"])

    def work(self) -> Mapping[str, float]:
        o = self.options
        flop = 4.0 * o["B"] * o["H"] * o["L"] * self._s() * o["D"]
        return {"flop": flop / 2 if o["causal"] else flop}


class EmbeddingKernel(GraphKernelWorkload):
    DESCRIPTION = "embedding lookup: T token ids into a V x D table"
    OPTIONS = (
        Option("V", "int", 50272, "vocabulary size", minimum=1),
        Option("D", "int", 4096, "embedding size", minimum=1),
        Option("T", "int", 2048, "tokens looked up", minimum=1),
        DTYPE,
        *GRAPH_OPTIONS,
    )

    def make_state(self, device):
        import torch

        o = self.options
        table = _randn((o["V"], o["D"]), torch_dtype(o["dtype"]), device)
        ids = torch.randint(0, o["V"], (o["T"],), device=device)
        return table, ids

    def launch(self, state):
        import torch.nn.functional as F

        table, ids = state
        F.embedding(ids, table)
