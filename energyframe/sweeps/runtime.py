"""Compiling and launching ``.cu`` kernels on the current torch stream, through CuPy.

CuPy's ``RawModule`` compiles with NVRTC (no full CUDA toolkit needed at run time) and keeps the
compiled binaries in its on-disk cache (``CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``),
so a second sweep of the same source does not compile again. Launches go to torch's current
stream, so they can be captured in a CUDA graph with the rest of energyframe's graph machinery.
docs/kernel-sweeps.md says why CuPy rather than cuda.core or torch's ``load_inline``.

``compile_ptx`` and ``resource_usage`` use ``nvcc`` where it is installed; they need no GPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError, WorkloadError
from .kernel import CudaKernel, Launch
from .signature import Signature

CUPY_HINT = (
    "launching .cu kernels needs CuPy built for your CUDA: pip install cupy-cuda12x (CUDA 12) or "
    "cupy-cuda13x (CUDA 13); --dry-run works without it"
)


class KernelCompileError(WorkloadError):
    """NVRTC refused the source; the message carries the compiler's log."""


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise WorkloadError(f"{CUPY_HINT} ({e})") from None
    return cupy


_FUNCTIONS: dict[tuple[str, tuple[str, ...], str], Any] = {}


def compiled(kernel: CudaKernel):
    """The kernel's CuPy function, compiled on first use (and kept for the process)."""
    key = (kernel.source, kernel.compile_options, kernel.name)
    if key not in _FUNCTIONS:
        cupy = _cupy()
        module = cupy.RawModule(
            code=kernel.source, options=kernel.compile_options, name_expressions=(kernel.name,)
        )
        try:
            _FUNCTIONS[key] = module.get_function(kernel.name)
        except cupy.cuda.compiler.CompileException as e:
            raise KernelCompileError(
                f"{kernel.label}: compilation failed:\n{str(e).strip()[:2000]}"
            ) from None
    return _FUNCTIONS[key]


class _StreamHandle:
    """A raw stream handle offered through the CUDA stream protocol."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


_STREAMS: dict[int, Any] = {}


def cupy_stream(handle: int):
    """A CuPy view of the stream ``handle`` (torch's current stream), cached per handle."""
    if handle not in _STREAMS:
        cupy = _cupy()
        from_external = getattr(cupy.cuda.Stream, "from_external", None)
        stream = None
        if from_external is not None:
            try:
                stream = from_external(_StreamHandle(handle))
            except Exception:  # an older CuPy whose from_external wants something else
                stream = None
        if stream is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                stream = cupy.cuda.ExternalStream(handle)
        _STREAMS[handle] = stream
    return _STREAMS[handle]


def _scalar(ctype_numpy: str, torch_dtype: str, value: Any):
    import numpy as np

    if torch_dtype == "bfloat16":  # no numpy bfloat16: pass the 16 bits
        import torch

        bits = torch.tensor(float(value), dtype=torch.bfloat16).view(torch.int16).item()
        return np.uint16(int(bits) & 0xFFFF)
    return getattr(np, ctype_numpy)(value)


def kernel_args(signature: Signature, tensors: Mapping[str, Any], scalars: Mapping[str, Any]) -> tuple:
    """The launch arguments in parameter order: device addresses for pointers, numpy scalars of
    the declared C type for the rest."""
    out = []
    for p in signature.params:
        if p.pointer:
            out.append(int(tensors[p.name].data_ptr()))
        else:
            out.append(_scalar(p.numpy_type, p.torch_dtype, scalars[p.name]))
    return tuple(out)


def launcher(kernel: CudaKernel, launch: Launch, args: tuple):
    """A function that launches the kernel once on torch's current stream."""
    import torch

    function = compiled(kernel)
    grid, block, shared = launch.grid, launch.block, launch.shared_mem_bytes

    def go() -> None:
        stream = cupy_stream(torch.cuda.current_stream().cuda_stream)
        function(grid, block, args, stream=stream, shared_mem=shared)

    return go


# -- nvcc, where installed (no GPU needed) ------------------------------------------------------
def nvcc() -> str:
    path = shutil.which("nvcc")
    if path is None:
        raise UsageError("nvcc is not on PATH (install the CUDA toolkit to compile ahead of time)")
    return path


def _run_nvcc(args: Sequence[str]) -> subprocess.CompletedProcess:
    done = subprocess.run([nvcc(), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise KernelCompileError(f"nvcc failed:\n{(done.stderr or done.stdout).strip()[:2000]}")
    return done


def compile_ptx(source: str | Path, arch: str = "compute_90", options: Sequence[str] = ()) -> str:
    """The PTX of a ``.cu`` file, from ``nvcc -ptx``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "kernels.ptx"
        _run_nvcc(["-ptx", f"-arch={arch}", *options, str(source), "-o", str(out)])
        return out.read_text()


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def _plain_name(symbol: str) -> str:
    """``_Z12matmul_naivePKfS0_Pfiii`` -> ``matmul_naive``; an extern "C" name stays."""
    match = re.match(r"_Z(\d+)", symbol)
    if match:
        start = match.end()
        return symbol[start : start + int(match.group(1))]
    return symbol


def resource_usage(
    source: str | Path, arch: str = "sm_90", options: Sequence[str] = ()
) -> dict[str, dict[str, int]]:
    """Per kernel: registers per thread, static shared memory and spill bytes, from ptxas."""
    with tempfile.TemporaryDirectory() as tmp:
        done = _run_nvcc(
            ["-cubin", f"-arch={arch}", "--resource-usage", *options, str(source), "-o", f"{tmp}/k.cubin"]
        )
    return parse_resource_usage(done.stderr + done.stdout)


def parse_resource_usage(text: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in text.splitlines():
        if entry := _ENTRY.search(line):
            current = _plain_name(entry.group(1))
            out[current] = {"registers": 0, "shared_bytes": 0, "spill_bytes": 0}
        elif current and (spill := _SPILL.search(line)):
            out[current]["spill_bytes"] = int(spill.group(1)) + int(spill.group(2))
        elif current and (used := _USED.search(line)):
            out[current]["registers"] = int(used.group(1))
            out[current]["shared_bytes"] = int(used.group(2) or 0)
    return out
